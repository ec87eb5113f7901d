//go:build goexperiment.simd && amd64

package encode

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"simd/archsimd"
)

// The SIMD butterfly stages give the portable ones' bits.
func TestHadamardStagesSIMD(t *testing.T) {
	if !archsimd.X86.AVX2() {
		t.Skip("no AVX2")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for n := 16; n <= 2048; n *= 2 {
		v := randVec(rng, n)
		for i := range v {
			v[i] *= float32(math.Pow(10, float64(rng.IntN(9)-4)))
		}
		a, b := slices.Clone(v), slices.Clone(v)
		hadamardStagesGeneric(a, 0.125)
		hadamardStagesAVX2(b, 0.125)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("n %d: value %d is %v, want %v", n, i, b[i], a[i])
			}
		}
	}
}
