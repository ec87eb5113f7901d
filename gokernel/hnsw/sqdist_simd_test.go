//go:build goexperiment.simd && amd64

package hnsw

import (
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// The AVX2 kernel equals the portable one (which the default build uses
// and vecmath tests), on every length and on the extremes.
func TestL2SqU8AVX2(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	for dim := 0; dim <= 300; dim++ {
		a, b := make([]byte, dim), make([]byte, dim+7)
		for i := range a {
			a[i] = byte(r.IntN(256))
		}
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		if got, want := l2SqU8AVX2(a, b), vecmath.L2SqU8(a, b); got != want {
			t.Fatalf("dim %d: %d, want %d", dim, got, want)
		}
	}
	a, b := make([]byte, 4096), make([]byte, 4096)
	for i := range b {
		b[i] = 255
	}
	if got, want := l2SqU8AVX2(a, b), uint32(4096*255*255); got != want {
		t.Fatalf("extremes: %d, want %d", got, want)
	}
}

func BenchmarkL2SqU8Kernels(b *testing.B) {
	x, y := make([]byte, 128), make([]byte, 128)
	for i := range x {
		x[i], y[i] = byte(i*7), byte(i*13)
	}
	b.Run("portable", func(b *testing.B) {
		for b.Loop() {
			vecmath.L2SqU8(x, y)
		}
	})
	b.Run("avx2", func(b *testing.B) {
		for b.Loop() {
			l2SqU8AVX2(x, y)
		}
	})
}
