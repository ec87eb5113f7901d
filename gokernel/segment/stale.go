package segment

import (
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/policy"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Merge policies (PlanOptions.Policy): see package policy.
const (
	PolicyAll    = policy.All
	PolicyTiered = policy.Tiered
)

// StaleRows estimates, from the manifest alone, how many of a segment's
// rows are deleted or belong to fragments no longer in the dataset: its
// rows minus the live rows (physical rows less deletions) of the fragments
// it covers that still exist. A merge drops exactly these. It is exact
// unless the indexed column has nulls (they are not indexed, so the
// estimate is low by their count, never below 0), and 0 when a covered
// fragment does not record its physical rows (old manifests).
func StaleRows(snap *table.Snapshot, im *pb.IndexMetadata, rows uint64) uint64 {
	return staleRowsIn(fragmentsByID(snap), im, rows)
}

// fragmentsByID indexes snap's fragments by id (once per call site, not
// once per segment: a thousand deltas over a thousand fragments).
func fragmentsByID(snap *table.Snapshot) map[uint64]*pb.DataFragment {
	byID := make(map[uint64]*pb.DataFragment, len(snap.Manifest.GetFragments()))
	for _, f := range snap.Manifest.GetFragments() {
		byID[f.GetId()] = f
	}
	return byID
}

// staleRowsIn is StaleRows over fragmentsByID(snap).
func staleRowsIn(byID map[uint64]*pb.DataFragment, im *pb.IndexMetadata, rows uint64) uint64 {
	ids, ok, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	if err != nil || !ok {
		return 0
	}
	var live uint64
	for _, id := range ids {
		f := byID[uint64(id)]
		if f == nil {
			continue
		}
		if f.GetPhysicalRows() == 0 {
			return 0
		}
		live += f.GetPhysicalRows() - min(f.GetDeletionFile().GetNumDeletedRows(), f.GetPhysicalRows())
	}
	if rows <= live {
		return 0
	}
	return rows - live
}
