package hnsw

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// clustered returns n vectors of dim values: 16 Gaussian clusters, as the
// Python fixtures make them (a graph over uniform noise says little).
func clustered(n, dim int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	cr := rand.New(rand.NewPCG(1234, 1))
	centers := make([]float32, 16*dim)
	for i := range centers {
		centers[i] = float32(cr.NormFloat64() * 3)
	}
	out := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		c := r.IntN(16)
		for j := 0; j < dim; j++ {
			out[i*dim+j] = centers[c*dim+j] + float32(r.NormFloat64())
		}
	}
	return out
}

func testParams(m, ef int) Params {
	p := DefaultParams()
	p.M, p.EfConstruction = m, ef
	p.Raw = nil
	return p
}

// sqEncode quantizes vectors to 8-bit codes as Lance does, over the
// bounds of the training vectors ref.
func sqEncode(v, ref []float32) (codes []byte, lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range ref {
		lo, hi = math.Min(lo, float64(x)), math.Max(hi, float64(x))
	}
	codes = make([]byte, len(v))
	for i, x := range v {
		codes[i] = byte(math.Max(0, math.Min(255, (float64(x)-lo)*255/(hi-lo))))
	}
	return codes, lo, hi
}

// pqEncode trains nothing: it takes the sub-vectors of 2^nbits random
// vectors of ref as the codebook and encodes every vector of v by its
// nearest centroids.
func pqEncode(v, ref []float32, dim, nsub, nbits int, seed uint64) (codes []byte, codebook []float32) {
	k, sd := 1<<nbits, dim/nsub
	n := len(v) / dim
	r := rand.New(rand.NewPCG(seed, 2))
	codebook = make([]float32, nsub*k*sd)
	for s := 0; s < nsub; s++ {
		for j := 0; j < k; j++ {
			src := r.IntN(len(ref) / dim)
			copy(codebook[(s*k+j)*sd:], ref[src*dim+s*sd:src*dim+(s+1)*sd])
		}
	}
	sub := make([]byte, n*nsub)
	for i := 0; i < n; i++ {
		for s := 0; s < nsub; s++ {
			best, bd := 0, float32(math.Inf(1))
			for j := 0; j < k; j++ {
				var d float32
				for t := 0; t < sd; t++ {
					x := v[i*dim+s*sd+t] - codebook[(s*k+j)*sd+t]
					d += x * x
				}
				if d < bd {
					best, bd = j, d
				}
			}
			sub[i*nsub+s] = byte(best)
		}
	}
	if nbits == 8 {
		return sub, codebook
	}
	codes = make([]byte, n*nsub/2)
	for i := range codes {
		codes[i] = sub[2*i] | sub[2*i+1]<<4
	}
	return codes, codebook
}

// A spaceCase makes the space of vectors v, quantized (SQ bounds, PQ
// codebook) as trained on ref.
type spaceCase struct {
	name  string
	space func(v, ref []float32, dim int) (*Space, error)
}

var spaceCases = []spaceCase{
	{"flat-l2", func(v, _ []float32, dim int) (*Space, error) { return NewFlat(v, dim, "l2") }},
	{"flat-cosine", func(v, _ []float32, dim int) (*Space, error) { return NewFlat(v, dim, "cosine") }},
	{"flat-dot", func(v, _ []float32, dim int) (*Space, error) { return NewFlat(v, dim, "dot") }},
	{"sq-l2", func(v, ref []float32, dim int) (*Space, error) {
		c, lo, hi := sqEncode(v, ref)
		return NewSQ(c, dim, lo, hi, "l2")
	}},
	{"sq-dot", func(v, ref []float32, dim int) (*Space, error) {
		c, lo, hi := sqEncode(v, ref)
		return NewSQ(c, dim, lo, hi, "dot")
	}},
	{"pq8-l2", func(v, ref []float32, dim int) (*Space, error) {
		c, cb := pqEncode(v, ref, dim, 8, 8, 7)
		m, err := NewPQModel(cb, 8, 8, dim, "l2")
		if err != nil {
			return nil, err
		}
		return m.Space(c)
	}},
	{"pq4-dot", func(v, ref []float32, dim int) (*Space, error) {
		c, cb := pqEncode(v, ref, dim, 8, 4, 7)
		m, err := NewPQModel(cb, 8, 4, dim, "dot")
		if err != nil {
			return nil, err
		}
		return m.Space(c)
	}},
}

// bruteKNN is the exact k nearest of q under the space's own distance.
func bruteKNN(s *Space, q, k int) []int {
	ids := make([]int, 0, s.Len()-1)
	for i := 0; i < s.Len(); i++ {
		if i != q {
			ids = append(ids, i)
		}
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		da, db := s.Dist(q, a), s.Dist(q, b)
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	return ids[:k]
}

func recallAt(g *Graph, s *Space, k, ef, queries int) float64 {
	hits := 0
	step := max(1, s.Len()/queries)
	n := 0
	for q := 0; q < s.Len() && n < queries; q += step {
		truth := bruteKNN(s, q, k)
		got := Search(g, s, q, k, ef)
		for _, t := range truth {
			if slices.Contains(got, t) {
				hits++
			}
		}
		n++
	}
	return float64(hits) / float64(k*n)
}

// checkGraph asserts the invariants of a graph's type and of Lance's
// readers: ids in range, no self loops or repeats, lists within their
// limits, every neighbour on the level, the entry point on the top level,
// and every node reachable from it on level 0.
func checkGraph(t *testing.T, g *Graph) {
	t.Helper()
	if g.N == 0 {
		if g.Entry != -1 {
			t.Fatalf("empty graph with entry %d", g.Entry)
		}
		return
	}
	top := 0
	for u := 0; u < g.N; u++ {
		top = max(top, g.Level(u))
	}
	if g.Level(g.Entry) != top {
		t.Fatalf("entry %d on level %d, top level %d", g.Entry, g.Level(g.Entry), top)
	}
	for u := 0; u < g.N; u++ {
		for l := 0; l <= g.Level(u); l++ {
			ids, dist := g.Neighbors(u, l)
			limit := g.Params.M
			if l == 0 {
				limit = g.stride
			}
			if len(ids) > limit || len(dist) != len(ids) {
				t.Fatalf("node %d level %d: %d neighbours (%d distances), limit %d", u, l, len(ids), len(dist), limit)
			}
			seen := map[uint32]bool{}
			for _, v := range ids {
				if int(v) >= g.N || int(v) == u || seen[v] || g.Level(int(v)) < l {
					t.Fatalf("node %d level %d: bad neighbour %d (levels %d, %v)", u, l, v, g.Level(int(v)), ids)
				}
				seen[v] = true
			}
		}
	}
	reach := make([]bool, g.N)
	reach[g.Entry] = true
	queue := []int{g.Entry}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		ids, _ := g.Neighbors(c, 0)
		for _, v := range ids {
			if !reach[v] {
				reach[v] = true
				queue = append(queue, int(v))
			}
		}
	}
	for u, ok := range reach {
		if !ok {
			t.Fatalf("node %d is not reachable from the entry point on level 0", u)
		}
	}
}

func TestBuildRecall(t *testing.T) {
	const n, dim = 2000, 32
	v := clustered(n, dim, 1)
	for _, sc := range spaceCases {
		t.Run(sc.name, func(t *testing.T) {
			s, err := sc.space(v, v, dim)
			if err != nil {
				t.Fatal(err)
			}
			g, st, err := Build(context.Background(), s, testParams(16, 100), Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			checkGraph(t, g)
			if st.Inserted != n || st.Distances == 0 {
				t.Fatalf("stats %+v", st)
			}
			// Distances stored with the edges are the space's.
			ids, dist := g.Neighbors(5, 0)
			for k, w := range ids {
				if d := s.Dist(5, int(w)); d != dist[k] {
					t.Fatalf("edge 5-%d: stored %v, space %v", w, dist[k], d)
				}
			}
			if r := recallAt(g, s, 10, 64, 50); r < 0.95 {
				t.Fatalf("recall@10 at ef 64 = %.3f", r)
			}
		})
	}
}

func TestBuildDeterministic(t *testing.T) {
	v := clustered(500, 16, 2)
	s, _ := NewFlat(v, 16, "l2")
	a, _, err := Build(context.Background(), s, testParams(8, 40), Options{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := Build(context.Background(), s, testParams(8, 40), Options{Seed: 9})
	ca, ma := a.Encode()
	cb, mb := b.Encode()
	if !reflect.DeepEqual(ca, cb) || !reflect.DeepEqual(ma, mb) {
		t.Fatal("same seed, different graphs")
	}
}

// TestHeuristicReusesClasses: pruning with the classes of earlier
// selections gives the graph a selection from scratch gives, with fewer
// distances.
func TestHeuristicReusesClasses(t *testing.T) {
	v := clustered(2500, 16, 21)
	for _, sc := range spaceCases[:4] {
		s, _ := sc.space(v, v, 16)
		p := testParams(12, 60)
		fast, fs, err := Build(context.Background(), s, p, Options{Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		full, ss, _ := Build(context.Background(), s, p, Options{Seed: 4, fullHeuristic: true})
		ca, ma := fast.Encode()
		cb, mb := full.Encode()
		if !reflect.DeepEqual(ca, cb) || !reflect.DeepEqual(ma, mb) {
			t.Fatalf("%s: the incremental heuristic built another graph", sc.name)
		}
		t.Logf("%s: %d distances, %d from scratch", sc.name, fs.Distances, ss.Distances)
		if fs.Distances >= ss.Distances {
			t.Fatalf("%s: %d distances, %d from scratch", sc.name, fs.Distances, ss.Distances)
		}
	}
}

func TestBuildSmallAndDuplicates(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 50} {
		v := make([]float32, n*4) // all identical: the heuristic prunes every duplicate
		s, _ := NewFlat(v, 4, "l2")
		g, _, err := Build(context.Background(), s, testParams(4, 10), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if g.N != n {
			t.Fatalf("n %d: graph of %d", n, g.N)
		}
		checkGraph(t, g)
	}
}

func TestBuildCancelled(t *testing.T) {
	v := clustered(3000, 8, 3)
	s, _ := NewFlat(v, 8, "l2")
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, _, err := Build(ctx, s, testParams(8, 40), Options{OnInserted: func(int) {
		if calls++; calls == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

// TestReuse builds a graph over the first 60% of the vectors, keeps it
// under shifted ids with a tenth of its nodes dropped, and checks the
// result against a graph built from nothing over the same vectors.
func TestReuse(t *testing.T) {
	const n, dim = 3000, 32
	v := clustered(n, dim, 4)
	for _, sc := range spaceCases {
		t.Run(sc.name, func(t *testing.T) {
			base := 1800
			oldSpace, err := sc.space(v[:base*dim], v, dim)
			if err != nil {
				t.Fatal(err)
			}
			p := testParams(16, 100)
			old, _, err := Build(context.Background(), oldSpace, p, Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			// The merged order: 200 rows of another input first, then the
			// old graph's survivors, then the rest.
			r := rand.New(rand.NewPCG(5, 5))
			newID := make([]int32, base)
			order := make([]int, 0, n)
			for i := base; i < base+200; i++ {
				order = append(order, i)
			}
			dropped := 0
			for u := 0; u < base; u++ {
				if r.IntN(10) == 0 || u == old.Entry {
					newID[u] = -1
					dropped++
					continue
				}
				newID[u] = int32(len(order))
				order = append(order, u)
			}
			for i := base + 200; i < n; i++ {
				order = append(order, i)
			}
			merged := make([]float32, 0, len(order)*dim)
			for _, i := range order {
				merged = append(merged, v[i*dim:(i+1)*dim]...)
			}
			s, err := sc.space(merged, v, dim)
			if err != nil {
				t.Fatal(err)
			}
			g, st, err := Reuse(context.Background(), s, old, newID, true, Options{Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			checkGraph(t, g)
			if st.Reused != base-dropped || st.Dropped != dropped || st.Inserted != len(order)-(base-dropped) || st.Repaired == 0 {
				t.Fatalf("stats %+v (dropped %d)", st, dropped)
			}
			for u := 0; u < g.N; u++ { // every stored distance is the space's
				ids, dist := g.Neighbors(u, 0)
				for k, w := range ids {
					if d := s.Dist(u, int(w)); math.Abs(float64(d-dist[k])) > 1e-4*math.Max(1, math.Abs(float64(d))) {
						t.Fatalf("edge %d-%d: stored %v, space %v", u, w, dist[k], d)
					}
				}
			}
			full, fst, err := Build(context.Background(), s, p, Options{Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			rReuse, rFull := recallAt(g, s, 10, 64, 60), recallAt(full, s, 10, 64, 60)
			t.Logf("%s: recall reuse %.3f full %.3f; distances %d vs %d", sc.name, rReuse, rFull, st.Distances, fst.Distances)
			if rReuse < rFull-0.02 {
				t.Fatalf("recall reuse %.3f, full build %.3f", rReuse, rFull)
			}
			if st.Distances >= fst.Distances {
				t.Fatalf("reuse computed %d distances, a full build %d", st.Distances, fst.Distances)
			}
		})
	}
}

func TestReuseNothingSurvives(t *testing.T) {
	v := clustered(400, 8, 6)
	s, _ := NewFlat(v, 8, "l2")
	old, _, _ := Build(context.Background(), s, testParams(8, 40), Options{})
	newID := make([]int32, old.N)
	for i := range newID {
		newID[i] = -1
	}
	g, st, err := Reuse(context.Background(), s, old, newID, true, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkGraph(t, g)
	if st.Inserted != 400 || st.Reused != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, _, err := Reuse(context.Background(), s, old, newID[:3], true, Options{}); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("short mapping: %v", err)
	}
	newID[0], newID[1] = 7, 7
	if _, _, err := Reuse(context.Background(), s, old, newID, true, Options{}); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("repeated id: %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	v := clustered(1500, 16, 7)
	s, _ := NewFlat(v, 16, "l2")
	g, _, err := Build(context.Background(), s, testParams(10, 50), Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	cols, meta := g.Encode()
	if len(meta.LevelOffsets) != g.Params.MaxLevel+1 || meta.Rows() != g.Rows() || meta.Nodes() != g.N {
		t.Fatalf("metadata %+v for %d nodes, %d rows", meta, g.N, g.Rows())
	}
	b, err := meta.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	meta2, err := ParseMetadata(string(b))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(meta2, cols[0], cols[1], cols[2], g.N)
	if err != nil {
		t.Fatal(err)
	}
	cols2, meta3 := d.Encode()
	if !reflect.DeepEqual(cols, cols2) || fmt.Sprint(meta.LevelOffsets, meta.EntryPoint) != fmt.Sprint(meta3.LevelOffsets, meta3.EntryPoint) {
		t.Fatal("decode(encode(g)) differs from g")
	}
	// Without distances the structure still decodes.
	if _, err := Decode(meta2, cols[0], cols[1], nil, g.N); err != nil {
		t.Fatal(err)
	}
}
