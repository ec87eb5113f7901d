// Package search searches one IVF vector index segment the way Lance's IVF
// search does (rust/lance/src/index/vector/ivf/v2.rs and the quantizers'
// distance calculators in lance-index): the query is prepared (cosine:
// normalised), the nprobes partitions whose centroids are nearest are
// probed, and each probed partition's rows are scored with the distance
// the segment's quantizer estimates from its codes; the k best over every
// probed partition are the answer. It exists so that a segment's recall
// can be estimated without pylance (lance-segmerge verify), and so that
// the estimate is the one a pylance query on that segment would see.
//
// Distances, as pylance 14 computes them (the tests compare them with the
// _distance pylance returns):
//
//	kind  l2 / cosine (normalised query)              dot
//	FLAT  |q-v|² (cosine: half of it, 1 - cos)        1 - q·v
//	SQ    Σ(c_q - c_v)²·(hi-lo)²/255²                 1 - q·v̂, v̂ = lo + c·(hi-lo)/255
//	      (c_q: the query scaled to u8 as codes are)
//	PQ    Σ_s T_s[c_s], T_s[j] = |r_s - C_s[j]|²,     Σ_s (1 - q_s·C_s[j]) - (nsub-1)
//	      r = q - centroid (4-bit: the table quantized
//	      to u8 past the first max(200, k) rows)
//	RQ    RaBitQ estimate from the binary (and extended) codes and each
//	      row's factors, with the partition's query-to-centroid distance
//
// Safe for concurrent use once built, except a Query and its scratch,
// which belong to one goroutine.
package search

import (
	"fmt"
	"math"
	"sort"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// DefaultNProbes is Lance's default number of partitions a query probes.
const DefaultNProbes = 20

// Index is a segment's model, prepared for search.
type Index struct {
	m   *encode.Model
	enc *encode.Encoder
	// dot: Lance's dot distance 1 - a·b; otherwise squared L2 (cosine
	// after normalisation).
	dot   bool
	k     int
	dim   int
	quant string // "flat", "sq", "pq" or "rq"
	// PQ
	nsub, nbits, subDim int
	// RQ
	exBits       int
	rawQuery     bool
	rotCentroids []float32 // raw query: the rotated centroids
}

// New prepares a model for search. errkind.Unsupported for HNSW models.
func New(m *encode.Model) (*Index, error) {
	if m.Type.HNSW() {
		return nil, fmt.Errorf("%w: search: %s segments (HNSW graphs) are not searched here", errkind.Unsupported, m.Type)
	}
	enc, err := encode.NewEncoder(m)
	if err != nil {
		return nil, err
	}
	ix := &Index{m: m, enc: enc, dot: m.Metric == encode.Dot, k: m.NumPartitions(), dim: m.Dim, quant: m.Type.Quantizer()}
	switch {
	case m.PQ != nil:
		ix.nsub, ix.nbits, ix.subDim = m.PQ.NumSubVectors, m.PQ.NumBits, m.Dim/m.PQ.NumSubVectors
	case m.RQ != nil:
		ix.exBits = m.RQ.NumBits - 1
		ix.rawQuery = m.RQ.QueryEstimator == encode.RawQuery
		if ix.rawQuery {
			ix.rotCentroids = make([]float32, len(m.Centroids))
			for p := 0; p < ix.k; p++ {
				enc.Rotate(ix.rotCentroids[p*m.Dim:(p+1)*m.Dim], m.Centroids[p*m.Dim:(p+1)*m.Dim])
			}
		}
	}
	return ix, nil
}

// Model is the index's model.
func (ix *Index) Model() *encode.Model { return ix.m }

// NumPartitions is the number of IVF partitions.
func (ix *Index) NumPartitions() int { return ix.k }

// Query is one query vector prepared against an index. Not safe for
// concurrent use.
type Query struct {
	ix *Index
	// v is the query as searched: normalised under cosine.
	v []float32
	// cdist is the distance from the query to every centroid (squared L2,
	// or 1 - q·c for dot).
	cdist []float32
	// RQ raw query: the rotated query, its sum and the sums of its
	// 4-dimension segments for every bit pattern.
	rot    []float32
	sumQ   float32
	table  []float32
	qtable quantTable
	// scratch
	resTable      []float32
	resid, rotTmp []float32
	pqTable       []float32
}

// NewQuery prepares a query vector (copied). It reports false for a
// vector the index cannot search: wrong dimension, non-finite values, or
// the zero vector under cosine.
func (ix *Index) NewQuery(v []float32) (*Query, bool) {
	if len(v) != ix.dim {
		return nil, false
	}
	q := &Query{ix: ix, v: append([]float32(nil), v...)}
	for _, x := range q.v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, false
		}
	}
	if !ix.enc.Prepare(q.v) {
		return nil, false
	}
	c := ix.m.Centroids
	q.cdist = make([]float32, ix.k)
	for p := range q.cdist {
		cp := c[p*ix.dim : (p+1)*ix.dim]
		if ix.dot {
			q.cdist[p] = 1 - vecmath.Dot(q.v, cp)
		} else {
			q.cdist[p] = vecmath.L2Sq(q.v, cp)
		}
	}
	if ix.quant == "rq" && ix.rawQuery {
		q.rot = make([]float32, ix.dim)
		ix.enc.Rotate(q.rot, q.v)
		q.sumQ, q.table = rqTable(q.rot, q.table)
		q.qtable = quantizeTable(q.table)
	}
	return q, true
}

// Vector is the query as searched (normalised under cosine).
func (q *Query) Vector() []float32 { return q.v }

// Probe returns the nprobes partitions nearest to the query, nearest
// first (ties: lower partition first).
func (q *Query) Probe(nprobes int) []int {
	order := make([]int, len(q.cdist))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return less(q.cdist[order[a]], q.cdist[order[b]]) })
	return order[:min(max(nprobes, 0), len(order))]
}

// less orders distances with NaN last.
func less(a, b float32) bool {
	if math.IsNaN(float64(a)) {
		return false
	}
	return math.IsNaN(float64(b)) || a < b
}

// CodeWidth is the width in bytes of one row of the segment's code column
// (FLAT: the float32 vector).
func (ix *Index) CodeWidth() int {
	switch ix.quant {
	case "flat":
		return 4 * ix.dim
	case "sq":
		return ix.dim
	case "pq":
		return ix.nsub * ix.nbits / 8
	case "rq":
		return encode.RQCodeBytes(ix.dim)
	}
	return 0
}

// CodeColumn names the segment's code column.
func (ix *Index) CodeColumn() string {
	switch ix.quant {
	case "flat":
		return encode.ColFlat
	case "sq":
		return encode.ColSQ
	case "pq":
		return encode.ColPQ
	}
	return encode.ColRQ
}

// Layout names the code layout transformation of the index type ("" when
// codes are stored row-major whatever the flags say).
func Layout(t ivf.IndexType) string {
	switch t.Quantizer() {
	case "pq":
		return "transposed"
	case "rq":
		return "packed"
	}
	return ""
}
