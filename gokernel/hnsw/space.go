package hnsw

import (
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// A Space is one partition's vectors as Lance's HNSW sees them: the
// merged storage (flat vectors, SQ codes, PQ codes), with the distance
// Lance computes on it, so that a graph built here and Lance's search over
// the same storage agree. What pylance 14.0.2 computes (its stored
// _distance values match these to float rounding):
//
//	storage  l2                     cosine                      dot
//	FLAT     |a-b|²                 1 - a·b/(|a||b|)            1 - a·b
//	SQ       |ca-cb|²·(hi-lo)²/255² same as l2 (normalized in)  1 - â·b̂ (â: code decoded to lo + c·(hi-lo)/255)
//	PQ       Σ_s |C_s[a_s]-C_s[b_s]|² same as l2 (normalized in) 1 - Σ_s C_s[a_s]·C_s[b_s]
//
// A Space is read-only once built and safe for concurrent use.
type Space struct {
	kind spaceKind
	n    int
	dim  int
	// vecs: flat vectors, or decoded SQ codes for dot (n·dim).
	vecs  []float32
	norms []float32 // flat cosine: |v|
	// codes: SQ codes (n·dim) or PQ codes, one byte per sub-vector
	// (n·nsub), row-major.
	codes []byte
	scale float32 // SQ l2: (hi-lo)²/255²
	pq    *PQModel
}

type spaceKind uint8

const (
	flatL2 spaceKind = iota
	flatCosine
	flatDot
	sqL2
	sqDot
	pqL2
	pqDot
)

// Len is the number of vectors.
func (s *Space) Len() int { return s.n }

func checkMetric(metric string) error {
	switch metric {
	case "l2", "cosine", "dot":
		return nil
	}
	return fmt.Errorf("%w: hnsw: distance type %q (l2, cosine and dot are supported)", errkind.Unsupported, metric)
}

// NewFlat makes the space of n = len(vectors)/dim float vectors.
func NewFlat(vectors []float32, dim int, metric string) (*Space, error) {
	if err := checkMetric(metric); err != nil {
		return nil, err
	}
	if dim <= 0 || len(vectors)%dim != 0 {
		return nil, fmt.Errorf("%w: hnsw: %d values are not rows of %d", errkind.InvalidInput, len(vectors), dim)
	}
	s := &Space{n: len(vectors) / dim, dim: dim, vecs: vectors}
	switch metric {
	case "l2":
		s.kind = flatL2
	case "dot":
		s.kind = flatDot
	case "cosine":
		s.kind = flatCosine
		s.norms = make([]float32, s.n)
		for i := range s.norms {
			s.norms[i] = vecmath.Norm(vectors[i*dim : (i+1)*dim])
		}
	}
	return s, nil
}

// NewSQ makes the space of n = len(codes)/dim 8-bit scalar-quantized
// vectors with bounds [lo, hi].
func NewSQ(codes []byte, dim int, lo, hi float64, metric string) (*Space, error) {
	if err := checkMetric(metric); err != nil {
		return nil, err
	}
	if dim <= 0 || len(codes)%dim != 0 {
		return nil, fmt.Errorf("%w: hnsw: %d code bytes are not rows of %d", errkind.InvalidInput, len(codes), dim)
	}
	s := &Space{n: len(codes) / dim, dim: dim, codes: codes}
	if metric != "dot" {
		// As Lance: the code distance times range²/255², in float32.
		r := float32(hi - lo)
		s.kind, s.scale = sqL2, r*r/float32(255*255)
		return s, nil
	}
	s.kind = sqDot
	var table [256]float32
	step := (hi - lo) / 255
	for c := range table {
		table[c] = float32(lo + float64(c)*step)
	}
	s.vecs = make([]float32, len(codes))
	for i, c := range codes {
		s.vecs[i] = table[c]
	}
	return s, nil
}

// PQModel is a PQ codebook prepared for graph distances; one model serves
// every partition of a merge (safe for concurrent use).
type PQModel struct {
	nsub, k, subdim int
	nbits           int
	dot             bool
	codebook        []float32 // [nsub][k][subdim]
	// cross[(s·k + i)·k + j] is the distance contribution of sub-vector s
	// between centroids i and j (|C_s[i]-C_s[j]|², or C_s[i]·C_s[j] for
	// dot), when it fits crossMaxValues.
	cross []float32
}

// crossMaxValues bounds the centroid-pair table: 2^22 float32 = 16 MiB, room
// for 64 sub-vectors of 256 centroids.
const crossMaxValues = 1 << 22

// NewPQModel prepares a codebook of 2^nbits centroids for each of nsub
// sub-vectors of a dim-dimensional vector, laid out as Lance stores it:
// sub-vector s, centroid j, component t at (s·2^nbits + j)·(dim/nsub) + t.
func NewPQModel(codebook []float32, nsub, nbits, dim int, metric string) (*PQModel, error) {
	if err := checkMetric(metric); err != nil {
		return nil, err
	}
	if nbits != 4 && nbits != 8 {
		return nil, fmt.Errorf("%w: hnsw: PQ with %d bits", errkind.Unsupported, nbits)
	}
	k := 1 << nbits
	if nsub <= 0 || dim%nsub != 0 || len(codebook) != k*dim || (nbits == 4 && nsub%2 != 0) {
		return nil, fmt.Errorf("%w: hnsw: PQ codebook of %d values for %d sub-vectors of %d bits over %d dimensions", errkind.InvalidInput, len(codebook), nsub, nbits, dim)
	}
	m := &PQModel{nsub: nsub, k: k, subdim: dim / nsub, nbits: nbits, dot: metric == "dot", codebook: codebook}
	if nsub*k*k <= crossMaxValues {
		m.cross = make([]float32, nsub*k*k)
		for s := 0; s < nsub; s++ {
			for i := 0; i < k; i++ {
				ci := m.centroid(s, i)
				row := m.cross[(s*k+i)*k : (s*k+i+1)*k]
				for j := range row {
					if m.dot {
						row[j] = vecmath.Dot(ci, m.centroid(s, j))
					} else {
						row[j] = vecmath.L2Sq(ci, m.centroid(s, j))
					}
				}
			}
		}
	}
	return m, nil
}

func (m *PQModel) centroid(s, j int) []float32 {
	o := (s*m.k + j) * m.subdim
	return m.codebook[o : o+m.subdim]
}

// CodeBytes is the number of code bytes per vector (4-bit codes pack two
// sub-vectors per byte, the low nibble first).
func (m *PQModel) CodeBytes() int {
	if m.nbits == 4 {
		return m.nsub / 2
	}
	return m.nsub
}

// Space makes the space of the vectors whose row-major codes (CodeBytes
// per row) are given.
func (m *PQModel) Space(codes []byte) (*Space, error) {
	cb := m.CodeBytes()
	if len(codes)%cb != 0 {
		return nil, fmt.Errorf("%w: hnsw: %d PQ code bytes are not rows of %d", errkind.InvalidInput, len(codes), cb)
	}
	n := len(codes) / cb
	s := &Space{kind: pqL2, n: n, dim: m.nsub * m.subdim, pq: m}
	if m.dot {
		s.kind = pqDot
	}
	if m.nbits == 8 {
		s.codes = codes
	} else {
		s.codes = make([]byte, n*m.nsub)
		for i, c := range codes {
			s.codes[2*i], s.codes[2*i+1] = c&0x0f, c>>4
		}
	}
	return s, nil
}

// Dist is the distance between vectors a and b.
func (s *Space) Dist(a, b int) float32 {
	switch s.kind {
	case flatL2:
		return vecmath.L2Sq(s.row(a), s.row(b))
	case flatDot, sqDot:
		return 1 - vecmath.Dot(s.row(a), s.row(b))
	case flatCosine:
		return cosine(vecmath.Dot(s.row(a), s.row(b)), s.norms[a]*s.norms[b])
	case sqL2:
		d := s.dim
		return float32(l2SqU8(s.codes[a*d:(a+1)*d], s.codes[b*d:(b+1)*d])) * s.scale
	}
	m := s.pq
	ca, cb := s.codes[a*m.nsub:(a+1)*m.nsub], s.codes[b*m.nsub:(b+1)*m.nsub]
	var sum float32
	if m.cross != nil {
		for sub, i := range ca {
			sum += m.cross[(sub*m.k+int(i))*m.k+int(cb[sub])]
		}
	} else {
		for sub, i := range ca {
			if m.dot {
				sum += vecmath.Dot(m.centroid(sub, int(i)), m.centroid(sub, int(cb[sub])))
			} else {
				sum += vecmath.L2Sq(m.centroid(sub, int(i)), m.centroid(sub, int(cb[sub])))
			}
		}
	}
	if s.kind == pqDot {
		return 1 - sum
	}
	return sum
}

func cosine(dot, norms float32) float32 {
	if norms == 0 {
		return 1
	}
	return 1 - dot/norms
}

func (s *Space) row(i int) []float32 { return s.vecs[i*s.dim : (i+1)*s.dim] }

// query computes distances from one vector to the others; for PQ it holds
// the vector's table of sub-vector distances to every centroid, so each
// distance is nsub lookups. Not safe for concurrent use.
type query struct {
	s     *Space
	a     int
	table []float32 // PQ: [nsub][k]
}

func (q *query) reset(s *Space, a int) {
	q.s, q.a = s, a
	if s.pq == nil {
		return
	}
	m := s.pq
	q.table = growFloats(q.table, m.nsub*m.k)
	codes := s.codes[a*m.nsub : (a+1)*m.nsub]
	for sub, i := range codes {
		row := q.table[sub*m.k : (sub+1)*m.k]
		if m.cross != nil {
			copy(row, m.cross[(sub*m.k+int(i))*m.k:])
			continue
		}
		ci := m.centroid(sub, int(i))
		for j := range row {
			if m.dot {
				row[j] = vecmath.Dot(ci, m.centroid(sub, j))
			} else {
				row[j] = vecmath.L2Sq(ci, m.centroid(sub, j))
			}
		}
	}
}

func (q *query) dist(b int) float32 {
	s := q.s
	if s.pq == nil {
		return s.Dist(q.a, b)
	}
	m := s.pq
	codes := s.codes[b*m.nsub : (b+1)*m.nsub]
	t := q.table
	var sum float32
	for sub, c := range codes {
		sum += t[sub*m.k+int(c)]
	}
	if s.kind == pqDot {
		return 1 - sum
	}
	return sum
}

func growFloats(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}
