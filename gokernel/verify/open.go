package verify

import (
	"context"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/modelio"
	"github.com/lance-segmerge/lance-segmerge/gokernel/search"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// opened is one segment opened for checking: its files, and its model
// when the files yield one.
type opened struct {
	meta  *pb.IndexMetadata
	uuid  string
	files *ivf.Files
	model *encode.Model
	index *search.Index
	// fresh is the model a fresh build of the segment's rows uses (its
	// own, unless the codes check found it encoded otherwise).
	fresh *encode.Model
	// noModel says why model is nil.
	noModel error
	// half: the column holds float16 vectors, which pylance (and a fresh
	// build) encodes in float16 arithmetic.
	half bool
	// mixedDot counts sampled rows of a dot PQ segment whose codes are
	// only the L2 assignment's, and only the inner product's, when the
	// segment holds both (zero otherwise).
	mixedDot [2]int
}

// encoder is the encoder a fresh build of the segment's rows uses.
func (o *opened) encoder(m *encode.Model) (*encode.Encoder, error) {
	if o.half {
		return encode.NewHalfEncoder(m)
	}
	return encode.NewEncoder(m)
}

func (o *opened) close() {
	if o != nil && o.files != nil {
		o.files.Close()
	}
}

// openSegment opens a segment's files where it lives (the dataset root or
// the base path it names) and reads its model. A segment whose files open
// but whose model does not (HNSW, a broken quantizer) comes back with
// model nil and the reason in noModel.
func openSegment(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*opened, error) {
	o := &opened{meta: im, uuid: table.IndexUUID(im)}
	ist := st
	if im.BaseId != nil {
		var err error
		if ist, err = snap.IndexStore(ctx, st, im); err != nil {
			return nil, err
		}
	}
	f, err := ivf.OpenFiles(ctx, ist, table.IndexDir(im), lancefile.Options{})
	if err != nil {
		return nil, err
	}
	o.files = f
	if f.Type.HNSW() {
		o.noModel = fmt.Errorf("%w: %s segments are checked for structure only (their HNSW graphs are not searched here)", errkind.Unsupported, f.Type)
		return o, nil
	}
	m, err := modelio.FromFiles(ctx, f, o.uuid)
	if err != nil {
		o.noModel = err
		return o, nil
	}
	ix, err := search.New(m)
	if err != nil {
		o.noModel = err
		return o, nil
	}
	o.model, o.index = m, ix
	return o, nil
}

// FindSegment returns the manifest entry of a segment of an index.
// errkind.NotFound when the version has no such index or segment.
func FindSegment(snap *table.Snapshot, indexName, segUUID string) (*pb.IndexMetadata, error) {
	return findSegment(snap, indexName, segUUID)
}

// findSegment returns the manifest entry of a segment of an index.
func findSegment(snap *table.Snapshot, indexName, segUUID string) (*pb.IndexMetadata, error) {
	return findSegmentOf(snap, indexName, segUUID, true)
}

// findSegmentOf is findSegment; vectorOnly refuses other index types.
func findSegmentOf(snap *table.Snapshot, indexName, segUUID string, vectorOnly bool) (*pb.IndexMetadata, error) {
	found := false
	for _, im := range snap.Indices {
		if im.GetName() != indexName {
			continue
		}
		if err := segment.RequireVector(im); err != nil && vectorOnly {
			return nil, err
		}
		found = true
		if table.IndexUUID(im) == segUUID {
			return im, nil
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: version %d has no index %q", errkind.NotFound, snap.Ref.Version, indexName)
	}
	return nil, fmt.Errorf("%w: index %q has no segment %s at version %d", errkind.NotFound, indexName, segUUID, snap.Ref.Version)
}

// SearchSegment runs queries (n×dim float32) over one segment alone, as
// Lance's IVF search does (see package search), and returns each query's
// hits. Rows the dataset version no longer has (deleted, or of fragments
// outside the segment's coverage) are filtered out, as a pylance query
// filters them.
func SearchSegment(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName, segUUID string, queries []float32, k, nprobes int) ([][]search.Hit, error) {
	im, err := findSegment(snap, indexName, segUUID)
	if err != nil {
		return nil, err
	}
	o, err := openSegment(ctx, st, snap, im)
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", segUUID, err)
	}
	defer o.close()
	if o.noModel != nil {
		return nil, fmt.Errorf("segment %s: %w", segUUID, o.noModel)
	}
	dim := o.model.Dim
	if dim == 0 || len(queries)%dim != 0 {
		return nil, fmt.Errorf("%w: %d query values are not vectors of dimension %d", errkind.InvalidInput, len(queries), dim)
	}
	live, err := newLiveSet(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	qs := make([]*search.Query, len(queries)/dim)
	for i := range qs {
		q, ok := o.index.NewQuery(queries[i*dim : (i+1)*dim])
		if !ok {
			return nil, fmt.Errorf("%w: query %d cannot be searched (non-finite values, or the zero vector under cosine)", errkind.InvalidInput, i)
		}
		qs[i] = q
	}
	return search.Search(ctx, o.index, o.files, qs, search.Options{K: k, NProbes: nprobes, Depth: -1, Keep: live.contains})
}
