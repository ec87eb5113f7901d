package table

import (
	"cmp"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

// resolveCumulativeCoverage rewrites, in place, the fragment bitmaps of
// index entries written the way pylance 0.20's optimize_indices wrote its
// deltas: each delta's bitmap claims every fragment the index covered
// before it plus its own, while it holds only the rows of its own. Read as
// written, those entries overlap, which no merge or commit may accept.
//
// Per index name, taking entries by dataset version: when some entry's
// claim meets what earlier entries claim, and every such entry claims all
// of it (the cumulative pattern), each entry keeps only the fragments no
// earlier entry claims. Any other overlap is left as written, for the
// checks that refuse it. The union of the bitmaps, which is what readers
// use to find unindexed fragments, does not change.
func resolveCumulativeCoverage(indices []*pb.IndexMetadata) {
	byName := map[string][]int{}
	var names []string
	for i, im := range indices {
		if _, seen := byName[im.GetName()]; !seen {
			names = append(names, im.GetName())
		}
		byName[im.GetName()] = append(byName[im.GetName()], i)
	}
	for _, name := range names {
		group := byName[name]
		if len(group) < 2 {
			continue
		}
		slices.SortStableFunc(group, func(a, b int) int {
			return cmp.Compare(indices[a].GetDatasetVersion(), indices[b].GetDatasetVersion())
		})
		claims := make([][]uint32, len(group))
		for k, i := range group {
			ids, ok, err := DecodeFragmentBitmap(indices[i].GetFragmentBitmap())
			if err != nil || !ok {
				claims = nil
				break
			}
			claims[k] = ids
		}
		own, ok := cumulativeOwn(claims)
		if !ok {
			continue
		}
		for k, i := range group {
			bm, err := EncodeFragmentBitmap(own[k])
			if err != nil {
				return
			}
			indices[i].FragmentBitmap = bm
		}
	}
}

// cumulativeOwn returns each claim less the fragments of the claims before
// it, when the claims overlap only cumulatively (see above) and every claim
// keeps a fragment of its own; ok is false otherwise (no overlap, or
// another kind).
func cumulativeOwn(claims [][]uint32) (own [][]uint32, ok bool) {
	if claims == nil {
		return nil, false
	}
	before := map[uint32]bool{}
	overlap := false
	own = make([][]uint32, len(claims))
	for k, c := range claims {
		mine := map[uint32]bool{}
		for _, f := range c {
			mine[f] = true
			if !before[f] {
				own[k] = append(own[k], f)
			}
		}
		if len(own[k]) < len(c) {
			overlap = true
			for f := range before {
				if !mine[f] {
					return nil, false // meets earlier claims without claiming all of them
				}
			}
		}
		if len(own[k]) == 0 {
			return nil, false
		}
		for _, f := range c {
			before[f] = true
		}
	}
	return own, overlap
}
