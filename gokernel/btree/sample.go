package btree

import (
	"context"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// KeyRow is one row of a segment: its key (nil when null) and row id.
type KeyRow struct {
	Null  bool
	Key   []byte
	RowID uint64
}

// sampleRun is how many consecutive rows Sample takes at each place it
// reads: a run costs one page's decoding, as one row does.
const sampleRun = 32

// Sample returns about n rows of a segment, in runs of sampleRun
// consecutive rows evenly spread over it, to check against the column's
// data: it reads the pages it samples, not the segment.
func Sample(ctx context.Context, st storage.Store, im *pb.IndexMetadata, n int) ([]KeyRow, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	runs := uint64(max(1, n/sampleRun))
	var out []KeyRow
	for j := range runs {
		start := j * s.Rows / runs
		c := newCursor(s, int(min(sampleRun, s.Rows-start)))
		c.next = start
		if c.window <= 0 {
			break
		}
		ok, err := c.fillExact(ctx)
		if err != nil || !ok {
			return out, err
		}
		for c.i = 0; c.i < c.n; c.i++ {
			out = append(out, KeyRow{Null: c.null(), Key: slices.Clone(c.value()), RowID: c.rowID()})
		}
	}
	return out, nil
}
