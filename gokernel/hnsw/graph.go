package hnsw

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// Column names of a graph in index.idx. Part of the format.
const (
	ColVectorID  = "__vector_id"
	ColNeighbors = "__neighbors"
	ColDistance  = "_distance"
)

// Fields returns index.idx's schema for an HNSW sub-index, as Lance writes
// it: __vector_id UInt32, __neighbors List<UInt32>, _distance
// List<Float32>, every field and item nullable. Lance readers older than
// 8.0 read _distance unconditionally, so it is always written.
func Fields() []*lancefile.Field {
	return []*lancefile.Field{
		lancefile.NewField(ColVectorID, lancefile.Primitive(lancefile.KindUint32), true),
		lancefile.NewListField(ColNeighbors, lancefile.Primitive(lancefile.KindUint32), true, true),
		lancefile.NewListField(ColDistance, lancefile.Primitive(lancefile.KindFloat32), true, true),
	}
}

// Graph is the HNSW graph of one IVF partition. Node ids are row positions
// in the partition's storage (auxiliary.idx rows).
//
// Invariants:
//  1. levels[u] is u's top level (0-based): u is on levels 0 … levels[u].
//  2. Level-0 neighbours of u are ids0[u·stride : u·stride+cnt0[u]] with
//     their distances at the same positions of dist0.
//  3. upper[u] is nil when levels[u] == 0, else it has levels[u] lists:
//     upper[u][l-1] holds u's neighbours on level l ≥ 1.
//  4. Every neighbour id is < N; a neighbour on level l is on level l too
//     (decoded graphs are checked; built graphs hold it by construction).
//  5. Entry is a node on the top level, or -1 when N == 0.
//
// A Graph is not safe for concurrent use.
type Graph struct {
	Params Params
	N      int
	Entry  int

	levels []uint8
	stride int
	ids0   []uint32
	dist0  []float32
	cnt0   []uint16
	// class0 packs, per node, the heuristic classes of its level-0 list:
	// the number of selected entries (low 16 bits), first in the list,
	// and of rejected ones after them (high 16 bits); entries after those
	// were added since (see builder.heuristic).
	class0 []uint32
	upper  [][]adjacency
}

type adjacency struct {
	ids        []uint32
	dist       []float32
	nsel, nrej uint16
}

// newGraph allocates a graph of n nodes, all on level 0 without neighbours,
// with room for stride level-0 neighbours each.
func newGraph(p Params, n, stride int) *Graph {
	return &Graph{
		Params: p, N: n, Entry: -1, stride: stride,
		levels: make([]uint8, n),
		ids0:   make([]uint32, n*stride),
		dist0:  make([]float32, n*stride),
		cnt0:   make([]uint16, n),
		class0: make([]uint32, n),
		upper:  make([][]adjacency, n),
	}
}

// Level returns u's top level.
func (g *Graph) Level(u int) int { return int(g.levels[u]) }

// TopLevel is the entry point's level, or -1 for an empty graph.
func (g *Graph) TopLevel() int {
	if g.Entry < 0 {
		return -1
	}
	return int(g.levels[g.Entry])
}

// Neighbors returns u's neighbours on level l and their distances; the
// slices alias the graph and stay valid until it changes.
func (g *Graph) Neighbors(u, l int) ([]uint32, []float32) {
	if l == 0 {
		o := u * g.stride
		n := int(g.cnt0[u])
		return g.ids0[o : o+n], g.dist0[o : o+n]
	}
	a := g.upper[u][l-1]
	return a.ids, a.dist
}

// setNeighbors replaces u's list on level l (level-0 lists longer than
// the stride are refused by the caller), its entries unclassified.
func (g *Graph) setNeighbors(u, l int, ids []uint32, dist []float32) {
	if l == 0 {
		o := u * g.stride
		copy(g.ids0[o:], ids)
		copy(g.dist0[o:], dist)
		g.cnt0[u] = uint16(len(ids))
		g.class0[u] = 0
		return
	}
	a := &g.upper[u][l-1]
	a.ids = append(a.ids[:0], ids...)
	a.dist = append(a.dist[:0], dist...)
	a.nsel, a.nrej = 0, 0
}

// classes returns how many entries of u's list on level l lead it as
// selected, then as rejected, by the last heuristic over it.
func (g *Graph) classes(u, l int) (nsel, nrej int) {
	if l == 0 {
		c := g.class0[u]
		return int(c & 0xffff), int(c >> 16)
	}
	a := &g.upper[u][l-1]
	return int(a.nsel), int(a.nrej)
}

func (g *Graph) setClasses(u, l, nsel, nrej int) {
	if l == 0 {
		g.class0[u] = uint32(nsel) | uint32(nrej)<<16
		return
	}
	a := &g.upper[u][l-1]
	a.nsel, a.nrej = uint16(nsel), uint16(nrej)
}

// setLevel puts u on levels 0 … l (u must be on level 0 only).
func (g *Graph) setLevel(u, l int) {
	g.levels[u] = uint8(l)
	if l > 0 {
		g.upper[u] = make([]adjacency, l)
	}
}

// LevelCounts returns the number of nodes on each level, up to the top.
func (g *Graph) LevelCounts() []int {
	var counts []int
	for u := 0; u < g.N; u++ {
		for l := len(counts); l <= int(g.levels[u]); l++ {
			counts = append(counts, 0)
		}
		for l := 0; l <= int(g.levels[u]); l++ {
			counts[l]++
		}
	}
	return counts
}

// Edges is the number of edges on all levels.
func (g *Graph) Edges() int {
	n := 0
	for u := 0; u < g.N; u++ {
		n += int(g.cnt0[u])
		for _, a := range g.upper[u] {
			n += len(a.ids)
		}
	}
	return n
}

// Rows is the number of index.idx rows the graph encodes to (one per node
// and level).
func (g *Graph) Rows() int {
	n := 0
	for u := 0; u < g.N; u++ {
		n += int(g.levels[u]) + 1
	}
	return n
}

// Encode returns the graph as Lance writes a partition's sub-index rows
// (level 0 first; on each level the nodes of that level in ascending id,
// each with its neighbours and their distances) and its metadata. The
// level offsets have Params.MaxLevel+1 entries, as Lance pads them.
func (g *Graph) Encode() (cols []*lancefile.Array, meta *Metadata) {
	counts := g.LevelCounts()
	rows, edges := g.Rows(), g.Edges()
	vid := make([]byte, 0, 4*rows)
	offs := make([]int64, 1, rows+1)
	nb := make([]byte, 0, 4*edges)
	ds := make([]byte, 0, 4*edges)
	for l := range counts {
		for u := 0; u < g.N; u++ {
			if int(g.levels[u]) < l {
				continue
			}
			ids, dist := g.Neighbors(u, l)
			vid = binary.LittleEndian.AppendUint32(vid, uint32(u))
			for k, v := range ids {
				nb = binary.LittleEndian.AppendUint32(nb, v)
				ds = binary.LittleEndian.AppendUint32(ds, math.Float32bits(dist[k]))
			}
			offs = append(offs, offs[len(offs)-1]+int64(len(ids)))
		}
	}
	u32, f32 := lancefile.Primitive(lancefile.KindUint32), lancefile.Primitive(lancefile.KindFloat32)
	cols = []*lancefile.Array{
		{Type: u32, Len: rows, Values: vid},
		{Type: lancefile.ListType(), Len: rows, Offsets: offs, Items: &lancefile.Array{Type: u32, Len: edges, Values: nb}},
		{Type: lancefile.ListType(), Len: rows, Offsets: offs, Items: &lancefile.Array{Type: f32, Len: edges, Values: ds}},
	}
	levelOffsets := make([]int, 1, g.Params.MaxLevel+1)
	for l := 0; l < g.Params.MaxLevel; l++ {
		n := 0
		if l < len(counts) {
			n = counts[l]
		}
		levelOffsets = append(levelOffsets, levelOffsets[l]+n)
	}
	entry := uint32(0)
	if g.Entry > 0 {
		entry = uint32(g.Entry)
	}
	return cols, &Metadata{EntryPoint: entry, Params: g.Params, LevelOffsets: levelOffsets}
}

// Decode rebuilds a partition's graph from its index.idx rows (the three
// columns, all rows of the partition) and metadata. maxNodes is the number
// of storage rows the graph may address (the partition's rows in
// auxiliary.idx). dists may be nil (the distances are then zero and must
// be recomputed). Bad rows are errkind.Corrupt: ids out of range, a level
// whose rows do not match the offsets, a level-0 row that is not its own
// node, a node on a level without being on the level below, neighbours
// that are not on the level.
func Decode(meta *Metadata, ids, nbrs, dists *lancefile.Array, maxNodes int) (*Graph, error) {
	n := meta.Nodes()
	rows := meta.Rows()
	if n > maxNodes {
		return nil, fmt.Errorf("%w: hnsw: graph of %d nodes over %d storage rows", errkind.Corrupt, n, maxNodes)
	}
	if ids == nil || nbrs == nil || ids.Len != rows || nbrs.Len != rows || (dists != nil && dists.Len != rows) {
		return nil, fmt.Errorf("%w: hnsw: graph metadata counts %d rows, the columns hold %s", errkind.Corrupt, rows, colLens(ids, nbrs, dists))
	}
	if err := checkColumn(ids, lancefile.KindUint32, false); err != nil {
		return nil, err
	}
	if err := checkColumn(nbrs, lancefile.KindUint32, true); err != nil {
		return nil, err
	}
	if dists != nil {
		if err := checkColumn(dists, lancefile.KindFloat32, true); err != nil {
			return nil, err
		}
	}
	// Lance keeps at most 2m neighbours on level 0, plus one edge for an
	// anchor of a stranded node, and m above: longer lists are not its.
	stride := 2*meta.Params.M + 1
	for r := 0; r < rows; r++ {
		limit := stride
		if r >= meta.LevelOffsets[1] {
			limit = meta.Params.M
		}
		if k := nbrs.Offsets[r+1] - nbrs.Offsets[r]; k > int64(limit) {
			return nil, fmt.Errorf("%w: hnsw: row %d has %d neighbours, more than m = %d allows", errkind.Corrupt, r, k, meta.Params.M)
		}
	}
	g := newGraph(meta.Params, n, stride)
	u32 := func(a *lancefile.Array, i int64) uint32 { return binary.LittleEndian.Uint32(a.Values[4*i:]) }
	levels := 0
	for l := 0; l+1 < len(meta.LevelOffsets); l++ {
		lo, hi := meta.LevelOffsets[l], meta.LevelOffsets[l+1]
		if hi > lo {
			levels = l + 1
		}
		prev := int64(-1)
		for r := lo; r < hi; r++ {
			u := int64(u32(ids, int64(r)))
			switch {
			case u >= int64(n):
				return nil, fmt.Errorf("%w: hnsw: level %d row %d names node %d of %d", errkind.Corrupt, l, r-lo, u, n)
			case l == 0 && u != int64(r):
				return nil, fmt.Errorf("%w: hnsw: level-0 row %d names node %d (level 0 must list every node in order)", errkind.Corrupt, r, u)
			case u <= prev:
				return nil, fmt.Errorf("%w: hnsw: level %d lists node %d after node %d", errkind.Corrupt, l, u, prev)
			case l > 0 && int(g.levels[u]) != l-1:
				return nil, fmt.Errorf("%w: hnsw: node %d is on level %d but not on level %d", errkind.Corrupt, u, l, l-1)
			}
			prev = u
			if l > 0 {
				g.levels[u] = uint8(l)
			}
		}
	}
	// Neighbour lists, now that every node's level is known.
	for l := 0; l < levels; l++ {
		lo, hi := meta.LevelOffsets[l], meta.LevelOffsets[l+1]
		for r := lo; r < hi; r++ {
			u := int(u32(ids, int64(r)))
			a, b := nbrs.Offsets[r], nbrs.Offsets[r+1]
			if !nbrs.IsValid(r) {
				a, b = 0, 0
			}
			if dists != nil && dists.IsValid(r) && dists.Offsets[r+1]-dists.Offsets[r] != b-a {
				return nil, fmt.Errorf("%w: hnsw: node %d has %d neighbours and %d distances on level %d", errkind.Corrupt, u, b-a, dists.Offsets[r+1]-dists.Offsets[r], l)
			}
			if l == 0 {
				g.cnt0[u] = uint16(b - a)
			} else {
				if g.upper[u] == nil {
					g.upper[u] = make([]adjacency, g.levels[u])
				}
				g.upper[u][l-1] = adjacency{ids: make([]uint32, b-a), dist: make([]float32, b-a)}
			}
			outIDs, outDist := g.Neighbors(u, l)
			for k := a; k < b; k++ {
				v := u32(nbrs.Items, k)
				if v >= uint32(n) {
					return nil, fmt.Errorf("%w: hnsw: node %d has neighbour %d on level %d, in a graph of %d nodes", errkind.Corrupt, u, v, l, n)
				}
				if int(g.levels[v]) < l {
					return nil, fmt.Errorf("%w: hnsw: node %d has neighbour %d on level %d, which is not on that level", errkind.Corrupt, u, v, l)
				}
				outIDs[k-a] = v
				if dists != nil && dists.IsValid(r) {
					outDist[k-a] = math.Float32frombits(u32(dists.Items, dists.Offsets[r]+(k-a)))
				}
			}
		}
	}
	if n > 0 {
		g.Entry = int(meta.EntryPoint)
		if int(g.levels[g.Entry]) != levels-1 {
			return nil, fmt.Errorf("%w: hnsw: entry point %d is on level %d, the graph has %d levels", errkind.Corrupt, g.Entry, g.levels[g.Entry], levels)
		}
	}
	return g, nil
}

func checkColumn(a *lancefile.Array, item lancefile.Kind, list bool) error {
	if list {
		if a.Type.Kind != lancefile.KindList && a.Type.Kind != lancefile.KindLargeList {
			return fmt.Errorf("%w: hnsw: column of type %s, want a list", errkind.Corrupt, a.Type)
		}
		if len(a.Offsets) != a.Len+1 || a.Items == nil {
			return fmt.Errorf("%w: hnsw: list column without offsets", errkind.Corrupt)
		}
		for i := 0; i < a.Len; i++ {
			if a.Offsets[i+1] < a.Offsets[i] || a.Offsets[i] < 0 {
				return fmt.Errorf("%w: hnsw: list offsets decrease at row %d", errkind.Corrupt, i)
			}
		}
		if a.Offsets[a.Len] > int64(a.Items.Len) {
			return fmt.Errorf("%w: hnsw: list offsets reach %d of %d items", errkind.Corrupt, a.Offsets[a.Len], a.Items.Len)
		}
		a = a.Items
	}
	if a.Type.Kind != item || len(a.Values) < 4*a.Len {
		return fmt.Errorf("%w: hnsw: column of %s, want %s", errkind.Corrupt, a.Type, lancefile.Primitive(item))
	}
	if !list && a.NullCount() > 0 {
		return fmt.Errorf("%w: hnsw: %d null node ids", errkind.Corrupt, a.NullCount())
	}
	return nil
}

func colLens(as ...*lancefile.Array) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += "/"
		}
		if a == nil {
			s += "-"
		} else {
			s += fmt.Sprint(a.Len)
		}
	}
	return s
}
