package vecmath

import "math"

// Batch nearest-row search, exact.
//
// A Searcher answers "which row of m is nearest to x" for many vectors x
// at once, with the answer Lance's kernels give: the first row of the
// smallest L2Sq16(x, row) (or 1 - Dot16(x, row) for the dot distance),
// and that distance, bit for bit. It gets there without computing those
// distances for every row:
//
//  1. A blocked matrix product gives every row's score s = ‖c‖²/2 - x·c
//     (dot: -x·c), which orders the rows as the distance does
//     (‖x-c‖² = ‖x‖² + 2s). Any summation order and fused multiply-adds
//     may be used here (the SIMD kernel does).
//  2. Floating-point error analysis bounds how far a computed score can be
//     from the real one, and how far Lance's rounded distance can be from
//     the real distance: every row whose score is within those bounds of
//     the smallest score is a candidate; no other row can be Lance's
//     answer.
//  3. The candidates (nearly always one) are measured with L2Sq16 / Dot16
//     in row order, and the first minimum wins, as Lance's argmin.
//
// A vector whose scores are not all finite (NaN or infinite values, or
// magnitudes whose squares leave float32's range), and every vector of a
// matrix with such rows, is measured against every row instead (step 3
// alone), so the answer never depends on the bound.

// Distance selects what a Searcher minimises.
type Distance int

const (
	// DistL2 is Lance's squared L2 distance (L2Sq16).
	DistL2 Distance = iota
	// DistDot is Lance's dot distance, 1 - Dot16.
	DistDot
)

// blockRows is the number of matrix rows the packed layout interleaves.
const blockRows = 16

// chunkRows bounds the matrix rows scored at once per vector (the score
// buffer of 4 vectors is 4 × chunkRows floats).
const chunkRows = 2048

// unitRoundoff is float32's unit roundoff, 2^-24.
const unitRoundoff = 1.0 / (1 << 24)

// tinyAbs bounds absolute rounding errors in float32's subnormal range,
// per operation (2^-149, the smallest subnormal).
const tinyAbs = 1.401298464324817e-45

// Searcher finds nearest rows of a fixed row-major matrix. It is safe for
// concurrent use; each goroutine needs its own SearchScratch.
type Searcher struct {
	m      []float32 // rows of dim values, as given
	dim, k int
	dist   Distance
	half   []float32 // ‖c‖²/2 (L2) or 0 (dot), +Inf past k up to a whole block
	packed []float32 // blocks of blockRows rows, interleaved by dimension
	maxC   float64   // the largest row norm
	bound  bound
	exact  bool // only exact scans (rows too large for the bound)
}

// NewSearcher prepares a search over the k = len(m)/dim rows of m for
// the given distance. m is kept, not copied: it must not change while the
// Searcher is used.
func NewSearcher(m []float32, dim int, dist Distance) *Searcher {
	k := 0
	if dim > 0 {
		k = len(m) / dim
	}
	s := &Searcher{m: m[:k*dim], dim: dim, k: k, dist: dist}
	kp := (k + blockRows - 1) / blockRows * blockRows
	s.half = make([]float32, kp)
	s.packed = make([]float32, kp*dim)
	for j := 0; j < k; j++ {
		row := m[j*dim : (j+1)*dim]
		var n2 float64
		for _, v := range row {
			n2 += float64(v) * float64(v)
		}
		if dist == DistL2 {
			s.half[j] = float32(n2 / 2)
		}
		s.maxC = max(s.maxC, math.Sqrt(n2))
		if math.IsNaN(n2) || math.IsInf(n2, 0) {
			s.exact = true
		}
		b, l := j/blockRows, j%blockRows
		for t, v := range row {
			s.packed[(b*dim+t)*blockRows+l] = v
		}
	}
	for j := k; j < kp; j++ {
		s.half[j] = float32(math.Inf(1))
	}
	// Keep squares, products and their sums well inside float32's range.
	if s.maxC > 1e17 {
		s.exact = true
	}
	s.maxC *= 1 + 1e-6
	s.bound = newBound(dim, s.maxC)
	return s
}

// Len is the number of rows searched.
func (s *Searcher) Len() int { return s.k }

// SearchScratch is per-goroutine working memory of Searcher.Nearest; the
// zero value is ready.
type SearchScratch struct {
	scores []float32
	cands  [4][]candidate
	scans  int // vectors measured against every row (tests)
}

type candidate struct {
	row   int32
	score float32
}

// Nearest finds the nearest row for n vectors: vector i is
// x[i*stride : i*stride+dim]. idx[i] receives the row (-1 when no
// distance is a finite number, as Lance's argmin), dist[i] (if dist is
// not nil) its distance: L2Sq16, or 1 - Dot16.
func (s *Searcher) Nearest(x []float32, stride, n int, idx []int32, dist []float32, sc *SearchScratch) {
	scores, kc, done := s.begin(x, stride, n, idx, dist, sc)
	if done {
		return
	}
	var norm [4]float64
	var low [4]float32
	var lanes [4 * blockRows]float32 // per vector, the minimum of each lane (j mod 16)
	for i0 := 0; i0 < n; i0 += 4 {
		rows := min(4, n-i0)
		xb := x[i0*stride:]
		for r := 0; r < rows; r++ {
			norm[r] = rowNorm(xb[r*stride : r*stride+s.dim])
			low[r] = float32(math.Inf(1))
			sc.cands[r] = sc.cands[r][:0]
		}
		for j0 := 0; j0 < len(s.half); j0 += kc {
			j1 := min(j0+kc, len(s.half))
			for l := range lanes {
				lanes[l] = float32(math.Inf(1))
			}
			scoreBlock(s, xb, stride, rows, j0, j1, scores, kc, lanes[:])
			for r := 0; r < rows; r++ {
				row := scores[r*kc : r*kc+(min(j1, s.k)-j0)]
				lm := (*[blockRows]float32)(lanes[r*blockRows:])
				low[r] = min(low[r], rowMinGeneric(lm[:]))
				thr := s.threshold(low[r], norm[r])
				if math.IsNaN(thr) {
					continue
				}
				// Only a lane whose minimum passes can hold a candidate.
				t32 := roundUp32(thr)
				for l, m := range lm {
					if !(m <= t32) {
						continue
					}
					for jj := l; jj < len(row); jj += blockRows {
						if row[jj] <= t32 {
							sc.cands[r] = append(sc.cands[r], candidate{int32(j0 + jj), row[jj]})
						}
					}
				}
			}
		}
		for r := 0; r < rows; r++ {
			i := i0 + r
			v := x[i*stride : i*stride+s.dim]
			thr := s.threshold(low[r], norm[r])
			if math.IsNaN(thr) || math.IsInf(thr, 0) || len(sc.cands[r]) == 0 {
				s.scanRow(v, i, idx, dist)
				sc.scans++
				continue
			}
			best, bestD := int32(-1), float32(math.Inf(1))
			for _, c := range sc.cands[r] {
				if float64(c.score) > thr {
					continue
				}
				// Candidates come lane by lane: the lowest row wins ties.
				if d := s.exactDist(v, int(c.row)); d < bestD || d == bestD && c.row < best {
					best, bestD = c.row, d
				}
			}
			if best < 0 {
				s.scanRow(v, i, idx, dist)
				sc.scans++
				continue
			}
			idx[i] = best
			if dist != nil {
				dist[i] = bestD
			}
		}
	}
}

// begin is the start of Nearest and NearestByScore: bounds checks, the
// exact scan when the matrix needs it (done), else the score buffer of
// four vectors and the rows scored at once (kc).
func (s *Searcher) begin(x []float32, stride, n int, idx []int32, dist []float32, sc *SearchScratch) (scores []float32, kc int, done bool) {
	if n == 0 {
		return nil, 0, true
	}
	_ = idx[n-1]
	if dist != nil {
		_ = dist[n-1]
	}
	if s.exact || s.k == 0 {
		for i := 0; i < n; i++ {
			s.scanRow(x[i*stride:i*stride+s.dim], i, idx, dist)
		}
		sc.scans += n
		return nil, 0, true
	}
	kc = min(chunkRows, len(s.half))
	if cap(sc.scores) < 4*kc {
		sc.scores = make([]float32, 4*kc)
	}
	return sc.scores[:4*kc], kc, false
}

// rowNorm is ‖v‖ or a little more (the bound only needs an upper
// bound), or NaN/Inf for a vector with such values.
var rowNorm = rowNormGeneric

// rowNormGeneric is ‖v‖ in float64.
func rowNormGeneric(v []float32) float64 {
	var n2 float64
	for _, x := range v {
		n2 += float64(x) * float64(x)
	}
	return math.Sqrt(n2)
}

// threshold is the largest computed score a row can have and still be
// Lance's answer, given the smallest computed score low and the vector's
// norm: NaN or infinite when the bound does not apply (the caller then
// scans every row).
//
// With u = 2^-24, d the dimension, X = ‖x‖, C = the largest row norm and
// g = (d+4)·u·1.05 (covering γ_d = d·u/(1-d·u) and a few more roundings):
//
//   - a computed score is within e of the real one: the dot product's
//     error is at most γ_d·X·C in any summation order, with or without
//     fused multiply-adds; ‖c‖²/2 and the subtraction add at most
//     2u·C²/2 and u·(C²/2 + X·C). L2: e = g·(X·C + C²); dot: the score is
//     -x·c and Lance's own dot is as far off: e = 2g·X·C.
//   - L2: Lance's L2Sq16 is within g·D + τ of the real distance
//     D = X² + 2S (S the real score; d rounded squares summed; τ the
//     subnormal slack). A row j can only win if its lowest possible value,
//     (1-g)(X² + 2(s_j - e)) - τ, is at most the best row's highest,
//     (1+g)(X² + 2(low + e)) + τ; solved for s_j.
//   - dot: Lance compares fl(1 - q) of its dot q, which can tie rows whose
//     dots differ by up to 2u·|1 - q|: s_j ≤ low + 2e + 2.02u(1 + |low| + e).
func (s *Searcher) threshold(low float32, x float64) float64 {
	m := float64(low)
	if !(x <= 1e17 && math.Abs(m) <= math.MaxFloat32) { // NaN fails too
		return math.NaN()
	}
	b := &s.bound
	var thr float64
	if s.dist == DistDot {
		e := b.g2*x*s.maxC + b.tiny
		thr = m + 2*e + 2.02*unitRoundoff*(1+math.Abs(m)+e)
	} else {
		// The condition above, solved: s_j ≤ (g·X² + (1+g)·low + 2e + τ) / (1-g).
		e := b.g*(x*s.maxC+b.c2) + b.tiny
		x2 := x * x
		thr = (b.g*x2+(1+b.g)*m+2*e+b.tau)*b.inv + 1e-9*(x2+e)
	}
	return thr + 1e-9*(math.Abs(thr)+math.Abs(m)) + b.tiny
}

// bound holds a Searcher's constants of threshold.
type bound struct {
	g, g2, inv, c2, tiny, tau float64
}

func newBound(dim int, maxC float64) bound {
	d := float64(dim)
	g := (d + 4) * unitRoundoff * 1.05
	return bound{g: g, g2: 2 * g, inv: 1 / (1 - g), c2: maxC * maxC,
		tiny: (4*d + 16) * tinyAbs, tau: (2*d + 8) * tinyAbs}
}

func (s *Searcher) exactDist(v []float32, j int) float32 {
	c := s.m[j*s.dim : (j+1)*s.dim]
	if s.dist == DistDot {
		return 1 - Dot16(v, c)
	}
	return L2Sq16(v, c)
}

// scanRow measures every row, the first minimum winning.
func (s *Searcher) scanRow(v []float32, i int, idx []int32, dist []float32) {
	best, bestD := int32(-1), float32(math.Inf(1))
	for j := 0; j < s.k; j++ {
		if d := s.exactDist(v, j); d < bestD {
			best, bestD = int32(j), d
		}
	}
	idx[i] = best
	if dist != nil {
		dist[i] = bestD
	}
}

// roundUp32 is the smallest float32 at least x: a float32 score v is at
// most x exactly when it is at most roundUp32(x).
func roundUp32(x float64) float32 {
	f := float32(x)
	if float64(f) < x {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}

// rowMinGeneric is the smallest value of v that is a number (+Inf for
// none).
func rowMinGeneric(v []float32) float32 {
	m := float32(math.Inf(1))
	for _, x := range v {
		if x < m {
			m = x
		}
	}
	return m
}

// scoreBlock writes, for the rows vectors of x (vector r at x[r*stride:],
// rows ≤ 4) and matrix rows j0 ≤ j < j1 (whole blocks),
// out[r*ld + j - j0] = half[j] - x_r·c_j, and lowers lanes[r*16 + j%16]
// to the smallest of them that is a number, lane by lane (rows past the
// matrix score +Inf). The portable kernel; the SIMD build replaces it
// where the CPU allows.
var scoreBlock = scoreBlockGeneric

// scoreBlockGeneric works from the row-major matrix, two vectors against
// four rows at a time in registers.
func scoreBlockGeneric(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, lanes []float32) {
	dim := s.dim
	jEnd := min(j1, s.k)
	defer func() {
		for r := 0; r < rows; r++ {
			lm := lanes[r*blockRows : (r+1)*blockRows]
			for jj, v := range out[r*ld : r*ld+jEnd-j0] {
				if l := jj % blockRows; v < lm[l] {
					lm[l] = v
				}
			}
		}
	}()
	r := 0
	for ; r+2 <= rows; r += 2 {
		x0 := x[r*stride : r*stride+dim]
		x1 := x[(r+1)*stride : (r+1)*stride+dim]
		o0 := out[r*ld : r*ld+j1-j0]
		o1 := out[(r+1)*ld : (r+1)*ld+j1-j0]
		j := j0
		for ; j+4 <= jEnd; j += 4 {
			c0 := s.m[j*dim : (j+1)*dim]
			c1 := s.m[(j+1)*dim : (j+2)*dim]
			c2 := s.m[(j+2)*dim : (j+3)*dim]
			c3 := s.m[(j+3)*dim : (j+4)*dim]
			var a00, a01, a02, a03, a10, a11, a12, a13 float32
			for t, v0 := range x0 {
				v1 := x1[t]
				b0, b1, b2, b3 := c0[t], c1[t], c2[t], c3[t]
				a00 += v0 * b0
				a01 += v0 * b1
				a02 += v0 * b2
				a03 += v0 * b3
				a10 += v1 * b0
				a11 += v1 * b1
				a12 += v1 * b2
				a13 += v1 * b3
			}
			h := s.half[j : j+4]
			o0[j-j0], o0[j-j0+1], o0[j-j0+2], o0[j-j0+3] = h[0]-a00, h[1]-a01, h[2]-a02, h[3]-a03
			o1[j-j0], o1[j-j0+1], o1[j-j0+2], o1[j-j0+3] = h[0]-a10, h[1]-a11, h[2]-a12, h[3]-a13
		}
		for ; j < jEnd; j++ {
			c := s.m[j*dim : (j+1)*dim]
			var a0, a1 float32
			for t, b := range c {
				a0 += x0[t] * b
				a1 += x1[t] * b
			}
			o0[j-j0], o1[j-j0] = s.half[j]-a0, s.half[j]-a1
		}
	}
	for ; r < rows; r++ {
		x0 := x[r*stride : r*stride+dim]
		o := out[r*ld : r*ld+j1-j0]
		for j := j0; j < jEnd; j++ {
			c := s.m[j*dim : (j+1)*dim]
			var a float32
			for t, b := range c {
				a += x0[t] * b
			}
			o[j-j0] = s.half[j] - a
		}
	}
}
