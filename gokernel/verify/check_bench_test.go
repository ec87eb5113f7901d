package verify

import (
	"context"
	"os"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// BenchmarkCheckReal runs the check before a commit (Cheap, as optimize
// runs it) on the segments of one index of a real dataset:
// SEGMERGE_BENCH_CHECK names the dataset (a merged one: bench/*.py --fixture
// keeps them), SEGMERGE_BENCH_INDEX the index (default k_idx).
func BenchmarkCheckReal(b *testing.B) {
	uri := os.Getenv("SEGMERGE_BENCH_CHECK")
	if uri == "" {
		b.Skip("set SEGMERGE_BENCH_CHECK to a dataset")
	}
	name := os.Getenv("SEGMERGE_BENCH_INDEX")
	if name == "" {
		name = "k_idx"
	}
	ctx := context.Background()
	st := storage.NewLocal(uri, uri)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		b.Fatal(err)
	}
	var metas []*pb.IndexMetadata
	for _, im := range snap.Indices {
		if im.GetName() == name {
			metas = append(metas, im)
		}
	}
	b.ResetTimer()
	for range b.N {
		rep, err := CheckSegments(ctx, st, snap, metas, Options{SampleRows: 256, Cheap: true})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Clean {
			b.Fatalf("not clean: %+v", rep.Segments[0])
		}
	}
}
