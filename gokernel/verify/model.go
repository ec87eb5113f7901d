package verify

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// modelTolerance is how far two model values may differ and still be one
// model (Lance's merger: bitwise equal or within 1e-5).
const modelTolerance = 1e-5

// modelSet holds the models of an index's segments and the one most of
// them share (the reference a segment is judged against).
type modelSet struct {
	byUUID map[string]*encode.Model
	ref    *encode.Model
	refN   int // segments sharing the reference
	total  int // segments with a model
	metric string
}

// readModels reads the model of every segment that has one (segments
// whose files do not open are judged by their own checks).
func readModels(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata) (*modelSet, error) {
	ms := &modelSet{byUUID: map[string]*encode.Model{}}
	type group struct {
		m *encode.Model
		n int
	}
	var groups []*group
	for _, im := range metas {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o, err := openSegment(ctx, st, snap, im)
		if err != nil {
			if errkind.Tag(err) == "io" {
				return nil, err
			}
			continue
		}
		m := o.model
		o.close()
		if m == nil {
			continue
		}
		ms.byUUID[o.uuid] = m
		ms.total++
		found := false
		for _, g := range groups {
			if modelDiff(g.m, m) == "" {
				g.n++
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, &group{m: m, n: 1})
		}
	}
	for _, g := range groups {
		if ms.ref == nil || g.n > ms.refN {
			ms.ref, ms.refN = g.m, g.n
		}
	}
	if ms.ref != nil {
		ms.metric = string(ms.ref.Metric)
	}
	return ms, nil
}

// check compares a segment's model with the index's reference.
func (ms *modelSet) check(o *opened, sr *SegmentReport) {
	if o.model == nil || ms.ref == nil {
		sr.add(Check{Name: "model", Verdict: Skipped, Message: "no model to compare"})
		return
	}
	if ms.total < 2 {
		sr.add(Check{Name: "model", Verdict: OK, Message: "the only segment with a model"})
		return
	}
	d := modelDiff(ms.ref, o.model)
	if d == "" {
		sr.add(Check{Name: "model", Verdict: OK, Message: fmt.Sprintf("the model %d of the index's %d segments share", ms.refN, ms.total)})
		return
	}
	if ms.refN*2 <= ms.total {
		// No majority: report the difference without blaming this one.
		sr.add(Check{Name: "model", Verdict: Warning, Message: fmt.Sprintf("the index's segments do not share one model (this one: %s)", d)})
		return
	}
	sr.add(Check{Name: "model", Verdict: Failed, Damage: DamageModel,
		Message: fmt.Sprintf("%s, against the model %d of the index's %d segments share", d, ms.refN, ms.total)})
}

// modelDiff describes how model b differs from a ("" when they are one
// model). SQ bounds may differ (each create_index_uncommitted segment
// trains its own; merges re-quantize).
func modelDiff(a, b *encode.Model) string {
	switch {
	case a.Type != b.Type:
		return fmt.Sprintf("index type %s, not %s", b.Type, a.Type)
	case a.Metric != b.Metric:
		return fmt.Sprintf("metric %s, not %s", b.Metric, a.Metric)
	case a.Dim != b.Dim:
		return fmt.Sprintf("dimension %d, not %d", b.Dim, a.Dim)
	case a.NumPartitions() != b.NumPartitions() && a.Type.HNSW():
		return fmt.Sprintf("%d IVF partitions, not %d", b.NumPartitions(), a.NumPartitions())
	}
	// A model extended by maintain(retrain="auto") keeps the narrower
	// one's centroids as its first: one model, whose segments encoded
	// before the extension use its first partitions.
	n := min(len(a.Centroids), len(b.Centroids))
	if i := farApart(a.Centroids[:n], b.Centroids[:n]); i >= 0 {
		p := i / a.Dim
		return fmt.Sprintf("its IVF centroid of partition %d differs (component %d: %g, not %g)", p, i%a.Dim, b.Centroids[i], a.Centroids[i])
	}
	switch {
	case a.PQ != nil && b.PQ != nil:
		if a.PQ.NumBits != b.PQ.NumBits || a.PQ.NumSubVectors != b.PQ.NumSubVectors {
			return fmt.Sprintf("PQ %d×%d bits, not %d×%d", b.PQ.NumSubVectors, b.PQ.NumBits, a.PQ.NumSubVectors, a.PQ.NumBits)
		}
		if i := farApart(a.PQ.Codebook, b.PQ.Codebook); i >= 0 {
			return fmt.Sprintf("its PQ codebook differs (value %d: %g, not %g)", i, b.PQ.Codebook[i], a.PQ.Codebook[i])
		}
	case a.RQ != nil && b.RQ != nil:
		r, s := a.RQ, b.RQ
		switch {
		case r.NumBits != s.NumBits:
			return fmt.Sprintf("%d-bit RQ, not %d-bit", s.NumBits, r.NumBits)
		case r.Rotation != s.Rotation || r.QueryEstimator != s.QueryEstimator:
			return fmt.Sprintf("RQ %s rotation and %s, not %s and %s", s.Rotation, s.QueryEstimator, r.Rotation, r.QueryEstimator)
		case !slices.Equal(r.Signs, s.Signs):
			return "its RQ rotation (fast rotation signs) differs"
		case farApart(r.Matrix, s.Matrix) >= 0:
			return "its RQ rotation matrix differs"
		}
	case a.SQ != nil && b.SQ != nil:
		if a.SQ.NumBits != b.SQ.NumBits {
			return fmt.Sprintf("%d-bit SQ, not %d-bit", b.SQ.NumBits, a.SQ.NumBits)
		}
	}
	return ""
}

// farApart returns the first index where a and b differ by more than the
// tolerance (or their lengths differ: 0), -1 when they agree.
func farApart(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if a[i] != b[i] && !(math.Abs(float64(a[i]-b[i])) <= modelTolerance) {
			return i
		}
	}
	return -1
}
