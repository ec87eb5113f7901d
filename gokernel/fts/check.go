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
	// FragmentDocs counts the documents of each fragment (when
	// CheckOptions.Covered is set).
	FragmentDocs map[uint32]uint64
}

// SampledDoc is a document as a segment's postings have it.
type SampledDoc struct {
	RowID     uint64
	NumTokens uint32
	Freqs     map[string]uint32
}

const maxProblems = 8

// CheckOptions tune Check.
type CheckOptions struct {
	// Covered, when set, says which fragments the segment covers: every
	// document must be a row of one.
	Covered func(fragment uint32) bool
	// Sample is how many documents' tokens to gather (CheckResult.Sample).
	Sample int
	// Tokens, when > 0, bounds the posting lists decoded per partition to
	// that many tokens evenly spread, and skips what needs them all (the
	// sums of frequencies, Sample): the check before a commit of an
	// output just written.
	Tokens int
}

// Check reads a segment: every posting list and position run (or, with
// opts.Tokens, a sample of them) decodes to the documents and length it
// claims, each document's frequencies sum to its token count, no token
// is repeated, and every document is a row of a covered fragment.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, opts CheckOptions) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	res := &CheckResult{Partitions: len(s.Meta.Partitions), Params: s.Meta.Params}
	problem := func(check, format string, args ...any) {
		if len(res.Problems) < maxProblems {
			res.Problems = append(res.Problems, Problem{check, fmt.Sprintf(format, args...)})
		}
	}
	perPart := 0
	if n := len(s.Meta.Partitions); n > 0 && opts.Sample > 0 && opts.Tokens <= 0 {
		perPart = (opts.Sample + n - 1) / n
	}
	for _, part := range s.Meta.Partitions {
		var docs *Docs
		var err error
		if opts.Tokens > 0 {
			docs, err = checkSampled(ctx, s, part, opts.Tokens, res, problem)
		} else {
			docs, err = checkPartition(ctx, s, part, perPart, res, problem)
		}
		if err != nil {
			return nil, err
		}
		if opts.Covered != nil && docs != nil {
			if res.FragmentDocs == nil {
				res.FragmentDocs = map[uint32]uint64{}
			}
			foreign := false
			for _, r := range docs.RowIDs {
				res.FragmentDocs[uint32(r>>32)]++
				if !foreign && !opts.Covered(uint32(r>>32)) {
					problem("row_ids", "partition %d holds row %d of fragment %d, which the segment does not cover", part, r, r>>32)
					foreign = true
				}
			}
		}
	}
	slices.SortFunc(res.Sample, func(a, b SampledDoc) int { return cmp.Compare(a.RowID, b.RowID) })
	return res, nil
}

type problemFunc func(check, format string, args ...any)

// checkPartition decodes every posting list of a partition, reading the
// invert file in windows.
func checkPartition(ctx context.Context, s *Segment, part uint64, perPart int, res *CheckResult, problem problemFunc) (*Docs, error) {
	op, err := s.openPartition(ctx, part)
	if err != nil {
		problem("structure", "partition %d: %v", part, err)
		return nil, nil
	}
	defer op.close()
	docs, toks, r := op.docs, op.tokens, op.inv
	rows := r.NumRows()
	res.Docs += uint64(len(docs.RowIDs))
	res.Tokens += rows
	withPos := s.Meta.WithPositions()
	seen := make(map[string]bool, len(toks))
	sums := make([]uint64, len(docs.RowIDs))
	picked := map[uint32]*SampledDoc{}
	if nd := len(docs.RowIDs); nd > 0 {
		for j := range min(perPart, nd) {
			d := uint32(j * nd / min(perPart, nd))
			picked[d] = &SampledDoc{RowID: docs.RowIDs[d], NumTokens: docs.NumTokens[d], Freqs: map[string]uint32{}}
		}
	}
	var p Posting
	var pos []uint32
	step := windowRows(rows, r.Size())
	for lo := uint64(0); lo < rows; lo += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		v, err := readInvertRange(ctx, r, lo, min(lo+step, rows), s.Meta.layout(), false)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			problem("structure", "partition %d: %v", part, err)
			return docs, nil
		}
		for t := range v.Length {
			tok := toks[lo+uint64(t)]
			if seen[tok] {
				problem("structure", "partition %d: token %q twice", part, tok)
			}
			seen[tok] = true
			if err := DecodePosting(v.Blocks(t), int(v.Length[t]), &p); err != nil {
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
			if withPos {
				if pos, err = v.decodePositions(t, p.Freqs, pos[:0]); err != nil {
					problem("structure", "partition %d, token %q: %v", part, tok, err)
				}
			}
		}
	}
	for d, n := range docs.NumTokens {
		if sums[d] != uint64(n) {
			problem("structure", "partition %d, document %d (row %d): %d tokens, its postings hold %d", part, d, docs.RowIDs[d], n, sums[d])
			break
		}
	}
	for _, sd := range picked {
		res.Sample = append(res.Sample, *sd)
	}
	return docs, nil
}

// checkSampled reads a partition's documents, token map and lengths, and
// decodes the posting lists (and positions) of n tokens evenly spread.
func checkSampled(ctx context.Context, s *Segment, part uint64, n int, res *CheckResult, problem problemFunc) (*Docs, error) {
	op, err := s.openPartition(ctx, part)
	if err != nil {
		problem("structure", "partition %d: %v", part, err)
		return nil, nil
	}
	defer op.close()
	docs, toks, r := op.docs, op.tokens, op.inv
	nt := len(toks)
	res.Docs += uint64(len(docs.RowIDs))
	res.Tokens += uint64(nt)
	withPos := s.Meta.WithPositions()
	var p Posting
	var pos []uint32
	for j := range min(n, nt) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := uint64(j * nt / min(n, nt))
		v, err := readInvertRow(ctx, r, t, s.Meta.layout())
		if err == nil {
			err = DecodePosting(v.Blocks(0), int(v.Length[0]), &p)
		}
		if err == nil && withPos {
			pos, err = v.decodePositions(0, p.Freqs, pos[:0])
		}
		if err == nil && p.Len() > 0 && int(p.Docs[p.Len()-1]) >= len(docs.RowIDs) {
			err = fmt.Errorf("document %d of %d", p.Docs[p.Len()-1], len(docs.RowIDs))
		}
		if err != nil {
			problem("structure", "partition %d, token %q: %v", part, toks[t], err)
			continue
		}
		res.Postings += uint64(p.Len())
	}
	return docs, nil
}
