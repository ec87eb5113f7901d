package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
)

func clustered(rng *rand.Rand, n, k, dim int) []float32 {
	centres := make([]float32, k*dim)
	for i := range centres {
		centres[i] = float32(rng.NormFloat64())
	}
	data := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		c := rng.IntN(k)
		for j := 0; j < dim; j++ {
			data[i*dim+j] = centres[c*dim+j] + 0.5*float32(rng.NormFloat64())
		}
	}
	return data
}

// BenchmarkKMeans trains IVF centroids on a sample of sampleRate vectors
// per cluster, a fixed number of iterations (no early stop).
func BenchmarkKMeans(b *testing.B) {
	for _, tc := range []struct{ k, dim, rate, iters int }{{64, 64, 64, 10}, {256, 128, 32, 5}, {1024, 128, 16, 3}} {
		b.Run(fmt.Sprintf("k%d/d%d/rate%d/iters%d", tc.k, tc.dim, tc.rate, tc.iters), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			n := tc.k * tc.rate
			data := clustered(rng, n, tc.k, tc.dim)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := KMeans(context.Background(), data, n, tc.dim, tc.k, KMeansOptions{Metric: encode.L2, MaxIters: tc.iters, Tolerance: 1e-12, Rng: rand.New(rand.NewPCG(3, 4)), Workers: 1})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
