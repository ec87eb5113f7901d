package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// S3 is a Store over a prefix of an S3 (or S3-compatible) bucket.
//
// Reads are ranged GETs; writes buffer one part and switch to a multipart
// upload when an object outgrows it; PutIfAbsent is a PUT with
// If-None-Match: *, which S3 (and compatible stores) turn into a 412 when
// the object exists: the same primitive pylance commits with, so the two
// arbitrate correctly against each other. The SDK retries throttling and
// transient errors with backoff. Credentials come from the options or the
// usual environment variables; they never appear in errors.
type S3 struct {
	client *s3.Client
	bucket string
	prefix string // "" or ending in "/"
	uri    string
	cfg    S3Config
}

// S3Config is what a Store needs to reach a bucket. The zero value of
// every field means its default.
type S3Config struct {
	Region             string
	Endpoint           string // e.g. "http://127.0.0.1:9000"; default AWS
	AccessKeyID        string
	SecretAccessKey    string
	SessionToken       string
	AllowHTTP          bool
	VirtualHostedStyle bool
	// MaxAttempts per request, retries with backoff included. Default 10.
	MaxAttempts int
	// Timeout bounds one HTTP request (a part upload, a ranged GET).
	// Default 5 minutes.
	Timeout time.Duration
	// PartBytes is the multipart upload part size. Default 16 MiB (S3
	// needs at least 5 MiB for every part but the last).
	PartBytes int
	// UploadConcurrency bounds the parts of one object in flight. Default 4.
	UploadConcurrency int
}

// s3OptionKeys maps the storage_options keys pylance (object_store)
// accepts to our settings, aliases included.
var s3OptionKeys = map[string]string{
	"aws_access_key_id": "key", "access_key_id": "key",
	"aws_secret_access_key": "secret", "secret_access_key": "secret",
	"aws_session_token": "token", "session_token": "token", "aws_token": "token", "token": "token",
	"aws_region": "region", "region": "region", "aws_default_region": "region",
	"aws_endpoint": "endpoint", "endpoint": "endpoint", "aws_endpoint_url": "endpoint", "endpoint_url": "endpoint",
	"aws_endpoint_url_s3": "endpoint", "allow_http": "allow_http", "aws_allow_http": "allow_http",
	"aws_virtual_hosted_style_request": "virtual", "virtual_hosted_style_request": "virtual",
	"timeout": "timeout", "request_timeout": "timeout",
	"max_retries": "retries", "client_max_retries": "retries",
}

// s3Env are the environment fallbacks, as object_store reads them.
var s3Env = map[string][]string{
	"key":        {"AWS_ACCESS_KEY_ID"},
	"secret":     {"AWS_SECRET_ACCESS_KEY"},
	"token":      {"AWS_SESSION_TOKEN"},
	"region":     {"AWS_REGION", "AWS_DEFAULT_REGION"},
	"endpoint":   {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"},
	"allow_http": {"AWS_ALLOW_HTTP"},
	"virtual":    {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST"},
}

// s3Options lists every key pylance takes for s3:// (object_store's
// AmazonS3ConfigKey aliases, the client keys, lance's own): those not in
// s3OptionKeys are accepted and have no effect here, as before; any other
// key is refused.
var s3Options = func() optionTable {
	keys := map[string]string{}
	for k, v := range s3OptionKeys {
		keys[k] = v
	}
	for _, k := range []string{"aws_bucket", "aws_bucket_name", "bucket_name", "bucket", "default_region",
		"aws_s3_express", "s3_express", "aws_imdsv1_fallback", "imdsv1_fallback", "aws_metadata_endpoint", "metadata_endpoint",
		"aws_unsigned_payload", "unsigned_payload", "aws_checksum_algorithm", "checksum_algorithm",
		"aws_container_credentials_relative_uri", "aws_container_credentials_full_uri", "aws_container_authorization_token_file",
		"aws_web_identity_token_file", "web_identity_token_file", "aws_role_arn", "role_arn", "aws_role_session_name",
		"role_session_name", "aws_endpoint_url_sts", "endpoint_url_sts", "aws_skip_signature", "skip_signature",
		"aws_copy_if_not_exists", "copy_if_not_exists", "aws_conditional_put", "conditional_put", "aws_disable_tagging",
		"disable_tagging", "aws_request_payer", "request_payer", "aws_server_side_encryption", "aws_sse_kms_key_id",
		"aws_sse_bucket_key_enabled", "aws_sse_customer_key_base64", "dynamodb_endpoint"} {
		if _, ok := keys[k]; !ok {
			keys[k] = ""
		}
	}
	return optionTable{scheme: "s3", prefix: "aws_", keys: keys}
}()

// ParseS3Options builds an S3Config from pylance-style storage options,
// falling back to the environment. Keys pylance takes but we do not need
// are ignored; unknown keys and malformed values are errkind.InvalidInput.
func ParseS3Options(options map[string]string) (S3Config, error) {
	if err := s3Options.checkKeys(options); err != nil {
		return S3Config{}, err
	}
	vals := map[string]string{}
	for k, v := range options {
		if name, ok := s3OptionKeys[strings.ToLower(k)]; ok {
			vals[name] = v
		}
	}
	for name, envs := range s3Env {
		if _, ok := vals[name]; ok {
			continue
		}
		for _, e := range envs {
			if v := getenv(e); v != "" {
				vals[name] = v
				break
			}
		}
	}
	cfg := S3Config{Region: vals["region"], Endpoint: vals["endpoint"], AccessKeyID: vals["key"],
		SecretAccessKey: vals["secret"], SessionToken: vals["token"]}
	var err error
	parseBool := func(name string) bool {
		v, ok := vals[name]
		if !ok || err != nil {
			return false
		}
		b, e := strconv.ParseBool(v)
		if e != nil {
			err = fmt.Errorf("%w: storage option %s=%q is not a boolean", errkind.InvalidInput, name, v)
		}
		return b
	}
	cfg.AllowHTTP = parseBool("allow_http")
	cfg.VirtualHostedStyle = parseBool("virtual")
	if v, ok := vals["timeout"]; ok && err == nil {
		if cfg.Timeout, err = time.ParseDuration(v); err != nil {
			if secs, e := strconv.ParseFloat(v, 64); e == nil {
				cfg.Timeout, err = time.Duration(secs*float64(time.Second)), nil
			} else {
				err = fmt.Errorf("%w: storage option timeout=%q is not a duration", errkind.InvalidInput, v)
			}
		}
	}
	if v, ok := vals["retries"]; ok && err == nil {
		n, e := strconv.Atoi(v)
		if e != nil || n < 0 {
			err = fmt.Errorf("%w: storage option max_retries=%q", errkind.InvalidInput, v)
		}
		cfg.MaxAttempts = n + 1
	}
	if cfg.Endpoint != "" && strings.HasPrefix(cfg.Endpoint, "http://") && !cfg.AllowHTTP {
		err = errors.Join(err, fmt.Errorf("%w: endpoint %s is plain http; set allow_http=true to use it", errkind.InvalidInput, redactURL(cfg.Endpoint)))
	}
	return cfg, err
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

func (c S3Config) withDefaults() S3Config {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.PartBytes < 5<<20 {
		c.PartBytes = 16 << 20
	}
	if c.UploadConcurrency <= 0 {
		c.UploadConcurrency = 4
	}
	return c
}

// NewS3 opens the store at s3://bucket/prefix.
func NewS3(uri string, cfg S3Config) (*S3, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: storage: bad S3 URI %q (want s3://bucket/path)", errkind.InvalidInput, RedactURI(uri))
	}
	cfg = cfg.withDefaults()
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	httpClient := &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	opts := s3.Options{
		Region:       cfg.Region,
		HTTPClient:   httpClient,
		UsePathStyle: !cfg.VirtualHostedStyle,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.MaxBackoff = 20 * time.Second
		}),
	}
	if cfg.AccessKeyID != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	} else {
		opts.Credentials = aws.AnonymousCredentials{}
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	return &S3{client: s3.New(opts), bucket: u.Host, prefix: prefix, uri: RedactURI(uri), cfg: cfg}, nil
}

func (s *S3) URI() string { return s.uri }

// Concurrency asks callers for RemoteConcurrency requests in flight.
func (s *S3) Concurrency() int { return RemoteConcurrency }

// Sync does nothing: an S3 PUT is durable when it returns.
func (s *S3) Sync(ctx context.Context, names []string) error { return nil }

func (s *S3) key(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return s.prefix + name, nil
}

// s3Err maps an SDK error to an error kind. The message names the object,
// never credentials.
func (s *S3) s3Err(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("storage: s3 %s %s: %w", op, name, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return fmt.Errorf("%w: storage: s3 %s %s", errkind.NotFound, op, name)
		case "NoSuchBucket":
			return fmt.Errorf("%w: storage: s3 %s: bucket %q does not exist", errkind.NotFound, op, s.bucket)
		case "PreconditionFailed":
			return fmt.Errorf("%w: storage: s3 %s %s: already exists", errkind.Conflict, op, name)
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
			return fmt.Errorf("%w: storage: s3 %s %s: %s (check the credentials)", errkind.InvalidInput, op, name, api.ErrorCode())
		}
		return fmt.Errorf("%w: storage: s3 %s %s: %s: %s", errkind.IO, op, name, api.ErrorCode(), api.ErrorMessage())
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return fmt.Errorf("%w: storage: s3 %s %s", errkind.NotFound, op, name)
	}
	return fmt.Errorf("%w: storage: s3 %s %s: %w", errkind.IO, op, name, err)
}

func (s *S3) Open(ctx context.Context, name string) (Object, error) {
	e, err := s.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	o := &s3Object{s: s, name: name, size: e.Size, etag: e.ETag}
	o.src = &blockSource{size: e.Size, read: o.readRange}
	return o, nil
}

type s3Object struct {
	s    *S3
	name string
	size int64
	etag string
	src  *blockSource
}

// Identity names the object's bytes by endpoint, bucket, key, size and
// ETag; "" when the store sent no ETag.
func (o *s3Object) Identity() string {
	if o.etag == "" {
		return ""
	}
	key, _ := o.s.key(o.name)
	return fmt.Sprintf("s3:%s|%s|%s|%d|%s", o.s.cfg.Endpoint, o.s.bucket, key, o.size, o.etag)
}

func (o *s3Object) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := readBounds(o.name, o.size, len(p), off); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	return o.src.readAt(ctx, p, off)
}

// readRange is one ranged GET.
func (o *s3Object) readRange(ctx context.Context, p []byte, off int64) error {
	key, _ := o.s.key(o.name)
	out, err := o.s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &o.s.bucket, Key: &key, Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)),
	})
	if err != nil {
		return o.s.s3Err("read", o.name, err)
	}
	defer out.Body.Close()
	if _, err := io.ReadFull(out.Body, p); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("storage: s3 read %s at %d: %w", o.name, off, ctx.Err())
		}
		return fmt.Errorf("%w: storage: s3 read %s at %d: %w", errkind.IO, o.name, off, err)
	}
	return nil
}

func (o *s3Object) Size() int64  { return o.size }
func (o *s3Object) Close() error { return nil }

func (s *S3) Stat(ctx context.Context, name string) (Entry, error) {
	key, err := s.key(name)
	if err != nil {
		return Entry{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return Entry{}, s.s3Err("stat", name, err)
	}
	e := Entry{Name: name, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}
	if out.LastModified != nil {
		e.ModTime = *out.LastModified
	}
	return e, nil
}

func (s *S3) List(ctx context.Context, prefix string) ([]Entry, error) {
	var out []Entry
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.s3Err("list", prefix, err)
		}
		for _, o := range page.Contents {
			e := Entry{Name: strings.TrimPrefix(aws.ToString(o.Key), s.prefix), Size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				e.ModTime = *o.LastModified
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *S3) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil && errkind.Tag(s.s3Err("delete", name, err)) != "not_found" {
		return s.s3Err("delete", name, err)
	}
	return nil
}

// PutIfAbsent is PutObject with If-None-Match: *. A 412 means another
// writer published the name first. When a request whose outcome is
// unknown (a timeout, a dropped connection) is retried and then answered
// 412, the object may be our own earlier attempt: read it back and compare.
func (s *S3) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: &key, Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		IfNoneMatch: aws.String("*"),
	}, func(o *s3.Options) {
		// 409 ConditionalRequestConflict: a concurrent conditional write to
		// the same key is in progress; S3 says to retry.
		o.Retryer = retry.AddWithErrorCodes(o.Retryer, "ConditionalRequestConflict")
	})
	if err == nil {
		return nil
	}
	mapped := s.s3Err("publish", name, err)
	if errkind.Tag(mapped) == "conflict" {
		if own, _ := s.sameContent(ctx, name, data); own {
			return nil
		}
	}
	return mapped
}

func (s *S3) sameContent(ctx context.Context, name string, data []byte) (bool, error) {
	obj, err := s.Open(ctx, name)
	if err != nil || obj.Size() != int64(len(data)) {
		return false, err
	}
	got := make([]byte, len(data))
	if err := obj.ReadAt(ctx, got, 0); err != nil {
		return false, err
	}
	return bytes.Equal(got, data), nil
}

// Create buffers one part; a larger object becomes a multipart upload whose
// parts upload in the background (at most UploadConcurrency at a time)
// while the caller keeps writing. Finish completes it; Abort aborts it.
func (s *S3) Create(ctx context.Context, name string) (Writer, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &s3Writer{s: s, ctx: ctx, cancel: cancel, name: name, key: key,
		sem: make(chan struct{}, s.cfg.UploadConcurrency)}, nil
}

type s3Writer struct {
	s        *S3
	ctx      context.Context
	cancel   context.CancelFunc
	name     string
	key      string
	buf      []byte
	uploadID *string
	wg       sync.WaitGroup
	mu       sync.Mutex
	parts    []types.CompletedPart
	err      error
	sem      chan struct{}
	done     bool
}

func (w *s3Writer) setErr(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *s3Writer) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if err := w.firstErr(); err != nil {
		return 0, err
	}
	w.buf = append(w.buf, p...)
	for len(w.buf) >= w.s.cfg.PartBytes {
		part := w.buf[:w.s.cfg.PartBytes:w.s.cfg.PartBytes]
		w.buf = append([]byte(nil), w.buf[w.s.cfg.PartBytes:]...)
		if err := w.uploadPart(part); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *s3Writer) uploadPart(part []byte) error {
	if w.uploadID == nil {
		out, err := w.s.client.CreateMultipartUpload(w.ctx, &s3.CreateMultipartUploadInput{Bucket: &w.s.bucket, Key: &w.key})
		if err != nil {
			err = w.s.s3Err("start upload of", w.name, err)
			w.setErr(err)
			return err
		}
		w.uploadID = out.UploadId
	}
	num := int32(len(w.parts) + 1)
	w.mu.Lock()
	w.parts = append(w.parts, types.CompletedPart{PartNumber: aws.Int32(num)})
	w.mu.Unlock()
	w.sem <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		out, err := w.s.client.UploadPart(w.ctx, &s3.UploadPartInput{
			Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID, PartNumber: aws.Int32(num),
			Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part))),
		})
		if err != nil {
			w.setErr(w.s.s3Err(fmt.Sprintf("upload part %d of", num), w.name, err))
			return
		}
		w.mu.Lock()
		w.parts[num-1].ETag = out.ETag
		w.mu.Unlock()
	}()
	return nil
}

func (w *s3Writer) Finish() error {
	if w.done {
		return fmt.Errorf("storage: %s: Finish after Finish or Abort", w.name)
	}
	w.done = true
	defer w.cancel()
	if w.uploadID == nil {
		_, err := w.s.client.PutObject(w.ctx, &s3.PutObjectInput{Bucket: &w.s.bucket, Key: &w.key,
			Body: bytes.NewReader(w.buf), ContentLength: aws.Int64(int64(len(w.buf)))})
		return w.s.s3Err("write", w.name, err)
	}
	if len(w.buf) > 0 {
		if err := w.uploadPart(w.buf); err != nil {
			w.abortUpload()
			return err
		}
	}
	w.wg.Wait()
	if err := w.firstErr(); err != nil {
		w.abortUpload()
		return err
	}
	_, err := w.s.client.CompleteMultipartUpload(w.ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.parts},
	})
	if err != nil {
		w.abortUpload()
		return w.s.s3Err("complete upload of", w.name, err)
	}
	return nil
}

func (w *s3Writer) abortUpload() {
	if w.uploadID == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 30*time.Second)
	defer cancel()
	_, _ = w.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID})
}

func (w *s3Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.cancel()
	w.wg.Wait()
	w.abortUpload()
}
