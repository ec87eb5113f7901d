package modelio

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Spec is a model's scalars, as JSON, with its arrays given as the
// addresses of ArrowArray/ArrowSchema pairs.
type Spec struct {
	IndexType        string    `json:"index_type"`
	Metric           string    `json:"metric"`
	Dim              int       `json:"dim"`
	NumSubVectors    int       `json:"num_sub_vectors,omitempty"`
	NumBits          int       `json:"num_bits,omitempty"`
	PQDotAssignment  string    `json:"pq_dot_assignment,omitempty"`
	SQBounds         []float64 `json:"sq_bounds,omitempty"`
	RQRotation       string    `json:"rq_rotation,omitempty"`
	RQSigns          []int     `json:"rq_signs,omitempty"`
	RQQueryEstimator string    `json:"rq_query_estimator,omitempty"`
	Arrays           ArrayPtrs `json:"arrays,omitempty"`
}

// ArrayPtrs names a model's arrays ("centroids", "codebook", "rotation"),
// each as [ArrowArray address, ArrowSchema address].
type ArrayPtrs map[string][2]uint64

// ParseSpec decodes a Spec; errkind.InvalidInput on bad JSON.
func ParseSpec(s string) (*Spec, error) {
	sp := &Spec{}
	if err := json.Unmarshal([]byte(s), sp); err != nil {
		return nil, fmt.Errorf("%w: model: %w", errkind.InvalidInput, err)
	}
	return sp, nil
}

// Import builds a model from a spec, importing its arrays through the C
// Data Interface (every array in the spec is taken over, and released on
// error too). The model may point into the exporter's buffers: call
// release once the model is no longer used. The model is validated.
func Import(sp *Spec) (_ *encode.Model, release func(), err error) {
	var imported []*Matrix
	releaseAll := func() {
		for _, m := range imported {
			m.Release()
		}
	}
	// Every array is imported (and so owned) first, whatever fails later.
	get := map[string]*Matrix{}
	var firstErr error
	for _, name := range []string{"centroids", "codebook", "rotation"} {
		p, ok := sp.Arrays[name]
		if !ok {
			continue
		}
		m, err := ImportMatrix(name, uintptr(p[0]), uintptr(p[1]), sp.Dim)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		imported = append(imported, m)
		get[name] = m
	}
	for name, p := range sp.Arrays {
		if name != "centroids" && name != "codebook" && name != "rotation" {
			// Unknown arrays are still released.
			if m, err := ImportMatrix(name, uintptr(p[0]), uintptr(p[1]), 0); err == nil {
				m.Release()
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: model: unknown array %q", errkind.InvalidInput, name)
			}
		}
	}
	defer func() {
		if err != nil {
			releaseAll()
		}
	}()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	metric, err := encode.ParseMetric(sp.Metric)
	if err != nil {
		return nil, nil, err
	}
	m := &encode.Model{Type: ivf.IndexType(sp.IndexType), Metric: metric, Dim: sp.Dim}
	c := get["centroids"]
	if c == nil {
		return nil, nil, fmt.Errorf("%w: model: no IVF centroids", errkind.InvalidInput)
	}
	if sp.Dim <= 0 {
		m.Dim = c.Cols
	}
	m.Centroids = c.Values
	switch m.Type {
	case ivf.IVFPQ, ivf.IVFHNSWPQ:
		cb := get["codebook"]
		if cb == nil {
			return nil, nil, fmt.Errorf("%w: model: an IVF_PQ model needs a PQ codebook", errkind.InvalidInput)
		}
		m.PQ = &encode.PQParams{NumSubVectors: sp.NumSubVectors, NumBits: sp.NumBits, Codebook: cb.Values}
		switch sp.PQDotAssignment {
		case "", "l2":
		case "inner_product":
			m.PQ.DotByInnerProduct = true
		default:
			return nil, nil, fmt.Errorf("%w: model: pq_dot_assignment %q (want l2 or inner_product)", errkind.InvalidInput, sp.PQDotAssignment)
		}
		if m.PQ.NumBits == 0 {
			m.PQ.NumBits = 8
		}
	case ivf.IVFSQ, ivf.IVFHNSWSQ:
		if len(sp.SQBounds) != 2 {
			return nil, nil, fmt.Errorf("%w: model: an IVF_SQ model needs sq_bounds [lo, hi]", errkind.InvalidInput)
		}
		m.SQ = &encode.SQParams{NumBits: sp.NumBits, Lo: sp.SQBounds[0], Hi: sp.SQBounds[1]}
		if m.SQ.NumBits == 0 {
			m.SQ.NumBits = 8
		}
	case ivf.IVFRQ:
		r := &encode.RQParams{NumBits: sp.NumBits, Rotation: sp.RQRotation, QueryEstimator: sp.RQQueryEstimator}
		if r.QueryEstimator == "" {
			r.QueryEstimator = encode.RawQuery
		}
		if r.Rotation == "" {
			r.Rotation = encode.RotationFast
		}
		for _, s := range sp.RQSigns {
			if s < 0 || s > 255 {
				return nil, nil, fmt.Errorf("%w: model: RQ sign byte %d", errkind.InvalidInput, s)
			}
			r.Signs = append(r.Signs, byte(s))
		}
		if mat := get["rotation"]; mat != nil {
			r.Matrix = mat.Values
		}
		m.RQ = r
	}
	for name := range get {
		if name == "codebook" && m.PQ == nil || name == "rotation" && m.RQ == nil {
			return nil, nil, fmt.Errorf("%w: model: a %s model takes no %s", errkind.InvalidInput, m.Type, name)
		}
	}
	if err := m.Validate(); err != nil {
		return nil, nil, err
	}
	return m, releaseAll, nil
}

// SpecOf returns a model's scalars (its arrays are exported separately).
func SpecOf(m *encode.Model) *Spec {
	sp := &Spec{IndexType: string(m.Type), Metric: string(m.Metric), Dim: m.Dim}
	switch {
	case m.PQ != nil:
		sp.NumSubVectors, sp.NumBits = m.PQ.NumSubVectors, m.PQ.NumBits
		if m.PQ.DotByInnerProduct {
			sp.PQDotAssignment = "inner_product"
		}
	case m.SQ != nil:
		sp.NumBits, sp.SQBounds = m.SQ.NumBits, []float64{m.SQ.Lo, m.SQ.Hi}
	case m.RQ != nil:
		sp.NumBits, sp.RQRotation, sp.RQQueryEstimator = m.RQ.NumBits, m.RQ.Rotation, m.RQ.QueryEstimator
		sp.RQSigns = make([]int, len(m.RQ.Signs))
		for i, s := range m.RQ.Signs {
			sp.RQSigns[i] = int(s)
		}
	}
	return sp
}

// Export exports the model's arrays into the C structs named in ptrs
// ("centroids", and "codebook" or "rotation" when the model has one).
func Export(m *encode.Model, ptrs ArrayPtrs) error {
	out := map[string][3]any{"centroids": {m.Centroids, m.NumPartitions(), m.Dim}}
	if m.PQ != nil {
		out["codebook"] = [3]any{m.PQ.Codebook, 1 << m.PQ.NumBits, m.Dim}
	}
	if m.RQ != nil && m.RQ.Matrix != nil {
		out["rotation"] = [3]any{m.RQ.Matrix, m.Dim, m.Dim}
	}
	for name, v := range out {
		p, ok := ptrs[name]
		if !ok {
			return fmt.Errorf("%w: model: no ArrowArray given for %q", errkind.InvalidInput, name)
		}
		if err := ExportMatrix(v[0].([]float32), v[1].(int), v[2].(int), uintptr(p[0]), uintptr(p[1])); err != nil {
			return err
		}
	}
	return nil
}

// FromSegment reads the model of an existing index segment: its IVF
// centroids, metric and quantizer (PQ codebook, SQ bounds, RQ rotation), so
// that new segments built with it merge with the existing ones.
func FromSegment(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*encode.Model, error) {
	if im.BaseId != nil {
		return nil, fmt.Errorf("%w: segment %s lives under base path %d (shallow clones are not supported)", errkind.Unsupported, table.IndexUUID(im), im.GetBaseId())
	}
	f, err := ivf.OpenFiles(ctx, st, table.IndexDir(im), lancefile.Options{})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return FromFiles(ctx, f, table.IndexUUID(im))
}

// FromFiles reads the model of an opened segment (named uuid in errors),
// as FromSegment does.
func FromFiles(ctx context.Context, f *ivf.Files, uuid string) (*encode.Model, error) {
	metric, err := encode.ParseMetric(f.Distance)
	if err != nil {
		return nil, err
	}
	ct := f.Centroids()
	if ct == nil {
		return nil, fmt.Errorf("%w: segment %s stores no IVF centroids", errkind.Corrupt, uuid)
	}
	cv, ok := ct.Float32s()
	if !ok {
		return nil, fmt.Errorf("%w: segment %s: centroids of type %s", errkind.Unsupported, uuid, ct.DType)
	}
	m := &encode.Model{Type: f.Type, Metric: metric, Dim: ct.Cols(), Centroids: cv}
	q := f.Quant
	switch f.Type.Quantizer() {
	case "pq":
		var cb []float32
		var err error
		if q.CodebookPosition > 0 {
			cb, err = readTensor(ctx, f, q.CodebookPosition)
		} else {
			cb, err = inlineCodebook(f, q)
		}
		if err != nil {
			return nil, err
		}
		m.PQ = &encode.PQParams{NumSubVectors: q.NumSubVectors, NumBits: q.NBits, Codebook: cb}
	case "sq":
		if q.SQBounds == nil {
			return nil, fmt.Errorf("%w: segment %s has no SQ bounds", errkind.Corrupt, uuid)
		}
		m.SQ = &encode.SQParams{NumBits: q.NumBits, Lo: q.SQBounds.Start, Hi: q.SQBounds.End}
	case "rq":
		r := &encode.RQParams{NumBits: q.NumBits, Rotation: q.RotationType, QueryEstimator: q.QueryEstimator}
		for _, s := range q.FastRotationSigns {
			r.Signs = append(r.Signs, byte(s))
		}
		if r.Rotation == encode.RotationMatrix && q.RotateMatPosition != nil {
			if r.Matrix, err = readTensor(ctx, f, *q.RotateMatPosition); err != nil {
				return nil, err
			}
		}
		m.RQ = r
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("segment %s: %w", uuid, err)
	}
	return m, nil
}

func readTensor(ctx context.Context, f *ivf.Files, pos int) ([]float32, error) {
	if pos <= 0 || pos >= f.Aux.NumGlobalBuffers() {
		return nil, fmt.Errorf("%w: %s: global buffer %d of %d", errkind.Corrupt, f.Dir, pos, f.Aux.NumGlobalBuffers())
	}
	b, err := f.Aux.GlobalBuffer(ctx, pos)
	if err != nil {
		return nil, err
	}
	t, err := ivf.DecodeTensor(b)
	if err != nil {
		return nil, err
	}
	v, ok := t.Float32s()
	if !ok {
		return nil, fmt.Errorf("%w: %s: tensor of type %s", errkind.Unsupported, f.Dir, t.DType)
	}
	return v, nil
}

// inlineCodebook decodes the codebook Lance before 0.28 kept inline in the
// PQ metadata, as the bytes of a Tensor message in "codebook_tensor".
func inlineCodebook(f *ivf.Files, q *ivf.QuantizerMeta) ([]float32, error) {
	var raw []byte
	if err := json.Unmarshal(q.Raw["codebook_tensor"], &raw); err != nil || len(raw) == 0 {
		return nil, fmt.Errorf("%w: %s: PQ metadata has neither codebook_position nor codebook_tensor", errkind.Corrupt, f.Dir)
	}
	t, err := ivf.DecodeTensor(raw)
	if err != nil {
		return nil, err
	}
	v, ok := t.Float32s()
	if !ok {
		return nil, fmt.Errorf("%w: %s: codebook of type %s", errkind.Unsupported, f.Dir, t.DType)
	}
	return v, nil
}
