package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
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
// per cluster, a fixed number of iterations (no early stop); k256/d8 is
// one PQ sub-vector codebook as create_index trains it.
func BenchmarkKMeans(b *testing.B) {
	for _, tc := range []struct{ k, dim, rate, iters int }{{64, 64, 64, 10}, {256, 128, 32, 5}, {1024, 128, 16, 3}, {256, 8, 256, 10}} {
		b.Run(fmt.Sprintf("k%d/d%d/rate%d/iters%d", tc.k, tc.dim, tc.rate, tc.iters), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			n := tc.k * tc.rate
			data := clustered(rng, n, tc.k, tc.dim)
			b.ReportAllocs()
			b.ResetTimer()
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op") }()
			for i := 0; i < b.N; i++ {
				_, err := KMeans(context.Background(), data, n, tc.dim, tc.k, KMeansOptions{Metric: encode.L2, MaxIters: tc.iters, Tolerance: 1e-12, Rng: rand.New(rand.NewPCG(3, 4)), Workers: 1})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTrainReal trains IVF_PQ models on a real dataset
// (SEGMERGE_BENCH_BUILD_DATASET, float32 column "vec"), as create_index
// does on its driver: SEGMERGE_BENCH_TRAIN="partitions,sample_rate,iters"
// (default 1024,256,50).
func BenchmarkTrainReal(b *testing.B) {
	uri := os.Getenv("SEGMERGE_BENCH_BUILD_DATASET")
	if uri == "" {
		b.Skip("set SEGMERGE_BENCH_BUILD_DATASET to a dataset with a float32 vector column \"vec\"")
	}
	k, rate, iters := 1024, 256, 50
	if v := os.Getenv("SEGMERGE_BENCH_TRAIN"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d,%d", &k, &rate, &iters); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	st := storage.NewLocal(uri, uri)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		b.Fatal(err)
	}
	rd, err := vecdata.NewReader(st, snap, "vec")
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range []ivf.IndexType{ivf.IVFFlat, ivf.IVFPQ} {
		b.Run(string(t), func(b *testing.B) {
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				_, st, err := Train(ctx, rd, Params{IndexType: t, Metric: encode.L2, NumPartitions: k, SampleRate: rate, MaxIters: iters, Seed: uint64(i)})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(st.IVFIters), "ivf-iters")
			}
			b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user+system CPU time (steadier than wall time
// on a shared machine).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
