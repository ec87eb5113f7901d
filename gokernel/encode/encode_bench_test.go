package encode

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// benchData is n clustered vectors around k centres (the target
// shape is 1024 partitions of 128-d vectors).
func benchData(rng *rand.Rand, n, k, dim int) (centres, data []float32) {
	centres = randVec(rng, k*dim)
	data = make([]float32, n*dim)
	for i := 0; i < n; i++ {
		c := rng.IntN(k)
		for j := 0; j < dim; j++ {
			data[i*dim+j] = centres[c*dim+j] + 0.5*float32(rng.NormFloat64())
		}
	}
	return centres, data
}

// benchModel is a model of the given kind at k partitions × dim, with a
// codebook drawn from the data (PQ: 16 sub-vectors of 8 bits).
func benchModel(rng *rand.Rand, t ivf.IndexType, metric Metric, k, dim int, data []float32) *Model {
	cent, _ := benchData(rng, 0, k, dim)
	m := &Model{Type: t, Metric: metric, Dim: dim, Centroids: cent}
	switch t {
	case ivf.IVFSQ:
		m.SQ = &SQParams{NumBits: 8, Lo: -4, Hi: 4}
	case ivf.IVFPQ:
		nsub := dim / 8
		m.PQ = &PQParams{NumSubVectors: nsub, NumBits: 8, Codebook: randVec(rng, 256*dim)}
	case ivf.IVFRQ:
		signs := make([]byte, FastRotationSignBytes(dim))
		for i := range signs {
			signs[i] = byte(rng.Uint32())
		}
		m.RQ = &RQParams{NumBits: 5, Rotation: RotationFast, Signs: signs, QueryEstimator: RawQuery}
	}
	return m
}

// BenchmarkEncode encodes a window of rows on one goroutine (a build
// worker's per-core throughput): 1024 partitions × 128-d (the issue's
// target), and 64 × 64-d (bench_build.py's small preset).
func BenchmarkEncode(b *testing.B) {
	const n = 2048
	for _, shape := range []struct{ k, dim int }{{1024, 128}, {64, 64}} {
		k, dim := shape.k, shape.dim
		for _, t := range []ivf.IndexType{ivf.IVFFlat, ivf.IVFSQ, ivf.IVFPQ, ivf.IVFRQ} {
			for _, metric := range []Metric{L2, Dot} {
				b.Run(fmt.Sprintf("k%dd%d/%s/%s", k, dim, t, metric), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(1, 2))
					_, data := benchData(rng, n, k, dim)
					m := benchModel(rng, t, metric, k, dim, data)
					e, err := NewEncoder(m)
					if err != nil {
						b.Fatal(err)
					}
					out := make([][]byte, len(e.Columns()))
					for c, col := range e.Columns() {
						out[c] = make([]byte, n*col.Width())
					}
					parts := make([]int32, n)
					vecs := make([]float32, len(data))
					var s Scratch
					b.SetBytes(int64(n * dim * 4))
					b.ReportAllocs()
					b.ResetTimer()
					c0 := cpuTime()
					for i := 0; i < b.N; i++ {
						copy(vecs, data)
						e.Encode(&s, vecs, parts, out)
					}
					b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
					b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n*b.N), "cpu-ns/row")
				})
			}
		}
	}
}

// cpuTime is the process's user+system CPU time (steadier than wall time
// on a shared machine).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
