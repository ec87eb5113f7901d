package table

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

// bitmapBomb is a valid portable roaring bitmap of the ids [0, n): with
// one run per container it is tiny (2^32 ids in 0.9 MiB), and naive
// decoding materialises 4n bytes.
func bitmapBomb(t testing.TB, n uint64) []byte {
	t.Helper()
	bm := roaring.New()
	bm.AddRange(0, n)
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFragmentBitmapBombs: bitmaps that claim 2^32 or 2^28 fragments are
// refused before anything is materialised, with or without a dataset
// bound, and cost no more memory than their own size.
func TestFragmentBitmapBombs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     uint64
		maxID uint32
		want  string
	}{
		{"2^32 ids, no dataset", 1 << 32, 1<<32 - 1, "more than"},
		{"2^28 ids, no dataset", 1 << 28, 1<<32 - 1, "more than"},
		{"2^32 ids, 100 fragments", 1 << 32, 99, "names fragment 4294967295"},
		{"2^28 ids, 100 fragments", 1 << 28, 99, "names fragment 268435455"},
		{"101 ids, 100 fragments", 101, 99, "names fragment 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bitmapBomb(t, tc.n)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, _, err := DecodeFragmentBitmapUpTo(b, tc.maxID)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errkind.Corrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%d-byte bitmap: %v, want a corrupt error with %q", len(b), err, tc.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(b))+1<<20 {
				t.Fatalf("%d-byte bitmap: decoding allocated %d bytes", len(b), alloc)
			}
			t.Logf("%d-byte bitmap of %d ids: %v", len(b), tc.n, err)
		})
	}
	// Right at the bounds: accepted.
	ids, ok, err := DecodeFragmentBitmapUpTo(bitmapBomb(t, 100), 99)
	if err != nil || !ok || len(ids) != 100 {
		t.Fatalf("100 of 100 fragments: %d ids, %v, %v", len(ids), ok, err)
	}
}

// TestMaxFragmentID: the manifest's max_fragment_id (or a larger fragment
// id); no bound without it.
func TestMaxFragmentID(t *testing.T) {
	snap := &Snapshot{Manifest: testManifest([]uint64{3, 9, 4})}
	if _, ok := snap.MaxFragmentID(); ok {
		t.Fatal("no max_fragment_id: no bound (a deleted fragment may lie above the current ones)")
	}
	m := uint32(12)
	snap.Manifest.MaxFragmentId = &m
	if id, ok := snap.MaxFragmentID(); !ok || id != 12 {
		t.Fatalf("max_fragment_id 12: %d %v", id, ok)
	}
	m = 5
	if id, ok := snap.MaxFragmentID(); !ok || id != 9 {
		t.Fatalf("max_fragment_id 5 below fragment 9: %d %v", id, ok)
	}
}

func testManifest(ids []uint64) *pb.Manifest {
	m := &pb.Manifest{}
	for _, id := range ids {
		m.Fragments = append(m.Fragments, &pb.DataFragment{Id: id})
	}
	return m
}
