package segment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// centroidTolerance is how far two centroids (or PQ codebook entries, RQ
// rotation entries, SQ bounds) may differ and still count as one model:
// Lance's merger accepts bitwise equality or |a-b| <= 1e-5.
const centroidTolerance = 1e-5

// source is one opened input segment.
type source struct {
	meta     *pb.IndexMetadata
	uuid     string
	frags    []uint32
	fragSet  map[uint32]bool
	files    *ivf.Files
	codebook *ivf.Tensor // PQ
	rotation *ivf.Tensor // RQ with matrix rotation
}

// model is what every source of a merge shares, taken from the first.
type model struct {
	typ       ivf.IndexType
	distance  string
	nparts    int
	centroids *ivf.Tensor
	quant     *ivf.QuantizerMeta
	codebook  *ivf.Tensor
	rotation  *ivf.Tensor
	fields    []*lancefile.Field
	version   lancefile.Version
	// codeColumn is the column whose layout differs from row order
	// ("__pq_code", "_rabit_codes") or that is re-quantized ("__sq_code"),
	// or "".
	codeColumn string
	// sqBounds are the output's SQ bounds: the union of the inputs' when
	// they differ and re-quantizing was asked for.
	sqLo, sqHi float64
	requantize bool
	// hnsw is what IVF_HNSW_* inputs share (nil for other types).
	hnsw *hnswModel
}

func closeSources(srcs []*source) {
	for _, s := range srcs {
		if s.files != nil {
			s.files.Close()
		}
	}
}

// checkEntries validates the manifest entries of a merge (or commit) input:
// non-empty, unique uuids, one index name, one field, disjoint coverage,
// no future dataset version. Each failure names the segment at fault.
func checkEntries(metas []*pb.IndexMetadata, snap *table.Snapshot) error {
	if len(metas) == 0 {
		return fmt.Errorf("%w: at least one index segment is required", errkind.InvalidInput)
	}
	seen := map[string]bool{}
	owner := map[uint32]string{}
	first := metas[0]
	for _, im := range metas {
		u := table.IndexUUID(im)
		if seen[u] {
			return fmt.Errorf("%w: segment %s appears twice", errkind.InvalidInput, u)
		}
		seen[u] = true
		if im.GetName() != first.GetName() {
			return fmt.Errorf("%w: segment %s belongs to index %q, segment %s to %q", errkind.InvalidInput, u, im.GetName(), table.IndexUUID(first), first.GetName())
		}
		if len(im.GetFields()) != 1 || im.GetFields()[0] != first.GetFields()[0] {
			return fmt.Errorf("%w: segment %s indexes fields %v, segment %s fields %v", errkind.InvalidInput, u, im.GetFields(), table.IndexUUID(first), first.GetFields())
		}
		if snap != nil && im.GetDatasetVersion() > snap.Ref.Version {
			return fmt.Errorf("%w: segment %s was built at dataset version %d, after the version %d being worked on", errkind.InvalidInput, u, im.GetDatasetVersion(), snap.Ref.Version)
		}
		if im.BaseId != nil {
			return fmt.Errorf("%w: segment %s lives under base path %d (shallow clones are not supported)", errkind.Unsupported, u, im.GetBaseId())
		}
		ids, ok, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		if err != nil {
			return fmt.Errorf("segment %s: %w", u, err)
		}
		if !ok {
			return fmt.Errorf("%w: segment %s has no fragment coverage (rebuild it with pylance)", errkind.InvalidInput, u)
		}
		for _, f := range ids {
			if o, dup := owner[f]; dup {
				return fmt.Errorf("%w: segments %s and %s both cover fragment %d", errkind.InvalidInput, o, u, f)
			}
			owner[f] = u
		}
	}
	return nil
}

// openSources opens every input's files and checks that they exist and are
// complete (sizes match the manifest's file list when it has one).
func openSources(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) (_ []*source, err error) {
	var srcs []*source
	defer func() {
		if err != nil {
			closeSources(srcs)
		}
	}()
	for _, im := range metas {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := &source{meta: im, uuid: table.IndexUUID(im)}
		s.frags, _, _ = table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		s.fragSet = make(map[uint32]bool, len(s.frags))
		for _, f := range s.frags {
			s.fragSet[f] = true
		}
		for _, f := range im.GetFiles() {
			e, err := st.Stat(ctx, table.IndexDir(im)+f.GetPath())
			if err != nil {
				return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
			}
			if uint64(e.Size) != f.GetSizeBytes() {
				return nil, fmt.Errorf("%w: segment %s: %s has %d bytes, the segment's metadata says %d (incomplete or replaced)",
					errkind.Corrupt, s.uuid, f.GetPath(), e.Size, f.GetSizeBytes())
			}
		}
		if s.files, err = ivf.OpenFiles(ctx, st, table.IndexDir(im), lancefile.Options{}); err != nil {
			return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
		}
		srcs = append(srcs, s)
		if err := s.loadModelBuffers(ctx); err != nil {
			return nil, err
		}
	}
	return srcs, nil
}

// loadModelBuffers reads the PQ codebook or RQ rotation of a source.
func (s *source) loadModelBuffers(ctx context.Context) error {
	q := s.files.Quant
	switch s.files.Type.Quantizer() {
	case "pq":
		if q.CodebookPosition > 0 {
			b, err := s.files.Aux.GlobalBuffer(ctx, q.CodebookPosition)
			if err != nil {
				return fmt.Errorf("segment %s: codebook: %w", s.uuid, err)
			}
			if s.codebook, err = ivf.DecodeTensor(b); err != nil {
				return fmt.Errorf("segment %s: codebook: %w", s.uuid, err)
			}
			return nil
		}
		// Lance before 0.28 kept the codebook inline, as the bytes of a
		// Tensor message in "codebook_tensor".
		var raw []byte
		if err := json.Unmarshal(q.Raw["codebook_tensor"], &raw); err != nil || len(raw) == 0 {
			return fmt.Errorf("%w: segment %s: PQ metadata has neither codebook_position nor codebook_tensor", errkind.Corrupt, s.uuid)
		}
		t, err := ivf.DecodeTensor(raw)
		if err != nil {
			return fmt.Errorf("segment %s: inline codebook: %w", s.uuid, err)
		}
		s.codebook = t
	case "rq":
		if q.RotationType == "matrix" {
			if q.RotateMatPosition == nil || *q.RotateMatPosition <= 0 {
				return fmt.Errorf("%w: segment %s: matrix rotation without rotate_mat_position", errkind.Corrupt, s.uuid)
			}
			b, err := s.files.Aux.GlobalBuffer(ctx, *q.RotateMatPosition)
			if err != nil {
				return fmt.Errorf("segment %s: rotation: %w", s.uuid, err)
			}
			if s.rotation, err = ivf.DecodeTensor(b); err != nil {
				return fmt.Errorf("segment %s: rotation: %w", s.uuid, err)
			}
		}
	}
	return nil
}

// sharedModel checks that every source shares the first one's model and
// returns it. Messages name the first segment that differs.
//
// With requantizeSQ, IVF_SQ inputs whose bounds differ are accepted: the
// output takes the union of the bounds and re-quantizes the codes of every
// input whose bounds differ from it.
func sharedModel(srcs []*source, requantizeSQ bool) (*model, error) {
	f0 := srcs[0].files
	m := &model{
		typ: f0.Type, distance: f0.Distance, nparts: f0.NumPartitions(), centroids: f0.Centroids(),
		quant: f0.Quant, codebook: srcs[0].codebook, rotation: srcs[0].rotation,
		fields: f0.Aux.Fields(), version: f0.Aux.Version(),
	}
	switch m.typ.Quantizer() {
	case "pq":
		m.codeColumn = "__pq_code"
	case "sq":
		if m.quant.SQBounds == nil {
			return nil, fmt.Errorf("%w: segment %s: SQ metadata without bounds", errkind.Corrupt, srcs[0].uuid)
		}
		m.codeColumn = "__sq_code"
		m.sqLo, m.sqHi = m.quant.SQBounds.Start, m.quant.SQBounds.End
	case "rq":
		m.codeColumn = "_rabit_codes"
		if q := m.quant; q.RowLayout != nil && *q.RowLayout != "columns" {
			return nil, fmt.Errorf("%w: segment %s stores RQ codes in the %q row layout", errkind.Unsupported, srcs[0].uuid, *q.RowLayout)
		}
	}
	if m.centroids == nil {
		return nil, fmt.Errorf("%w: segment %s has no IVF centroids", errkind.Corrupt, srcs[0].uuid)
	}
	if m.nparts != m.centroids.Rows() {
		return nil, fmt.Errorf("%w: segment %s has %d partitions and %d centroids", errkind.Corrupt, srcs[0].uuid, m.nparts, m.centroids.Rows())
	}
	m0 := srcs[0].meta
	for _, s := range srcs[1:] {
		f := s.files
		fail := func(what string, a, b any) error {
			return fmt.Errorf("%w: segment %s does not share the model of segment %s: %s %v, not %v", errkind.InvalidInput, s.uuid, srcs[0].uuid, what, b, a)
		}
		switch {
		case f.Type != m.typ:
			return nil, fail("index type", m.typ, f.Type)
		case f.Distance != m.distance:
			return nil, fail("distance type", m.distance, f.Distance)
		case f.NumPartitions() != m.nparts:
			return nil, fail("IVF partition count", m.nparts, f.NumPartitions())
		case !strings.EqualFold(s.meta.GetIndexDetails().GetTypeUrl(), m0.GetIndexDetails().GetTypeUrl()):
			return nil, fail("index details type", m0.GetIndexDetails().GetTypeUrl(), s.meta.GetIndexDetails().GetTypeUrl())
		case s.meta.GetIndexVersion() != m0.GetIndexVersion():
			return nil, fail("index version", m0.GetIndexVersion(), s.meta.GetIndexVersion())
		}
		if err := sameTensor(m.centroids, f.Centroids()); err != nil {
			return nil, fail("IVF centroids", "the same", err)
		}
		if err := sameSchema(m.fields, f.Aux.Fields()); err != nil {
			return nil, fail("auxiliary columns", "the same", err)
		}
		q0, q := m.quant, f.Quant
		switch m.typ.Quantizer() {
		case "flat":
		case "sq":
			switch {
			case q.Dim != q0.Dim || q.NumBits != q0.NumBits:
				return nil, fail("SQ dim/bits", fmt.Sprint(q0.Dim, "/", q0.NumBits), fmt.Sprint(q.Dim, "/", q.NumBits))
			case q.SQBounds == nil || q0.SQBounds == nil:
				return nil, fail("SQ bounds", "present", "missing")
			case !closeEnough(q.SQBounds.Start, q0.SQBounds.Start) || !closeEnough(q.SQBounds.End, q0.SQBounds.End):
				if !requantizeSQ {
					return nil, fmt.Errorf("%w: segment %s has SQ bounds [%g, %g], segment %s [%g, %g]: each IVF_SQ segment trained its own quantizer; merge with requantize_sq=True to re-quantize to the union of the bounds",
						errkind.InvalidInput, s.uuid, q.SQBounds.Start, q.SQBounds.End, srcs[0].uuid, q0.SQBounds.Start, q0.SQBounds.End)
				}
				m.requantize = true
				m.sqLo, m.sqHi = math.Min(m.sqLo, q.SQBounds.Start), math.Max(m.sqHi, q.SQBounds.End)
			}
		case "pq":
			switch {
			case q.NBits != q0.NBits:
				return nil, fail("PQ bits", q0.NBits, q.NBits)
			case q.NumSubVectors != q0.NumSubVectors:
				return nil, fail("PQ sub-vectors", q0.NumSubVectors, q.NumSubVectors)
			case q.Dimension != q0.Dimension:
				return nil, fail("PQ dimension", q0.Dimension, q.Dimension)
			}
			if err := sameTensor(m.codebook, s.codebook); err != nil {
				return nil, fail("PQ codebook", "the same", err)
			}
		case "rq":
			switch {
			case q.NumBits != q0.NumBits:
				return nil, fail("RQ bits", q0.NumBits, q.NumBits)
			case q.CodeDim != q0.CodeDim:
				return nil, fail("RQ code dimension", q0.CodeDim, q.CodeDim)
			case q.RotationType != q0.RotationType:
				return nil, fail("RQ rotation type", q0.RotationType, q.RotationType)
			case q.QueryEstimator != q0.QueryEstimator:
				return nil, fail("RQ query estimator", q0.QueryEstimator, q.QueryEstimator)
			case !bytes.Equal(q.Raw["fast_rotation_signs"], q0.Raw["fast_rotation_signs"]):
				return nil, fail("RQ rotation (fast_rotation_signs)", "the same", "different; pin one rotation with build_rq_model")
			}
			if (m.rotation == nil) != (s.rotation == nil) {
				return nil, fail("RQ rotation matrix", m.rotation != nil, s.rotation != nil)
			}
			if m.rotation != nil {
				if err := sameTensor(m.rotation, s.rotation); err != nil {
					return nil, fail("RQ rotation matrix", "the same", err)
				}
			}
		}
	}
	if m.typ.HNSW() {
		var err error
		if m.hnsw, err = sharedHNSW(srcs, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func closeEnough(a, b float64) bool {
	return a == b || math.Abs(a-b) <= centroidTolerance*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// sameTensor compares two tensors: same type and shape, values bitwise
// equal or within centroidTolerance, no NaN.
func sameTensor(a, b *ivf.Tensor) error {
	if a == nil || b == nil {
		if a == b {
			return nil
		}
		return errors.New("present in one segment only")
	}
	if a.DType != b.DType || fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) {
		return fmt.Errorf("%s%v vs %s%v", b.DType, b.Shape, a.DType, a.Shape)
	}
	if bytes.Equal(a.Data, b.Data) {
		return nil
	}
	av, ok1 := a.Float64s()
	bv, ok2 := b.Float64s()
	if !ok1 || !ok2 {
		return errors.New("different values")
	}
	for i := range av {
		if math.IsNaN(av[i]) || math.IsNaN(bv[i]) || math.Abs(av[i]-bv[i]) > centroidTolerance {
			return fmt.Errorf("value %d is %g, not %g", i, bv[i], av[i])
		}
	}
	return nil
}

func sameSchema(a, b []*lancefile.Field) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d columns vs %d", len(b), len(a))
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Type != b[i].Type {
			return fmt.Errorf("column %d is %s %s, not %s %s", i, b[i].Name, b[i].Type, a[i].Name, a[i].Type)
		}
	}
	return nil
}
