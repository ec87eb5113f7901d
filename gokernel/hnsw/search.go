package hnsw

import "slices"

// Search returns the ids of the k nodes nearest to node q (excluded) that
// Lance's search finds with beam width ef: a greedy descent from the entry
// point to level 1, then a beam search of level 0. It is what the graph
// offers pylance's queries, for tests and benchmarks (pylance itself
// searches the files). Not safe for concurrent use with changes to g.
func Search(g *Graph, s *Space, q, k, ef int) []int {
	if g.Entry < 0 {
		return nil
	}
	b := newBuilder(g, s, Options{})
	b.ef = max(ef, k)
	b.q.reset(s, q)
	ep := item{id: uint32(g.Entry), d: 0}
	ep.d = b.qdist(ep.id)
	for l := g.TopLevel(); l >= 1; l-- {
		ep = b.greedy(ep, l)
	}
	// The query node is a node of the graph: the search goes through it
	// but does not return it.
	res := slices.DeleteFunc(b.searchLayer(ep, 0, -1), func(e item) bool { return int(e.id) == q })
	out := make([]int, 0, k)
	for _, e := range res[:min(k, len(res))] {
		out = append(out, int(e.id))
	}
	return out
}
