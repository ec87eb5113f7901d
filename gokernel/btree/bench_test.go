package btree

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// BenchmarkMerge merges 100 segments of 20,000 int64 keys (1% null), the
// shape of bench/bench_btree.py's medium preset.
func BenchmarkMerge(b *testing.B) {
	root := b.TempDir()
	st := storage.NewLocal(root, root)
	metas := benchSegments(b, st)
	b.ResetTimer()
	for range b.N {
		if _, err := Merge(context.Background(), st, metas, MergeOptions{IndexUUID: uuid.New().String()}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheck checks the merge of BenchmarkMerge's 100 segments
// (2M rows): the pre-commit check of a merged BTREE segment.
func BenchmarkCheck(b *testing.B) {
	root := b.TempDir()
	st := storage.NewLocal(root, root)
	metas := benchSegments(b, st)
	id := uuid.New()
	res, err := Merge(context.Background(), st, metas, MergeOptions{IndexUUID: id.String()})
	if err != nil {
		b.Fatal(err)
	}
	out := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: res.Files}
	b.ResetTimer()
	for range b.N {
		cr, err := Check(context.Background(), st, out, CheckOptions{Covered: func(uint64) bool { return true }})
		if err != nil || len(cr.Problems) > 0 || cr.Rows != 2_000_000 {
			b.Fatal(err, cr)
		}
	}
}

// benchSegments writes 100 segments of 20,000 int64 keys (1% null), the
// shape of bench/bench_btree.py's medium preset.
func benchSegments(b *testing.B, st storage.Store) []*pb.IndexMetadata {
	rng := rand.New(rand.NewPCG(7, 8))
	var metas []*pb.IndexMetadata
	for f := uint32(0); f < 100; f++ {
		rows := make([]row, 20000)
		for i := range rows {
			rows[i] = row{v: rng.Int64N(2e9) - 1e9, null: rng.IntN(100) == 0, id: uint64(f)<<32 | uint64(i)}
		}
		metas = append(metas, writeSegment(b, st, rows, DefaultBatchSize, f))
	}
	return metas
}
