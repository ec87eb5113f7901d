package verify

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/search"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// recallMargin is how far below a fresh build's recall a segment's may
// fall before it counts as damaged: the codes check finds damage; this
// only flags a segment whose search is plainly worse than its model allows
// (the chained-merge damage takes recall@10 from about 0.5 to 0.07).
const recallMargin = 0.1

// checkRecall estimates the segment's recall@k: queries sampled from its
// data are searched over the segment alone (search.Search, the layout its
// metadata declares, deleted rows filtered), against brute force over its
// live rows; next to it, the recall of the same model encoding the same
// rows afresh (one pass over the data: the brute force and the fresh
// encoding stream together).
func checkRecall(ctx context.Context, o *opened, rd *vecdata.Reader, live *liveSet, opts Options, sr *SegmentReport) error {
	if m := o.mixedDot; m[0] > 0 {
		sr.add(Check{Name: "recall", Verdict: Skipped, Numbers: map[string]float64{"only_l2_rows": float64(m[0]), "only_inner_product_rows": float64(m[1])},
			Message: fmt.Sprintf("the segment holds dot-product PQ codes of both of pylance's assignments (%d sampled rows by nearest entry, as its create_index encodes; %d by inner product, as its optimize_indices deltas do): a fresh build encodes every row one way, so its recall is no baseline", m[0], m[1])})
		return nil
	}
	frags := make([]uint64, 0, len(live.frags))
	for id := range live.frags {
		frags = append(frags, uint64(id))
	}
	slices.Sort(frags)
	if len(frags) == 0 {
		sr.add(Check{Name: "recall", Verdict: Skipped, Message: "the dataset no longer has the fragments the segment covers"})
		return nil
	}
	qb, err := rd.Sample(ctx, frags, opts.Queries, opts.Seed^0x5eed)
	if err != nil {
		return err
	}
	ix := o.index
	dim := o.model.Dim
	var queries []*search.Query
	for i := 0; i < qb.Len(); i++ {
		if q, ok := ix.NewQuery(qb.Vectors[i*dim : (i+1)*dim]); ok {
			queries = append(queries, q)
		}
	}
	if len(queries) == 0 {
		sr.add(Check{Name: "recall", Verdict: Skipped, Message: "no query could be sampled from the segment's rows"})
		return nil
	}
	k, nprobes := opts.K, min(opts.NProbes, ix.NumPartitions())
	got, err := search.Search(ctx, ix, o.files, queries, search.Options{K: k, NProbes: nprobes, Depth: -1, Keep: live.contains})
	if err != nil {
		sr.add(Check{Name: "recall", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("the segment could not be searched: %v", err)})
		return nil
	}
	truth, fresh, rows, err := bruteAndFresh(ctx, o, rd, frags, queries, k, nprobes, opts.Parallelism, opts)
	if err != nil {
		return err
	}
	recall, freshRecall := overlap(got, truth), overlap(fresh, truth)
	sr.Recall, sr.FreshRecall = recall, freshRecall
	nums := map[string]float64{"recall": recall, "fresh_recall": freshRecall, "queries": float64(len(queries)), "k": float64(k),
		"nprobes": float64(nprobes), "rows": float64(rows)}
	msg := fmt.Sprintf("recall@%d %.3f over %d queries at nprobes %d; the same model encoding the same %d rows afresh: %.3f",
		k, recall, len(queries), nprobes, rows, freshRecall)
	if recall < freshRecall-recallMargin {
		sr.add(Check{Name: "recall", Verdict: Failed, Damage: DamageLowRecall, Message: msg, Numbers: nums})
		return nil
	}
	sr.add(Check{Name: "recall", Verdict: OK, Message: msg, Numbers: nums})
	return nil
}

// overlap is mean |got ∩ truth| / |truth| over the queries.
func overlap(got, truth [][]search.Hit) float64 {
	hits, total := 0, 0
	for i := range truth {
		want := map[uint64]bool{}
		for _, h := range truth[i] {
			want[h.RowID] = true
		}
		total += len(want)
		for _, h := range got[i] {
			if want[h.RowID] {
				hits++
			}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hits) / float64(total)
}

// bruteAndFresh streams the segment's live rows once: exact top-k for
// every query (the ground truth), and the top-k a segment built afresh
// from these rows with the same model would return (rows encoded, then
// scored with the search's distances in the partitions each query
// probes; 4-bit PQ tables are not quantized here).
func bruteAndFresh(ctx context.Context, o *opened, rd *vecdata.Reader, frags []uint64, queries []*search.Query, k, nprobes, workers int, opts Options) (truth, fresh [][]search.Hit, rows int, err error) {
	m := o.model
	dim := m.Dim
	ix := o.index
	probing := make([][]int, ix.NumPartitions())
	for qi, q := range queries {
		for _, p := range q.Probe(nprobes) {
			probing[p] = append(probing[p], qi)
		}
	}
	type state struct {
		truth, fresh []*search.TopK
		qs           []*search.Query // per worker: queries carry scratch
	}
	newState := func() *state {
		s := &state{}
		for _, q := range queries {
			s.truth = append(s.truth, search.NewTopK(k))
			s.fresh = append(s.fresh, search.NewTopK(k))
			nq, _ := ix.NewQuery(q.Vector())
			s.qs = append(s.qs, nq)
		}
		return s
	}
	type job struct {
		ids  []uint64
		vecs []float32
	}
	jobs := make(chan job, workers)
	states := make([]*state, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		states[w] = newState()
		wg.Add(1)
		go func(s *state, werr *error) {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					*werr = fmt.Errorf("lance-segmerge kernel panic in a verify worker: %v", r)
					for range jobs { // drain, so the producer never blocks
					}
				}
			}()
			for j := range jobs {
				if *werr == nil {
					*werr = scoreWindow(o, s.qs, s.truth, s.fresh, probing, j.ids, j.vecs, dim)
				}
			}
		}(states[w], &errs[w])
	}
	scan := rd.Scan(ctx, frags, 0, func(b *vecdata.Batch) error {
		rows += b.Len()
		opts.Progress.RowsRead.Add(int64(b.Len()))
		select {
		case jobs <- job{ids: slices.Clone(b.RowIDs), vecs: slices.Clone(b.Vectors)}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(jobs)
	wg.Wait()
	if scan != nil {
		return nil, nil, 0, scan
	}
	for _, e := range errs {
		if e != nil {
			return nil, nil, 0, e
		}
	}
	truth, fresh = make([][]search.Hit, len(queries)), make([][]search.Hit, len(queries))
	for qi := range queries {
		t, f := search.NewTopK(k), search.NewTopK(k)
		for _, s := range states {
			for _, h := range s.truth[qi].Sorted() {
				t.Push(h.RowID, h.Dist)
			}
			for _, h := range s.fresh[qi].Sorted() {
				f.Push(h.RowID, h.Dist)
			}
		}
		truth[qi], fresh[qi] = t.Sorted(), f.Sorted()
	}
	return truth, fresh, rows, nil
}

// scoreWindow adds one window of rows to every query's exact and fresh
// top-k.
func scoreWindow(o *opened, qs []*search.Query, truth, fresh []*search.TopK, probing [][]int, ids []uint64, vecs []float32, dim int) error {
	ix := o.index
	n := len(ids)
	m := o.model
	if o.fresh != nil {
		m = o.fresh
	}
	e, err := o.encodeBatch(m, vecs) // vecs prepared in place
	if err != nil {
		return err
	}
	parts, out := e.parts, e.cols
	// Exact distances, on the prepared vectors (cosine: normalised).
	dot := o.model.Metric == encode.Dot
	for i := 0; i < n; i++ {
		if parts[i] < 0 {
			continue // Lance does not index it
		}
		v := vecs[i*dim : (i+1)*dim]
		for qi, q := range qs {
			var d float32
			if dot {
				d = 1 - vecmath.Dot(q.Vector(), v)
			} else {
				d = vecmath.L2Sq(q.Vector(), v)
			}
			truth[qi].Push(ids[i], d)
		}
	}
	// The fresh segment's rows, grouped by partition.
	byPart := map[int][]int{}
	for i, p := range parts {
		if p >= 0 && len(probing[p]) > 0 {
			byPart[int(p)] = append(byPart[int(p)], i)
		}
	}
	names := map[string]int{}
	for c, name := range e.names {
		names[name] = c
	}
	f32s := func(name string, rows []int) []float32 {
		c, ok := names[name]
		if !ok {
			return nil
		}
		outF := make([]float32, len(rows))
		for k, i := range rows {
			outF[k] = math.Float32frombits(uint32(out[c][4*i]) | uint32(out[c][4*i+1])<<8 | uint32(out[c][4*i+2])<<16 | uint32(out[c][4*i+3])<<24)
		}
		return outF
	}
	w := ix.CodeWidth()
	var dist []float32
	for p, rows := range byPart {
		part := &search.Partition{ID: p, RowIDs: make([]uint64, len(rows)), Codes: make([]byte, 0, len(rows)*w)}
		for k, i := range rows {
			part.RowIDs[k] = ids[i]
			part.Codes = append(part.Codes, out[0][i*w:(i+1)*w]...)
		}
		if o.model.RQ != nil {
			part.Add, part.Scale, part.Err = f32s(encode.ColRQAdd, rows), f32s(encode.ColRQScale, rows), f32s(encode.ColRQError, rows)
			part.ExAdd, part.ExScale = f32s(encode.ColRQExAdd, rows), f32s(encode.ColRQExScale, rows)
			if c, ok := names[encode.ColRQExCodes]; ok {
				ew := e.width[c]
				for _, i := range rows {
					part.Ex = append(part.Ex, encode.UnpackBlockedRow(out[c][i*ew:(i+1)*ew], o.model.RQ.NumBits-1, dim)...)
				}
			}
		}
		for _, qi := range probing[p] {
			// k past the rows: 4-bit PQ scores exactly (see above).
			dist = qs[qi].Distances(part, math.MaxInt32, dist)
			for r, d := range dist {
				fresh[qi].Push(part.RowIDs[r], d)
			}
		}
	}
	return nil
}
