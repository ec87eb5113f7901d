package segment

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Provenance is what made a segment part of the dataset: the version whose
// commit first listed it, that commit's operation and its transaction
// properties (Commit writes lance-segmerge's there; pylance writes none).
type Provenance struct {
	Version    uint64            `json:"version"`
	Operation  string            `json:"operation"`
	Properties map[string]string `json:"properties"`
	// Unknown says why the commit could not be found (the versions were
	// cleaned up, the transaction is missing).
	Unknown string `json:"unknown,omitempty"`
}

// maxCachedManifests bounds the manifests a Provenances call keeps open.
const maxCachedManifests = 64

// MaxProvenanceSegments bounds the segments one Provenances call looks up
// (each costs a binary search over the versions).
const MaxProvenanceSegments = 4096

// Provenances finds, for each segment (committed at snap), the version
// that first lists it and that version's transaction. A segment stays in
// every version from its commit until it is replaced, so the first version
// is found by a binary search over the versions still in storage between
// the segment's dataset_version and snap's; manifests are read once per
// call, whatever number of segments share them.
func Provenances(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata) (map[string]Provenance, error) {
	if len(metas) > MaxProvenanceSegments {
		return nil, fmt.Errorf("%w: provenance of %d segments asked (at most %d)", errkind.InvalidInput, len(metas), MaxProvenanceSegments)
	}
	refs, err := table.ListVersions(ctx, st)
	if err != nil {
		return nil, err
	}
	var versions []uint64
	for _, r := range refs {
		if r.Version <= snap.Ref.Version {
			versions = append(versions, r.Version)
		}
	}
	cache := map[uint64]*table.Snapshot{snap.Ref.Version: snap}
	open := func(v uint64) (*table.Snapshot, error) {
		if s := cache[v]; s != nil {
			return s, nil
		}
		s, err := table.Open(ctx, st, v)
		if err != nil {
			return nil, err
		}
		// The searches share their first probes; the rest are kept only
		// while the cache is small (a manifest of a large table is MBs).
		if len(cache) < maxCachedManifests {
			cache[v] = s
		}
		return s, nil
	}
	has := func(s *table.Snapshot, u string) bool {
		for _, im := range s.Indices {
			if table.IndexUUID(im) == u {
				return true
			}
		}
		return false
	}
	out := make(map[string]Provenance, len(metas))
	for _, im := range metas {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		u := table.IndexUUID(im)
		lo := sort.Search(len(versions), func(i int) bool { return versions[i] >= im.GetDatasetVersion() })
		hi := len(versions) - 1
		if hi < lo {
			out[u] = Provenance{Unknown: "no version in storage between its dataset version and this one"}
			continue
		}
		// Invariant: versions[hi] lists u; the answer is in [lo, hi].
		var probeErr error
		for lo < hi {
			mid := lo + (hi-lo)/2
			s, err := open(versions[mid])
			if err != nil {
				probeErr = err
				break
			}
			if has(s, u) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if probeErr != nil {
			if errors.Is(probeErr, errkind.NotFound) {
				out[u] = Provenance{Unknown: probeErr.Error()}
				continue
			}
			return nil, probeErr
		}
		first, err := open(versions[hi])
		if err != nil {
			return nil, err
		}
		p := Provenance{Version: first.Ref.Version, Properties: map[string]string{}}
		txn, err := first.Transaction(ctx, st)
		switch {
		case errors.Is(err, errkind.NotFound):
			p.Unknown = err.Error()
		case err != nil:
			return nil, err
		default:
			p.Operation = operationName(txn)
			for k, v := range txn.GetTransactionProperties() {
				p.Properties[k] = v
			}
		}
		if hi == 0 && versions[0] > im.GetDatasetVersion()+1 {
			// The versions before the first one kept were cleaned up: the
			// segment may be older than this one.
			p.Unknown = fmt.Sprintf("versions before %d were cleaned up; the segment was listed from then on", versions[0])
		}
		out[u] = p
	}
	return out, nil
}

// operationName is the name of a transaction's operation, as Lance's
// Python API spells it ("CreateIndex", "Append"...).
func operationName(t *pb.Transaction) string {
	switch t.GetOperation().(type) {
	case *pb.Transaction_CreateIndex_:
		return "CreateIndex"
	case *pb.Transaction_Append_:
		return "Append"
	case *pb.Transaction_Delete_:
		return "Delete"
	case *pb.Transaction_Overwrite_:
		return "Overwrite"
	case *pb.Transaction_Rewrite_:
		return "Rewrite"
	case *pb.Transaction_Merge_:
		return "Merge"
	case *pb.Transaction_Update_:
		return "Update"
	case nil:
		return ""
	}
	return "other"
}

// IndexProvenances is Provenances over the segments of one index at snap
// ("": every index). errkind.NotFound when the index does not exist.
func IndexProvenances(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName string) (map[string]Provenance, error) {
	var metas []*pb.IndexMetadata
	for _, im := range snap.Indices {
		if indexName == "" || im.GetName() == indexName {
			metas = append(metas, im)
		}
	}
	if len(metas) == 0 && indexName != "" {
		return nil, fmt.Errorf("%w: version %d has no index %q (indices: %v)", errkind.NotFound, snap.Ref.Version, indexName, IndexNames(snap))
	}
	return Provenances(ctx, st, snap, metas)
}
