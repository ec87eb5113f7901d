package vecdata

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

func TestFloyd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, k uint64 }{{10, 0}, {10, 3}, {10, 10}, {10, 20}, {1 << 40, 1000}} {
		got := Distinct(rng, tc.n, tc.k)
		if want := min(tc.n, tc.k); uint64(len(got)) != want {
			t.Fatalf("n=%d k=%d: %d values", tc.n, tc.k, len(got))
		}
		seen := map[uint64]bool{}
		for _, v := range got {
			if v >= tc.n || seen[v] {
				t.Fatalf("n=%d k=%d: bad or repeated value %d", tc.n, tc.k, v)
			}
			seen[v] = true
		}
	}
}

func TestAppendValid(t *testing.T) {
	const dim = 2
	vals := []float32{1, 2, float32(math.NaN()), 0, 3, 4, 5, 6, float32(math.Inf(-1)), 1, 7, 8}
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		bits := math.Float32bits(v)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	a := &lancefile.Array{Type: lancefile.FixedSizeList(lancefile.KindFloat32, dim), Len: 6, Values: raw,
		Validity: []byte{0b111011}} // row 2 null
	r := &Reader{col: &Column{Dim: dim, Elem: lancefile.KindFloat32}}
	b := &Batch{}
	ff := &fragmentFile{deleted: roaring.BitmapOf(15)} // row 5 (offset 15) deleted
	r.appendValid(b, a, ff, 3, 10)
	wantIDs := []uint64{3<<32 | 10, 3<<32 | 13}
	if !slices.Equal(b.RowIDs, wantIDs) || !slices.Equal(b.Vectors, []float32{1, 2, 5, 6}) || b.Skipped != 3 {
		t.Fatalf("got %v %v skipped %d", b.RowIDs, b.Vectors, b.Skipped)
	}
	// a stable reader's fragment names its rows by their stable ids
	ff.ids = make([]uint64, 16)
	for i := range ff.ids {
		ff.ids[i] = 1000 + uint64(i)
	}
	b = &Batch{}
	r.appendValid(b, a, ff, 3, 10)
	if !slices.Equal(b.RowIDs, []uint64{1010, 1013}) {
		t.Fatalf("stable ids: got %v", b.RowIDs)
	}
}
