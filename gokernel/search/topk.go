package search

import (
	"container/heap"
	"context"
	"math"
	"sort"

	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// Hit is one search result.
type Hit struct {
	RowID uint64
	Dist  float32
}

// TopK keeps the k hits of smallest distance pushed so far; a hit does not
// displace an equal one pushed before it (as Lance's heaps). NaN distances
// are never kept.
type TopK struct {
	k int
	h hitHeap
}

// NewTopK makes an empty TopK.
func NewTopK(k int) *TopK { return &TopK{k: k} }

// Push offers a hit.
func (t *TopK) Push(id uint64, d float32) {
	if t.k <= 0 || math.IsNaN(float64(d)) {
		return
	}
	if len(t.h) < t.k {
		heap.Push(&t.h, Hit{id, d})
		return
	}
	if d < t.h[0].Dist {
		t.h[0] = Hit{id, d}
		heap.Fix(&t.h, 0)
	}
}

// Len is the number of hits kept.
func (t *TopK) Len() int { return len(t.h) }

// Worst is the largest distance kept (+Inf while fewer than k are kept).
func (t *TopK) Worst() float32 {
	if len(t.h) < t.k {
		return float32(math.Inf(1))
	}
	return t.h[0].Dist
}

// Sorted returns the hits, nearest first (ties by row id).
func (t *TopK) Sorted() []Hit {
	out := append([]Hit(nil), t.h...)
	sort.Slice(out, func(a, b int) bool {
		if out[a].Dist != out[b].Dist {
			return out[a].Dist < out[b].Dist
		}
		return out[a].RowID < out[b].RowID
	})
	return out
}

type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return h[i].Dist > h[j].Dist }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Options control Search.
type Options struct {
	K       int
	NProbes int
	// Depth is how many times the stored codes had the layout applied;
	// -1 for what the segment's metadata declares (what Lance assumes).
	Depth int
	// Keep, when set, filters rows (a prefilter: deleted rows, rows of
	// fragments outside the segment's coverage).
	Keep func(rowID uint64) bool
}

// Search runs every query over one segment: each query probes its
// NProbes nearest partitions, and each partition is read once for all
// the queries that probe it. As in Lance, a query's partitions are scored
// nearest first into one heap, each partition's rows in their stored
// order, and a row never displaces one of equal distance: which of tied
// rows is returned (quantized distances tie often) follows that order.
// It returns each query's hits, nearest first.
func Search(ctx context.Context, ix *Index, f *ivf.Files, queries []*Query, opts Options) ([][]Hit, error) {
	if opts.K <= 0 {
		opts.K = 10
	}
	if opts.NProbes <= 0 {
		opts.NProbes = DefaultNProbes
	}
	depth := opts.Depth
	if depth < 0 {
		depth = DeclaredDepth(f)
	}
	rd, err := NewReader(ix, f, depth)
	if err != nil {
		return nil, err
	}
	type prober struct{ query, rank int }
	probers := make([][]prober, ix.NumPartitions())
	// local[q][rank]: query q's best rows of its rank-th partition, in
	// stored order.
	local := make([][][]posHit, len(queries))
	for qi, q := range queries {
		probes := q.Probe(opts.NProbes)
		local[qi] = make([][]posHit, len(probes))
		for rank, p := range probes {
			probers[p] = append(probers[p], prober{qi, rank})
		}
	}
	var dist []float32
	for p, qs := range probers {
		if len(qs) == 0 || f.IVF.Lengths[p] == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		part, err := rd.Read(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, pr := range qs {
			dist = queries[pr.query].Distances(part, opts.K, dist)
			lt := newPosTopK(opts.K)
			for i, d := range dist {
				if opts.Keep == nil || opts.Keep(part.RowIDs[i]) {
					lt.push(posHit{pos: i, Hit: Hit{part.RowIDs[i], d}})
				}
			}
			local[pr.query][pr.rank] = lt.inOrder()
		}
	}
	out := make([][]Hit, len(queries))
	for qi := range queries {
		t := NewTopK(opts.K)
		for _, hits := range local[qi] {
			for _, h := range hits {
				t.Push(h.RowID, h.Dist)
			}
		}
		out[qi] = t.Sorted()
	}
	return out, nil
}

// posHit is a hit and its row's position in its partition.
type posHit struct {
	Hit
	pos int
}

// posTopK keeps a partition's k best rows as TopK does (equal distances
// keep the earlier row), remembering positions.
type posTopK struct {
	k int
	h posHeap
}

func newPosTopK(k int) *posTopK { return &posTopK{k: k} }

func (t *posTopK) push(x posHit) {
	if math.IsNaN(float64(x.Dist)) {
		return
	}
	if len(t.h) < t.k {
		heap.Push(&t.h, x)
		return
	}
	if x.Dist < t.h[0].Dist {
		t.h[0] = x
		heap.Fix(&t.h, 0)
	}
}

// inOrder returns the kept rows in their stored order.
func (t *posTopK) inOrder() []posHit {
	out := append([]posHit(nil), t.h...)
	sort.Slice(out, func(a, b int) bool { return out[a].pos < out[b].pos })
	return out
}

type posHeap []posHit

func (h posHeap) Len() int { return len(h) }
func (h posHeap) Less(i, j int) bool {
	if h[i].Dist != h[j].Dist {
		return h[i].Dist > h[j].Dist
	}
	return h[i].pos > h[j].pos // of equal rows, the later one leaves first
}
func (h posHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *posHeap) Push(x any)   { *h = append(*h, x.(posHit)) }
func (h *posHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
