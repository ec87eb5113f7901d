package hnsw

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
)

// Options tune Build and Reuse. The zero value means defaults.
type Options struct {
	// Seed seeds the level draws of inserted nodes: the same storage,
	// parameters and seed give the same graph.
	Seed uint64
	// OnInserted, when set, is called from the building goroutine with the
	// number of nodes inserted since its last call, every progressEvery
	// insertions and once at the end.
	OnInserted func(n int)

	fullHeuristic bool // tests: check every candidate (see builder.heuristic)
}

// progressEvery is how many insertions go between progress reports and
// cancellation checks (a few milliseconds of work).
const progressEvery = 256

// Stats counts what a build did.
type Stats struct {
	// Inserted nodes went through a search of the graph.
	Inserted int
	// Reused nodes were kept from an input graph with their edges.
	Reused int
	// Dropped input-graph nodes were removed (rows the merge dropped).
	Dropped int
	// Repaired lists lost a neighbour to a dropped node and were rebuilt.
	Repaired int
	// Linked nodes were unreachable from the entry point on level 0 and
	// got an in-edge after the build.
	Linked int
	// Distances is the number of distance computations.
	Distances int64
}

func (s *Stats) add(o Stats) {
	s.Inserted += o.Inserted
	s.Reused += o.Reused
	s.Dropped += o.Dropped
	s.Repaired += o.Repaired
	s.Linked += o.Linked
	s.Distances += o.Distances
}

// Build builds the graph of every vector of s, inserting them in id
// order, as Lance's HNSW builder does (Malkov & Yashunin, Algorithms 1, 2
// and 4): a node draws its top level l with P(l ≥ k) = m^-k (capped at
// MaxLevel-1), descends greedily from the entry point to level l, then on
// each level l…0 keeps m neighbours chosen by the heuristic from an
// ef_construction-wide beam, and links back to them; a list over its
// limit (2m on level 0, m above) is pruned by the same heuristic. Nodes
// left without a path from the entry point on level 0 are then linked
// from a reachable neighbour.
func Build(ctx context.Context, s *Space, p Params, opts Options) (*Graph, Stats, error) {
	b := newBuilder(newGraph(p, s.Len(), 2*p.M+1), s, opts)
	err := b.insertRange(ctx, func(yield func(int) bool) {
		for u := 0; u < s.Len(); u++ {
			if !yield(u) {
				return
			}
		}
	})
	if err != nil {
		return nil, b.stats, err
	}
	b.connectStranded()
	return b.g, b.stats, nil
}

type item struct {
	id uint32
	d  float32
	st status // in the heuristic: what an earlier selection found
}

// status is what the last heuristic selection over a list found about an
// entry: selected (nearer to the node than to every nearer selected
// entry), rejected (some nearer selected entry is nearer to it), or
// nothing (added since, or never checked).
type status uint8

const (
	stNew status = iota
	stSelected
	stRejected
)

// sortByDist sorts items nearest first, stably (the heuristic's reuse of
// earlier selections relies on equal distances keeping their order).
// Lists are short (a beam of ef_construction, or a neighbour list and one
// more): insertion sort up to 48 items, the standard stable sort above.
func sortByDist(a []item) {
	if len(a) > 48 {
		slices.SortStableFunc(a, func(x, y item) int { return cmp.Compare(x.d, y.d) })
		return
	}
	for i := 1; i < len(a); i++ {
		x := a[i]
		j := i
		for ; j > 0 && a[j-1].d > x.d; j-- {
			a[j] = a[j-1]
		}
		a[j] = x
	}
}

// builder holds one graph under construction and the scratch its searches
// reuse. Not safe for concurrent use: partitions build in parallel, each
// with its own builder.
type builder struct {
	g     *Graph
	s     *Space
	m, m0 int // neighbours kept on levels ≥ 1, and on level 0
	ef    int
	ml    float64
	rng   *rand.Rand
	opts  Options
	stats Stats

	q        query
	visited  []uint32 // visited[u] == epoch: seen by the current search
	epoch    uint32
	cand     []item // min-heap of the beam's frontier
	res      []item // max-heap of the beam's best ef
	sel, tmp []item
	pruned   []int32 // heuristic: candidates not selected, in order
	// fullHeuristic checks every candidate, as if no list had been
	// classified before (tests compare the two).
	fullHeuristic bool
}

func newBuilder(g *Graph, s *Space, opts Options) *builder {
	p := g.Params
	return &builder{
		g: g, s: s, m: p.M, m0: 2 * p.M, ef: max(p.EfConstruction, 1),
		ml:            1 / math.Log(float64(p.M)),
		rng:           rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15)),
		opts:          opts,
		visited:       make([]uint32, g.N),
		fullHeuristic: opts.fullHeuristic,
	}
}

// insertRange inserts the nodes nodes yields, checking for cancellation
// and reporting progress as it goes.
func (b *builder) insertRange(ctx context.Context, nodes func(yield func(int) bool)) error {
	var err error
	pending := 0
	nodes(func(u int) bool {
		b.insert(u, b.randomLevel())
		b.stats.Inserted++
		if pending++; pending == progressEvery {
			if b.opts.OnInserted != nil {
				b.opts.OnInserted(pending)
			}
			pending = 0
			if err = ctx.Err(); err != nil {
				return false
			}
		}
		return true
	})
	if pending > 0 && b.opts.OnInserted != nil {
		b.opts.OnInserted(pending)
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// randomLevel draws a top level: floor(-ln U / ln m), U uniform in (0, 1],
// capped at MaxLevel-1.
func (b *builder) randomLevel() int {
	u := 1 - b.rng.Float64()
	l := int(-math.Log(u) * b.ml)
	return min(l, b.g.Params.MaxLevel-1, maxLevels-1)
}

func (b *builder) qdist(v uint32) float32 {
	b.stats.Distances++
	return b.q.dist(int(v))
}

func (b *builder) between(u, v uint32) float32 {
	b.stats.Distances++
	return b.s.Dist(int(u), int(v))
}

// insert adds node u (on level 0 only, without edges, referenced by no
// one) to the graph with top level level.
func (b *builder) insert(u, level int) {
	g := b.g
	g.setLevel(u, level)
	if g.Entry < 0 {
		g.Entry = u
		return
	}
	b.q.reset(b.s, u)
	ep := item{id: uint32(g.Entry), d: 0}
	ep.d = b.qdist(ep.id)
	top := g.TopLevel()
	for l := top; l > level; l-- {
		ep = b.greedy(ep, l)
	}
	for l := min(level, top); l >= 0; l-- {
		w := b.searchLayer(ep, l, u)
		nearest := w[0]
		var nsel, nrej int
		b.sel, nsel, nrej = b.heuristic(w, b.m, b.sel)
		ids, dist := make([]uint32, len(b.sel)), make([]float32, len(b.sel))
		for i, e := range b.sel {
			ids[i], dist[i] = e.id, e.d
		}
		g.setNeighbors(u, l, ids, dist)
		g.setClasses(u, l, nsel, nrej)
		for i, v := range ids {
			b.link(v, uint32(u), dist[i], l)
		}
		ep = nearest
	}
	if level > top {
		g.Entry = u
	}
}

// greedy walks level l from ep to the nearest node it can reach by always
// moving to a nearer neighbour.
func (b *builder) greedy(ep item, l int) item {
	for {
		improved := false
		ids, _ := b.g.Neighbors(int(ep.id), l)
		for _, v := range ids {
			if d := b.qdist(v); d < ep.d {
				ep, improved = item{id: v, d: d}, true
			}
		}
		if !improved {
			return ep
		}
	}
}

// searchLayer returns the ef_construction nodes nearest to the query that
// a beam search of level l from ep finds, nearest first. The slice is the
// builder's scratch, valid until the next search. Node self (if ≥ 0) is
// never visited.
func (b *builder) searchLayer(ep item, l int, self int) []item {
	b.nextEpoch()
	b.visited[ep.id] = b.epoch
	if self >= 0 {
		b.visited[self] = b.epoch
	}
	b.cand = append(b.cand[:0], ep)
	b.res = append(b.res[:0], ep)
	for len(b.cand) > 0 {
		c := popMin(&b.cand)
		if c.d > b.res[0].d {
			break
		}
		ids, _ := b.g.Neighbors(int(c.id), l)
		for _, v := range ids {
			if b.visited[v] == b.epoch {
				continue
			}
			b.visited[v] = b.epoch
			d := b.qdist(v)
			if len(b.res) < b.ef || d < b.res[0].d {
				pushMin(&b.cand, item{id: v, d: d})
				pushMax(&b.res, item{id: v, d: d})
				if len(b.res) > b.ef {
					popMax(&b.res)
				}
			}
		}
	}
	slices.SortFunc(b.res, func(x, y item) int { return cmp.Compare(x.d, y.d) }) // all new: order of ties is free
	return b.res
}

func (b *builder) nextEpoch() {
	b.epoch++
	if b.epoch == 0 {
		clear(b.visited)
		b.epoch = 1
	}
}

// heuristic selects k of cands (sorted nearest first), or all of them
// when there are no more, as pylance 14.0.2 does (Algorithm 4 with
// keepPrunedConnections): a candidate is selected when it is nearer to
// the query than to every candidate selected before it, and the list is
// then filled up to k with the nearest of the others. The selected come
// first, then the fill, each nearest first (the order pylance's lists
// have). The result is appended to out[:0], with the number of selected
// and of filled entries (both 0 when every candidate is kept unchecked).
//
// Candidates that an earlier selection over the same list classified
// (status) are not checked again where the answer cannot have changed,
// which makes pruning a full list for one more neighbour cheap. The
// result is the one a selection from scratch gives:
//   - an entry selected before was nearer than every entry selected
//     before it then; it stays selected unless one of the entries newly
//     selected before it now is nearer to it (only those are checked);
//   - an entry rejected before had a nearer selected entry nearer to it;
//     while no entry selected before has been dropped ahead of it, that
//     witness is still selected and it stays rejected unchecked.
func (b *builder) heuristic(cands []item, k int, out []item) ([]item, int, int) {
	out = out[:0]
	if len(cands) <= k {
		return append(out, cands...), 0, 0
	}
	b.pruned = b.pruned[:0]
	dropped := false // an entry selected before was not selected again
	for i, c := range cands {
		if len(out) >= k {
			break
		}
		keep := true
		switch {
		case c.st == stSelected && !b.fullHeuristic:
			for _, r := range out {
				if r.st != stSelected && b.between(c.id, r.id) <= c.d {
					keep = false
					break
				}
			}
		case c.st == stRejected && !dropped && !b.fullHeuristic:
			keep = false
		default:
			for _, r := range out {
				if b.between(c.id, r.id) <= c.d {
					keep = false
					break
				}
			}
		}
		if keep {
			out = append(out, c)
		} else {
			if c.st == stSelected {
				dropped = true
			}
			b.pruned = append(b.pruned, int32(i))
		}
	}
	nsel := len(out)
	for _, i := range b.pruned {
		if len(out) >= k {
			break
		}
		out = append(out, cands[i])
	}
	return out, nsel, len(out) - nsel
}

// link adds u (at distance d) to v's list on level l, pruning the list by
// the heuristic when it is full.
func (b *builder) link(v, u uint32, d float32, l int) {
	g := b.g
	ids, dist := g.Neighbors(int(v), l)
	limit := b.m
	if l == 0 {
		limit = b.m0
	}
	if len(ids) < limit && (l > 0 || len(ids) < g.stride) {
		if l == 0 {
			o := int(v)*g.stride + len(ids)
			g.ids0[o], g.dist0[o] = u, d
			g.cnt0[v]++
		} else {
			a := &g.upper[v][l-1]
			a.ids, a.dist = append(a.ids, u), append(a.dist, d)
		}
		return
	}
	nsel, nrej := g.classes(int(v), l)
	b.tmp = b.tmp[:0]
	for i, w := range ids {
		st := stNew
		switch {
		case i < nsel:
			st = stSelected
		case i < nsel+nrej:
			st = stRejected
		}
		b.tmp = append(b.tmp, item{w, dist[i], st})
	}
	b.tmp = append(b.tmp, item{u, d, stNew})
	b.prune(int(v), l, limit)
}

// prune replaces v's list on level l by the heuristic's choice of up to
// limit of the candidates in b.tmp (sorted here).
func (b *builder) prune(v, l, limit int) {
	sortByDist(b.tmp)
	var nsel, nrej int
	b.sel, nsel, nrej = b.heuristic(b.tmp, limit, b.sel)
	ids, dist := b.g.Neighbors(v, l)
	ids, dist = ids[:0], dist[:0]
	for _, e := range b.sel {
		ids, dist = append(ids, e.id), append(dist, e.d)
	}
	if l == 0 {
		b.g.cnt0[v] = uint16(len(ids))
	} else {
		b.g.upper[v][l-1] = adjacency{ids: ids, dist: dist}
	}
	b.g.setClasses(v, l, nsel, nrej)
}

// connectStranded gives every node a level-0 path from the entry point,
// as Lance's builder does after its (parallel) insertion: a query only
// enumerates level 0, so a node no edge leads to could never be found. A
// stranded node is linked from its nearest out-neighbour that is reachable
// and has not anchored another node yet (each anchor takes one edge over
// its limit, which the stride leaves room for); a node whose out-
// neighbours are all stranded waits until one of them is linked; what is
// left is chained onto the last linked node. O(N + E).
func (b *builder) connectStranded() {
	g := b.g
	if g.N == 0 {
		return
	}
	reach := make([]bool, g.N)
	var queue []uint32
	var fresh []uint32
	mark := func(start uint32) {
		fresh = fresh[:0]
		if reach[start] {
			return
		}
		reach[start] = true
		queue = append(queue[:0], start)
		for len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			fresh = append(fresh, c)
			ids, _ := g.Neighbors(int(c), 0)
			for _, v := range ids {
				if !reach[v] {
					reach[v] = true
					queue = append(queue, v)
				}
			}
		}
	}
	mark(uint32(g.Entry))
	if len(fresh) == g.N {
		return
	}
	waiting := map[uint32][]uint32{}
	var ready []uint32
	for u := 0; u < g.N; u++ {
		if !reach[u] {
			ready = append(ready, uint32(u))
		}
	}
	anchored := make([]bool, g.N)
	tail := -1
	room := func(a int) bool { return !anchored[a] && int(g.cnt0[a]) < g.stride }
	linkFrom := func(a int, u uint32, d float32) {
		o := a*g.stride + int(g.cnt0[a])
		g.ids0[o], g.dist0[o] = u, d
		g.cnt0[a]++
		anchored[a] = true
		tail = int(u)
		b.stats.Linked++
		mark(u)
		for _, v := range fresh {
			if w, ok := waiting[v]; ok {
				ready = append(ready, w...)
				delete(waiting, v)
			}
		}
	}
	var isolated []uint32
	for len(ready) > 0 {
		u := ready[0]
		ready = ready[1:]
		if reach[u] {
			continue
		}
		ids, dist := g.Neighbors(int(u), 0)
		best, bestD := -1, float32(0)
		anyReach := false
		for k, v := range ids {
			if !reach[v] {
				continue
			}
			anyReach = true
			if room(int(v)) && (best < 0 || dist[k] < bestD) {
				best, bestD = int(v), dist[k]
			}
		}
		switch {
		case best >= 0:
			linkFrom(best, u, bestD)
		case anyReach:
			isolated = append(isolated, u) // every reachable neighbour has anchored already
		default:
			waitedOn := false
			for _, v := range ids {
				waiting[v] = append(waiting[v], u)
				waitedOn = true
			}
			if !waitedOn {
				isolated = append(isolated, u)
			}
		}
	}
	// Nodes still stranded: chain them from the last linked node (which
	// has anchored nothing yet), or any reachable node with room.
	scan := 0
	for _, group := range [][]uint32{isolated, mapValues(waiting)} {
		for _, u := range group {
			if reach[u] {
				continue
			}
			a := tail
			if a < 0 || !reach[a] || !room(a) {
				for a = -1; scan < g.N; scan++ {
					if reach[scan] && room(scan) {
						a = scan
						break
					}
				}
			}
			if a < 0 {
				return // no node has room left (cannot happen: every linked node has)
			}
			linkFrom(a, u, b.between(uint32(a), u))
		}
	}
}

func mapValues(m map[uint32][]uint32) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []uint32
	for _, k := range keys {
		out = append(out, m[k]...)
	}
	return out
}

// Binary heaps of items, by distance: the frontier (min) and the results
// (max).

func pushMin(h *[]item, x item) {
	a := append(*h, x)
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if a[p].d <= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
	*h = a
}

func popMin(h *[]item) item {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && a[l].d < a[s].d {
			s = l
		}
		if r < n && a[r].d < a[s].d {
			s = r
		}
		if s == i {
			break
		}
		a[s], a[i] = a[i], a[s]
		i = s
	}
	*h = a
	return top
}

func pushMax(h *[]item, x item) {
	a := append(*h, x)
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if a[p].d >= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
	*h = a
}

func popMax(h *[]item) item {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, s := 2*i+1, 2*i+2, i
		if l < n && a[l].d > a[s].d {
			s = l
		}
		if r < n && a[r].d > a[s].d {
			s = r
		}
		if s == i {
			break
		}
		a[s], a[i] = a[i], a[s]
		i = s
	}
	*h = a
	return top
}
