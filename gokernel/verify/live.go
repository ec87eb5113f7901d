package verify

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// liveSet tells which row ids of a segment a query at a dataset version
// can return: with row addresses, rows of the fragments the segment covers
// that the version still has, less deleted rows; with stable row ids, the
// ids still live in those fragments.
type liveSet struct {
	frags   map[uint32]*pb.DataFragment
	deleted map[uint32]*roaring.Bitmap
	stable  *roaring64.Bitmap
}

func newLiveSet(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*liveSet, error) {
	ids, _, err := snap.DecodeCoverage(im)
	if err != nil {
		return nil, err
	}
	l := &liveSet{frags: map[uint32]*pb.DataFragment{}, deleted: map[uint32]*roaring.Bitmap{}}
	byID := map[uint64]*pb.DataFragment{}
	for _, f := range snap.Manifest.GetFragments() {
		byID[f.GetId()] = f
	}
	for _, id := range ids {
		f := byID[uint64(id)]
		if f == nil {
			continue
		}
		l.frags[id] = f
		d, err := snap.DeletedRows(ctx, st, f)
		if err != nil {
			return nil, fmt.Errorf("fragment %d: %w", id, err)
		}
		if d != nil && !d.IsEmpty() {
			l.deleted[id] = d
		}
	}
	if snap.HasStableRowIDs() {
		if l.stable, err = snap.LiveRowIDs(ctx, st, ids); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// contains reports whether a row id is live.
func (l *liveSet) contains(id uint64) bool {
	if l.stable != nil {
		return l.stable.Contains(id)
	}
	frag, off := uint32(id>>32), uint32(id)
	f := l.frags[frag]
	if f == nil {
		return false
	}
	if p := f.GetPhysicalRows(); p != 0 && uint64(off) >= p {
		return false
	}
	d := l.deleted[frag]
	return d == nil || !d.Contains(off)
}
