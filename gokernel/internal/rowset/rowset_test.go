package rowset

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

func TestSetFindsRepeatsWhereverIDsLive(t *testing.T) {
	s := New(100) // a budget of a few words: most ids go sparse
	ids := []uint64{
		0, 1, 63, 64, 1<<32 | 5, // dense
		7<<32 | (maxDenseOffset + 3), // offset too large: sparse
		maxDenseFragment<<32 | 9,     // fragment id too large: sparse
		3<<32 | 1<<25,                // past the budget: sparse until the bitset may grow
	}
	for _, id := range ids {
		if !s.Add(id) {
			t.Fatalf("id %#x reported as a repeat on its first add", id)
		}
	}
	for _, id := range ids {
		if s.Add(id) {
			t.Fatalf("id %#x repeated but reported new", id)
		}
	}
	// a large budget: the same id first sparse, then in a grown bitset
	s = &Set{words: 0, sparse: roaring64.New()}
	if !s.Add(2<<32 | 1000) {
		t.Fatal("first add")
	}
	s.words = 1 << 20
	if s.Add(2<<32 | 1000) {
		t.Fatal("an id added sparse, then dense, was reported new")
	}
}
