package segment

import (
	"context"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// What a commit checks of its new vector segments beyond their manifest
// entries, so that an index never holds segments of different kinds or
// models (pylance's commit checks the index type and metric only):
//
//  1. the new segments are of one kind: index type, distance type, vector
//     dimension, IVF partition count, quantizer parameters;
//  2. unless the commit replaces every segment of the index, each new
//     segment has the kind and model (IVF centroids, PQ codebook, RQ
//     rotation, SQ bounds) of the index's remaining segments, compared with
//     the first of them in manifest order.
//
// SQ bounds are the exception: every create_index_uncommitted IVF_SQ
// segment trains its own, and a requantize_sq merge of such segments takes
// the union of theirs. New bounds are refused only when the index's
// segments all share one set of bounds (as after create_index and
// optimize_indices, whose deltas reuse the base's).

// modelChecker compares new segments with the remaining segments of the
// index, across commit attempts: segments it opened stay open (and are
// reused) until close.
type modelChecker struct {
	st     storage.Store
	snap   *table.Snapshot // resolves base paths of existing segments
	index  string
	news   []*source // the new vector segments, opened
	opened map[string]*source
}

func (c *modelChecker) close() {
	for _, s := range c.opened {
		s.files.Close()
	}
	c.opened = nil
}

// open returns an existing segment of the index, opened.
func (c *modelChecker) open(ctx context.Context, im *pb.IndexMetadata) (*source, error) {
	u := table.IndexUUID(im)
	if s := c.opened[u]; s != nil {
		return s, nil
	}
	s, err := openSource(ctx, c.st, c.snap, im, false)
	if err != nil {
		return nil, fmt.Errorf("segment: read segment %s of index %q to compare models: %w", u, c.index, err)
	}
	if err := s.checkModel(); err != nil {
		s.files.Close()
		return nil, err
	}
	if c.opened == nil {
		c.opened = map[string]*source{}
	}
	c.opened[u] = s
	return s, nil
}

// checkNew checks that the new segments are of one kind.
func (c *modelChecker) checkNew() error {
	for _, s := range c.news {
		if err := s.checkModel(); err != nil {
			return err
		}
	}
	for _, s := range c.news[min(1, len(c.news)):] {
		ref := c.news[0]
		if mm := compareKind(ref, s); mm != nil {
			return fmt.Errorf("%w: segment %s is not of the kind of the other segments of this commit: %s",
				errkind.InvalidInput, s.uuid, mm.versus("segment "+ref.uuid))
		}
	}
	return nil
}

// check compares the new segments with the segments of the index that
// stay in version latest+1 (those not in removed).
func (c *modelChecker) check(ctx context.Context, latest *table.Snapshot, removed map[string]bool) error {
	if len(c.news) == 0 {
		return nil
	}
	ours := map[string]bool{}
	for _, s := range c.news {
		ours[s.uuid] = true
	}
	var existing []*pb.IndexMetadata // the index's segments at latest, ours aside
	var ref *pb.IndexMetadata
	for _, im := range latest.Indices {
		u := table.IndexUUID(im)
		if im.GetName() != c.index || ours[u] || !IsVector(im) || im.BaseId != nil {
			continue
		}
		existing = append(existing, im)
		if ref == nil && !removed[u] {
			ref = im
		}
	}
	if ref == nil {
		return nil // the commit replaces every segment of the index (or creates it)
	}
	r, err := c.open(ctx, ref)
	if err != nil {
		return err
	}
	for _, s := range c.news {
		mm := compareKind(r, s)
		if mm == nil {
			mm = compareModel(r, s)
		}
		if mm == nil {
			continue
		}
		if mm.sqBounds {
			mixed, err := c.mixedSQBounds(ctx, r, existing)
			if err != nil {
				return err
			}
			if mixed {
				continue
			}
		}
		return fmt.Errorf("%w: segment %s does not match index %q: %s (a commit may change an index's kind or model only by replacing all of its segments)",
			errkind.InvalidInput, s.uuid, c.index, mm.versus("the index's segment "+r.uuid))
	}
	return nil
}

// mixedSQBounds reports whether the index's segments already differ in
// their SQ bounds (each trained its own).
func (c *modelChecker) mixedSQBounds(ctx context.Context, ref *source, existing []*pb.IndexMetadata) (bool, error) {
	for _, im := range existing {
		if table.IndexUUID(im) == ref.uuid {
			continue
		}
		s, err := c.open(ctx, im)
		if err != nil {
			return false, err
		}
		if compareKind(ref, s) != nil {
			continue
		}
		if mm := compareModel(ref, s); mm != nil && mm.sqBounds {
			return true, nil
		}
	}
	return false, nil
}
