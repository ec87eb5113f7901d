package hnsw

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// TestReuseRequantized reuses a graph built over SQ codes of other bounds:
// every kept edge's distance is recomputed on the new codes.
func TestReuseRequantized(t *testing.T) {
	const n, dim = 1200, 16
	v := clustered(n, dim, 8)
	oc, olo, ohi := sqEncode(v[:800*dim], v[:800*dim])
	oldSpace, _ := NewSQ(oc, dim, olo, ohi, "l2")
	old, _, err := Build(context.Background(), oldSpace, testParams(8, 60), Options{})
	if err != nil {
		t.Fatal(err)
	}
	nc, nlo, nhi := sqEncode(v, v)
	s, _ := NewSQ(nc, dim, nlo, nhi, "l2")
	newID := make([]int32, 800)
	for i := range newID {
		newID[i] = int32(i)
	}
	g, st, err := Reuse(context.Background(), s, old, newID, false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkGraph(t, g)
	if st.Reused != 800 || st.Inserted != 400 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
	for u := 0; u < g.N; u++ {
		for l := 0; l <= g.Level(u); l++ {
			ids, dist := g.Neighbors(u, l)
			for k, w := range ids {
				if d := s.Dist(u, int(w)); d != dist[k] {
					t.Fatalf("edge %d-%d level %d: stored %v, space %v", u, w, l, dist[k], d)
				}
			}
		}
	}
}

// smallGraph encodes a built graph of n nodes (with several levels).
func smallGraph(t testing.TB, n int) (*Metadata, []*lancefile.Array) {
	v := clustered(n, 8, 11)
	s, _ := NewFlat(v, 8, "l2")
	p := testParams(4, 20) // m = 4: many levels
	g, _, err := Build(context.Background(), s, p, Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	cols, meta := g.Encode()
	if meta.Levels() < 3 {
		t.Fatalf("want a graph of several levels, got %v", meta.LevelOffsets)
	}
	return meta, cols
}

func cloneArray(a *lancefile.Array) *lancefile.Array {
	if a == nil {
		return nil
	}
	c := *a
	c.Values = append([]byte(nil), a.Values...)
	c.Offsets = append([]int64(nil), a.Offsets...)
	c.Items = cloneArray(a.Items)
	return &c
}

func putU32(a *lancefile.Array, i int, v uint32) { binary.LittleEndian.PutUint32(a.Values[4*i:], v) }

func TestDecodeCorrupt(t *testing.T) {
	meta, cols := smallGraph(t, 300)
	n := meta.Nodes()
	l1 := meta.LevelOffsets[1] // first level-1 row
	tests := []struct {
		name   string
		damage func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array)
		want   string
	}{
		{"neighbour out of range", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			putU32(nbrs.Items, 3, uint32(n+5))
			return ids, nbrs, dists
		}, "neighbour"},
		{"node id out of range", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			putU32(ids, l1, 1<<30)
			return ids, nbrs, dists
		}, "names node"},
		{"level 0 out of order", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			putU32(ids, 7, 8)
			return ids, nbrs, dists
		}, "level-0 row 7"},
		{"upper level repeats a node", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			putU32(ids, l1+1, binary.LittleEndian.Uint32(ids.Values[4*l1:]))
			return ids, nbrs, dists
		}, "after node"},
		{"level count disagrees with rows", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			m.LevelOffsets[len(m.LevelOffsets)-1]++
			return ids, nbrs, dists
		}, "rows"},
		{"level shifted by one row", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			m.LevelOffsets[2]-- // the last level-1 row is read as level 2
			return ids, nbrs, dists
		}, "not on level"},
		{"entry point not on top", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			m.EntryPoint = (m.EntryPoint + 1) % uint32(n)
			return ids, nbrs, dists
		}, "entry point"},
		{"distances of another length", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			dists.Offsets[1]--
			return ids, nbrs, dists
		}, "distances"},
		{"more nodes than storage rows", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			return ids, nbrs, dists
		}, "storage rows"},
		{"missing column", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			return ids, nil, dists
		}, "columns"},
		{"neighbours of the wrong type", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			return ids, ids, dists
		}, "want a list"},
		{"offsets past the items", func(m *Metadata, ids, nbrs, dists *lancefile.Array) (*lancefile.Array, *lancefile.Array, *lancefile.Array) {
			nbrs.Offsets[len(nbrs.Offsets)-1] += 100
			return ids, nbrs, dists
		}, "items"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := *meta
			m.LevelOffsets = append([]int(nil), meta.LevelOffsets...)
			ids, nbrs, dists := tc.damage(&m, cloneArray(cols[0]), cloneArray(cols[1]), cloneArray(cols[2]))
			maxNodes := n
			if tc.name == "more nodes than storage rows" {
				maxNodes = n - 1
			}
			_, err := Decode(&m, ids, nbrs, dists, maxNodes)
			if !errors.Is(err, errkind.Corrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want corrupt mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		in, want string // want "" = valid
	}{
		{`{"entry_point":3,"params":{"max_level":3,"m":20,"ef_construction":150,"prefetch_distance":2},"level_offsets":[0,10,12,12]}`, ""},
		{`{"entry_point":0,"params":{"max_level":2,"m":20,"ef_construction":150,"prefetch_distance":null,"parallel_limit":4},"level_offsets":[0,1,1]}`, ""},
		{`{"entry_point":10,"params":{"max_level":3,"m":20,"ef_construction":150},"level_offsets":[0,10,12,12]}`, "entry point"},
		{`{"entry_point":0,"params":{"max_level":3,"m":20,"ef_construction":150},"level_offsets":[0,10,9,12]}`, "decrease"},
		{`{"entry_point":0,"params":{"max_level":3,"m":20,"ef_construction":150},"level_offsets":[0,10,12,20]}`, "more than"},
		{`{"entry_point":0,"params":{"max_level":3,"m":20,"ef_construction":150},"level_offsets":[1,10]}`, "start"},
		{`{"entry_point":0,"params":{"max_level":0,"m":20,"ef_construction":150},"level_offsets":[0,1]}`, "max_level"},
		{`{"entry_point":0,"params":{"max_level":3,"m":1,"ef_construction":150},"level_offsets":[0,1]}`, "m 1"},
		{`{"entry_point":0,"params":{"max_level":3,"m":20,"ef_construction":0},"level_offsets":[0,1]}`, "ef_construction"},
		{`{"entry_point":0,"level_offsets":[0,1]}`, "no params"},
		{`{"entry_point":0,"params":{"max_level":3,"m":20,"ef_construction":150},"level_offsets":[0]}`, "level offsets"},
		{`{"entry_point":-1}`, "graph metadata"},
		{`[1,2]`, "graph metadata"},
	}
	for _, tc := range tests {
		m, err := ParseMetadata(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.want != "" && (!errors.Is(err, errkind.Corrupt) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: err = %v, want corrupt mentioning %q", tc.in, err, tc.want)
		case tc.want == "":
			// Unknown keys survive a rewrite of the params.
			b, _ := m.Marshal()
			if strings.Contains(tc.in, "parallel_limit") != strings.Contains(string(b), "parallel_limit") {
				t.Errorf("%s: rewritten as %s", tc.in, b)
			}
		}
	}
	list, err := ParseList(`["", "{\"entry_point\":0,\"params\":{\"max_level\":7,\"m\":20,\"ef_construction\":150,\"prefetch_distance\":2},\"level_offsets\":[0,3,3,3,3,3,3,3]}"]`)
	if err != nil || len(list) != 2 || list[0] != nil || list[1].Nodes() != 3 || list[1].Levels() != 1 {
		t.Fatalf("ParseList: %v %v", list, err)
	}
	b, _ := MarshalList(list)
	if again, err := ParseList(string(b)); err != nil || len(again) != 2 || again[1].Rows() != 3 {
		t.Fatalf("MarshalList: %s %v", b, err)
	}
	if _, err := ParseList(`{"a":1}`); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("not a list: %v", err)
	}
}

func TestParamsEqual(t *testing.T) {
	a, b := DefaultParams(), DefaultParams()
	if !a.Equal(b) {
		t.Fatal("defaults differ")
	}
	b.M = 16
	if a.Equal(b) || !strings.Contains(b.String(), "m=16") {
		t.Fatalf("%v equals %v", a, b)
	}
	b = DefaultParams()
	b.PrefetchDistance = nil
	if a.Equal(b) {
		t.Fatal("prefetch distance ignored")
	}
}

func TestSpaceErrors(t *testing.T) {
	if _, err := NewFlat(make([]float32, 10), 3, "l2"); !errors.Is(err, errkind.InvalidInput) {
		t.Errorf("ragged flat: %v", err)
	}
	if _, err := NewFlat(nil, 3, "hamming"); !errors.Is(err, errkind.Unsupported) {
		t.Errorf("hamming: %v", err)
	}
	if _, err := NewSQ(make([]byte, 10), 4, 0, 1, "l2"); !errors.Is(err, errkind.InvalidInput) {
		t.Errorf("ragged sq: %v", err)
	}
	if _, err := NewPQModel(make([]float32, 256*8), 4, 8, 8, "l2"); err != nil {
		t.Errorf("pq model: %v", err)
	}
	if _, err := NewPQModel(make([]float32, 256*8), 3, 8, 8, "l2"); !errors.Is(err, errkind.InvalidInput) {
		t.Errorf("sub-vectors not dividing the dimension: %v", err)
	}
	if _, err := NewPQModel(make([]float32, 256*8), 4, 6, 8, "l2"); !errors.Is(err, errkind.Unsupported) {
		t.Errorf("6-bit PQ: %v", err)
	}
	m, _ := NewPQModel(make([]float32, 16*8), 4, 4, 8, "l2")
	if _, err := m.Space(make([]byte, 3)); !errors.Is(err, errkind.InvalidInput) {
		t.Errorf("ragged pq codes: %v", err)
	}
}

// TestSpaceDistances pins the distance formulas against direct
// computations (the Python tests pin them against pylance's _distance).
func TestSpaceDistances(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{2, 0, 3, 1}
	v := append(append([]float32(nil), a...), b...)
	l2, _ := NewFlat(v, 4, "l2")
	dot, _ := NewFlat(v, 4, "dot")
	cos, _ := NewFlat(v, 4, "cosine")
	if d := l2.Dist(0, 1); d != 1+4+0+9 {
		t.Errorf("l2 %v", d)
	}
	if d := dot.Dist(0, 1); d != 1-(2+0+9+4) {
		t.Errorf("dot %v", d)
	}
	want := 1 - 15/(math.Sqrt(30)*math.Sqrt(14))
	if d := cos.Dist(0, 1); math.Abs(float64(d)-want) > 1e-6 {
		t.Errorf("cosine %v, want %v", d, want)
	}
	codes := []byte{0, 10, 255, 3, 4, 10, 0, 3}
	sq, _ := NewSQ(codes, 4, -1, 1, "l2")
	if d, want := sq.Dist(0, 1), float32(16+0+255*255+0)*4/(255*255); d != want {
		t.Errorf("sq l2 %v, want %v", d, want)
	}
	sqd, _ := NewSQ(codes, 4, -1, 1, "dot")
	dec := func(c byte) float64 { return -1 + float64(c)*2/255 }
	var dp float64
	for i := 0; i < 4; i++ {
		dp += dec(codes[i]) * dec(codes[4+i])
	}
	if d := sqd.Dist(0, 1); math.Abs(float64(d)-(1-dp)) > 1e-5 {
		t.Errorf("sq dot %v, want %v", d, 1-dp)
	}
	// PQ, 2 sub-vectors of 2 dims, 4-bit: centroid j of sub-vector s is
	// (s+j, j).
	cb := make([]float32, 2*16*2)
	for s := 0; s < 2; s++ {
		for j := 0; j < 16; j++ {
			cb[(s*16+j)*2], cb[(s*16+j)*2+1] = float32(s+j), float32(j)
		}
	}
	pm, _ := NewPQModel(cb, 2, 4, 4, "l2")
	ps, _ := pm.Space([]byte{0x31, 0x52}) // vector 0: codes (1, 3); vector 1: (2, 5)
	// sub 0: (1,1) vs (2,2) → 2; sub 1: (4,3) vs (6,5) → 8
	if d := ps.Dist(0, 1); d != 10 {
		t.Errorf("pq l2 %v", d)
	}
	var q query
	q.reset(ps, 0)
	if d := q.dist(1); d != 10 {
		t.Errorf("pq query %v", d)
	}
}

// Lance before 0.31 leaves each upper level's entry-point row out of
// level_offsets (a partition of 0.23.2 held 76 rows for offsets ending at
// 70, max_level 7); FitRows recognises that layout and nothing else.
func TestFitRows(t *testing.T) {
	tests := []struct {
		name       string
		offsets    []int
		rows       int
		fits, old  bool
		wantOffset []int
	}{
		{"modern", []int{0, 62, 69, 72, 73, 74, 75, 76}, 76, true, false, []int{0, 62, 69, 72, 73, 74, 75, 76}},
		{"pre-0.31, from 0.23.2", []int{0, 62, 68, 70, 70, 70, 70, 70}, 76, true, true, []int{0, 62, 69, 72, 73, 74, 75, 76}},
		{"one row short", []int{0, 62, 68, 70, 70, 70, 70, 70}, 75, false, false, nil},
		{"one level only", []int{0, 10}, 11, false, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &Metadata{LevelOffsets: append([]int(nil), tc.offsets...)}
			fits, old := m.FitRows(tc.rows)
			if fits != tc.fits || old != tc.old {
				t.Fatalf("FitRows = %v, %v; want %v, %v", fits, old, tc.fits, tc.old)
			}
			if fits && !slices.Equal(m.LevelOffsets, tc.wantOffset) {
				t.Fatalf("offsets %v, want %v", m.LevelOffsets, tc.wantOffset)
			}
		})
	}
}
