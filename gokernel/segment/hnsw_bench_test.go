package segment

import (
	"context"
	"os"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// BenchmarkMergeHNSW merges every segment of the vector index of a real,
// pylance-written IVF_HNSW_* dataset (SEGMERGE_BENCH_HNSW names it, e.g.
// DIR/deltas-IVF_HNSW_SQ from bench/bench_hnsw.py --work DIR), with the
// graph mode SEGMERGE_BENCH_HNSW_GRAPH ("reuse", the default, or
// "rebuild"). Reports distances per inserted row.
func BenchmarkMergeHNSW(b *testing.B) {
	uri := os.Getenv("SEGMERGE_BENCH_HNSW")
	if uri == "" {
		b.Skip("set SEGMERGE_BENCH_HNSW to an IVF_HNSW_* delta dataset (bench/bench_hnsw.py --work DIR leaves them in DIR)")
	}
	ctx := context.Background()
	st := storage.NewLocal(uri, uri)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		b.Fatal(err)
	}
	var rows int64
	prog := &Progress{}
	b.ReportAllocs()
	for b.Loop() {
		*prog = Progress{}
		m, err := Merge(ctx, st, snap, snap.Indices, MergeOptions{HNSWGraph: os.Getenv("SEGMERGE_BENCH_HNSW_GRAPH"), Progress: prog})
		if err != nil {
			b.Fatal(err)
		}
		rows = prog.RowsWritten.Load()
		b.StopTimer()
		RemoveUncommitted(ctx, st, []string{table.IndexUUID(m)})
		b.StartTimer()
	}
	b.ReportMetric(float64(prog.GraphDistances.Load())/float64(max(prog.GraphRowsInserted.Load(), 1)), "distances/inserted-row")
	b.ReportMetric(float64(rows), "rows")
}
