package storage

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// rest is the HTTP machinery the GCS and Azure backends share: one client
// per store, requests retried with backoff, responses mapped to error
// kinds, and every error message scrubbed of credentials.
//
// Retries: connection failures, 408, 429 and 5xx are retried with capped
// exponential backoff and full jitter (100 ms doubling up to 15 s, or the
// server's Retry-After), until MaxRetries retries or RetryTimeout since
// the first attempt, whichever comes first; a body that breaks off in the
// middle of a ranged read is retried the same way. A request is rebuilt
// for every attempt (fresh body, fresh signature).
type rest struct {
	hc     *http.Client
	cfg    ClientConfig
	store  string                                           // "gcs" or "azure", for messages
	auth   func(ctx context.Context, r *http.Request) error // signs a request; nil for none
	secret *secrets
}

// ClientConfig holds the HTTP settings of the GCS and Azure stores: those
// of object_store's ClientOptions and lance's retry options. The zero
// value means defaults.
type ClientConfig struct {
	AllowHTTP                bool
	AllowInvalidCertificates bool
	// Timeout bounds one HTTP request, body included. Default 5 minutes (a
	// 16 MiB part on a slow link).
	Timeout time.Duration
	// ConnectTimeout bounds a TCP connect. Default 5 s (object_store's).
	ConnectTimeout time.Duration
	ProxyURL       string
	UserAgent      string
	// MaxRetries after the first attempt: 0 means the default, 10 (lance's
	// client_max_retries), and a negative number none.
	MaxRetries int
	// RetryTimeout bounds the time spent retrying one request. Default 180 s
	// (lance's client_retry_timeout).
	RetryTimeout time.Duration
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	switch {
	case c.MaxRetries == 0:
		c.MaxRetries = 10
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	}
	if c.RetryTimeout <= 0 {
		c.RetryTimeout = 180 * time.Second
	}
	return c
}

// listPageSize is the number of objects one List request asks for;
// a variable so that tests can make listings span pages.
var listPageSize = 1000

// Backoff of the retry loop; variables so that tests can shorten them.
var (
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 15 * time.Second
)

func newREST(store string, cfg ClientConfig, sec *secrets) (*rest, error) {
	cfg = cfg.withDefaults()
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if cfg.ProxyURL != "" {
		u, err := url.Parse(cfg.ProxyURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("%w: storage option proxy_url is not a URL", errkind.InvalidInput)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if cfg.AllowInvalidCertificates {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the user asked for it (allow_invalid_certificates)
	}
	if sec == nil {
		sec = &secrets{}
	}
	return &rest{hc: &http.Client{Timeout: cfg.Timeout, Transport: tr,
		// Never follow redirects: a 3xx is an answer (GCS's 308 is "resume
		// incomplete"), and following one would resend credentials.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		cfg: cfg, store: store, secret: sec}, nil
}

// checkScheme refuses plain-http endpoints unless allow_http is set, as
// object_store does.
func (c *rest) checkScheme(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%w: storage: %s endpoint %q is not an http(s) URL", errkind.InvalidInput, c.store, redactURL(endpoint))
	}
	if u.Scheme == "http" && !c.cfg.AllowHTTP {
		return fmt.Errorf("%w: storage: %s endpoint %s is plain http; set allow_http=true to use it", errkind.InvalidInput, c.store, redactURL(endpoint))
	}
	return nil
}

// errRetry marks a failure found while reading a response (a body cut
// short) that the retry loop may retry like a failed request.
type errRetry struct{ err error }

func (e errRetry) Error() string { return e.err.Error() }
func (e errRetry) Unwrap() error { return e.err }

// do sends the request mk builds (once per attempt) and hands a response
// that is not retryable to handle, which reads and closes nothing: do
// closes the body. handle returns nil when done, errRetry to try again, or
// the final error. op and name go into error messages.
func (c *rest) do(ctx context.Context, op, name string, mk func() (*http.Request, error), handle func(*http.Response) error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		req, err := mk()
		if err != nil {
			return err
		}
		req = req.WithContext(ctx)
		if c.cfg.UserAgent != "" {
			req.Header.Set("User-Agent", c.cfg.UserAgent)
		}
		if c.auth != nil {
			if err := c.auth(ctx, req); err != nil {
				return err
			}
		}
		resp, err := c.hc.Do(req)
		var failure error
		var wait time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("storage: %s %s %s: %w", c.store, op, name, ctx.Err())
			}
			failure = fmt.Errorf("%w: storage: %s %s %s: %s", errkind.IO, c.store, op, name, c.secret.scrub(transportError(err)))
		case retryableStatus(resp.StatusCode):
			failure = c.statusError(op, name, resp)
			wait = retryAfter(resp.Header.Get("Retry-After"))
			drain(resp)
		default:
			herr := handle(resp)
			drain(resp)
			var re errRetry
			if herr == nil || !errors.As(herr, &re) {
				return herr
			}
			if ctx.Err() != nil {
				return fmt.Errorf("storage: %s %s %s: %w", c.store, op, name, ctx.Err())
			}
			failure = fmt.Errorf("%w: storage: %s %s %s: %s", errkind.IO, c.store, op, name, c.secret.scrub(re.err.Error()))
		}
		if attempt >= c.cfg.MaxRetries {
			return failure
		}
		if wait <= 0 {
			ceil := backoffInitial << min(attempt, 20)
			if ceil > backoffMax || ceil <= 0 {
				ceil = backoffMax
			}
			wait = time.Duration(rand.Int64N(int64(ceil)) + 1)
		}
		if time.Since(start)+wait > c.cfg.RetryTimeout {
			return failure
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("storage: %s %s %s: %w", c.store, op, name, ctx.Err())
		case <-t.C:
		}
	}
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return min(time.Duration(secs)*time.Second, backoffMax)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), backoffMax)
	}
	return 0
}

// transportError describes a failed round trip without the request URL
// (Azure SAS tokens travel in the query string).
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		u, perr := url.Parse(ue.URL)
		where := "request"
		if perr == nil {
			where = u.Scheme + "://" + u.Host
		}
		return fmt.Sprintf("%s %s: %v", ue.Op, where, ue.Err)
	}
	return err.Error()
}

// delete removes the object at u; one that is already gone counts as
// removed.
func (c *rest) delete(ctx context.Context, name, u string) error {
	return c.do(ctx, "delete", name, newRequest(http.MethodDelete, u, nil), func(resp *http.Response) error {
		if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotFound {
			return nil
		}
		return c.statusError("delete", name, resp)
	})
}

// statusError maps an HTTP answer to an error kind. The message has the
// service's error code and message (bounded), never the URL's query.
func (c *rest) statusError(op, name string, resp *http.Response) error {
	detail := c.secret.scrub(serviceMessage(resp))
	msg := fmt.Sprintf("storage: %s %s %s: HTTP %d", c.store, op, name, resp.StatusCode)
	if detail != "" {
		msg += ": " + detail
	}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound:
		return fmt.Errorf("%w: %s", errkind.NotFound, msg)
	case code == http.StatusPreconditionFailed || code == http.StatusConflict:
		return fmt.Errorf("%w: %s", errkind.Conflict, msg)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("%w: %s (check the credentials)", errkind.InvalidInput, msg)
	case code == http.StatusBadRequest || code == http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w: %s", errkind.InvalidInput, msg)
	default:
		return fmt.Errorf("%w: %s", errkind.IO, msg)
	}
}

// serviceMessage pulls the error code and message out of a GCS JSON or an
// Azure XML error body (at most 4 KiB of it).
func serviceMessage(resp *http.Response) string {
	if code := resp.Header.Get("x-ms-error-code"); code != "" && resp.Request != nil && resp.Request.Method == http.MethodHead {
		return code
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(io.LimitReader(resp.Body, 4<<10))
	s := body.String()
	pick := func(open, close string) string {
		i := strings.Index(s, open)
		if i < 0 {
			return ""
		}
		rest := s[i+len(open):]
		j := strings.Index(rest, close)
		if j < 0 {
			return ""
		}
		return rest[:j]
	}
	var parts []string
	if code := pick("<Code>", "</Code>"); code != "" {
		parts = append(parts, code)
	} else if code := resp.Header.Get("x-ms-error-code"); code != "" {
		parts = append(parts, code)
	}
	if m := pick("<Message>", "</Message>"); m != "" {
		parts = append(parts, firstLine(m))
	}
	if len(parts) == 0 {
		if m := pick(`"message":"`, `"`); m != "" {
			parts = append(parts, m)
		}
	}
	return strings.Join(parts, ": ")
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// secrets are the credential values of a store, removed from every error
// message as a last line of defence (services echo parts of requests).
type secrets struct {
	mu   sync.Mutex
	vals []string
}

func (s *secrets) add(vs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vs {
		if len(v) >= 4 {
			s.vals = append(s.vals, v)
		}
	}
}

func (s *secrets) scrub(msg string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.vals {
		msg = strings.ReplaceAll(msg, v, "***")
	}
	return msg
}

// readFull reads exactly len(p) bytes of a ranged GET's body. A server
// that ignored the Range header (200 instead of 206) sends the whole
// object: skip to off. A body that ends early is retried.
func readRangeBody(resp *http.Response, p []byte, off int64) error {
	if resp.StatusCode == http.StatusOK && off > 0 {
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return errRetry{fmt.Errorf("skipping to %d: %w", off, err)}
		}
	}
	if _, err := io.ReadFull(resp.Body, p); err != nil {
		return errRetry{fmt.Errorf("reading %d bytes at %d: %w", len(p), off, err)}
	}
	return nil
}

// restObject is an object of a REST store: ranged reads through read.
type restObject struct {
	name string
	id   string
	blockSource
}

// restIdentity names an object's bytes by its URL, size and version tag
// (GCS generation, Azure ETag); "" without a tag.
func restIdentity(scheme, url string, e Entry) string {
	if e.ETag == "" {
		return ""
	}
	return fmt.Sprintf("%s:%s|%d|%s", scheme, url, e.Size, e.ETag)
}

func (o *restObject) Identity() string { return o.id }

func (o *restObject) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := readBounds(o.name, o.size, len(p), off); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	return o.readAt(ctx, p, off)
}

func (o *restObject) Size() int64  { return o.size }
func (o *restObject) Close() error { return nil }

// sameContent reports whether name holds exactly data: a conditional put
// retried after a lost answer finds its own first attempt.
func sameContent(ctx context.Context, st Store, name string, data []byte) bool {
	obj, err := st.Open(ctx, name)
	if err != nil {
		return false
	}
	defer obj.Close()
	if obj.Size() != int64(len(data)) {
		return false
	}
	got := make([]byte, len(data))
	if err := obj.ReadAt(ctx, got, 0); err != nil {
		return false
	}
	return string(got) == string(data)
}

// tokenCache holds a bearer token until shortly before it expires.
type tokenCache struct {
	mu      sync.Mutex
	token   string
	expires time.Time
	fetch   func(ctx context.Context) (token string, ttl time.Duration, err error)
	sec     *secrets
}

func (t *tokenCache) get(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Until(t.expires) > 5*time.Minute {
		return t.token, nil
	}
	tok, ttl, err := t.fetch(ctx)
	if err != nil {
		return "", err
	}
	if ttl <= 0 {
		ttl = time.Hour
	}
	t.token, t.expires = tok, time.Now().Add(ttl)
	t.sec.add(tok)
	return tok, nil
}

// readSmallFile reads a credentials file of at most 1 MiB.
func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, 1<<20+1)); err != nil {
		return nil, err
	}
	if b.Len() > 1<<20 {
		return nil, fmt.Errorf("%s is larger than 1 MiB", path)
	}
	return b.Bytes(), nil
}
