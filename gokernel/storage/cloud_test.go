package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/cloudtest"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/s3test"
)

// cloudBackend opens one of the REST stores on its emulator (run through
// tools/with_emulators.py), reached at base: the emulator itself, or a
// proxy in front of it.
type cloudBackend struct {
	name   string
	target func(t testing.TB) string
	open   func(t testing.TB, base, prefix string, o cloudOpts) Store
}

type cloudOpts struct {
	part    int
	retries int
}

func cloudBackends() []cloudBackend {
	return []cloudBackend{
		{
			name:   "gcs",
			target: func(t testing.TB) string { base, _ := cloudtest.GCS(t); return base },
			open: func(t testing.TB, base, prefix string, o cloudOpts) Store {
				_, bucket := cloudtest.GCS(t)
				cfg := GCSConfig{BaseURL: base, SkipSignature: true, PartBytes: o.part,
					Client: ClientConfig{AllowHTTP: true, MaxRetries: retriesOpt(o.retries)}}
				st, err := NewGCS("gs://"+bucket+"/"+prefix+"/ds.lance", cfg)
				if err != nil {
					t.Fatal(err)
				}
				return st
			},
		},
		{
			name:   "azure",
			target: func(t testing.TB) string { return cloudtest.AzureBlob(t).Endpoint },
			open: func(t testing.TB, base, prefix string, o cloudOpts) Store {
				az := cloudtest.AzureBlob(t)
				cfg := AzureConfig{Account: az.Account, AccessKey: az.Key, Endpoint: base + "/" + az.Account, PartBytes: o.part,
					Client: ClientConfig{AllowHTTP: true, MaxRetries: retriesOpt(o.retries)}}
				st, err := NewAzure("az://"+az.Container+"/"+prefix+"/ds.lance", cfg)
				if err != nil {
					t.Fatal(err)
				}
				return st
			},
		},
	}
}

// retriesOpt turns a number of retries into ClientConfig.MaxRetries.
func retriesOpt(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func fastBackoff(t testing.TB) {
	oldI, oldM := backoffInitial, backoffMax
	backoffInitial, backoffMax = 5*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { backoffInitial, backoffMax = oldI, oldM })
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCloudContract(t *testing.T) {
	ctx := context.Background()
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t, b.target(t), cloudtest.Prefix(), cloudOpts{retries: 3})
			checkContract(t, st)
			// The same bytes again: our own earlier attempt (a retried
			// conditional put whose first answer was lost), not a conflict.
			if err := st.PutIfAbsent(ctx, "_versions/1.manifest", []byte("v1")); err != nil {
				t.Fatalf("retry of an identical publish: %v", err)
			}
		})
	}
}

func TestCloudPutIfAbsentRace(t *testing.T) {
	ctx := context.Background()
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t, b.target(t), cloudtest.Prefix(), cloudOpts{retries: 3})
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
		})
	}
}

// A large object goes up in parts (GCS: resumable chunks with
// Content-Range; Azure: blocks and a block list), small ones and publishes
// in one request carrying the store's create-if-absent precondition; every
// byte comes back, also by ranged reads across part boundaries.
func TestCloudMultipartAndPreconditions(t *testing.T) {
	ctx := context.Background()
	const part = 256 << 10
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			proxy := s3test.NewFaultProxy(t, b.target(t), 0, 0)
			var mu sync.Mutex
			var seen []string
			proxy.OnRequest = func(r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				q := r.URL.Query()
				switch {
				case r.Header.Get("Content-Range") != "":
					seen = append(seen, "chunk "+r.Header.Get("Content-Range"))
				case q.Get("comp") == "block":
					seen = append(seen, "block")
				case q.Get("comp") == "blocklist":
					seen = append(seen, "blocklist")
				case q.Get("uploadType") == "resumable":
					seen = append(seen, "resumable")
				case q.Get("ifGenerationMatch") != "":
					seen = append(seen, "ifGenerationMatch="+q.Get("ifGenerationMatch"))
				case r.Header.Get("If-None-Match") != "":
					seen = append(seen, "If-None-Match: "+r.Header.Get("If-None-Match"))
				case r.Method == http.MethodPut || r.Method == http.MethodPost:
					seen = append(seen, "put")
				}
			}
			st := b.open(t, proxy.URL, cloudtest.Prefix(), cloudOpts{part: part, retries: 3})
			data := randomBytes(5*part+12345, 3)
			w, err := st.Create(ctx, "_indices/u/auxiliary.idx")
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(data); off += 100_000 {
				if _, err := w.Write(data[off:min(off+100_000, len(data))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			obj, err := st.Open(ctx, "_indices/u/auxiliary.idx")
			if err != nil || obj.Size() != int64(len(data)) {
				t.Fatalf("%v %v", obj, err)
			}
			got := make([]byte, 3000)
			if err := obj.ReadAt(ctx, got, 2*part-1000); err != nil || !bytes.Equal(got, data[2*part-1000:2*part+2000]) {
				t.Fatalf("ranged read across parts: %v", err)
			}
			all, err := ReadAll(ctx, st, "_indices/u/auxiliary.idx", 1<<30)
			if err != nil || !bytes.Equal(all, data) {
				t.Fatalf("content differs: %v", err)
			}
			if err := Put(ctx, st, "small", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := st.PutIfAbsent(ctx, "_versions/1.manifest", []byte("m")); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got2 := strings.Join(seen, "; ")
			mu.Unlock()
			var want string
			switch b.name {
			case "gcs":
				total := len(data)
				want = fmt.Sprintf("resumable; chunk bytes 0-%d/*; chunk bytes %d-%d/*; chunk bytes %d-%d/*; chunk bytes %d-%d/*; chunk bytes %d-%d/*; chunk bytes %d-%d/%d; put; ifGenerationMatch=0",
					part-1, part, 2*part-1, 2*part, 3*part-1, 3*part, 4*part-1, 4*part, 5*part-1, 5*part, total-1, total)
			case "azure":
				want = "block; block; block; block; block; block; blocklist; put; If-None-Match: *"
			}
			if got2 != want {
				t.Fatalf("requests:\n got %s\nwant %s", got2, want)
			}
		})
	}
}

// An aborted upload leaves no object, whatever was already sent.
func TestCloudAbortLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t, b.target(t), cloudtest.Prefix(), cloudOpts{part: 256 << 10, retries: 3})
			w, err := st.Create(ctx, "_indices/u/index.idx")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(randomBytes(700<<10, 4)); err != nil {
				t.Fatal(err)
			}
			w.Abort()
			if _, err := st.Stat(ctx, "_indices/u/index.idx"); !errors.Is(err, errkind.NotFound) {
				t.Fatalf("aborted upload visible: %v", err)
			}
			if entries, err := st.List(ctx, ""); err != nil || len(entries) != 0 {
				t.Fatalf("left behind: %v %v", entries, err)
			}
		})
	}
}

func TestCloudListPages(t *testing.T) {
	ctx := context.Background()
	old := listPageSize
	listPageSize = 3
	t.Cleanup(func() { listPageSize = old })
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			proxy := s3test.NewFaultProxy(t, b.target(t), 0, 0)
			var lists atomic.Int32
			proxy.OnRequest = func(r *http.Request) {
				if r.Method == http.MethodGet && r.URL.Query().Has("prefix") {
					lists.Add(1)
				}
			}
			st := b.open(t, proxy.URL, cloudtest.Prefix(), cloudOpts{retries: 3})
			var want []string
			for i := 0; i < 8; i++ {
				name := fmt.Sprintf("_versions/%d.manifest", i)
				want = append(want, name)
				if err := Put(ctx, st, name, []byte(name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := Put(ctx, st, "other", []byte("x")); err != nil {
				t.Fatal(err)
			}
			entries, err := st.List(ctx, "_versions/")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name)
				if e.Size != int64(len(e.Name)) || e.ModTime.IsZero() {
					t.Fatalf("entry %+v", e)
				}
			}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Fatalf("listed %v", names)
			}
			if lists.Load() != 3 {
				t.Fatalf("8 objects listed 3 at a time in %d requests", lists.Load())
			}
		})
	}
}

// Through a proxy that fails or delays a fifth of the requests, every
// operation succeeds after retries; through a dead one, errors come back
// typed.
func TestCloudSurvivesFaults(t *testing.T) {
	ctx := context.Background()
	fastBackoff(t)
	for _, b := range cloudBackends() {
		t.Run(b.name, func(t *testing.T) {
			proxy := s3test.NewFaultProxy(t, b.target(t), 0.2, 0.1)
			prefix := cloudtest.Prefix()
			st := b.open(t, proxy.URL, prefix, cloudOpts{part: 256 << 10, retries: 10})
			big := randomBytes(700<<10, 5)
			for i := 0; i < 12; i++ {
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
				if i%4 == 0 {
					if err := Put(ctx, st, "big", big); err != nil {
						t.Fatalf("multipart %d: %v", i, err)
					}
					if got, err := ReadAll(ctx, st, "big", 1<<30); err != nil || !bytes.Equal(got, big) {
						t.Fatalf("multipart %d read back: %v", i, err)
					}
				}
			}
			if proxy.Faults.Load() == 0 {
				t.Fatal("no fault was injected")
			}
			direct := b.open(t, b.target(t), prefix, cloudOpts{retries: 3})
			if entries, err := direct.List(ctx, "_versions/"); err != nil || len(entries) != 12 {
				t.Fatalf("published %d manifests (%v)", len(entries), err)
			}
			hard := s3test.NewFaultProxy(t, b.target(t), 1.0, 0)
			dead := b.open(t, hard.URL, prefix, cloudOpts{retries: 2})
			if err := dead.PutIfAbsent(ctx, "_versions/x.manifest", []byte("x")); !errors.Is(err, errkind.IO) {
				t.Fatalf("publish through a dead store: %v", err)
			}
			if _, err := dead.Open(ctx, "obj/1"); !errors.Is(err, errkind.IO) {
				t.Fatalf("open through a dead store: %v", err)
			}
			if _, err := direct.Stat(ctx, "_versions/x.manifest"); !errors.Is(err, errkind.NotFound) {
				t.Fatalf("a failed publish left an object: %v", err)
			}
		})
	}
}

// Azurite checks Shared Key signatures: a wrong key is a credentials error
// (errkind.InvalidInput), its message free of the key.
func TestAzureWrongKeyRefused(t *testing.T) {
	az := cloudtest.AzureBlob(t)
	wrong := "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
	st, err := NewAzure("az://"+az.Container+"/"+cloudtest.Prefix(), AzureConfig{Account: az.Account, AccessKey: wrong,
		Endpoint: az.AccountURL(), Client: ClientConfig{AllowHTTP: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Stat(context.Background(), "x")
	if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), "credentials") || strings.Contains(err.Error(), wrong) {
		t.Fatalf("wrong key: %v", err)
	}
	if err := Put(context.Background(), st, "x", []byte("x")); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("write with a wrong key: %v", err)
	}
}
