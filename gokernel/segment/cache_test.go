package segment

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// readCounter counts the ranged reads of the objects it opens, which keep
// their storage identity (so that ivf's segment cache applies).
type readCounter struct {
	storage.Store
	reads atomic.Int64
}

type countedObject struct {
	storage.Object
	c *readCounter
}

func (c *readCounter) Open(ctx context.Context, name string) (storage.Object, error) {
	o, err := c.Store.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countedObject{o, c}, nil
}

func (o *countedObject) ReadAt(ctx context.Context, p []byte, off int64) error {
	o.c.reads.Add(1)
	return o.Object.ReadAt(ctx, p, off)
}

func (o *countedObject) Identity() string { return storage.ObjectIdentity(o.Object) }

// TestSegmentCache: list, plan, merge and commit open a segment's files
// again and again; what they decode is read once per process, shared
// (tensors interned across segments of one model), and never served for
// files that changed or for another dataset's files.
func TestSegmentCache(t *testing.T) {
	ctx := context.Background()
	defer ivf.SetCacheLimit(ivf.SetCacheLimit(0)) // empty, then restore
	ivf.SetCacheLimit(ivf.DefaultCacheBytes)
	root := t.TempDir()
	st := &readCounter{Store: storage.NewLocal(root, root)}
	a := fakeSegment(t, st, 0, []uint32{3, 0, 5, 2, 1}, false)
	b := fakeSegment(t, st, 1, []uint32{1, 1, 1, 1, 1}, true)

	open := func(im *pb.IndexMetadata) *source {
		t.Helper()
		s, err := openSource(ctx, st, nil, im, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.files.Close() })
		return s
	}
	sa := open(a)
	first := st.reads.Load()
	if first == 0 {
		t.Fatal("the first open read nothing")
	}
	sa2 := open(a)
	if n := st.reads.Load() - first; n != 0 {
		t.Fatalf("opening a segment again read %d times", n)
	}
	if sa2.files.IVF != sa.files.IVF || sa2.codebook != sa.codebook {
		t.Fatal("a second open did not share the decoded model")
	}
	// The second open reads pages through its own objects.
	ids, err := sa2.files.Aux.Read(ctx, "_rowid", 0, 3)
	if err != nil || ids.Len != 3 {
		t.Fatalf("read through a cached segment: %v %v", ids, err)
	}
	sa.files.Close() // closing one handle leaves the other usable
	if _, err := sa2.files.Aux.Read(ctx, "_rowid", 3, 8); err != nil {
		t.Fatal(err)
	}

	// Two segments of one model share one copy of its tensors.
	sb := open(b)
	if sb.files.Centroids() != sa2.files.Centroids() || sb.codebook != sa2.codebook {
		t.Fatal("segments of one model hold separate copies of its centroids or codebook")
	}
	if got := ivf.ReadCacheStats(); got.Entries != 2 || got.Tensors != 2 {
		t.Fatalf("cache holds %+v, want 2 segments sharing 2 tensors (centroids, codebook)", got)
	}

	// A file replaced under the same name is decoded afresh.
	dir := filepath.Join(root, filepath.FromSlash(table.IndexDir(a)))
	c := fakeSegment(t, st, 0, []uint32{1, 2, 3, 4, 5}, false)
	cdir := filepath.Join(root, filepath.FromSlash(table.IndexDir(c)))
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		if err := os.Rename(filepath.Join(cdir, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if got := open(a).files.IVF.Lengths; len(got) != 5 || got[0] != 1 || got[4] != 5 {
		t.Fatalf("replaced files served from the cache: lengths %v", got)
	}

	// The same relative paths under another root are another dataset's.
	root2 := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root2, filepath.FromSlash(table.IndexDir(b))), 0o755); err != nil {
		t.Fatal(err)
	}
	st2 := storage.NewLocal(root2, root2)
	d := fakeSegment(t, st2, 1, []uint32{2, 2, 2, 2, 2}, false)
	bdir := filepath.Join(root, filepath.FromSlash(table.IndexDir(b)))
	ddir := filepath.Join(root2, filepath.FromSlash(table.IndexDir(d)))
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		if err := os.Rename(filepath.Join(ddir, name), filepath.Join(root2, filepath.FromSlash(table.IndexDir(b)), name)); err != nil {
			t.Fatal(err)
		}
	}
	f2, err := ivf.OpenFiles(ctx, st2, table.IndexDir(b), lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if f2.IVF.Lengths[0] != 2 || f2.IVF == sb.files.IVF {
		t.Fatalf("another dataset's segment at the same path served from the cache (%s)", bdir)
	}

	// The bound holds: a tiny limit keeps nothing but what fits.
	ivf.SetCacheLimit(1)
	if got := ivf.ReadCacheStats(); got.Bytes > 1 || got.Entries != 0 {
		t.Fatalf("cache over its bound: %+v", got)
	}
	before := st.reads.Load()
	open(b)
	if st.reads.Load() == before {
		t.Fatal("a segment was served from a cache bounded to 1 byte")
	}
}

// TestSegmentCacheMemStore: the in-memory store names every write, so a
// segment rewritten in place (same name, same size) is decoded afresh.
func TestSegmentCacheMemStore(t *testing.T) {
	ctx := context.Background()
	defer ivf.SetCacheLimit(ivf.SetCacheLimit(0))
	ivf.SetCacheLimit(ivf.DefaultCacheBytes)
	st := storage.NewMem("memory://cache-test")
	a := fakeSegment(t, st, 0, []uint32{3, 0, 5, 2, 1}, false)
	f, err := ivf.OpenFiles(ctx, st, table.IndexDir(a), lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	c := fakeSegment(t, st, 0, []uint32{5, 2, 1, 3, 0}, false) // same sizes, other lengths
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		b, err := storage.ReadAll(ctx, st, table.IndexDir(c)+name, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := storage.Put(ctx, st, table.IndexDir(a)+name, b); err != nil {
			t.Fatal(err)
		}
	}
	g, err := ivf.OpenFiles(ctx, st, table.IndexDir(a), lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.IVF.Lengths[0] != 5 || g.IVF == f.IVF {
		t.Fatalf("rewritten segment served from the cache: %v", g.IVF.Lengths)
	}
}
