package vecmath

import (
	"math/rand/v2"
	"testing"
)

func TestL2SqU8(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, dim := range []int{0, 1, 7, 8, 9, 31, 32, 128, 1000} {
		a, b := make([]byte, dim), make([]byte, dim+5)
		for i := range a {
			a[i] = byte(r.IntN(256))
		}
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		var want uint32
		for i := range a {
			d := int(a[i]) - int(b[i])
			want += uint32(d * d)
		}
		if got := L2SqU8(a, b); got != want {
			t.Errorf("dim %d: L2SqU8 = %d, want %d", dim, got, want)
		}
	}
	// The extremes: every byte 0 against 255.
	a, b := make([]byte, 4096), make([]byte, 4096)
	for i := range b {
		b[i] = 255
	}
	if got, want := L2SqU8(a, b), uint32(4096*255*255); got != want {
		t.Errorf("extremes: %d, want %d", got, want)
	}
}

func BenchmarkL2SqU8(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	x, y := make([]byte, 128), make([]byte, 128)
	for i := range x {
		x[i], y[i] = byte(r.IntN(256)), byte(r.IntN(256))
	}
	b.SetBytes(128)
	var s uint32
	for b.Loop() {
		s += L2SqU8(x, y)
	}
	_ = s
}

func BenchmarkL2Sq128(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	x, y := randVec(r, 128), randVec(r, 128)
	b.SetBytes(512)
	var s float32
	for b.Loop() {
		s += L2Sq(x, y)
	}
	_ = s
}
