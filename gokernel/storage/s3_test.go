package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/s3test"
)

func s3Endpoint(t testing.TB) string { return s3test.Endpoint(t) }

// newTestS3 returns a store over a fresh bucket of the local S3 server,
// reached through endpoint (the server itself, or a proxy in front of it).
func newTestS3(t testing.TB, endpoint string, mutate func(*S3Config)) *S3 {
	t.Helper()
	bucket := s3test.NewBucket(t)
	cfg := S3Config{Endpoint: endpoint, AllowHTTP: true, AccessKeyID: "testing", SecretAccessKey: "testing", MaxAttempts: 8}
	if mutate != nil {
		mutate(&cfg)
	}
	st, err := NewS3("s3://"+bucket+"/some/dataset.lance", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestS3Contract(t *testing.T) {
	ctx := context.Background()
	st := newTestS3(t, s3Endpoint(t), nil)
	checkContract(t, st)
	// The same bytes again: our own earlier attempt (a retried conditional
	// put whose first response was lost), not a conflict.
	if err := st.PutIfAbsent(ctx, "_versions/1.manifest", []byte("v1")); err != nil {
		t.Fatalf("retry of an identical publish: %v", err)
	}
}

func TestS3Multipart(t *testing.T) {
	ctx := context.Background()
	st := newTestS3(t, s3Endpoint(t), func(c *S3Config) { c.PartBytes = 5 << 20 })
	data := make([]byte, 12<<20+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	w, err := st.Create(ctx, "_indices/u/auxiliary.idx")
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		w.Write(data[off:min(off+1<<20, len(data))])
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	obj, err := st.Open(ctx, "_indices/u/auxiliary.idx")
	if err != nil || obj.Size() != int64(len(data)) {
		t.Fatalf("%v %v", obj, err)
	}
	got := make([]byte, 1000)
	if err := obj.ReadAt(ctx, got, 7<<20); err != nil || !bytes.Equal(got, data[7<<20:7<<20+1000]) {
		t.Fatalf("ranged read across parts: %v", err)
	}
}

func TestS3PutIfAbsentRace(t *testing.T) {
	ctx := context.Background()
	st := newTestS3(t, s3test.NewAtomicProxy(t, s3Endpoint(t)), nil)
	for round := 0; round < 5; round++ {
		name := fmt.Sprintf("_versions/%d.manifest", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := st.PutIfAbsent(ctx, name, []byte(fmt.Sprintf("writer %d", g))); err == nil {
					wins.Add(1)
				} else if !errors.Is(err, errkind.Conflict) {
					t.Errorf("unexpected: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d winners", round, wins.Load())
		}
	}
}

func TestS3SurvivesFaults(t *testing.T) {
	ctx := context.Background()
	proxy := s3test.NewFaultProxy(t, s3Endpoint(t), 0.2, 0.1)
	st := newTestS3(t, proxy.URL, nil)
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("obj/%d", i)
		if err := Put(ctx, st, name, []byte(name)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		got, err := ReadAll(ctx, st, name, 100)
		if err != nil || string(got) != name {
			t.Fatalf("get %d: %q %v", i, got, err)
		}
		if err := st.PutIfAbsent(ctx, fmt.Sprintf("_versions/%d.manifest", i), []byte(name)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if proxy.Faults.Load() == 0 {
		t.Fatal("no fault was injected")
	}
	// With retries exhausted, errors come back as errors, typed.
	hard := s3test.NewFaultProxy(t, s3Endpoint(t), 1.0, 0)
	dead := newTestS3(t, hard.URL, func(c *S3Config) { c.MaxAttempts = 2 })
	if err := dead.PutIfAbsent(ctx, "_versions/x.manifest", []byte("x")); err == nil {
		t.Fatal("a publish through a dead proxy succeeded")
	}
}
