// Package s3test supports tests against a local S3 server (moto, started
// by tools/with_moto.py, or one in process): fresh buckets, and a proxy
// that injects faults.
package s3test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Endpoint is the local S3 server, or the test is skipped.
func Endpoint(t testing.TB) string {
	ep := os.Getenv("SEGMERGE_S3_ENDPOINT")
	if ep == "" {
		t.Skip("SEGMERGE_S3_ENDPOINT is not set (run through tools/with_moto.py)")
	}
	return ep
}

// InProcess starts an S3 server in this process (gofakes3 over memory,
// written in Go: it costs a small fraction of moto's CPU, so a benchmark
// measures the client rather than the server) and returns its endpoint.
// It stops with the test.
func InProcess(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	return srv.URL
}

// NewBucket creates a fresh bucket on the local S3 server and returns its
// name.
func NewBucket(t testing.TB) string {
	t.Helper()
	return NewBucketAt(t, Endpoint(t))
}

// NewBucketAt creates a fresh bucket on the S3 server at endpoint and
// returns its name.
func NewBucketAt(t testing.TB, endpoint string) string {
	t.Helper()
	bucket := "t-" + uuid.NewString()[:13]
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", ""),
	})
	if _, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	return bucket
}

// FaultProxy stands between a client and an object store server (S3,
// GCS or Azure emulators) and fails or delays a fraction of requests: 503
// SlowDown (which every store's clients retry), 500, a dropped connection,
// or a delay. Location headers (GCS resumable upload sessions) are
// rewritten to point back at the proxy.
type FaultProxy struct {
	*httptest.Server
	failRate, delayRate float64
	delay               time.Duration
	Faults              atomic.Int64
	mu                  sync.Mutex
	r                   *rand.Rand
	// OnRequest, when set, sees every request before it is failed or
	// forwarded (tests check the preconditions a client sends).
	OnRequest func(*http.Request)
}

// SetFailRate changes the share of requests that fail, from now on: 1
// makes the store look gone.
func (p *FaultProxy) SetFailRate(rate float64) {
	p.mu.Lock()
	p.failRate = rate
	p.mu.Unlock()
}

// SetDelay changes how long a delayed request waits (50 ms unless set),
// from now on. With a delay rate of 1 the proxy stands for a store one
// round trip away (benchmarks).
func (p *FaultProxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// NewFaultProxy starts a proxy to target failing failRate and delaying
// delayRate of the requests.
func NewFaultProxy(t testing.TB, target string, failRate, delayRate float64) *FaultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &FaultProxy{failRate: failRate, delayRate: delayRate, delay: 50 * time.Millisecond, r: rand.New(rand.NewPCG(7, 7))}
	rp.ModifyResponse = func(resp *http.Response) error {
		if loc := resp.Header.Get("Location"); strings.HasPrefix(loc, target) {
			resp.Header.Set("Location", p.URL+strings.TrimPrefix(loc, target))
		}
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if p.OnRequest != nil {
			p.OnRequest(req)
		}
		p.mu.Lock()
		x, y, kind := p.r.Float64(), p.r.Float64(), p.r.IntN(3)
		failRate, delay := p.failRate, p.delay
		p.mu.Unlock()
		if y < p.delayRate {
			time.Sleep(delay)
		}
		if x < failRate {
			p.Faults.Add(1)
			switch kind {
			case 0:
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprint(w, `<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>`)
			case 1:
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `<?xml version="1.0"?><Error><Code>InternalError</Code><Message>injected</Message></Error>`)
			default:
				if hj, ok := w.(http.Hijacker); ok {
					conn, _, _ := hj.Hijack()
					conn.Close()
					return
				}
				w.WriteHeader(http.StatusBadGateway)
			}
			return
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(p.Close)
	return p
}

// NewAtomicProxy starts a proxy to target that forwards conditional PUTs
// (If-None-Match or If-Match) one at a time. moto checks a condition and
// then writes, in two steps without a lock, so two concurrent writers can
// both win the same name there; S3 decides them atomically. Behind this
// proxy a race test measures the client, not moto.
func NewAtomicProxy(t testing.TB, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPut && (req.Header.Get("If-None-Match") != "" || req.Header.Get("If-Match") != "") {
			mu.Lock()
			defer mu.Unlock()
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
