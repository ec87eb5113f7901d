package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

func backends(t *testing.T) map[string]Store {
	return map[string]Store{
		"local": NewLocal(t.TempDir(), "test"),
		"mem":   NewMem("memory://test"),
	}
}

func TestStoreContract(t *testing.T) {
	for name, st := range backends(t) {
		t.Run(name, func(t *testing.T) { checkContract(t, st) })
	}
}

// checkContract exercises what every Store promises: ranged reads that
// refuse to run past the end, aborted writes that never appear,
// put-if-absent that never replaces, listing, idempotent deletes and
// refused names.
func checkContract(t *testing.T, st Store) {
	t.Helper()
	ctx := context.Background()
	checkIdentity(t, st)
	if _, err := st.Open(ctx, "a/b.bin"); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("open missing: %v", err)
	}
	if err := Put(ctx, st, "a/b.bin", []byte("hello world")); err != nil {
		t.Fatal(err)
	}
	obj, err := st.Open(ctx, "a/b.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if obj.Size() != 11 {
		t.Fatalf("size %d", obj.Size())
	}
	buf := make([]byte, 5)
	if err := obj.ReadAt(ctx, buf, 6); err != nil || string(buf) != "world" {
		t.Fatalf("ReadAt: %q %v", buf, err)
	}
	if err := obj.ReadAt(ctx, buf, 7); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("read past end: %v", err)
	}
	if err := obj.ReadAt(ctx, buf, -1); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("negative offset: %v", err)
	}

	w, err := st.Create(ctx, "a/c.bin")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("partial"))
	w.Abort()
	if _, err := st.Stat(ctx, "a/c.bin"); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("aborted object visible: %v", err)
	}

	if err := st.PutIfAbsent(ctx, "_versions/1.manifest", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(ctx, "_versions/1.manifest", []byte("v1 again")); !errors.Is(err, errkind.Conflict) {
		t.Fatalf("second PutIfAbsent: %v", err)
	}
	got, err := ReadAll(ctx, st, "_versions/1.manifest", 100)
	if err != nil || string(got) != "v1" {
		t.Fatalf("PutIfAbsent replaced the object: %q %v", got, err)
	}
	if _, err := ReadAll(ctx, st, "_versions/1.manifest", 1); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("limit not enforced: %v", err)
	}

	entries, err := st.List(ctx, "a/")
	if err != nil || len(entries) != 1 || entries[0].Name != "a/b.bin" || entries[0].Size != 11 {
		t.Fatalf("List a/: %+v %v", entries, err)
	}
	if entries, _ := st.List(ctx, "nope/"); len(entries) != 0 {
		t.Fatalf("List missing prefix: %+v", entries)
	}
	if err := st.Delete(ctx, "a/b.bin"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a/b.bin"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	for _, bad := range []string{"", "/abs", "../up", "a/../../x"} {
		if _, err := st.Open(ctx, bad); !errors.Is(err, errkind.InvalidInput) {
			t.Fatalf("name %q accepted: %v", bad, err)
		}
	}
}

// Many goroutines race to publish the same name: exactly one wins, and the
// published bytes are the winner's, whole.
func TestPutIfAbsentRace(t *testing.T) {
	ctx := context.Background()
	for name, st := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for round := 0; round < 20; round++ {
				obj := fmt.Sprintf("_versions/%d.manifest", round)
				var wins atomic.Int32
				var winner atomic.Value
				var wg sync.WaitGroup
				for g := 0; g < 8; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						data := []byte(fmt.Sprintf("writer-%d-%s", g, string(make([]byte, 4096))))
						err := st.PutIfAbsent(ctx, obj, data)
						switch {
						case err == nil:
							wins.Add(1)
							winner.Store(string(data))
						case !errors.Is(err, errkind.Conflict):
							t.Errorf("unexpected error: %v", err)
						}
					}()
				}
				wg.Wait()
				if wins.Load() != 1 {
					t.Fatalf("round %d: %d winners", round, wins.Load())
				}
				got, err := ReadAll(ctx, st, obj, 1<<20)
				if err != nil || string(got) != winner.Load().(string) {
					t.Fatalf("round %d: published bytes are not the winner's", round)
				}
			}
		})
	}
}

func TestLocalLeavesNoTemporaries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := NewLocal(dir, dir)
	for i := 0; i < 5; i++ {
		_ = st.PutIfAbsent(ctx, "_versions/x.manifest", []byte("x"))
	}
	w, _ := st.Create(ctx, "_indices/u/index.idx")
	w.Write([]byte("abc"))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			names = append(names, d.Name())
		}
		return nil
	})
	if len(names) != 2 {
		t.Fatalf("files left: %v", names)
	}
	if !IsTemp("_versions/.tmp-x") || IsTemp("_indices/u/index.idx") {
		t.Fatal("IsTemp")
	}
	if err := st.Delete(ctx, "_indices/u/index.idx"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "_indices")); !os.IsNotExist(err) {
		t.Fatalf("empty directories left behind: %v", err)
	}
}

func TestOpenURI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		uri  string
		kind error
	}{
		{dir, nil},
		{"file://" + dir, nil},
		{"memory://x", nil},
		{"", errkind.InvalidInput},
		{"s3://bucket/t.lance", nil},
		{"gs://bucket/t.lance", nil},
		{"gs://bucket", nil},
		{"az://container/t.lance", errkind.InvalidInput}, // no account
		{"az://container@acct.dfs.core.windows.net/t.lance", nil},
		{"az://a.b/t.lance", errkind.InvalidInput},
		{"abfss://container@acct.dfs.core.windows.net/t.lance", errkind.Unsupported},
		{"s3+ddb://bucket/t.lance", errkind.Unsupported},
		{"s3://", errkind.InvalidInput},
		{"ftp://host/x", errkind.InvalidInput},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			_, err := Open(ctx, tc.uri, nil)
			if tc.kind == nil && err != nil || tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Fatalf("Open(%q) = %v, want kind %v", tc.uri, err, tc.kind)
			}
		})
	}
}

func TestRedactURI(t *testing.T) {
	for in, want := range map[string]string{
		"s3://KEY:SECRET@bucket/t.lance": "s3://***@bucket/t.lance",
		"s3://KEY@bucket/t.lance?x=y":    "s3://***@bucket/t.lance?x=y",
		"s3://K:S%2Fx@bucket":            "s3://***@bucket",
		"s3://user:p@ss@bucket/p@th":     "s3://***@bucket/p@th",
		"s3://bucket/p@th":               "s3://bucket/p@th",
		"/data/t@v.lance":                "/data/t@v.lance",
		"file://u:pw@/tmp/x":             "file://***@/tmp/x",
		"memory://name":                  "memory://name",
		"gs://a:b@c/d#frag@x":            "gs://***@c/d#frag@x",
	} {
		if got := RedactURI(in); got != want {
			t.Errorf("RedactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestS3URISecretNeverShown: credentials in an S3 URI's userinfo appear
// neither in the store's URI nor in its errors.
func TestS3URISecretNeverShown(t *testing.T) {
	const secret = "s3cr3tPassw0rd"
	st, err := Open(context.Background(), "s3://AKID:"+secret+"@bucket/t.lance", map[string]string{
		"aws_endpoint": "http://127.0.0.1:9", "allow_http": "true", "max_retries": "0", "timeout": "2s", "aws_region": "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.List(context.Background(), "_versions/")
	if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(st.URI(), secret) || st.URI() != "s3://***@bucket/t.lance" {
		t.Fatalf("URI %q, error %v", st.URI(), err)
	}
	if _, err := Open(context.Background(), "zz://AKID:"+secret+"@x/y", nil); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad scheme: %v", err)
	}
}

// checkIdentity: every backend names the exact bytes of an opened object
// (ivf's segment cache keys on it): the same object twice has one
// identity; a rewrite of the same size under the same name, and another
// name, have others.
func checkIdentity(t *testing.T, st Store) {
	t.Helper()
	ctx := context.Background()
	ident := func(name string) string {
		t.Helper()
		o, err := st.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		return ObjectIdentity(o)
	}
	for _, name := range []string{"ident/x.bin", "ident/y.bin"} {
		if err := Put(ctx, st, name, []byte("first")); err != nil {
			t.Fatal(err)
		}
	}
	a, a2, b := ident("ident/x.bin"), ident("ident/x.bin"), ident("ident/y.bin")
	if a == "" || a != a2 || a == b {
		t.Fatalf("identities %q, %q (same object), %q (another)", a, a2, b)
	}
	if err := Put(ctx, st, "ident/x.bin", []byte("again")); err != nil {
		t.Fatal(err)
	}
	if c := ident("ident/x.bin"); c == a {
		t.Fatalf("a rewritten object kept its identity %q", c)
	}
	for _, name := range []string{"ident/x.bin", "ident/y.bin"} {
		if err := st.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSplitRead(t *testing.T) {
	ctx := context.Background()
	src := make([]byte, 3*remotePartBytes+12345)
	for i := range src {
		src[i] = byte(i * 7)
	}
	from := func(calls *atomic.Int64, failAt int64) func(context.Context, []byte, int64) error {
		return func(ctx context.Context, p []byte, off int64) error {
			calls.Add(1)
			if len(p) > remotePartBytes {
				return fmt.Errorf("a part of %d bytes", len(p))
			}
			if failAt >= off && failAt < off+int64(len(p)) {
				return errors.New("injected")
			}
			copy(p, src[off:])
			return nil
		}
	}
	for _, tc := range []struct {
		name      string
		off, n    int
		failAt    int64
		wantCalls int64
		wantErr   bool
	}{
		{"small: one request", 5, 1000, -1, 1, false},
		{"exactly one part", 0, remotePartBytes, -1, 1, false},
		{"split in 4", 0, len(src), -1, 4, false},
		{"split from an offset", 100, len(src) - 100, -1, 4, false},
		{"a part fails", 0, len(src), 2 * remotePartBytes, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			p := make([]byte, tc.n)
			err := splitRead(ctx, p, int64(tc.off), from(&calls, tc.failAt))
			if tc.wantErr {
				if err == nil || err.Error() != "injected" {
					t.Fatalf("err = %v, want the part's error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, src[tc.off:tc.off+tc.n]) {
				t.Fatal("bytes differ from the source")
			}
			if calls.Load() != tc.wantCalls {
				t.Fatalf("%d requests, want %d", calls.Load(), tc.wantCalls)
			}
		})
	}
}
