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

// Sample streams a segment and returns about n of its rows, evenly spread
// (every rows/n-th), to check against the column's data.
func Sample(ctx context.Context, st storage.Store, im *pb.IndexMetadata, n int) ([]KeyRow, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	step := max(uint64(1), s.Rows/uint64(max(n, 1)))
	var out []KeyRow
	c := newCursor(s, maxWindowRows)
	var row uint64
	for {
		ok, err := c.fill(ctx)
		if err != nil || !ok {
			return out, err
		}
		for c.i = 0; c.i < c.n; c.i++ {
			if row%step == 0 {
				out = append(out, KeyRow{Null: c.null(), Key: slices.Clone(c.value()), RowID: c.rowID()})
			}
			row++
		}
	}
}
