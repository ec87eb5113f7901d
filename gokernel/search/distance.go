package search

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// flat4BitRows is how many rows of a 4-bit PQ partition Lance scores with
// the exact table before it quantizes the table to u8 (at least k).
const flat4BitRows = 200

// Distances scores every row of part against the query as Lance's search
// does, into dst (grown as needed; len = part.Len()). k is the query's k
// (4-bit PQ scores its first max(200, k) rows exactly).
func (q *Query) Distances(part *Partition, k int, dst []float32) []float32 {
	n := part.Len()
	dst = slices.Grow(dst[:0], n)[:n]
	if n == 0 {
		return dst
	}
	switch q.ix.quant {
	case "flat":
		q.flat(part, dst)
	case "sq":
		q.sq(part, dst)
	case "pq":
		q.pq(part, k, dst)
	case "rq":
		q.rq(part, dst)
	}
	return dst
}

func f32At(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

func (q *Query) flat(part *Partition, dst []float32) {
	dim := q.ix.dim
	row := make([]float32, dim)
	for i := range dst {
		raw := part.Codes[i*4*dim : (i+1)*4*dim]
		for j := range row {
			row[j] = f32At(raw, j)
		}
		switch {
		case q.ix.dot:
			dst[i] = 1 - vecmath.Dot(q.v, row)
		case q.ix.m.Metric == encode.Cosine:
			// 1 - cos of the normalised vectors: half their squared L2.
			dst[i] = vecmath.L2Sq(q.v, row) / 2
		default:
			dst[i] = vecmath.L2Sq(q.v, row)
		}
	}
}

// sqCode scales x to an SQ code as Lance does for codes and queries:
// (x-lo)·255/(hi-lo), truncated and saturated to [0, 255].
func sqCode(x float32, lo, hi float64) byte {
	if hi == lo {
		return 0
	}
	v := (float64(x) - lo) * 255 / (hi - lo)
	switch {
	case !(v > 0):
		return 0
	case v >= 255:
		return 255
	}
	return byte(v)
}

func (q *Query) sq(part *Partition, dst []float32) {
	sq := q.ix.m.SQ
	dim := q.ix.dim
	valueScale := float32(sq.Hi-sq.Lo) / 255
	if q.ix.dot {
		// 1 - q·v̂ with v̂ = lo + c·(hi-lo)/255.
		lo := float32(sq.Lo)
		var sumQ float32
		for _, x := range q.v {
			sumQ += x
		}
		for i := range dst {
			codes := part.Codes[i*dim : (i+1)*dim]
			var s float32
			for j, c := range codes {
				s += float32(c) * q.v[j]
			}
			dst[i] = 1 - (lo*sumQ + valueScale*s)
		}
		return
	}
	qc := make([]byte, dim)
	for j, x := range q.v {
		qc[j] = sqCode(x, sq.Lo, sq.Hi)
	}
	scale := valueScale * valueScale
	for i := range dst {
		codes := part.Codes[i*dim : (i+1)*dim]
		var s uint64
		for j, c := range codes {
			d := int64(c) - int64(qc[j])
			s += uint64(d * d)
		}
		dst[i] = float32(s) * scale
	}
}

// pqTable fills the query's distance table against the PQ codebook for
// partition p: [nsub][2^bits] squared L2 from the residual q - c_p, or
// 1 - q_s·C_s[j] (raw query) for dot.
func (q *Query) pqTableFor(p int) []float32 {
	ix := q.ix
	pq := ix.m.PQ
	nc := 1 << ix.nbits
	x := q.v
	if !ix.dot {
		q.resid = slices.Grow(q.resid[:0], ix.dim)[:ix.dim]
		c := ix.m.Centroids[p*ix.dim : (p+1)*ix.dim]
		for j := range q.resid {
			q.resid[j] = q.v[j] - c[j]
		}
		x = q.resid
	}
	q.pqTable = slices.Grow(q.pqTable[:0], ix.nsub*nc)[:ix.nsub*nc]
	sd := ix.subDim
	for s := 0; s < ix.nsub; s++ {
		sub := x[s*sd : (s+1)*sd]
		cb := pq.Codebook[s*nc*sd : (s+1)*nc*sd]
		row := q.pqTable[s*nc : (s+1)*nc]
		for j := range row {
			if ix.dot {
				row[j] = 1 - vecmath.Dot(sub, cb[j*sd:(j+1)*sd])
			} else {
				row[j] = vecmath.L2Sq(sub, cb[j*sd:(j+1)*sd])
			}
		}
	}
	return q.pqTable
}

func (q *Query) pq(part *Partition, k int, dst []float32) {
	ix := q.ix
	table := q.pqTableFor(part.ID)
	n := len(dst)
	if ix.nbits == 8 {
		for i := range dst {
			codes := part.Codes[i*ix.nsub : (i+1)*ix.nsub]
			var s float32
			for sv, c := range codes {
				s += table[sv*256+int(c)]
			}
			dst[i] = s
		}
	} else {
		pq4(table, part.Codes, ix.nsub/2, n, k, dst)
	}
	if ix.dot {
		diff := float32(ix.nsub) - 1
		for i := range dst {
			dst[i] -= diff
		}
	}
}

// pq4exact scores rows [from, to) of a 4-bit partition (row-major, nb code
// bytes per row: the low nibble is sub-vector 2b, the high one 2b+1) with
// the float table, summing in Lance's order.
func pq4exact(table []float32, codes []byte, nb, from, to int, dst []float32) {
	for i := from; i < to; i++ {
		var s float32
		for b, c := range codes[i*nb : (i+1)*nb] {
			s += table[2*b*16+int(c&0x0f)]
			s += table[(2*b+1)*16+int(c>>4)]
		}
		dst[i] = s
	}
}

// pq4 scores a 4-bit PQ partition as Lance does: the first max(200, k)
// rows and the rows after the last full block of 16 exactly; the others
// with the table quantized to u8 over [min of the table, max of the exact
// distances], summed with saturation at 255, then mapped back.
func pq4(table []float32, codes []byte, nb, n, k int, dst []float32) {
	flatNum := min(max(flat4BitRows, k), n)
	rem := n % 16
	pq4exact(table, codes, nb, 0, flatNum, dst)
	qmax := dst[0]
	for _, d := range dst[1:flatNum] {
		if d > qmax || math.IsNaN(float64(qmax)) {
			qmax = d
		}
	}
	qmin := float32(math.Inf(1))
	for _, t := range table {
		qmin = min(qmin, t)
	}
	if !(qmax > qmin) || math.IsInf(float64(qmax-qmin), 0) {
		pq4exact(table, codes, nb, flatNum, n, dst)
		return
	}
	factor := 255 / (qmax - qmin)
	quant := make([]byte, len(table))
	for i, t := range table {
		quant[i] = roundSatU8((t - qmin) * factor)
	}
	rng := (qmax - qmin) / 255
	for i := flatNum; i < n-rem; i++ {
		var s uint32
		for b, c := range codes[i*nb : (i+1)*nb] {
			s = min(s+uint32(quant[2*b*16+int(c&0x0f)]), 255)
			s = min(s+uint32(quant[(2*b+1)*16+int(c>>4)]), 255)
		}
		dst[i] = float32(s)*rng + qmin
	}
	if rem > 0 {
		pq4exact(table, codes, nb, max(n-rem, flatNum), n, dst)
	}
}

// roundSatU8 is Rust's x.round() as u8: half away from zero, saturating,
// NaN to 0.
func roundSatU8(x float32) byte {
	r := math.Round(float64(x))
	switch {
	case !(r > 0):
		return 0
	case r >= 255:
		return 255
	}
	return byte(r)
}

// rqTable returns the sum of a rotated query and, per 4-dimension segment,
// the sum of its values over each of the 16 bit patterns (Lance's RaBitQ
// distance table).
func rqTable(rot, table []float32) (float32, []float32) {
	var sum float32
	for _, x := range rot {
		sum += x
	}
	segs := len(rot) / 4
	table = slices.Grow(table[:0], segs*16)[:segs*16]
	for s := 0; s < segs; s++ {
		t := table[s*16 : (s+1)*16]
		t[0] = 0
		for j := 1; j < 16; j++ {
			low := j & -j
			t[j] = t[j-low] + rot[4*s+lowbitIndex(low)]
		}
	}
	return sum, table
}

func lowbitIndex(b int) int {
	switch b {
	case 1:
		return 0
	case 2:
		return 1
	case 4:
		return 2
	}
	return 3
}

// rqBlockRows is the block of rows Lance's FastScan kernel scores with the
// quantized table; the rows after the last full block are scored exactly.
const rqBlockRows = 32

// quantTable is a RaBitQ distance table quantized to u8 as Lance's
// FastScan path quantizes it: over [min, max] of the whole table, rounded
// half to even.
type quantTable struct {
	q      []uint8
	sumMin float32 // number of segment tables × min
	step   float32 // (max - min)/255
	ok     bool
}

func quantizeTable(table []float32) quantTable {
	if len(table) == 0 {
		return quantTable{}
	}
	lo, hi := table[0], table[0]
	for _, v := range table[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	rng := hi - lo
	factor := 255 / rng
	qt := quantTable{q: make([]uint8, len(table)), sumMin: float32(len(table)/16) * lo, step: rng / 255, ok: true}
	if math.IsInf(float64(rng), 0) || math.IsNaN(float64(rng)) || math.IsInf(float64(factor), 0) || math.IsNaN(float64(factor)) {
		return qt // a zero table: every row scores sumMin
	}
	for i, v := range table {
		r := math.RoundToEven(float64((v - lo) * factor))
		switch {
		case !(r > 0):
			qt.q[i] = 0
		case r >= 255:
			qt.q[i] = 255
		default:
			qt.q[i] = uint8(r)
		}
	}
	return qt
}

// binaryIPQuant is binaryIP from the quantized table.
func (qt *quantTable) binaryIP(code []byte) float32 {
	var s uint32
	for b, c := range code {
		s += uint32(qt.q[(2*b)*16+int(c&0x0f)])
		s += uint32(qt.q[(2*b+1)*16+int(c>>4)])
	}
	return float32(s)*qt.step + qt.sumMin
}

// binaryIPs writes every row's binary inner product: rows in full blocks
// of 32 from the quantized table, the rest exactly, as Lance does.
func binaryIPs(table []float32, qt *quantTable, codes []byte, width int, dst []float32) {
	n := len(dst)
	full := n - n%rqBlockRows
	for i := range dst {
		code := codes[i*width : (i+1)*width]
		if i < full && qt.ok {
			dst[i] = qt.binaryIP(code)
		} else {
			dst[i] = binaryIP(table, code)
		}
	}
}

// binaryIP is Σ rot[d] over the dimensions whose sign bit is set in a
// row's binary code, from the segment table.
func binaryIP(table []float32, code []byte) float32 {
	var s float32
	for b, c := range code {
		s += table[(2*b)*16+int(c&0x0f)]
		s += table[(2*b+1)*16+int(c>>4)]
	}
	return s
}

func (q *Query) rq(part *Partition, dst []float32) {
	ix := q.ix
	dim := ix.dim
	width := ix.CodeWidth()
	p := part.ID
	rot, sumQ, table, qt := q.rot, q.sumQ, q.table, &q.qtable
	// dist = est·scale + addScale·(add - addOffset) + queryFactor
	var queryFactor, addOffset float32
	addScale := float32(1)
	if ix.rawQuery {
		queryFactor = q.cdist[p]
		if ix.dot {
			// The stored add factor is 1 - c·(r - r̂); Lance scales its
			// correction by the projection of q on c, α = q·c/|c|², in the
			// rotated space.
			c := ix.rotCentroids[p*dim : (p+1)*dim]
			ip := vecmath.Dot(rot, c)
			alpha := ip / vecmath.Dot(c, c)
			if math.IsNaN(float64(alpha)) || math.IsInf(float64(alpha), 0) {
				alpha = 0
			}
			addScale, addOffset, queryFactor = alpha, 1, 1-ip
		}
	} else {
		// Residual query: the rotation of q - c_p.
		q.resid = slices.Grow(q.resid[:0], dim)[:dim]
		c := ix.m.Centroids[p*dim : (p+1)*dim]
		for j := range q.resid {
			q.resid[j] = q.v[j] - c[j]
		}
		q.rotTmp = slices.Grow(q.rotTmp[:0], dim)[:dim]
		ix.enc.Rotate(q.rotTmp, q.resid)
		rot = q.rotTmp
		sumQ, q.resTable = rqTable(rot, q.resTable)
		table = q.resTable
		rqt := quantizeTable(table)
		qt = &rqt
		queryFactor = q.cdist[p]
		if ix.dot {
			queryFactor = q.cdist[p] - 1
		}
	}
	binaryIPs(table, qt, part.Codes, width, dst)
	if !ix.rawQuery {
		sqrtD := float32(math.Sqrt(float64(float32(dim) * float32(ix.m.RQ.NumBits))))
		for i, ip := range dst {
			dst[i] = (2*ip-sumQ)/sqrtD*part.Scale[i] + part.Add[i] + queryFactor
		}
		return
	}
	if ix.exBits == 0 || part.Ex == nil {
		for i, ip := range dst {
			dst[i] = (ip-0.5*sumQ)*part.Scale[i] + addScale*(part.Add[i]-addOffset) + queryFactor
		}
		return
	}
	codeScale := float32(int(1) << ix.exBits)
	bias := -(codeScale - 0.5)
	for i, ip := range dst {
		var ex float32
		for d, v := range part.Ex[i*dim : (i+1)*dim] {
			ex += rot[d] * float32(v)
		}
		full := codeScale*ip + ex + bias*sumQ
		dst[i] = full*part.ExScale[i] + addScale*(part.ExAdd[i]-addOffset) + queryFactor
	}
}
