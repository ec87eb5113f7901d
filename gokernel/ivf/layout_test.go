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

// packRQByBytes is the RQ layout as the format note states it, one byte at
// a time: what PackRQ's word-at-a-time loop must produce.
func packRQByBytes(dst, src []byte, n, l int) {
	full := n / rqBlock
	for g := 0; g < full; g++ {
		for c := 0; c < l; c++ {
			for j := 0; j < 16; j++ {
				a := rqBlock*g + rqPerm0[j]
				x, y := src[a*l+c], src[(a+16)*l+c]
				dst[rqBlock*(g*l+c)+j] = x&0x0f | (y&0x0f)<<4
				dst[rqBlock*(g*l+c)+16+j] = x>>4 | y&0xf0
			}
		}
	}
	p, r := full*rqBlock, n-full*rqBlock
	for c := 0; c < l; c++ {
		for k := 0; k < r; k++ {
			dst[p*l+c*r+k] = src[(p+k)*l+c]
		}
	}
}

// TestPackRQWords: PackRQ (eight code bytes at a time where a row has
// them) writes exactly the byte-wise layout, for row widths with and
// without a remainder past the last eight bytes, and UnpackRQ undoes it.
func TestPackRQWords(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, l := range []int{1, 3, 7, 8, 9, 12, 16, 24, 33, 48, 64} {
		for _, n := range []int{0, 31, 32, 64, 65, 96 + 17} {
			src := make([]byte, n*l)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			want, got := make([]byte, len(src)), make([]byte, len(src))
			packRQByBytes(want, src, n, l)
			PackRQ(got, src, n, l)
			if !bytes.Equal(got, want) {
				t.Fatalf("l=%d n=%d: PackRQ differs from the byte-wise layout", l, n)
			}
			back := make([]byte, len(src))
			UnpackRQ(back, got, n, l)
			if !bytes.Equal(back, src) {
				t.Fatalf("l=%d n=%d: UnpackRQ(PackRQ(x)) != x", l, n)
			}
		}
	}
}

func BenchmarkPackRQ(b *testing.B) {
	const n, l = 32 * 1024, 16 // 128-d 1-bit codes
	src, dst := make([]byte, n*l), make([]byte, n*l)
	for i := range src {
		src[i] = byte(i * 31)
	}
	b.SetBytes(int64(n * l))
	for i := 0; i < b.N; i++ {
		PackRQ(dst, src, n, l)
	}
}

func BenchmarkUnpackRQ(b *testing.B) {
	const n, l = 32 * 1024, 16
	src, dst := make([]byte, n*l), make([]byte, n*l)
	b.SetBytes(int64(n * l))
	for i := 0; i < b.N; i++ {
		UnpackRQ(dst, src, n, l)
	}
}
