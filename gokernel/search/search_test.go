package search

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

func TestTopK(t *testing.T) {
	tk := NewTopK(3)
	for i, d := range []float32{5, 1, 4, 1, float32(math.NaN()), 0, 4} {
		tk.Push(uint64(i), d)
	}
	got := tk.Sorted()
	want := []Hit{{5, 0}, {1, 1}, {3, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if tk.Worst() != 1 {
		t.Fatalf("worst %v", tk.Worst())
	}
	if NewTopK(2).Worst() != float32(math.Inf(1)) {
		t.Fatal("an unfilled TopK has no worst distance")
	}
}

func TestUndoInvertsLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 31, 32, 33, 100} {
		for _, w := range []int{1, 2, 16} {
			x := make([]byte, n*w)
			for i := range x {
				x[i] = byte(rng.Uint32())
			}
			once, twice := make([]byte, len(x)), make([]byte, len(x))
			ivf.TransposePQ(once, x, n, w)
			ivf.TransposePQ(twice, once, n, w)
			if !slices.Equal(Undo("pq", once, n, w, 1), x) || !slices.Equal(Undo("pq", twice, n, w, 2), x) {
				t.Fatalf("pq n=%d w=%d: Undo does not invert TransposePQ", n, w)
			}
			ivf.PackRQ(once, x, n, w)
			ivf.PackRQ(twice, once, n, w)
			if !slices.Equal(Undo("rq", once, n, w, 1), x) || !slices.Equal(Undo("rq", twice, n, w, 2), x) {
				t.Fatalf("rq n=%d w=%d: Undo does not invert PackRQ", n, w)
			}
			if !slices.Equal(Undo("sq", x, n, w, 2), x) {
				t.Fatal("SQ codes have no layout")
			}
		}
	}
}

func TestQuantizeTable(t *testing.T) {
	qt := quantizeTable(make([]float32, 32))
	if !qt.ok || qt.binaryIP([]byte{0xff}) != 0 {
		t.Fatalf("a zero table scores every row 0, got %+v", qt)
	}
	table := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30}
	qt = quantizeTable(table)
	if got := qt.binaryIP([]byte{0xff}); math.Abs(float64(got-45)) > 0.2 {
		t.Fatalf("quantized ip %v, want about 45", got)
	}
	if got := binaryIP(table, []byte{0xff}); got != 45 {
		t.Fatalf("exact ip %v", got)
	}
}

func TestPQ4MatchesExactForLargeK(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const nb, n = 4, 500
	table := make([]float32, 2*nb*16)
	for i := range table {
		table[i] = rng.Float32() * 10
	}
	codes := make([]byte, n*nb)
	for i := range codes {
		codes[i] = byte(rng.Uint32())
	}
	exact, quant := make([]float32, n), make([]float32, n)
	pq4exact(table, codes, nb, 0, n, exact)
	pq4(table, codes, nb, n, n, quant)
	if !slices.Equal(exact, quant) {
		t.Fatal("k >= rows: every row is scored exactly")
	}
	pq4(table, codes, nb, n, 10, quant)
	if !slices.Equal(exact[:200], quant[:200]) || !slices.Equal(exact[n-n%16:], quant[n-n%16:]) {
		t.Fatal("the first 200 rows and the tail are exact")
	}
	qmax := slices.Max(exact[:200])
	qmin := slices.Min(table)
	step := (qmax - qmin) / 255
	for i := 200; i < n-n%16; i++ {
		// Each of the 8 looked-up entries is rounded (half a step); past
		// the top of the range the sum saturates at qmax.
		if quant[i] != qmax && math.Abs(float64(quant[i]-exact[i])) > float64(8*step) {
			t.Fatalf("row %d: quantized %v, exact %v (step %v)", i, quant[i], exact[i], step)
		}
	}
}

// testModel makes a model of k partitions over clustered 16-d vectors.
func testModel(t *testing.T, typ ivf.IndexType, metric encode.Metric, k int) (*encode.Model, []float32) {
	rng := rand.New(rand.NewPCG(5, 6))
	const dim, n = 16, 2000
	x := make([]float32, n*dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) + float32(i/dim%k)*3
	}
	m := &encode.Model{Type: typ, Metric: metric, Dim: dim, Centroids: make([]float32, k*dim)}
	for p := 0; p < k; p++ {
		copy(m.Centroids[p*dim:], x[p*dim:(p+1)*dim])
	}
	switch typ {
	case ivf.IVFPQ:
		nsub := 4
		cb := make([]float32, 256*dim)
		for i := range cb {
			cb[i] = float32(rng.NormFloat64())
		}
		m.PQ = &encode.PQParams{NumSubVectors: nsub, NumBits: 8, Codebook: cb}
	case ivf.IVFSQ:
		m.SQ = &encode.SQParams{NumBits: 8, Lo: -5, Hi: 30}
	}
	return m, x
}

// segment encodes vectors into partitions, row-major, as a build would.
func segment(t *testing.T, ix *Index, x []float32) []*Partition {
	enc, err := encode.NewEncoder(ix.Model())
	if err != nil {
		t.Fatal(err)
	}
	dim := ix.Model().Dim
	n := len(x) / dim
	vecs := slices.Clone(x)
	parts := make([]int32, n)
	cols := enc.Columns()
	out := make([][]byte, len(cols))
	for c := range cols {
		out[c] = make([]byte, n*cols[c].Width())
	}
	enc.Encode(&encode.Scratch{}, vecs, parts, out)
	ps := make([]*Partition, ix.NumPartitions())
	for p := range ps {
		ps[p] = &Partition{ID: p}
	}
	w := ix.CodeWidth()
	for i, p := range parts {
		ps[p].RowIDs = append(ps[p].RowIDs, uint64(i))
		ps[p].Codes = append(ps[p].Codes, out[0][i*w:(i+1)*w]...)
	}
	return ps
}

func TestFlatSearchIsExactWithinProbes(t *testing.T) {
	for _, metric := range []encode.Metric{encode.L2, encode.Cosine, encode.Dot} {
		m, x := testModel(t, ivf.IVFFlat, metric, 8)
		ix, err := New(m)
		if err != nil {
			t.Fatal(err)
		}
		parts := segment(t, ix, x)
		q, ok := ix.NewQuery(x[5*16 : 6*16])
		if !ok {
			t.Fatal("query refused")
		}
		tk := NewTopK(5)
		var dist []float32
		for _, p := range parts {
			dist = q.Distances(p, 5, dist)
			for i, d := range dist {
				tk.Push(p.RowIDs[i], d)
			}
		}
		// Brute force over the prepared vectors.
		type rd struct {
			id uint64
			d  float64
		}
		var all []rd
		qv := q.Vector()
		for i := 0; i < len(x)/16; i++ {
			v := slices.Clone(x[i*16 : (i+1)*16])
			var d float64
			switch metric {
			case encode.Dot:
				d = 1 - float64(vecmath.Dot(qv, v))
			case encode.Cosine:
				vecmath.Normalize(v)
				d = float64(vecmath.L2Sq(qv, v)) / 2
			default:
				d = float64(vecmath.L2Sq(qv, v))
			}
			all = append(all, rd{uint64(i), d})
		}
		sort.SliceStable(all, func(a, b int) bool { return all[a].d < all[b].d })
		for i, h := range tk.Sorted() {
			if math.Abs(float64(h.Dist)-all[i].d) > 1e-3*math.Max(1, math.Abs(all[i].d)) {
				t.Fatalf("%s: hit %d distance %v, brute force %v", metric, i, h.Dist, all[i].d)
			}
		}
	}
}

func TestPQAndSQDistancesFollowTheirTables(t *testing.T) {
	for _, typ := range []ivf.IndexType{ivf.IVFPQ, ivf.IVFSQ} {
		for _, metric := range []encode.Metric{encode.L2, encode.Dot} {
			m, x := testModel(t, typ, metric, 4)
			ix, err := New(m)
			if err != nil {
				t.Fatal(err)
			}
			parts := segment(t, ix, x)
			q, _ := ix.NewQuery(x[:16])
			p := parts[2]
			dist := q.Distances(p, 10, nil)
			for i := range dist {
				want := reference(ix, q, p, i)
				if math.Abs(float64(dist[i]-want)) > 1e-3*math.Max(1, math.Abs(float64(want))) {
					t.Fatalf("%s %s row %d: %v, reference %v", typ, metric, i, dist[i], want)
				}
			}
		}
	}
}

// reference decodes row i of part and computes the distance the obvious
// way.
func reference(ix *Index, q *Query, part *Partition, i int) float32 {
	m := ix.Model()
	dim := m.Dim
	dec := make([]float32, dim)
	switch m.Type {
	case ivf.IVFSQ:
		if m.Metric != encode.Dot {
			// Distances between codes, the query quantized as the data.
			var s float32
			for j, c := range part.Codes[i*dim : (i+1)*dim] {
				d := float32(c) - float32(sqCode(q.v[j], m.SQ.Lo, m.SQ.Hi))
				s += d * d
			}
			r := float32(m.SQ.Hi-m.SQ.Lo) / 255
			return s * r * r
		}
		for j, c := range part.Codes[i*dim : (i+1)*dim] {
			dec[j] = float32(m.SQ.Lo) + float32(c)*float32(m.SQ.Hi-m.SQ.Lo)/255
		}
		return 1 - vecmath.Dot(q.v, dec)
	case ivf.IVFPQ:
		sd := dim / m.PQ.NumSubVectors
		for s, c := range part.Codes[i*m.PQ.NumSubVectors : (i+1)*m.PQ.NumSubVectors] {
			copy(dec[s*sd:], m.PQ.Codebook[(s*256+int(c))*sd:(s*256+int(c)+1)*sd])
		}
		if m.Metric == encode.Dot {
			return 1 - vecmath.Dot(q.v, dec)
		}
		c := m.Centroids[part.ID*dim : (part.ID+1)*dim]
		for j := range dec {
			dec[j] += c[j]
		}
		return vecmath.L2Sq(q.v, dec)
	}
	return 0
}

func TestNewQueryRefusesWhatCannotBeSearched(t *testing.T) {
	m, _ := testModel(t, ivf.IVFFlat, encode.Cosine, 2)
	ix, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range [][]float32{make([]float32, 16), make([]float32, 3), append(make([]float32, 15), float32(math.NaN()))} {
		if _, ok := ix.NewQuery(v); ok {
			t.Fatalf("query %v accepted", v)
		}
	}
	m, _ = testModel(t, ivf.IVFFlat, encode.L2, 2)
	if ix, err = New(m); err != nil {
		t.Fatal(err)
	}
	q, _ := ix.NewQuery(m.Centroids[16:32])
	if got := q.Probe(5); !slices.Equal(got, []int{1, 0}) {
		t.Fatalf("probe %v", got)
	}
}
