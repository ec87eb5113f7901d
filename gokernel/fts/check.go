package fts

import (
	"context"
	"fmt"

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
}

const maxProblems = 8

// Check reads a whole segment: every posting list and position run
// decodes to the documents and length it claims, each document's
// frequencies sum to its token count, no token is repeated, and, when
// covered is set, every document is a row of a fragment the segment
// covers.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, covered func(fragment uint32) bool) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Partitions: len(s.Meta.Partitions)}
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
		if covered != nil {
			for _, r := range pt.docs.RowIDs {
				if !covered(uint32(r >> 32)) {
					problem("row_ids", "partition %d holds row %d of fragment %d, which the segment does not cover", part, r, r>>32)
					break
				}
			}
		}
	}
	return res, nil
}
