package ivf

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestLayoutsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 5, 31, 32, 33, 64, 70, 100, 1000} {
		for _, w := range []int{1, 4, 8, 16, 48} {
			src := make([]byte, n*w)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			for _, tc := range []struct {
				name       string
				fwd, inv   func(dst, src []byte, n, w int)
				idempotent bool
			}{
				{"pq", TransposePQ, UntransposePQ, false},
				{"rq", PackRQ, UnpackRQ, false},
			} {
				laid := make([]byte, len(src))
				tc.fwd(laid, src, n, w)
				back := make([]byte, len(src))
				tc.inv(back, laid, n, w)
				if !bytes.Equal(back, src) {
					t.Fatalf("%s n=%d w=%d: inverse(forward(x)) != x", tc.name, n, w)
				}
				// Applying the layout twice is not the identity of applying it
				// once (the corruption a naive re-merge causes), except in
				// degenerate shapes.
				twice := make([]byte, len(src))
				tc.fwd(twice, laid, n, w)
				degenerate := n <= 1 || w == 1 && (tc.name == "pq" || n < rqBlock)
				if !degenerate && n >= 5 && bytes.Equal(twice, laid) {
					t.Fatalf("%s n=%d w=%d: the layout is idempotent", tc.name, n, w)
				}
			}
		}
	}
}

// The PQ layout by hand: 3 rows of 2 bytes.
func TestTransposePQExample(t *testing.T) {
	src := []byte{1, 2, 3, 4, 5, 6} // rows (1,2) (3,4) (5,6)
	dst := make([]byte, 6)
	TransposePQ(dst, src, 3, 2)
	if !bytes.Equal(dst, []byte{1, 3, 5, 2, 4, 6}) {
		t.Fatalf("%v", dst)
	}
}

// The RQ layout by hand: one full block of 32 rows of 1 byte, row k = k.
// Byte j of the block holds the low nibbles of rows perm0[j] and
// perm0[j]+16; byte 16+j their high nibbles.
func TestPackRQExample(t *testing.T) {
	src := make([]byte, 32)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, 32)
	PackRQ(dst, src, 32, 1)
	for j := 0; j < 16; j++ {
		a, b := rqPerm0[j], rqPerm0[j]+16
		if dst[j] != src[a]&0xf|(src[b]&0xf)<<4 || dst[16+j] != src[a]>>4|src[b]&0xf0 {
			t.Fatalf("byte %d: %#x %#x", j, dst[j], dst[16+j])
		}
	}
}

func TestMergeTransposedPQ(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const b = 6
	var parts []PQPart
	var rowMajor []byte
	for k, n := range []int{0, 7, 1, 33, 12} {
		x := make([]byte, n*b)
		for i := range x {
			x[i] = byte(r.Uint32())
		}
		rowMajor = append(rowMajor, x...)
		p := PQPart{Codes: x, N: n}
		if k%2 == 1 {
			p.Codes = make([]byte, len(x))
			TransposePQ(p.Codes, x, n, b)
			p.Transposed = true
		}
		parts = append(parts, p)
	}
	want := make([]byte, len(rowMajor))
	TransposePQ(want, rowMajor, len(rowMajor)/b, b)
	got := make([]byte, len(rowMajor))
	MergeTransposedPQ(got, parts, b)
	if !bytes.Equal(got, want) {
		t.Fatal("MergeTransposedPQ differs from transposing the concatenation")
	}
}
