package btree

import (
	"context"
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage/faulty"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// A write that fails while pages are encoded in the background ends the
// merge with that error, whatever the page it fails at, and publishes
// nothing.
func TestAFailedWriteEndsTheMerge(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	local := storage.NewLocal(root, root)
	rng := rand.New(rand.NewPCG(3, 4))
	var metas []*pb.IndexMetadata
	for f := uint32(0); f < 3; f++ {
		rows := make([]row, 20000)
		for i := range rows {
			rows[i] = row{v: rng.Int64N(1e6), null: i%50 == 0, id: uint64(f)<<32 | uint64(i)}
		}
		metas = append(metas, writeSegment(t, local, rows, 256, f))
	}
	for _, budget := range []int64{1, 4096, 100_000, 400_000} {
		out := uuid.New()
		_, err := Merge(ctx, faulty.New(local, faulty.Options{WriteBudget: budget}), metas, MergeOptions{IndexUUID: out.String()})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("budget %d: merge returned %v, want the write's ENOSPC", budget, err)
		}
		dir := table.IndexDir(&pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}})
		if left, _ := local.List(ctx, dir); len(left) > 0 {
			t.Fatalf("budget %d: a failed merge left %v", budget, left)
		}
	}
}
