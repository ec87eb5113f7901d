package segment

import (
	"context"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// GraphInfo describes one partition's HNSW graph as this package reads it
// (for diagnostics and for the tests that hold our reader and distances
// against pylance's files).
type GraphInfo struct {
	Partition   int   `json:"partition"`
	Nodes       int   `json:"nodes"`
	Rows        int   `json:"rows"`
	Edges       int   `json:"edges"`
	LevelCounts []int `json:"level_counts"`
	EntryPoint  int   `json:"entry_point"`
	// Unreachable counts nodes without a level-0 path from the entry point.
	Unreachable int `json:"unreachable"`
	// MaxDistanceError is the largest difference, relative to max(1, |d|),
	// between a stored edge distance and the one this package computes on
	// the partition's storage.
	MaxDistanceError float64 `json:"max_distance_error"`
	// Degree0 is the mean level-0 neighbour count.
	Degree0 float64 `json:"degree0"`
}

// InspectHNSW decodes every partition graph of the IVF_HNSW_* segment
// under dir ("_indices/<uuid>/") and recomputes its edge distances on the
// partition's storage.
func InspectHNSW(ctx context.Context, st storage.Store, dir string) ([]GraphInfo, error) {
	f, err := ivf.OpenFiles(ctx, st, dir, lancefile.Options{})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !f.Type.HNSW() {
		return nil, fmt.Errorf("%w: %s is %s, not an HNSW index", errkind.InvalidInput, dir, f.Type)
	}
	s := &source{uuid: dir, files: f}
	if err := s.loadModelBuffers(ctx); err != nil {
		return nil, err
	}
	m, err := sharedModel([]*source{s}, false)
	if err != nil {
		return nil, err
	}
	mg := &merger{srcs: []*source{s}, m: m, opts: MergeOptions{}.withDefaults()}
	h := &hnswMerge{mg: mg, hm: m.hnsw, graphs: make([]graphRows, 1)}
	var out []GraphInfo
	for p := 0; p < m.nparts; p++ {
		gm := m.hnsw.metas[0][p]
		if gm == nil {
			continue
		}
		g, err := h.readGraph(ctx, 0, p, gm)
		if err != nil {
			return nil, err
		}
		lo := f.IVF.Offsets[p]
		a, err := f.Aux.Read(ctx, m.hnsw.vecCol, lo, lo+uint64(f.IVF.Lengths[p]))
		if err != nil {
			return nil, err
		}
		vecs := a.Values
		if m.typ.Quantizer() == "pq" && mg.inQueryLayout(s) {
			vecs = make([]byte, len(a.Values))
			ivf.UntransposePQ(vecs, a.Values, a.Len, a.Type.ValueBits()/8)
		}
		space, err := h.space(vecs)
		if err != nil {
			return nil, err
		}
		info := GraphInfo{Partition: p, Nodes: g.N, Rows: g.Rows(), Edges: g.Edges(), LevelCounts: g.LevelCounts(), EntryPoint: g.Entry}
		reach := make([]bool, g.N)
		queue := []int{g.Entry}
		reach[g.Entry] = true
		deg := 0
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			ids, _ := g.Neighbors(u, 0)
			for _, v := range ids {
				if !reach[v] {
					reach[v] = true
					queue = append(queue, int(v))
				}
			}
		}
		for u := 0; u < g.N; u++ {
			if !reach[u] {
				info.Unreachable++
			}
			for l := 0; l <= g.Level(u); l++ {
				ids, dist := g.Neighbors(u, l)
				if l == 0 {
					deg += len(ids)
				}
				for k, v := range ids {
					d := float64(space.Dist(u, int(v)))
					e := math.Abs(d-float64(dist[k])) / math.Max(1, math.Abs(d))
					info.MaxDistanceError = math.Max(info.MaxDistanceError, e)
				}
			}
		}
		if g.N > 0 {
			info.Degree0 = float64(deg) / float64(g.N)
		}
		out = append(out, info)
	}
	return out, nil
}
