package encode

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Column names of a segment's auxiliary file. Part of the format.
const (
	ColRowID         = "_rowid"
	ColFlat          = "flat"
	ColSQ            = "__sq_code"
	ColPQ            = "__pq_code"
	ColRQ            = "_rabit_codes"
	ColRQAdd         = "__add_factors"
	ColRQScale       = "__scale_factors"
	ColRQError       = "__error_factors"
	ColRQExCodes     = "__blocked_ex_codes"
	ColRQExAdd       = "__add_factors_ex"
	ColRQExScale     = "__scale_factors_ex"
	ColRQLegacyExCod = "__ex_codes"
)

// Column is one code column of the auxiliary file (after _rowid).
type Column struct {
	Name     string
	Type     lancefile.DataType
	Nullable bool
}

// Width is the size of one row of the column in bytes.
func (c Column) Width() int { return c.Type.ValueBits() / 8 }

// Encoder encodes vectors with one model. It is safe for concurrent use;
// each goroutine needs its own Scratch.
type Encoder struct {
	m      *Model
	metric Metric // the metric after preparation: cosine is L2
	k      int
	cols   []Column
	// ivfSearch finds partitions; pqSearch the codes, one per sub-vector.
	ivfSearch *vecmath.Searcher
	pqSearch  []*vecmath.Searcher
	// PQ
	subDim int
	// half: float16 vectors (see NewHalfEncoder).
	half bool
	// RQ
	exBits       int
	rotCentroids []float32 // raw query: the rotated centroids
	rot          *rotator  // fast rotation, prepared
	centNormSq   []float32 // residual query, dot: ‖c‖²
}

// NewEncoder validates the model and prepares what encoding needs, for
// float32 vectors.
func NewEncoder(m *Model) (*Encoder, error) { return newEncoder(m, false) }

// NewHalfEncoder is NewEncoder for a float16 column. Lance computes in the
// column's type there: the model's centroids and codebook are float16
// (rounded here, a copy), a cosine vector is normalised in float32 and
// rounded to float16, PQ and RQ residuals are float16 differences, and
// IVF_FLAT rows are float16. Distances are float32 sums of the float16
// values.
func NewHalfEncoder(m *Model) (*Encoder, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	h := *m
	h.Centroids = halfCopy(m.Centroids)
	if m.PQ != nil {
		pq := *m.PQ
		pq.Codebook = halfCopy(pq.Codebook)
		h.PQ = &pq
	}
	return newEncoder(&h, true)
}

func halfCopy(v []float32) []float32 {
	out := slices.Clone(v)
	vecmath.RoundToHalf(out)
	return out
}

func newEncoder(m *Model, half bool) (*Encoder, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	e := &Encoder{m: m, metric: m.Metric.indexMetric(), k: m.NumPartitions(), half: half}
	e.ivfSearch = vecmath.NewSearcher(m.Centroids, m.Dim, e.distance())
	u8 := func(n int) lancefile.DataType { return lancefile.FixedSizeList(lancefile.KindUint8, n) }
	f32 := lancefile.Primitive(lancefile.KindFloat32)
	switch m.Type {
	case ivf.IVFFlat:
		elem := lancefile.KindFloat32
		if half {
			elem = lancefile.KindFloat16
		}
		e.cols = []Column{{ColFlat, lancefile.FixedSizeList(elem, m.Dim), false}}
	case ivf.IVFSQ:
		e.cols = []Column{{ColSQ, u8(m.Dim), true}}
	case ivf.IVFPQ:
		e.subDim = m.Dim / m.PQ.NumSubVectors
		e.cols = []Column{{ColPQ, u8(m.PQ.NumSubVectors * m.PQ.NumBits / 8), true}}
		dist := vecmath.DistL2
		if e.metric == Dot && m.PQ.DotByInnerProduct {
			dist = vecmath.DistDot
		}
		nc := 1 << m.PQ.NumBits
		for sv := 0; sv < m.PQ.NumSubVectors; sv++ {
			e.pqSearch = append(e.pqSearch, vecmath.NewSearcher(m.PQ.Codebook[sv*nc*e.subDim:(sv+1)*nc*e.subDim], e.subDim, dist))
		}
	case ivf.IVFRQ:
		r := m.RQ
		e.exBits = r.NumBits - 1
		if r.Rotation == RotationFast {
			e.rot = newRotator(m.Dim, r.Signs)
		}
		e.cols = []Column{{ColRQ, u8(RQCodeBytes(m.Dim)), true}, {ColRQAdd, f32, true}, {ColRQScale, f32, true}}
		if r.QueryEstimator == RawQuery {
			e.cols = append(e.cols, Column{ColRQError, f32, true})
			if e.exBits > 0 {
				e.cols = append(e.cols, Column{ColRQExCodes, u8(BlockedExCodeBytes(m.Dim, e.exBits)), true},
					Column{ColRQExAdd, f32, true}, Column{ColRQExScale, f32, true})
			}
			e.rotCentroids = make([]float32, len(m.Centroids))
			for p := 0; p < e.k; p++ {
				e.rotate(e.rotCentroids[p*m.Dim:(p+1)*m.Dim], m.Centroids[p*m.Dim:(p+1)*m.Dim])
			}
		} else if e.metric == Dot {
			e.centNormSq = make([]float32, e.k)
			for p := range e.centNormSq {
				e.centNormSq[p] = normSqSeq(m.Centroids[p*m.Dim : (p+1)*m.Dim])
			}
		}
	default:
		return nil, fmt.Errorf("%w: encode: index type %s", errkind.Unsupported, m.Type)
	}
	return e, nil
}

// Model is the encoder's model (for a float16 encoder, the model rounded
// to float16).
func (e *Encoder) Model() *Model { return e.m }

// Half reports whether the encoder is for float16 vectors.
func (e *Encoder) Half() bool { return e.half }

// distance is the IVF's distance: Lance's dot distance for dot, squared
// L2 otherwise (cosine vectors are normalised first).
func (e *Encoder) distance() vecmath.Distance {
	if e.metric == Dot {
		return vecmath.DistDot
	}
	return vecmath.DistL2
}

// Columns are the code columns, in the auxiliary file's order after _rowid.
func (e *Encoder) Columns() []Column { return e.cols }

// Scratch is per-goroutine working memory.
type Scratch struct {
	resid, rot []float32
	ex         exScratch
	exValues   []byte
	search     vecmath.SearchScratch
	dist       []float32
	codes      []int32
	dropped    []bool
}

// Prepare brings a vector to the space the index works in, in place:
// cosine vectors are divided by their norm (Lance: sequential float32 sum
// of squares, square root, division). It reports false for a vector Lance
// drops (a zero vector under cosine normalises to NaN).
func (e *Encoder) Prepare(v []float32) bool {
	if e.m.Metric != Cosine {
		return true
	}
	n := float32(math.Sqrt(float64(normSqSeq(v))))
	for i := range v {
		v[i] /= n
	}
	if e.half {
		vecmath.RoundToHalf(v)
	}
	return n != 0 && !math.IsInf(float64(n), 0) && !math.IsNaN(float64(n))
}

// normSqSeq is Σ v² in dimension order (Lance's scalar loops).
func normSqSeq(v []float32) float32 {
	var s float32
	for _, x := range v {
		s += float32(x * x)
	}
	return s
}

// Assign returns a prepared vector's IVF partition and its distance to the
// centroid (squared L2, or 1 - dot for dot), summed in Lance's order, the
// first minimum winning ties as in Lance; -1 when no distance is a finite
// number. Encode assigns whole batches faster.
func (e *Encoder) Assign(v []float32) (int, float32) {
	var idx [1]int32
	var dist [1]float32
	var sc vecmath.SearchScratch
	e.ivfSearch.Nearest(v, len(v), 1, idx[:], dist[:], &sc)
	return int(idx[0]), dist[0]
}

func (e *Encoder) rotate(out, v []float32) {
	if e.m.RQ.Rotation == RotationMatrix {
		matrixRotate(out, v, e.m.RQ.Matrix)
		return
	}
	e.rot.rotate(out, v)
}

// Encode encodes n = len(parts) vectors (n×Dim values, prepared in place).
// parts[i] receives row i's partition, or -1 for a row Lance drops; out[c]
// (len n × Columns()[c].Width()) receives row i's bytes of column c at
// i×width.
func (e *Encoder) Encode(s *Scratch, vectors []float32, parts []int32, out [][]byte) {
	dim := e.m.Dim
	n := len(parts)
	if n == 0 {
		return
	}
	s.dropped = slices.Grow(s.dropped[:0], n)[:n]
	for i := range parts {
		v := vectors[i*dim : (i+1)*dim]
		if s.dropped[i] = !e.Prepare(v); s.dropped[i] {
			clear(v) // not searched: its values are not numbers
		}
	}
	s.dist = slices.Grow(s.dist[:0], n)[:n]
	e.ivfSearch.Nearest(vectors, dim, n, parts, s.dist, &s.search)
	for i, p := range parts {
		if s.dropped[i] {
			parts[i] = -1
		}
		if parts[i] < 0 {
			for c, col := range e.cols {
				w := col.Width()
				clear(out[c][i*w : (i+1)*w])
			}
			continue
		}
		if e.m.Type != ivf.IVFPQ {
			e.encodeRow(s, vectors[i*dim:(i+1)*dim], int(p), s.dist[i], out, i)
		}
	}
	if e.m.Type == ivf.IVFPQ {
		e.encodePQBatch(s, vectors, parts, out[0])
	}
}

func putF32(b []byte, x float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(x)) }

func (e *Encoder) residual(s *Scratch, v []float32, p int) []float32 {
	dim := e.m.Dim
	s.resid = slices.Grow(s.resid[:0], dim)[:dim]
	c := e.m.Centroids[p*dim : (p+1)*dim]
	for j := range s.resid {
		s.resid[j] = v[j] - c[j]
	}
	if e.half {
		vecmath.RoundToHalf(s.resid)
	}
	return s.resid
}

func (e *Encoder) encodeRow(s *Scratch, v []float32, p int, dist float32, out [][]byte, i int) {
	dim := e.m.Dim
	switch e.m.Type {
	case ivf.IVFFlat:
		if e.half {
			row := out[0][i*2*dim : (i+1)*2*dim]
			for j, x := range v {
				binary.LittleEndian.PutUint16(row[2*j:], vecmath.Float32ToHalf(x))
			}
			return
		}
		row := out[0][i*4*dim : (i+1)*4*dim]
		for j, x := range v {
			putF32(row[4*j:], x)
		}
	case ivf.IVFSQ:
		lo, hi := e.m.SQ.Lo, e.m.SQ.Hi
		row := out[0][i*dim : (i+1)*dim]
		if lo == hi {
			clear(row)
			return
		}
		r := hi - lo
		for j, x := range v {
			row[j] = saturatingU8((float64(x) - lo) * 255 / r)
		}
	case ivf.IVFRQ:
		e.encodeRQ(s, v, p, dist, out, i)
	}
}

// saturatingU8 is Rust's `f64 as u8`: truncation toward zero, saturating,
// NaN to 0.
func saturatingU8(x float64) byte {
	switch {
	case !(x > 0):
		return 0
	case x >= 255:
		return 255
	}
	return byte(x)
}

// encodePQBatch writes the PQ codes of a batch of assigned rows: for each
// sub-vector of the residual (the raw vector for dot), the codebook entry
// nearest in squared L2, or, for dot with DotByInnerProduct, of largest
// inner product (first minimum of 1 - dot), as pylance encodes with an
// injected codebook; entry 0 when no distance is a number. 4-bit codes
// pack two sub-vectors per byte, the even one in the low nibble. Rows not
// assigned (-1) are left as they are.
func (e *Encoder) encodePQBatch(s *Scratch, vectors []float32, parts []int32, dst []byte) {
	pq, dim, n := e.m.PQ, e.m.Dim, len(parts)
	x := vectors
	if e.metric != Dot {
		s.resid = slices.Grow(s.resid[:0], n*dim)[:n*dim]
		x = s.resid
		for i, p := range parts {
			r := x[i*dim : (i+1)*dim]
			if p < 0 {
				clear(r)
				continue
			}
			c := e.m.Centroids[int(p)*dim : (int(p)+1)*dim]
			for j, v := range vectors[i*dim : (i+1)*dim] {
				r[j] = v - c[j]
			}
			if e.half {
				vecmath.RoundToHalf(r)
			}
		}
	}
	w := e.cols[0].Width()
	s.codes = slices.Grow(s.codes[:0], n)[:n]
	for sv := 0; sv < pq.NumSubVectors; sv++ {
		e.pqSearch[sv].Nearest(x[sv*e.subDim:], dim, n, s.codes, nil, &s.search)
		for i, c := range s.codes {
			if parts[i] < 0 {
				continue
			}
			code := byte(max(c, 0))
			switch {
			case pq.NumBits == 8:
				dst[i*w+sv] = code
			case sv%2 == 0:
				dst[i*w+sv/2] = code
			default:
				dst[i*w+sv/2] |= code << 4
			}
		}
	}
}

func (e *Encoder) encodeRQ(s *Scratch, v []float32, p int, dist float32, out [][]byte, i int) {
	dim := e.m.Dim
	res := e.residual(s, v, p)
	var normSq float32
	if e.metric == Dot {
		normSq = normSqSeq(res)
	} else {
		normSq = dist // ‖v-c‖², the assignment's distance
	}
	s.rot = slices.Grow(s.rot[:0], dim)[:dim]
	e.rotate(s.rot, res)
	cw := RQCodeBytes(dim)
	packSignBits(out[0][i*cw:(i+1)*cw], s.rot)
	if e.m.RQ.QueryEstimator == ResidualQuery {
		var absSum float32
		for _, x := range s.rot {
			absSum += float32(math.Abs(float64(x)))
		}
		ip := absSum / float32(math.Sqrt(float64(dim)))
		add, scale := normSq, ratio(float32(-2*normSq), ip)
		if e.metric == Dot {
			add = dist + e.centNormSq[p]
			scale = -ratio(normSq, ip)
		}
		putF32(out[1][4*i:], add)
		putF32(out[2][4*i:], scale)
		return
	}
	var exValues []byte
	var exDot float32
	if e.exBits > 0 {
		s.exValues = slices.Grow(s.exValues[:0], dim)[:dim]
		exValues = s.exValues
		w := e.cols[4].Width()
		exDot = quantizeEx(&s.ex, s.rot, e.exBits, out[4][i*w:(i+1)*w], exValues)
	}
	f := rawQueryFactors(e.metric, normSq, s.rot, e.rotCentroids[p*dim:(p+1)*dim], exValues, exDot, e.exBits)
	putF32(out[1][4*i:], f.add)
	putF32(out[2][4*i:], f.scale)
	putF32(out[3][4*i:], f.errf)
	if e.exBits > 0 {
		putF32(out[5][4*i:], f.exAdd)
		putF32(out[6][4*i:], f.exScale)
	}
}
