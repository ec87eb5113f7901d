package segment

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

// benchBuildModel draws a model from the data itself (sampled rows as
// centroids and as PQ entries): the cost of a build does not depend on how
// good the model is.
func benchBuildModel(b *testing.B, rd *vecdata.Reader, t ivf.IndexType, k int) *encode.Model {
	dim := rd.Column().Dim
	s, err := rd.Sample(context.Background(), rd.FragmentIDs(), max(k, 256), 1)
	if err != nil {
		b.Fatal(err)
	}
	m := &encode.Model{Type: t, Metric: encode.L2, Dim: dim, Centroids: s.Vectors[:k*dim]}
	switch t {
	case ivf.IVFSQ:
		m.SQ = &encode.SQParams{NumBits: 8, Lo: -1, Hi: 1}
	case ivf.IVFPQ:
		nsub := dim / 8
		cb := make([]float32, 256*dim)
		for sv := 0; sv < nsub; sv++ {
			for c := 0; c < 256; c++ {
				copy(cb[(sv*256+c)*8:(sv*256+c+1)*8], s.Vectors[c*dim+sv*8:c*dim+sv*8+8])
			}
		}
		m.PQ = &encode.PQParams{NumSubVectors: nsub, NumBits: 8, Codebook: cb}
	case ivf.IVFRQ:
		signs := make([]byte, encode.FastRotationSignBytes(dim))
		for i := range signs {
			signs[i] = byte(i*37 + 11)
		}
		m.RQ = &encode.RQParams{NumBits: 5, Rotation: encode.RotationFast, Signs: signs, QueryEstimator: encode.RawQuery}
	}
	return m
}

// BenchmarkBuildReal builds one segment over every fragment of a real
// dataset (SEGMERGE_BENCH_BUILD_DATASET, a float32 vector column "vec",
// e.g. bench/bench_build.py's data) for each index type, with
// SEGMERGE_BENCH_BUILD_PARTITIONS partitions (default 1024).
func BenchmarkBuildReal(b *testing.B) {
	uri := os.Getenv("SEGMERGE_BENCH_BUILD_DATASET")
	if uri == "" {
		b.Skip("set SEGMERGE_BENCH_BUILD_DATASET to a dataset with a float32 vector column \"vec\"")
	}
	k := 1024
	if v, err := strconv.Atoi(os.Getenv("SEGMERGE_BENCH_BUILD_PARTITIONS")); err == nil && v > 0 {
		k = v
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
	frags := rd.FragmentIDs()
	var rows int64
	for _, f := range snap.Manifest.GetFragments() {
		rows += int64(f.GetPhysicalRows())
	}
	for _, t := range []ivf.IndexType{ivf.IVFFlat, ivf.IVFSQ, ivf.IVFPQ, ivf.IVFRQ} {
		b.Run(fmt.Sprintf("%s/k%d", t, k), func(b *testing.B) {
			m := benchBuildModel(b, rd, t, k)
			b.ReportAllocs()
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				im, err := Build(ctx, st, snap, m, BuildOptions{Column: "vec", IndexName: "bench", FragmentIDs: frags})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				RemoveUncommitted(ctx, st, []string{table.IndexUUID(im)})
				b.StartTimer()
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(rows)/float64(b.N), "cpu-ns/row")
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
