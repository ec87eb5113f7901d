package vecmath

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time: steadier than wall time
// on a machine others load (their runs do not count, only cache and
// frequency effects).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNearest: IVF assignment (1024 rows × 128-d) and PQ encoding (256
// rows × 8-d sub-vectors) of 1024 vectors, the searcher against measuring
// every row with L2Sq16 (what Lance does).
func BenchmarkNearest(b *testing.B) {
	for _, tc := range []struct {
		name         string
		k, dim, strd int
	}{{"ivf1024x128", 1024, 128, 128}, {"pq256x8", 256, 8, 128}} {
		r := rand.New(rand.NewPCG(1, 2))
		const n = 1024
		m := randVec(r, tc.k*tc.dim)
		x := randVec(r, n*tc.strd)
		for i := 0; i < n; i++ { // clustered around the rows
			c := r.IntN(tc.k)
			for t := 0; t < tc.dim; t++ {
				x[i*tc.strd+t] = m[c*tc.dim+t] + 0.5*x[i*tc.strd+t]
			}
		}
		idx := make([]int32, n)
		dist := make([]float32, n)
		for _, d := range []Distance{DistL2, DistDot} {
			b.Run(fmt.Sprintf("%s/%d/searcher", tc.name, d), func(b *testing.B) {
				s := NewSearcher(m, tc.dim, d)
				var sc SearchScratch
				b.ReportAllocs()
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					s.Nearest(x, tc.strd, n, idx, dist, &sc)
				}
				b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n*b.N), "cpu-ns/vector")
			})
			b.Run(fmt.Sprintf("%s/%d/scan", tc.name, d), func(b *testing.B) {
				c0 := cpuTime()
				for i := 0; i < b.N; i++ {
					for v := 0; v < n; v++ {
						idx[v], dist[v] = bruteNearest(x[v*tc.strd:v*tc.strd+tc.dim], m, tc.dim, d)
					}
				}
				b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n*b.N), "cpu-ns/vector")
			})
		}
	}
}
