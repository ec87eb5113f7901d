package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// GCS is a Store over a prefix of a Google Cloud Storage bucket, spoken to
// through the JSON API over plain net/http (see rest.go for retries).
//
// Reads are ranged media GETs; an object larger than one part goes up as a
// resumable upload (sequential chunks, one in flight while the next is
// filled), a smaller one as one simple upload; PutIfAbsent is a simple
// upload with ifGenerationMatch=0, the precondition GCS turns into 412 when
// the name exists, and the one pylance (object_store) commits with.
type GCS struct {
	c      *rest
	base   string // "https://storage.googleapis.com", no trailing slash
	bucket string
	prefix string // "" or ending in "/"
	uri    string
	part   int
}

// GCSConfig is what a GCS store needs; ParseGCSOptions builds it from
// pylance's storage options. The zero value of every field means its
// default.
type GCSConfig struct {
	// BaseURL of the service. Default https://storage.googleapis.com, or
	// the gcs_base_url of the service account JSON (object_store's
	// extension for emulators).
	BaseURL string
	// Credentials, tried in object_store's order: SkipSignature (no
	// credentials), Token (a static OAuth bearer token, lance's
	// google_storage_token), a service account (ServiceAccountKey JSON, or
	// the file at ServiceAccountPath; its disable_oauth means no
	// credentials), application default credentials (the file at
	// ApplicationCredentials, else ~/.config/gcloud/...), the metadata
	// server.
	SkipSignature          bool
	Token                  string
	ServiceAccountKey      string
	ServiceAccountPath     string
	ApplicationCredentials string
	Client                 ClientConfig
	// PartBytes is the resumable upload chunk: a multiple of 256 KiB.
	// Default 16 MiB.
	PartBytes int
}

var gcsOptions = optionTable{scheme: "gs", prefix: "google_", keys: map[string]string{
	"google_service_account": "service_account", "service_account": "service_account",
	"google_service_account_path": "service_account", "service_account_path": "service_account",
	"google_service_account_key": "service_account_key", "service_account_key": "service_account_key",
	"google_bucket": "", "google_bucket_name": "", "bucket": "", "bucket_name": "",
	"google_application_credentials": "application_credentials", "application_credentials": "application_credentials",
	"google_skip_signature": "skip_signature", "skip_signature": "skip_signature",
	"google_storage_token": "token",
}, opendal: map[string]string{
	"endpoint": "opendal_endpoint", "allow_anonymous": "skip_signature", "token": "token",
	"credential": "opendal_credential", "credential_path": "service_account",
	"disable_vm_metadata": "", "disable_config_load": "", "predefined_acl": "", "default_storage_class": "",
	"scope": "",
}}

// ParseGCSOptions builds a GCSConfig from pylance-style storage options,
// with pylance's environment fallbacks (GOOGLE_SERVICE_ACCOUNT,
// GOOGLE_SERVICE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS,
// GOOGLE_STORAGE_TOKEN, ...). Unknown keys and malformed values are
// errkind.InvalidInput.
func ParseGCSOptions(options map[string]string) (GCSConfig, error) {
	r, err := gcsOptions.resolve(options, nil)
	if err != nil {
		return GCSConfig{}, err
	}
	var errs []error
	cfg := GCSConfig{
		BaseURL:                r.get("opendal_endpoint"),
		SkipSignature:          r.boolean("skip_signature", &errs),
		Token:                  r.get("token"),
		ServiceAccountKey:      r.get("service_account_key"),
		ServiceAccountPath:     r.get("service_account"),
		ApplicationCredentials: r.get("application_credentials"),
		Client:                 r.client(&errs),
	}
	if v := r.get("opendal_credential"); v != "" && cfg.ServiceAccountKey == "" {
		// OpenDAL's credential: the key file's JSON, base64-encoded.
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: storage: %s is not base64", errkind.InvalidInput, r.src["opendal_credential"]))
		}
		cfg.ServiceAccountKey = string(raw)
	}
	if cfg.ServiceAccountKey != "" && cfg.ServiceAccountPath != "" {
		errs = append(errs, fmt.Errorf("%w: storage: both a service account key (%s) and a service account file (%s) are set; keep one",
			errkind.InvalidInput, r.src["service_account_key"], r.src["service_account"]))
	}
	if len(errs) > 0 {
		return GCSConfig{}, joinErrors(errs)
	}
	return cfg, nil
}

// NewGCS opens the store at gs://bucket/prefix. Credentials are read and
// checked here (a missing file, a malformed key: errkind.InvalidInput);
// tokens are fetched on first use.
func NewGCS(uri string, cfg GCSConfig) (*GCS, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w: storage: bad GCS URI %q (want gs://bucket/path)", errkind.InvalidInput, redactURL(uri))
	}
	sec := &secrets{}
	auth, base, err := gcsCredentials(cfg, sec)
	if err != nil {
		return nil, err
	}
	if cfg.BaseURL != "" {
		base = cfg.BaseURL
	}
	c, err := newREST("gcs", cfg.Client, sec)
	if err != nil {
		return nil, err
	}
	base = strings.TrimRight(base, "/")
	if err := c.checkScheme(base); err != nil {
		return nil, err
	}
	if auth != nil {
		c.auth = auth.authorize(c)
	}
	part := cfg.PartBytes
	if part <= 0 {
		part = 16 << 20
	}
	part = max(256<<10, part/(256<<10)*(256<<10))
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &GCS{c: c, base: base, bucket: u.Host, prefix: prefix, uri: uri, part: part}, nil
}

func (s *GCS) URI() string { return s.uri }

// Sync does nothing: a GCS upload is durable when it returns.
func (s *GCS) Sync(ctx context.Context, names []string) error { return nil }

func (s *GCS) key(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return s.prefix + name, nil
}

func (s *GCS) objectURL(key string) string {
	return s.base + "/storage/v1/b/" + url.PathEscape(s.bucket) + "/o/" + url.PathEscape(key)
}

func (s *GCS) uploadURL(query url.Values) string {
	return s.base + "/upload/storage/v1/b/" + url.PathEscape(s.bucket) + "/o?" + query.Encode()
}

func newRequest(method, u string, body []byte) func() (*http.Request, error) {
	return func() (*http.Request, error) {
		var r *http.Request
		var err error
		if body == nil {
			r, err = http.NewRequest(method, u, nil)
		} else {
			r, err = http.NewRequest(method, u, bytes.NewReader(body))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: storage: bad request URL: %v", errkind.InvalidInput, transportError(err))
		}
		return r, nil
	}
}

// gcsObjectMeta is the part of the JSON API's object resource we read.
type gcsObjectMeta struct {
	Name    string    `json:"name"`
	Size    string    `json:"size"` // int64 as a decimal string
	Updated time.Time `json:"updated"`
	// Generation changes with every write of the object.
	Generation string `json:"generation"`
}

func (m gcsObjectMeta) entry(name string) (Entry, error) {
	n, err := strconv.ParseInt(m.Size, 10, 64)
	if err != nil || n < 0 {
		return Entry{}, fmt.Errorf("%w: storage: gcs object %s has size %q", errkind.Corrupt, name, m.Size)
	}
	return Entry{Name: name, Size: n, ModTime: m.Updated, ETag: m.Generation}, nil
}

func decodeJSON(resp *http.Response, v any) error {
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return errRetry{fmt.Errorf("decoding the answer: %w", err)}
	}
	return nil
}

func (s *GCS) Stat(ctx context.Context, name string) (Entry, error) {
	key, err := s.key(name)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	err = s.c.do(ctx, "stat", name, newRequest(http.MethodGet, s.objectURL(key)+"?fields=name,size,updated,generation", nil), func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK {
			return s.c.statusError("stat", name, resp)
		}
		var m gcsObjectMeta
		if err := decodeJSON(resp, &m); err != nil {
			return err
		}
		e, err = m.entry(name)
		return err
	})
	return e, err
}

// Concurrency asks callers for RemoteConcurrency requests in flight.
func (s *GCS) Concurrency() int { return RemoteConcurrency }

func (s *GCS) Open(ctx context.Context, name string) (Object, error) {
	e, err := s.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	key, _ := s.key(name)
	media := s.objectURL(key) + "?alt=media"
	return &restObject{name: name, id: restIdentity("gs", s.objectURL(key), e), blockSource: blockSource{size: e.Size, read: func(ctx context.Context, p []byte, off int64) error {
		mk := func() (*http.Request, error) {
			r, err := newRequest(http.MethodGet, media, nil)()
			if err == nil {
				r.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
			}
			return r, err
		}
		return s.c.do(ctx, "read", name, mk, func(resp *http.Response) error {
			if resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK {
				return s.c.statusError("read", name, resp)
			}
			return readRangeBody(resp, p, off)
		})
	}}}, nil
}

func (s *GCS) List(ctx context.Context, prefix string) ([]Entry, error) {
	var out []Entry
	token := ""
	for {
		q := url.Values{"prefix": {s.prefix + prefix}, "fields": {"items(name,size,updated),nextPageToken"},
			"maxResults": {strconv.Itoa(listPageSize)}}
		if token != "" {
			q.Set("pageToken", token)
		}
		u := s.base + "/storage/v1/b/" + url.PathEscape(s.bucket) + "/o?" + q.Encode()
		var page struct {
			Items         []gcsObjectMeta `json:"items"`
			NextPageToken string          `json:"nextPageToken"`
		}
		err := s.c.do(ctx, "list", prefix, newRequest(http.MethodGet, u, nil), func(resp *http.Response) error {
			if resp.StatusCode != http.StatusOK {
				return s.c.statusError("list", prefix, resp)
			}
			page.Items, page.NextPageToken = nil, ""
			return decodeJSON(resp, &page)
		})
		if err != nil {
			return nil, err
		}
		for _, m := range page.Items {
			e, err := m.entry(strings.TrimPrefix(m.Name, s.prefix))
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			break
		}
		token = page.NextPageToken
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *GCS) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	return s.c.delete(ctx, name, s.objectURL(key))
}

// upload sends a whole object in one request; ifAbsent adds the
// ifGenerationMatch=0 precondition.
func (s *GCS) upload(ctx context.Context, op, name, key string, data []byte, ifAbsent bool) error {
	q := url.Values{"uploadType": {"media"}, "name": {key}}
	if ifAbsent {
		q.Set("ifGenerationMatch", "0")
	}
	mk := func() (*http.Request, error) {
		r, err := newRequest(http.MethodPost, s.uploadURL(q), data)()
		if err == nil {
			r.Header.Set("Content-Type", "application/octet-stream")
		}
		return r, err
	}
	return s.c.do(ctx, op, name, mk, func(resp *http.Response) error {
		if resp.StatusCode/100 == 2 {
			return nil
		}
		return s.c.statusError(op, name, resp)
	})
}

// PutIfAbsent is a simple upload with ifGenerationMatch=0. A 412 after a
// retried request may be our own first attempt: read it back and compare.
func (s *GCS) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	err = s.upload(ctx, "publish", name, key, data, true)
	if errkind.Tag(err) == "conflict" && sameContent(ctx, s, name, data) {
		return nil
	}
	if errkind.Tag(err) == "conflict" {
		return fmt.Errorf("%w: storage: gcs publish %s: already exists", errkind.Conflict, name)
	}
	return err
}

// Create buffers one chunk; a larger object becomes a resumable upload
// whose chunks go up in order, one in flight while the caller fills the
// next. Finish sends the last chunk; Abort cancels the session.
func (s *GCS) Create(ctx context.Context, name string) (Writer, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &gcsWriter{s: s, ctx: ctx, cancel: cancel, name: name, key: key}, nil
}

type gcsWriter struct {
	s       *GCS
	ctx     context.Context
	cancel  context.CancelFunc
	name    string
	key     string
	buf     []byte
	session string // resumable upload URI, once started
	sent    int64  // bytes handed to the uploader
	chunks  chan gcsChunk
	closed  bool // chunks is closed
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	done    bool
}

type gcsChunk struct {
	data  []byte
	off   int64
	total int64 // -1 until the last chunk
}

func (w *gcsWriter) setErr(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *gcsWriter) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *gcsWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: %s: Write after Finish or Abort", w.name)
	}
	if err := w.firstErr(); err != nil {
		return 0, err
	}
	w.buf = append(w.buf, p...)
	for len(w.buf) > w.s.part {
		chunk := w.buf[:w.s.part:w.s.part]
		w.buf = append(make([]byte, 0, w.s.part), w.buf[w.s.part:]...)
		if err := w.send(gcsChunk{data: chunk, off: w.sent, total: -1}); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// send hands a chunk to the uploader goroutine, starting the session
// first. It blocks while the previous chunk is still going up.
func (w *gcsWriter) send(c gcsChunk) error {
	if w.session == "" {
		q := url.Values{"uploadType": {"resumable"}, "name": {w.key}}
		err := w.s.c.do(w.ctx, "start upload of", w.name, newRequest(http.MethodPost, w.s.uploadURL(q), []byte{}), func(resp *http.Response) error {
			if resp.StatusCode/100 != 2 {
				return w.s.c.statusError("start upload of", w.name, resp)
			}
			w.session = resp.Header.Get("Location")
			if w.session == "" {
				return fmt.Errorf("%w: storage: gcs start upload of %s: no session URI in the answer", errkind.IO, w.name)
			}
			return nil
		})
		if err != nil {
			w.setErr(err)
			return err
		}
		w.chunks = make(chan gcsChunk)
		w.wg.Add(1)
		go w.uploader()
	}
	select {
	case w.chunks <- c:
		w.sent += int64(len(c.data))
		return nil
	case <-w.ctx.Done():
		if err := w.firstErr(); err != nil {
			return err
		}
		return fmt.Errorf("storage: gcs write %s: %w", w.name, w.ctx.Err())
	}
}

func (w *gcsWriter) uploader() {
	defer w.wg.Done()
	for c := range w.chunks {
		if w.firstErr() != nil {
			continue
		}
		if err := w.putChunk(c); err != nil {
			w.setErr(err)
			w.cancel() // unblocks a Write waiting to hand over the next chunk
		}
	}
}

// putChunk sends one chunk, resending the tail the service says it has not
// persisted (a 308 whose Range ends inside the chunk). GCS ignores bytes
// sent again at offsets it already has, so a retried chunk is safe.
func (w *gcsWriter) putChunk(c gcsChunk) error {
	start := c.off
	end := c.off + int64(len(c.data)) // exclusive
	for {
		from := start - c.off
		mk := func() (*http.Request, error) {
			r, err := newRequest(http.MethodPut, w.session, c.data[from:])()
			if err != nil {
				return nil, err
			}
			total := "*"
			if c.total >= 0 {
				total = strconv.FormatInt(c.total, 10)
			}
			if start == end {
				r.Header.Set("Content-Range", "bytes */"+total)
			} else {
				r.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%s", start, end-1, total))
			}
			return r, nil
		}
		persisted := int64(-1)
		complete := false
		err := w.s.c.do(w.ctx, "upload part of", w.name, mk, func(resp *http.Response) error {
			switch {
			case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
				complete = true
				return nil
			case resp.StatusCode == http.StatusPermanentRedirect:
				persisted = 0
				if rg := resp.Header.Get("Range"); rg != "" {
					var lo, hi int64
					if _, err := fmt.Sscanf(rg, "bytes=%d-%d", &lo, &hi); err == nil {
						persisted = hi + 1
					}
				}
				return nil
			default:
				return w.s.c.statusError("upload part of", w.name, resp)
			}
		})
		if err != nil {
			return err
		}
		switch {
		case complete && c.total >= 0:
			return nil
		case complete:
			return fmt.Errorf("%w: storage: gcs upload of %s finished before its last chunk", errkind.IO, w.name)
		case c.total >= 0 && persisted >= c.total:
			return fmt.Errorf("%w: storage: gcs upload of %s: all bytes persisted but the object was not finalized", errkind.IO, w.name)
		case persisted >= end:
			if c.total < 0 {
				return nil
			}
			start = end // only the finalizing request is left
		case persisted < c.off:
			return fmt.Errorf("%w: storage: gcs upload of %s lost bytes before offset %d (service has %d)", errkind.IO, w.name, c.off, persisted)
		default:
			start = persisted
		}
	}
}

func (w *gcsWriter) Finish() error {
	if w.done {
		return fmt.Errorf("storage: %s: Finish after Finish or Abort", w.name)
	}
	w.done = true
	defer w.cancel()
	if err := w.firstErr(); err != nil {
		w.abort()
		return err
	}
	if w.session == "" {
		return w.s.upload(w.ctx, "write", w.name, w.key, w.buf, false)
	}
	total := w.sent + int64(len(w.buf))
	if err := w.send(gcsChunk{data: w.buf, off: w.sent, total: total}); err != nil {
		w.abort()
		return err
	}
	close(w.chunks)
	w.closed = true
	w.wg.Wait()
	if err := w.firstErr(); err != nil {
		w.abort()
		return err
	}
	return nil
}

// abort stops the uploader and cancels the session (GCS answers 499).
func (w *gcsWriter) abort() {
	w.cancel()
	if w.chunks != nil && !w.closed {
		close(w.chunks)
		w.closed = true
	}
	w.wg.Wait()
	if w.session == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 30*time.Second)
	defer cancel()
	if r, err := http.NewRequestWithContext(ctx, http.MethodDelete, w.session, nil); err == nil {
		if w.s.c.auth != nil && w.s.c.auth(ctx, r) != nil {
			return
		}
		if resp, err := w.s.c.hc.Do(r); err == nil {
			drain(resp)
		}
	}
}

func (w *gcsWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.abort()
}
