package fts

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Problem is one thing Check found wrong ("structure": files, postings
// and statistics; "row_ids": rows of fragments the segment does not
// cover).
type Problem struct {
	Check   string
	Message string
}

// CheckResult is what Check read and found.
type CheckResult struct {
	Partitions             int
	Docs, Tokens, Postings uint64
	Problems               []Problem
	// Params is the segment's analyzer (its params JSON).
	Params string
	// Sample are documents evenly spread over the partitions, each with
	// the tokens its postings give it: to check against the text.
	Sample []SampledDoc
}

// SampledDoc is a document as a segment's postings have it.
type SampledDoc struct {
	RowID     uint64
	NumTokens uint32
	Freqs     map[string]uint32
}

const maxProblems = 8

// Check reads a whole segment: every posting list and position run
// decodes to the documents and length it claims, each document's
// frequencies sum to its token count, no token is repeated, and, when
// covered is set, every document is a row of a fragment the segment
// covers. It also gathers up to sample documents' tokens (Sample).
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, covered func(fragment uint32) bool, sample int) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Partitions: len(s.Meta.Partitions), Params: s.Meta.Params}
	perPart := 0
	if n := len(s.Meta.Partitions); n > 0 && sample > 0 {
		perPart = (sample + n - 1) / n
	}
	problem := func(check, format string, args ...any) {
		if len(res.Problems) < maxProblems {
			res.Problems = append(res.Problems, Problem{check, fmt.Sprintf(format, args...)})
		}
	}
	var p Posting
	var pos []uint32
	for _, part := range s.Meta.Partitions {
		pt, err := loadPart(ctx, s, part)
		if err != nil {
			problem("structure", "partition %d: %v", part, err)
			continue
		}
		res.Docs += uint64(len(pt.docs.RowIDs))
		res.Tokens += uint64(len(pt.tokens))
		seen := make(map[string]bool, len(pt.tokens))
		sums := make([]uint64, len(pt.docs.RowIDs))
		picked := map[uint32]*SampledDoc{}
		if nd := len(pt.docs.RowIDs); nd > 0 {
			for j := range min(perPart, nd) {
				d := uint32(j * nd / min(perPart, nd))
				picked[d] = &SampledDoc{RowID: pt.docs.RowIDs[d], NumTokens: pt.docs.NumTokens[d], Freqs: map[string]uint32{}}
			}
		}
		for id, tok := range pt.tokens {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if seen[tok] {
				problem("structure", "partition %d: token %q twice", part, tok)
			}
			seen[tok] = true
			if err := DecodePosting(pt.inv.Blocks(id), int(pt.inv.Length[id]), &p); err != nil {
				problem("structure", "partition %d, token %q: %v", part, tok, err)
				continue
			}
			if p.Len() == 0 {
				problem("structure", "partition %d, token %q: an empty posting list", part, tok)
			}
			res.Postings += uint64(p.Len())
			for i, d := range p.Docs {
				if int(d) >= len(sums) {
					problem("structure", "partition %d, token %q: document %d of %d", part, tok, d, len(sums))
					break
				}
				sums[d] += uint64(p.Freqs[i])
				if sd := picked[d]; sd != nil {
					sd.Freqs[tok] = p.Freqs[i]
				}
			}
			if pt.pos {
				if pos, err = pt.inv.decodePositions(id, p.Freqs, pos[:0]); err != nil {
					problem("structure", "partition %d, token %q: %v", part, tok, err)
				}
			}
		}
		for d, n := range pt.docs.NumTokens {
			if sums[d] != uint64(n) {
				problem("structure", "partition %d, document %d (row %d): %d tokens, its postings hold %d", part, d, pt.docs.RowIDs[d], n, sums[d])
				break
			}
		}
		for _, sd := range picked {
			res.Sample = append(res.Sample, *sd)
		}
		if covered != nil {
			for _, r := range pt.docs.RowIDs {
				if !covered(uint32(r >> 32)) {
					problem("row_ids", "partition %d holds row %d of fragment %d, which the segment does not cover", part, r, r>>32)
					break
				}
			}
		}
	}
	slices.SortFunc(res.Sample, func(a, b SampledDoc) int { return cmp.Compare(a.RowID, b.RowID) })
	return res, nil
}
