package hnsw

import (
	"context"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Reuse builds the graph of every vector of s starting from an input's
// graph instead of from nothing (the way Lucene merges HNSW segments):
// node u of old becomes node newID[u] of the result, or is dropped when
// newID[u] < 0 (its row did not survive the merge). Dropped nodes are
// removed with their edges, and every list that pointed at one is rebuilt
// by the heuristic from its surviving neighbours and the dropped nodes'
// surviving neighbours. Then every vector of s that old did not place is
// inserted as Build inserts, and stranded nodes are linked.
//
// distancesValid says that old's edge distances were computed on the same
// vectors as s (same codes, same quantizer); otherwise the kept edges'
// distances are recomputed on s. The graph keeps old's parameters.
func Reuse(ctx context.Context, s *Space, old *Graph, newID []int32, distancesValid bool, opts Options) (*Graph, Stats, error) {
	if len(newID) != old.N {
		return nil, Stats{}, fmt.Errorf("%w: hnsw: %d ids for a graph of %d nodes", errkind.InvalidInput, len(newID), old.N)
	}
	n := s.Len()
	placed := make([]bool, n)
	for u, v := range newID {
		if v < 0 {
			continue
		}
		if int(v) >= n || placed[v] {
			return nil, Stats{}, fmt.Errorf("%w: hnsw: node %d maps to %d, out of range or taken (%d vectors)", errkind.InvalidInput, u, v, n)
		}
		placed[v] = true
	}
	stride := max(old.stride, 2*old.Params.M+1)
	g := newGraph(old.Params, n, stride)
	b := newBuilder(g, s, opts)
	for u, v := range newID {
		if v >= 0 {
			g.setLevel(int(v), old.Level(u))
			b.stats.Reused++
		} else {
			b.stats.Dropped++
		}
	}
	if err := b.reuseEdges(ctx, old, newID, distancesValid); err != nil {
		return nil, b.stats, err
	}
	g.Entry = -1
	if old.Entry >= 0 && newID[old.Entry] >= 0 {
		g.Entry = int(newID[old.Entry])
	} else {
		// The highest surviving node (the first of them) takes over.
		for u, v := range newID {
			if v >= 0 && (g.Entry < 0 || old.Level(u) > g.Level(g.Entry)) {
				g.Entry = int(v)
			}
		}
	}
	if b.stats.Reused == 0 {
		// Nothing survived: the levels drawn below build from nothing.
		clear(g.levels)
		clear(g.upper)
	}
	err := b.insertRange(ctx, func(yield func(int) bool) {
		for v := 0; v < n; v++ {
			if (!placed[v] || b.stats.Reused == 0) && !yield(v) {
				return
			}
		}
	})
	if err != nil {
		return nil, b.stats, err
	}
	b.connectStranded()
	return g, b.stats, nil
}

// reuseEdges copies old's edges between surviving nodes into b.g under
// their new ids, rebuilding the lists that lost a neighbour.
func (b *builder) reuseEdges(ctx context.Context, old *Graph, newID []int32, distancesValid bool) error {
	g := b.g
	var ids []uint32
	var dist []float32
	for u := 0; u < old.N; u++ {
		if u%progressEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		nu := newID[u]
		if nu < 0 {
			continue
		}
		for l := 0; l <= old.Level(u); l++ {
			oids, odist := old.Neighbors(u, l)
			lost := false
			ids, dist = ids[:0], dist[:0]
			for k, v := range oids {
				nv := newID[v]
				if nv < 0 {
					lost = true
					continue
				}
				d := odist[k]
				if !distancesValid {
					d = b.between(uint32(nu), uint32(nv))
				}
				ids, dist = append(ids, uint32(nv)), append(dist, d)
			}
			if lost {
				ids, dist = b.repair(old, newID, u, l, ids, dist)
				b.stats.Repaired++
			}
			g.setNeighbors(int(nu), l, ids, dist)
		}
	}
	return nil
}

// repair rebuilds the list of old node u on level l, which lost neighbours
// to dropped nodes: its surviving neighbours (ids, dist, new ids) plus the
// surviving neighbours of the dropped ones are the candidates, and the
// heuristic keeps up to the level's limit of them.
func (b *builder) repair(old *Graph, newID []int32, u, l int, ids []uint32, dist []float32) ([]uint32, []float32) {
	nu := uint32(newID[u])
	b.nextEpoch()
	b.visited[nu] = b.epoch
	b.tmp = b.tmp[:0]
	for k, v := range ids {
		b.visited[v] = b.epoch
		b.tmp = append(b.tmp, item{v, dist[k], stNew})
	}
	oids, _ := old.Neighbors(u, l)
	for _, v := range oids {
		if newID[v] >= 0 {
			continue
		}
		two, _ := old.Neighbors(int(v), l)
		for _, w := range two {
			nw := newID[w]
			if nw < 0 || b.visited[nw] == b.epoch {
				continue
			}
			b.visited[nw] = b.epoch
			b.tmp = append(b.tmp, item{uint32(nw), b.between(nu, uint32(nw)), stNew})
		}
	}
	limit := b.m
	if l == 0 {
		limit = b.m0
	}
	sortByDist(b.tmp)
	b.sel, _, _ = b.heuristic(b.tmp, limit, b.sel)
	ids, dist = ids[:0], dist[:0]
	for _, e := range b.sel {
		ids, dist = append(ids, e.id), append(dist, e.d)
	}
	return ids, dist
}
