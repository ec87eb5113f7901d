//go:build goexperiment.simd && amd64

package vecmath

import (
	"fmt"
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
