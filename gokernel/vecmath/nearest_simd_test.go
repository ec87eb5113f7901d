//go:build goexperiment.simd && amd64

package vecmath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"simd/archsimd"
)

// simdKernels are the SIMD score kernels this CPU can run.
func simdKernels() map[string]func(*Searcher, []float32, int, int, int, int, []float32, int, []float32) {
	k := map[string]func(*Searcher, []float32, int, int, int, int, []float32, int, []float32){}
	if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		k["avx2"] = scoreBlockAVX2
	}
	if archsimd.X86.AVX512() {
		k["avx512"] = scoreBlockAVX512
	}
	return k
}

// Every SIMD kernel gives the exact answers, as the portable one.
func TestSearcherIsExactSIMD(t *testing.T) {
	saved := scoreBlock
	defer func() { scoreBlock = saved }()
	for name, kern := range simdKernels() {
		scoreBlock = kern
		for _, tc := range searchCases() {
			for _, dist := range []Distance{DistL2, DistDot} {
				t.Run(fmt.Sprintf("%s/%s/%d", name, tc.name, dist), func(t *testing.T) { checkSearcher(t, tc, dist) })
			}
		}
	}
}

func BenchmarkScoreKernels(b *testing.B) {
	saved := scoreBlock
	defer func() { scoreBlock = saved }()
	kernels := simdKernels()
	kernels["generic"] = scoreBlockGeneric
	for name, kern := range kernels {
		scoreBlock = kern
		b.Run(name, BenchmarkNearest)
	}
}

// The SIMD Lance-order kernels give the portable ones' bits.
func TestL2Sq16Dot16SIMD(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	type pair struct{ l2, dot func(a, b []float32) float32 }
	impls := map[string]pair{}
	if archsimd.X86.AVX2() {
		impls["avx2"] = pair{l2Sq16AVX2, dot16AVX2}
	}
	if archsimd.X86.AVX512() {
		impls["avx512"] = pair{l2Sq16AVX512, dot16AVX512}
	}
	for name, impl := range impls {
		for _, dim := range []int{0, 1, 8, 15, 16, 17, 32, 40, 100, 128, 769} {
			for rep := 0; rep < 20; rep++ {
				a, b := randVec(r, dim), randVec(r, dim)
				for i := range a {
					a[i] *= float32(math.Pow(10, float64(r.IntN(7)-3)))
				}
				if g, w := impl.l2(a, b), l2Sq16Generic(a, b); math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("%s dim %d: L2 %v, want %v", name, dim, g, w)
				}
				if g, w := impl.dot(a, b), dot16Generic(a, b); math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("%s dim %d: dot %v, want %v", name, dim, g, w)
				}
			}
		}
	}
}
