package segment

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// BenchmarkMergeReal merges real segments (written by pylance; see
// bench/bench_merge.py) in groups of 8: SEGMERGE_BENCH_DATASET names the
// dataset, SEGMERGE_BENCH_SEGMENTS a JSON list of its segment infos.
func BenchmarkMergeReal(b *testing.B) {
	uri, segsPath := os.Getenv("SEGMERGE_BENCH_DATASET"), os.Getenv("SEGMERGE_BENCH_SEGMENTS")
	if uri == "" || segsPath == "" {
		b.Skip("set SEGMERGE_BENCH_DATASET and SEGMERGE_BENCH_SEGMENTS (bench/bench_merge.py --work keeps them)")
	}
	ctx := context.Background()
	raw, err := os.ReadFile(segsPath)
	if err != nil {
		b.Fatal(err)
	}
	metas, err := ParseInfos(raw)
	if err != nil {
		b.Fatal(err)
	}
	var infos []json.RawMessage
	json.Unmarshal(raw, &infos)
	st := storage.NewLocal(uri, uri)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		b.Fatal(err)
	}
	var bytes int64
	for _, im := range metas {
		for _, f := range im.GetFiles() {
			bytes += int64(f.GetSizeBytes())
		}
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var outs []string
		for g := 0; g < len(metas); g += 8 {
			m, err := Merge(ctx, st, snap, metas[g:min(g+8, len(metas))], MergeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			outs = append(outs, table.IndexUUID(m))
		}
		b.StopTimer()
		RemoveUncommitted(ctx, st, outs)
		b.StartTimer()
	}
	_ = pb.IndexMetadata{}
}
