package storage

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Storage options, as pylance takes them: the keys and aliases of
// object_store's configuration (GoogleConfigKey, AzureConfigKey and the
// ClientConfigKey every cloud store shares), lance's own retry keys, and
// the same environment fallbacks. Keys are case-insensitive. A key no
// store of that scheme knows is refused (errkind.InvalidInput) instead of
// being ignored as pylance does: a misspelt credential key would otherwise
// fall back silently to other credentials.

// Environ returns the process environment the stores read their
// fallbacks from. The Python binding replaces it with a reader of C's
// environ, which sees what Python sets after the extension has loaded (Go's
// own copy does not).
var Environ = os.Environ

// getenv looks a variable up in Environ.
func getenv(name string) string {
	for _, kv := range Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// clientKeys are object_store's ClientConfigKey names. A store takes them
// bare or with its own prefix ("google_timeout", "azure_allow_http").
// Those mapped to "" are accepted and have no effect here (HTTP/2 and
// connection pool tuning of object_store's reqwest client).
var clientKeys = map[string]string{
	"allow_http": "allow_http", "allow_invalid_certificates": "allow_invalid_certificates",
	"connect_timeout": "connect_timeout", "timeout": "timeout", "proxy_url": "proxy_url", "user_agent": "user_agent",
	"default_content_type": "", "http1_only": "", "http2_only": "", "http2_keep_alive_interval": "",
	"http2_keep_alive_timeout": "", "http2_keep_alive_while_idle": "", "http2_max_frame_size": "",
	"pool_idle_timeout": "", "pool_max_idle_per_host": "", "proxy_ca_certificate": "", "proxy_excludes": "",
	"randomize_addresses": "",
}

// lanceKeys are the keys lance itself reads for every store. max_retries
// is ours (the S3 backend always took it).
var lanceKeys = map[string]string{
	"client_max_retries": "retries", "max_retries": "retries", "client_retry_timeout": "retry_timeout",
	"download_retry_count": "", "use_opendal": "use_opendal", "expires_at_millis": "",
}

// optionTable describes the storage options of one store.
type optionTable struct {
	scheme string            // "gs", for messages
	keys   map[string]string // alias → setting ("" = accepted, no effect)
	prefix string            // the store's prefix for client keys ("google_")
	// opendal are the keys of pylance's other backend (use_opendal=true):
	// alias → setting. They are only read with use_opendal=true, and never
	// from the environment (OpenDAL reads none of them there).
	opendal map[string]string
}

// lookup maps a lower-case key to its setting.
func (t optionTable) lookup(k string) (string, bool) {
	if s, ok := t.keys[k]; ok {
		return s, true
	}
	if s, ok := clientKeys[strings.TrimPrefix(k, t.prefix)]; ok {
		return s, true
	}
	return "", false
}

// resolved holds the settings of one store, with where each came from
// ("storage option timeout", "environment variable TIMEOUT") for messages.
type resolved struct {
	vals map[string]string
	src  map[string]string
}

func (r resolved) has(name string) bool   { _, ok := r.vals[name]; return ok }
func (r resolved) get(name string) string { return r.vals[name] }

// resolve applies the options, then the environment for whatever they did
// not set: every variable whose lower-cased name is one of the store's
// keys (lance's rule: GOOGLE_SERVICE_ACCOUNT, AZURE_STORAGE_ACCOUNT_NAME,
// but also TIMEOUT), then the OBJECT_STORE_CLIENT_* variables lance reads.
// Unknown option keys are errkind.InvalidInput; values are never quoted in
// errors (they may be credentials).
func (t optionTable) resolve(options map[string]string, extraEnv map[string]string) (resolved, error) {
	r, err := t.fromOptions(options)
	if err != nil {
		return r, err
	}
	env := Environ()
	sort.Strings(env)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		name, ok := t.lookup(strings.ToLower(k))
		if !ok {
			name, ok = extraEnv[k]
		}
		if !ok || name == "" || r.has(name) || v == "" {
			continue
		}
		r.vals[name], r.src[name] = v, "environment variable "+k
	}
	for k, name := range map[string]string{"OBJECT_STORE_CLIENT_MAX_RETRIES": "retries", "OBJECT_STORE_CLIENT_RETRY_TIMEOUT": "retry_timeout"} {
		if v := getenv(k); v != "" && !r.has(name) {
			r.vals[name], r.src[name] = v, "environment variable "+k
		}
	}
	return r, nil
}

// fromOptions applies the options alone.
func (t optionTable) fromOptions(options map[string]string) (resolved, error) {
	r := resolved{vals: map[string]string{}, src: map[string]string{}}
	var unknown, opendal []string
	keys := make([]string, 0, len(options))
	for k := range options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		name, ok := t.lookup(lk)
		if !ok {
			name, ok = lanceKeys[lk]
		}
		if !ok {
			if name, ok = t.opendal[lk]; ok {
				opendal = append(opendal, k)
			}
		}
		if !ok {
			unknown = append(unknown, k)
			continue
		}
		if name != "" {
			r.vals[name], r.src[name] = options[k], "storage option "+k
		}
	}
	if len(unknown) > 0 {
		return r, t.unknownError(unknown)
	}
	if len(opendal) > 0 {
		var errs []error
		if !r.boolean("use_opendal", &errs) {
			return r, errors.Join(append(errs, fmt.Errorf("%w: storage: %s: pylance reads these %s:// options only with use_opendal=true (its OpenDAL backend)",
				errkind.InvalidInput, strings.Join(opendal, ", "), t.scheme))...)
		}
	}
	return r, nil
}

// checkKeys refuses the keys of options that no store of this scheme
// takes (and OpenDAL keys without use_opendal=true).
func (t optionTable) checkKeys(options map[string]string) error {
	_, err := t.fromOptions(options)
	return err
}

// knownElsewhere names the other store that takes key, if any.
func knownElsewhere(key string, self string) string {
	tables := map[string]func(string) bool{
		"s3": func(k string) bool { _, ok := s3Options.lookup(k); return ok && !isClientKey(k, s3Options.prefix) },
		"gs": func(k string) bool { _, ok := gcsOptions.lookup(k); return ok && !isClientKey(k, gcsOptions.prefix) },
		"az": func(k string) bool {
			_, ok := azureOptions.lookup(k)
			return ok && !isClientKey(k, azureOptions.prefix)
		},
	}
	for _, scheme := range []string{"s3", "gs", "az"} {
		if scheme != self && tables[scheme](key) {
			return scheme
		}
	}
	return ""
}

func isClientKey(k, prefix string) bool {
	_, ok := clientKeys[strings.TrimPrefix(k, prefix)]
	return ok
}

func (t optionTable) unknownError(keys []string) error {
	var msgs []string
	for _, k := range keys {
		lk := strings.ToLower(k)
		switch other := knownElsewhere(lk, t.scheme); {
		case other != "":
			msgs = append(msgs, fmt.Sprintf("%q is an option of %s:// stores, not %s://", k, other, t.scheme))
		default:
			m := fmt.Sprintf("%q is not a %s:// storage option", k, t.scheme)
			if s := t.suggest(lk); s != "" {
				m += fmt.Sprintf(" (did you mean %q?)", s)
			}
			msgs = append(msgs, m)
		}
	}
	return fmt.Errorf("%w: storage: %s", errkind.InvalidInput, strings.Join(msgs, "; "))
}

// suggest returns the known key closest to k, if it is close.
func (t optionTable) suggest(k string) string {
	best, bestD := "", 4
	try := func(cand string) {
		if d := editDistance(k, cand); d < bestD || d == bestD && cand < best {
			best, bestD = cand, d
		}
	}
	for cand := range t.keys {
		try(cand)
	}
	for cand := range clientKeys {
		try(cand)
	}
	for cand := range lanceKeys {
		try(cand)
	}
	for cand := range t.opendal {
		try(cand)
	}
	if bestD > max(1, len(k)/4) {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseBoolOption follows object_store: true, 1, on, yes, y and their
// opposites, in any case.
func (r resolved) boolean(name string, errs *[]error) bool {
	v, ok := r.vals[name]
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "on", "yes", "y":
		return true
	case "false", "0", "off", "no", "n", "":
		return false
	}
	*errs = append(*errs, fmt.Errorf("%w: storage: %s is not a boolean", errkind.InvalidInput, r.src[name]))
	return false
}

// duration takes "30s", "1m30s", "500ms", "1h 30m" or a number of seconds.
func (r resolved) duration(name string, errs *[]error) time.Duration {
	v, ok := r.vals[name]
	if !ok {
		return 0
	}
	s := strings.ReplaceAll(strings.TrimSpace(v), " ", "")
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	*errs = append(*errs, fmt.Errorf("%w: storage: %s is not a duration", errkind.InvalidInput, r.src[name]))
	return 0
}

// client builds the HTTP settings every cloud store shares.
func (r resolved) client(errs *[]error) ClientConfig {
	c := ClientConfig{
		AllowHTTP:                r.boolean("allow_http", errs),
		AllowInvalidCertificates: r.boolean("allow_invalid_certificates", errs),
		Timeout:                  r.duration("timeout", errs),
		ConnectTimeout:           r.duration("connect_timeout", errs),
		ProxyURL:                 r.get("proxy_url"),
		UserAgent:                r.get("user_agent"),
		RetryTimeout:             r.duration("retry_timeout", errs),
	}
	if v, ok := r.vals["retries"]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			*errs = append(*errs, fmt.Errorf("%w: storage: %s is not a number of retries", errkind.InvalidInput, r.src["retries"]))
		}
		c.MaxRetries = n
		if n == 0 {
			c.MaxRetries = -1
		}
	}
	return c
}
