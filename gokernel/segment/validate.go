package segment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fragreuse"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
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
	meta    *pb.IndexMetadata
	uuid    string
	frags   []uint32
	fragSet map[uint32]bool
	remap   *remapGuard // set by Merge: rows of gone fragments it watches for
	rows    fragRows    // rows a merge kept, per fragment
	// deleted holds, per covered fragment with a deletion file, the row
	// offsets deleted at the merge's version (set by liveFilter).
	deleted map[uint32]*roaring.Bitmap
	files   *ivf.Files
	// owned holds the stable row ids the input still owns (datasets with
	// stable row ids; nil otherwise).
	owned    *roaring64.Bitmap
	codebook *ivf.Tensor // PQ
	rotation *ivf.Tensor // RQ with matrix rotation
	// depth, when >= 0, is how many times the code layout was really
	// applied to this input's codes (a repair, MergeOptions.Layouts).
	depth int
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
		if s != nil && s.files != nil {
			s.files.Close()
		}
	}
}

// checkEntries validates the manifest entries of a merge (or commit) input:
// non-empty, unique uuids, one index name, one field, disjoint coverage,
// no future dataset version. Each failure names the segment at fault.
func checkEntries(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, snap *table.Snapshot) error {
	if len(metas) == 0 {
		return fmt.Errorf("%w: at least one index segment is required", errkind.InvalidInput)
	}
	seen := map[string]bool{}
	owner := map[uint32]string{}
	first := metas[0]
	var current func(uint32) bool
	if snap != nil {
		current = currentFragments(snap)
	}
	compacted := compactedTest(ctx, st, snap)
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
		var ids []uint32
		var ok bool
		var err error
		if snap != nil {
			ids, ok, err = snap.DecodeCoverage(im)
		} else {
			ids, ok, err = table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		}
		if err != nil {
			return fmt.Errorf("segment %s: %w", u, err)
		}
		if !ok {
			return fmt.Errorf("%w: segment %s has no fragment coverage (rebuild it with pylance)", errkind.InvalidInput, u)
		}
		if err := refuseDeferredRemap(compacted, im, ids, current); err != nil {
			return err
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

// indexStore returns the store holding a segment's directory: st, or the
// base path the entry names (segments of shallow clones live under their
// source dataset's root).
func indexStore(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (storage.Store, error) {
	if im.BaseId == nil {
		return st, nil
	}
	if snap == nil {
		return nil, fmt.Errorf("%w: segment %s lives under base path %d, and no dataset version resolves it", errkind.InvalidInput, table.IndexUUID(im), im.GetBaseId())
	}
	return snap.IndexStore(ctx, st, im)
}

// openParallelism bounds the segments opened at once. Opening a segment
// is a few small requests (an object store's HEAD and ranged GETs, each a
// round trip), so a thousand deltas on S3 are opened 32 at a time.
const openParallelism = 32

// openSources opens every input's files (under the dataset root, or the
// base path an input names) and checks that they exist and are complete
// (sizes match the manifest's file list when it has one). Inputs are
// opened in parallel; a failure is the first failing input's, in input
// order, as if they were opened one by one.
func openSources(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata) (_ []*source, err error) {
	srcs := make([]*source, len(metas))
	defer func() {
		if err != nil {
			closeSources(srcs)
		}
	}()
	stores := make([]storage.Store, len(metas))
	for i, im := range metas { // resolving base paths is not concurrent
		if stores[i], err = indexStore(ctx, st, snap, im); err != nil {
			return nil, err
		}
	}
	err = parallel.Each(len(metas), openParallelism, func(i int) (err error) {
		srcs[i], err = openSourceIn(ctx, stores[i], metas[i], true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return srcs, nil
}

// openSource opens one segment's files and model buffers, where the
// segment lives (st, or the base path it names in snap); with checkSizes,
// the files' sizes must match the segment's file list.
func openSource(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, checkSizes bool) (_ *source, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ist, err := indexStore(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	return openSourceIn(ctx, ist, im, checkSizes)
}

// openSourceIn is openSource on the store ist that holds the segment.
func openSourceIn(ctx context.Context, ist storage.Store, im *pb.IndexMetadata, checkSizes bool) (_ *source, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &source{meta: im, uuid: table.IndexUUID(im)}
	s.frags, _, _ = table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	s.fragSet = make(map[uint32]bool, len(s.frags))
	for _, f := range s.frags {
		s.fragSet[f] = true
	}
	var check func(name string, size int64) error
	var sizeErr error
	if checkSizes {
		// The two index files are checked as they are opened (one request
		// per file on an object store); any other file listed, here.
		want := map[string]uint64{}
		for _, f := range im.GetFiles() {
			want[f.GetPath()] = f.GetSizeBytes()
			if f.GetPath() == ivf.IndexFileName || f.GetPath() == ivf.AuxiliaryFileName {
				continue
			}
			e, err := ist.Stat(ctx, table.IndexDir(im)+f.GetPath())
			if err != nil {
				return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
			}
			if uint64(e.Size) != f.GetSizeBytes() {
				return nil, fmt.Errorf("%w: segment %s: %s has %d bytes, the segment's metadata says %d (incomplete or replaced)",
					errkind.Corrupt, s.uuid, f.GetPath(), e.Size, f.GetSizeBytes())
			}
		}
		check = func(name string, size int64) error {
			if w, ok := want[name]; ok && uint64(size) != w {
				sizeErr = fmt.Errorf("%w: segment %s: %s has %d bytes, the segment's metadata says %d (incomplete or replaced)",
					errkind.Corrupt, s.uuid, name, size, w)
			}
			return sizeErr
		}
	}
	if s.files, err = ivf.OpenFilesChecked(ctx, ist, table.IndexDir(im), lancefile.Options{}, check); err != nil {
		if sizeErr != nil {
			return nil, sizeErr
		}
		return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
	}
	if err := s.loadModelBuffers(ctx); err != nil {
		s.files.Close()
		return nil, err
	}
	return s, nil
}

// loadModelBuffers reads the PQ codebook or RQ rotation of a source (once
// per process and segment: see ivf.Files.QuantizerBuffers).
func (s *source) loadModelBuffers(ctx context.Context) error {
	var err error
	if s.codebook, s.rotation, err = s.files.QuantizerBuffers(ctx); err != nil {
		return fmt.Errorf("segment %s: %w", s.uuid, err)
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
	if err := srcs[0].checkModel(); err != nil {
		return nil, err
	}
	switch m.typ.Quantizer() {
	case "pq":
		m.codeColumn = "__pq_code"
	case "sq":
		m.codeColumn = "__sq_code"
		m.sqLo, m.sqHi = m.quant.SQBounds.Start, m.quant.SQBounds.End
	case "rq":
		m.codeColumn = "_rabit_codes"
		if q := m.quant; q.RowLayout != nil && *q.RowLayout != "columns" {
			return nil, fmt.Errorf("%w: segment %s stores RQ codes in the %q row layout", errkind.Unsupported, srcs[0].uuid, *q.RowLayout)
		}
	}
	m0 := srcs[0].meta
	for _, s := range srcs[1:] {
		if err := s.checkModel(); err != nil {
			return nil, err
		}
		fail := func(what string, a, b any) error {
			return fmt.Errorf("%w: segment %s does not share the model of segment %s: %s %v, not %v", errkind.InvalidInput, s.uuid, srcs[0].uuid, what, b, a)
		}
		differs := func(mm *mismatch) error {
			return fmt.Errorf("%w: segment %s does not share the model of segment %s: %s", errkind.InvalidInput, s.uuid, srcs[0].uuid, mm.versus("segment "+srcs[0].uuid))
		}
		mm := compareKind(srcs[0], s)
		switch {
		case mm != nil:
			return nil, differs(mm)
		case !strings.EqualFold(s.meta.GetIndexDetails().GetTypeUrl(), m0.GetIndexDetails().GetTypeUrl()):
			return nil, fail("index details type", m0.GetIndexDetails().GetTypeUrl(), s.meta.GetIndexDetails().GetTypeUrl())
		}
		if err := sameSchema(m.fields, s.files.Aux.Fields()); err != nil {
			return nil, fail("auxiliary columns", "the same", err)
		}
		mm = compareModel(srcs[0], s)
		if mm != nil && mm.sqBounds {
			q0, q := srcs[0].files.Quant, s.files.Quant
			if !requantizeSQ {
				return nil, fmt.Errorf("%w: segment %s has SQ bounds [%g, %g], segment %s [%g, %g]: each IVF_SQ segment trained its own quantizer; requantize_sq=False refuses them (by default they are re-quantized to the union of the bounds)",
					errkind.InvalidInput, s.uuid, q.SQBounds.Start, q.SQBounds.End, srcs[0].uuid, q0.SQBounds.Start, q0.SQBounds.End)
			}
			m.requantize = true
			m.sqLo, m.sqHi = math.Min(m.sqLo, q.SQBounds.Start), math.Max(m.sqHi, q.SQBounds.End)
			continue
		}
		if mm != nil {
			return nil, differs(mm)
		}
	}
	m.centroids, m.nparts = widen(srcs)
	if m.typ.HNSW() {
		var err error
		if m.hnsw, err = sharedHNSW(srcs, m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkModel checks what a source's own model needs to be usable: IVF
// centroids, one per partition, and SQ bounds for IVF_SQ.
func (s *source) checkModel() error {
	f := s.files
	c := f.Centroids()
	switch {
	case c == nil:
		return fmt.Errorf("%w: segment %s has no IVF centroids", errkind.Corrupt, s.uuid)
	case f.NumPartitions() != c.Rows():
		return fmt.Errorf("%w: segment %s has %d partitions and %d centroids", errkind.Corrupt, s.uuid, f.NumPartitions(), c.Rows())
	case f.Type.Quantizer() == "sq" && (f.Quant == nil || f.Quant.SQBounds == nil):
		return fmt.Errorf("%w: segment %s: SQ metadata without bounds", errkind.Corrupt, s.uuid)
	case f.Type.Quantizer() != "flat" && f.Quant == nil:
		return fmt.Errorf("%w: segment %s has no quantizer metadata", errkind.Corrupt, s.uuid)
	}
	return s.checkDetails()
}

// checkDetails checks the index details a segment's manifest entry carries
// against its files: they travel with the entry (a plan, a JSON segment
// from another machine) and a merge or commit copies them into the
// manifest, where pylance reads them. VectorIndexDetails must decode; a
// compression it names must be the files' quantizer (with the same bits
// and sub-vectors), and a metric it sets the files' distance. Entries
// without details (older writers) and details of another type pass.
func (s *source) checkDetails() error {
	d := s.meta.GetIndexDetails()
	if d == nil || !hasSuffixFold(d.GetTypeUrl(), "VectorIndexDetails") {
		return nil
	}
	var v pb.VectorIndexDetails
	if err := proto.Unmarshal(d.GetValue(), &v); err != nil {
		return fmt.Errorf("%w: segment %s: its index details (%s) do not decode: %v", errkind.InvalidInput, s.uuid, d.GetTypeUrl(), err)
	}
	f := s.files
	bad := func(what string, details, files any) error {
		return fmt.Errorf("%w: segment %s: its index details say %s %v, its files %v", errkind.InvalidInput, s.uuid, what, details, files)
	}
	// proto3 does not write the default (L2): only a metric the details
	// set is compared.
	if m := metricName(v.GetMetricType()); v.GetMetricType() != pb.VectorIndexDetails_L2 && !strings.EqualFold(m, f.Distance) {
		return bad("metric", m, f.Distance)
	}
	var kind string
	var bits, subs uint32
	switch c := v.GetCompression().(type) {
	case nil:
		return nil
	case *pb.VectorIndexDetails_Flat_:
		kind = "flat"
	case *pb.VectorIndexDetails_Sq_:
		kind, bits = "sq", c.Sq.GetNumBits()
	case *pb.VectorIndexDetails_Pq_:
		kind, bits, subs = "pq", c.Pq.GetNumBits(), c.Pq.GetNumSubVectors()
	case *pb.VectorIndexDetails_Rq_:
		kind, bits = "rq", c.Rq.GetNumBits()
	}
	if kind != f.Type.Quantizer() {
		return bad("compression", kind, f.Type.Quantizer())
	}
	if q := f.Quant; q != nil {
		fileBits := q.NumBits
		if kind == "pq" {
			fileBits = q.NBits
		}
		if bits != 0 && fileBits != 0 && int(bits) != fileBits {
			return bad("num_bits", bits, fileBits)
		}
		if subs != 0 && q.NumSubVectors != 0 && int(subs) != q.NumSubVectors {
			return bad("num_sub_vectors", subs, q.NumSubVectors)
		}
	}
	return nil
}

// mismatch is how a segment differs from a reference segment: what, and
// the reference's (want) and the segment's (got) values.
type mismatch struct {
	what      string
	want, got any
	// sqBounds: the SQ bounds differ (and nothing compared before them).
	sqBounds bool
}

// sameValue is the want of a mismatch between two tensors (got is how
// they differ).
const sameValue = "the same"

// versus describes the mismatch against the reference segment named ref:
// "distance type cosine, where <ref> has l2".
func (m *mismatch) versus(ref string) string {
	if m.want == sameValue {
		return fmt.Sprintf("its %s differ from those of %s (%v)", m.what, ref, m.got)
	}
	return fmt.Sprintf("%s %v, where %s has %v", m.what, m.got, ref, m.want)
}

// rawOrNull is a metadata value with a missing key read as null (Lance
// before fast rotations wrote no fast_rotation_signs; later, null with
// the matrix rotation).
func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// rqCodeDim is an RQ segment's code dimension: Lance before the code_dim
// key (pylance 0.39 to 2.x) rotated in the vector's own dimension.
func rqCodeDim(q *ivf.QuantizerMeta, dim int) int {
	if q.CodeDim > 0 {
		return q.CodeDim
	}
	return dim
}

// dimension is the vector dimension of a segment (the centroids' width).
func (s *source) dimension() int { return s.files.Centroids().Cols() }

// compareKind compares what makes two segments the same kind of index:
// index type, distance type, vector dimension, IVF partition count and the
// quantizer's parameters (bits, sub-vectors, rotation kind). Both sources
// passed checkModel.
func compareKind(ref, s *source) *mismatch {
	f0, f := ref.files, s.files
	switch {
	case f.Type != f0.Type:
		return &mismatch{what: "index type", want: f0.Type, got: f.Type}
	case f.Distance != f0.Distance:
		return &mismatch{what: "distance type", want: f0.Distance, got: f.Distance}
	case s.dimension() != ref.dimension():
		return &mismatch{what: "vector dimension", want: ref.dimension(), got: s.dimension()}
	case f.NumPartitions() != f0.NumPartitions() && f0.Type.HNSW(): // others: compareModel (an extended model)
		return &mismatch{what: "IVF partition count", want: f0.NumPartitions(), got: f.NumPartitions()}
	}
	q0, q := f0.Quant, f.Quant
	switch f0.Type.Quantizer() {
	case "sq":
		if q.Dim != q0.Dim || q.NumBits != q0.NumBits {
			return &mismatch{what: "SQ dim/bits", want: fmt.Sprint(q0.Dim, "/", q0.NumBits), got: fmt.Sprint(q.Dim, "/", q.NumBits)}
		}
	case "pq":
		switch {
		case q.NBits != q0.NBits:
			return &mismatch{what: "PQ bits", want: q0.NBits, got: q.NBits}
		case q.NumSubVectors != q0.NumSubVectors:
			return &mismatch{what: "PQ sub-vectors", want: q0.NumSubVectors, got: q.NumSubVectors}
		case q.Dimension != q0.Dimension:
			return &mismatch{what: "PQ dimension", want: q0.Dimension, got: q.Dimension}
		}
	case "rq":
		switch {
		case q.NumBits != q0.NumBits:
			return &mismatch{what: "RQ bits", want: q0.NumBits, got: q.NumBits}
		case rqCodeDim(q, s.dimension()) != rqCodeDim(q0, ref.dimension()):
			return &mismatch{what: "RQ code dimension", want: rqCodeDim(q0, ref.dimension()), got: rqCodeDim(q, s.dimension())}
		case q.RotationType != q0.RotationType:
			return &mismatch{what: "RQ rotation type", want: q0.RotationType, got: q.RotationType}
		case q.QueryEstimator != q0.QueryEstimator:
			return &mismatch{what: "RQ query estimator", want: q0.QueryEstimator, got: q.QueryEstimator}
		}
	}
	return nil
}

// compareModel compares the trained model of two segments of one kind
// (compareKind returned nil): IVF centroids, PQ codebook, SQ bounds, RQ
// rotation.
func compareModel(ref, s *source) *mismatch {
	if err := sameCentroids(ref, s); err != nil {
		return &mismatch{what: "IVF centroids", want: sameValue, got: err}
	}
	q0, q := ref.files.Quant, s.files.Quant
	switch ref.files.Type.Quantizer() {
	case "sq":
		if !closeEnough(q.SQBounds.Start, q0.SQBounds.Start) || !closeEnough(q.SQBounds.End, q0.SQBounds.End) {
			return &mismatch{what: "SQ bounds", want: fmt.Sprintf("[%g, %g]", q0.SQBounds.Start, q0.SQBounds.End),
				got: fmt.Sprintf("[%g, %g]", q.SQBounds.Start, q.SQBounds.End), sqBounds: true}
		}
	case "pq":
		if err := sameTensor(ref.codebook, s.codebook); err != nil {
			return &mismatch{what: "PQ codebook", want: sameValue, got: err}
		}
	case "rq":
		if !bytes.Equal(rawOrNull(q.Raw["fast_rotation_signs"]), rawOrNull(q0.Raw["fast_rotation_signs"])) {
			return &mismatch{what: "RQ rotation (fast_rotation_signs)", want: sameValue, got: "pin one rotation with build_rq_model"}
		}
		if (ref.rotation == nil) != (s.rotation == nil) {
			return &mismatch{what: "RQ rotation matrix", want: ref.rotation != nil, got: s.rotation != nil}
		}
		if ref.rotation != nil {
			if err := sameTensor(ref.rotation, s.rotation); err != nil {
				return &mismatch{what: "RQ rotation matrix", want: sameValue, got: err}
			}
		}
	}
	return nil
}

// sqNote describes a re-quantization: which inputs' bounds moved to which
// union.
func sqNote(srcs []*source, m *model) string {
	var moved []string
	for _, s := range srcs {
		b := s.files.Quant.SQBounds
		if !closeEnough(b.Start, m.sqLo) || !closeEnough(b.End, m.sqHi) {
			moved = append(moved, fmt.Sprintf("%s [%g, %g]", s.uuid, b.Start, b.End))
		}
	}
	return fmt.Sprintf("IVF_SQ inputs have different bounds: re-quantized %d of %d inputs to the union [%g, %g] (%s)",
		len(moved), len(srcs), m.sqLo, m.sqHi, strings.Join(moved, ", "))
}

func closeEnough(a, b float64) bool {
	return a == b || math.Abs(a-b) <= centroidTolerance*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// sameCentroids compares two segments' IVF centroids: the same, or (IVF
// kinds without a graph) one a prefix of the other. A model extended with
// centroids where the data went (train.Extend) keeps the partitions it
// had, so a segment encoded before the extension is a segment of the
// extended model whose new partitions are empty: its rows' partitions,
// residuals and codes are unchanged. HNSW graphs are per partition of one
// model and are not extended.
func sameCentroids(ref, s *source) error {
	a, b := ref.files.Centroids(), s.files.Centroids()
	if a == nil || b == nil || ref.files.Type.HNSW() || len(a.Shape) != 2 || len(b.Shape) != 2 ||
		a.Shape[0] == b.Shape[0] || a.Shape[1] != b.Shape[1] || a.DType != b.DType {
		return sameTensor(a, b)
	}
	short, long := a, b
	if b.Shape[0] < a.Shape[0] {
		short, long = b, a
	}
	head := &ivf.Tensor{DType: long.DType, Shape: []uint32{short.Shape[0], long.Shape[1]}, Data: long.Data[:len(short.Data)]}
	if err := sameTensor(short, head); err != nil {
		return fmt.Errorf("%d centroids vs %d, and the first %d differ: %w", b.Shape[0], a.Shape[0], short.Shape[0], err)
	}
	return nil
}

// widen makes every source's partition table as long as the widest
// source's model (sources encoded before an extension have its first
// partitions; the rest are empty in them) and returns that model's
// centroids.
func widen(srcs []*source) (*ivf.Tensor, int) {
	wide := srcs[0]
	for _, s := range srcs[1:] {
		if s.files.NumPartitions() > wide.files.NumPartitions() {
			wide = s
		}
	}
	n := wide.files.NumPartitions()
	for _, s := range srcs {
		iv := s.files.IVF
		if len(iv.Lengths) >= n {
			continue
		}
		var total uint64
		if k := len(iv.Lengths); k > 0 {
			total = iv.Offsets[k-1] + uint64(iv.Lengths[k-1])
		}
		padded := &ivf.Model{Centroids: wide.files.Centroids(), Loss: iv.Loss,
			Lengths: append(slices.Clip(iv.Lengths), make([]uint32, n-len(iv.Lengths))...),
			Offsets: append(slices.Clip(iv.Offsets), make([]uint64, n-len(iv.Offsets))...)}
		for p := len(iv.Lengths); p < n; p++ {
			padded.Offsets[p] = total
		}
		f := *s.files // the cached Files stay as they were
		f.IVF = padded
		s.files = &f
	}
	return wide.files.Centroids(), n
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
	if a == b {
		return nil // one interned tensor (ivf's segment cache)
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

// FragReuseIndexName is the system index a compaction with
// defer_index_remap leaves behind: it maps the rows of the fragments the
// compaction rewrote to their new addresses, and pylance reads every other
// index's segments through it until its own optimize applies the map.
const FragReuseIndexName = fragreuse.IndexName

// compactedTest says which fragments a compaction with defer_index_remap
// rewrote, from the version's fragment reuse index (nil: it has none),
// read from st when pylance moved its content to a file. A map this
// cannot read counts every fragment as rewritten: a gone fragment is then
// refused rather than its rows dropped.
func compactedTest(ctx context.Context, st storage.Store, snap *table.Snapshot) func(uint32) bool {
	if snap == nil || fragreuse.Find(snap) == nil {
		return nil
	}
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil || m == nil {
		return func(uint32) bool { return true }
	}
	return m.Compacted
}

// movedView returns metas with the fragment bitmap of every segment that
// names fragments a compaction with defer_index_remap rewrote pointed at
// the fragments that replaced them, as pylance's optimize does before it
// merges: the segment's rows stay at their old addresses, which the merge
// moves through the fragment reuse index (remapGuard; a ZONEMAP or
// BLOOMFILTER merge builds the new fragments' zones instead,
// zonesOfMoved). Segments whose rewritten fragments do not make whole
// rewrite groups (a merged segment would claim fragments holding rows it
// never had; pylance refuses them too) are left as they are, for
// refuseDeferredRemap. The entries in metas are not modified.
func movedView(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata) []*pb.IndexMetadata {
	if snap == nil || snap.HasStableRowIDs() || fragreuse.Find(snap) == nil {
		return metas
	}
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil || m == nil {
		return metas
	}
	current := currentFragments(snap)
	out, cloned := metas, false
	for i, im := range metas {
		ids, ok, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		if err != nil || !ok || !slices.ContainsFunc(ids, func(f uint32) bool { return !current(f) && m.Compacted(f) }) {
			continue
		}
		moved, complete := m.NewFragments(ids)
		if !complete {
			continue
		}
		bm, err := table.EncodeFragmentBitmap(moved)
		if err != nil {
			continue
		}
		if !cloned {
			out, cloned = slices.Clone(metas), true
		}
		c := proto.Clone(im).(*pb.IndexMetadata)
		c.FragmentBitmap = bm
		out[i] = c
	}
	return out
}

// CoveredFragments returns the fragments the segments of index name cover
// as merges see them (movedView: fragments a deferred compaction rewrote
// count as the ones that replaced them), ascending: the fragments a build
// of new rows must leave alone.
func CoveredFragments(ctx context.Context, st storage.Store, snap *table.Snapshot, name string) ([]uint32, error) {
	var out []uint32
	for _, im := range movedView(ctx, st, snap, snap.Indices) {
		if im.GetName() != name {
			continue
		}
		ids, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, fmt.Errorf("segment %s of index %q: %w", table.IndexUUID(im), name, err)
		}
		out = append(out, ids...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// refuseDeferredRemap refuses segment im, covering fragments ids, when it
// names a fragment that is gone because a compaction with
// defer_index_remap rewrote it: its rows live on in fragments it does not
// cover, and a merged segment claiming those would need the whole rewrite
// group (errkind.Unsupported, naming the remedy: pylance's optimize
// points such segments' bitmaps at the new fragments, without rewriting
// them, after which remapGuard moves their rows in our merges). The rows
// of a fragment gone otherwise (deleted whole) are gone, and merges drop
// them.
func refuseDeferredRemap(compacted func(uint32) bool, im *pb.IndexMetadata, ids []uint32, current func(uint32) bool) error {
	if compacted == nil {
		return nil
	}
	for _, f := range ids {
		if !current(f) && compacted(f) {
			return fmt.Errorf("%w: segment %s of index %q covers fragment %d, which a compaction with defer_index_remap rewrote, and not the fragments that replaced it: "+
				"pylance's optimize_indices(index_names=[%q]) points the segments at them (after which merges here move their rows through the fragment reuse index, %s), "+
				"or with num_indices_to_merge=N merges them through it",
				errkind.Unsupported, table.IndexUUID(im), im.GetName(), f, im.GetName(), FragReuseIndexName)
		}
	}
	return nil
}

// currentFragments is a membership test of the version's fragment ids.
func currentFragments(snap *table.Snapshot) func(uint32) bool {
	set := snap.FragmentSet()
	return func(f uint32) bool { return set[uint64(f)] }
}

// remapGuard watches a merge for rows of fragments that a compaction with
// defer_index_remap rewrote: rows whose addresses only the fragment reuse
// index maps (pylance's optimize points the fragment bitmaps of segments
// built before such a compaction at the new fragments, and leaves their
// row addresses to the map). Where the merge applies the map (m set: the
// merges of BTREE, BITMAP, LABEL_LIST, NGRAM, INVERTED and vector
// segments), such rows move to their new addresses; a ZONEMAP or
// BLOOMFILTER merge drops their zones where it built those of the new
// fragments from the data (zonesOfMoved). Elsewhere a merge would drop
// them as stale and lose every row of such a segment, so it is refused
// instead (err).
type remapGuard struct {
	present   map[uint64]bool   // nil: no fragment reuse index, nothing to watch
	compacted func(uint32) bool // of the gone fragments, those rewritten
	m         *fragreuse.Map    // the map, where the merge applies it
	moves     map[uint32]bool   // with m: the gone fragments it rewrote
	hit       atomic.Uint64     // the first address refused, plus one
}

func newRemapGuard(ctx context.Context, st storage.Store, snap *table.Snapshot) *remapGuard {
	g, _ := guardAndMap(ctx, st, snap)
	return g
}

// newRowRemap is newRemapGuard for a merge that applies the map: the rows
// of rewritten fragments move (the map read from st when its content is in
// a file). A map that does not read leaves the guard refusing them.
func newRowRemap(ctx context.Context, st storage.Store, snap *table.Snapshot) *remapGuard {
	g, m := guardAndMap(ctx, st, snap)
	if m != nil {
		g.m, g.moves = m, map[uint32]bool{}
		for _, f := range m.Rewritten() {
			g.moves[f] = !g.present[uint64(f)]
		}
	}
	return g
}

// guardAndMap is a guard that watches for rows of rewritten fragments,
// and the map it read (nil: none, or one that does not read, whose guard
// counts every gone fragment as rewritten, as compactedTest does).
func guardAndMap(ctx context.Context, st storage.Store, snap *table.Snapshot) (*remapGuard, *fragreuse.Map) {
	g := &remapGuard{}
	if snap.HasStableRowIDs() || fragreuse.Find(snap) == nil {
		return g, nil
	}
	g.present = snap.FragmentSet()
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil || m == nil {
		g.compacted = func(uint32) bool { return true }
		return g, nil
	}
	g.compacted = m.Compacted
	return g, m
}

// moved reports whether the rows of fragment f live on at other
// addresses, where the merge maps them.
func (g *remapGuard) moved(f uint32) bool {
	return g != nil && g.moves[f]
}

// gone reports whether the row at addr is of a fragment that a compaction
// rewrote, where the merge does not map it, and notes it.
func (g *remapGuard) gone(addr uint64) bool {
	if g == nil || g.present == nil || g.m != nil || g.present[addr>>32] || !g.compacted(uint32(addr>>32)) {
		return false
	}
	g.hit.CompareAndSwap(0, addr+1)
	return true
}

// wrap is keep (nil: every row stays), watched: a row of a rewritten
// fragment stays where its new address does (keep sees new addresses).
func (g *remapGuard) wrap(keep func(uint64) bool) func(uint64) bool {
	if g.present == nil {
		return keep
	}
	return func(addr uint64) bool {
		if g.moved(uint32(addr >> 32)) {
			n, ok := g.m.Remap(addr)
			return ok && (keep == nil || keep(n))
		}
		if g.gone(addr) {
			return false
		}
		return keep == nil || keep(addr)
	}
}

// remap is where a kept row lives now (nil: every row where it is).
func (g *remapGuard) remap() func(uint64) uint64 {
	if g.m == nil {
		return nil
	}
	return func(addr uint64) uint64 {
		if g.moved(uint32(addr >> 32)) {
			addr, _ = g.m.Remap(addr)
		}
		return addr
	}
}

// movedTest is moved where the merge maps rows (nil: nothing moves).
func (g *remapGuard) movedTest() func(uint32) bool {
	if g.m == nil {
		return nil
	}
	return g.moved
}

// err is errkind.Unsupported once a row of a gone fragment was seen: it
// explains a failure of the merge too (the coverage check finds a covered
// fragment without rows).
func (g *remapGuard) err() error {
	a := g.hit.Load()
	if a == 0 {
		return nil
	}
	a--
	return fmt.Errorf("%w: the merge read row address %d of fragment %d, which a compaction with defer_index_remap rewrote, "+
		"and found no new place for it (the fragment reuse index %s did not read, or the segments do not claim the fragments that replaced it); "+
		"pylance's optimize_indices(index_names=[...], num_indices_to_merge=N) merges the index through that map; nothing was written", errkind.Unsupported, a, a>>32, FragReuseIndexName)
}
