// Package ngram reads, merges and checks the segments of Lance NGRAM
// scalar indices, as pylance 14.0.2 writes them.
//
// A segment is one Lance file, ngram_postings.lance, with one row per
// n-gram token: "tokens" (uint32, ascending, each once) and
// "posting_list" (binary, with field metadata
// lance-encoding:compression "none"): the rows holding the token, a 64-bit
// roaring bitmap of row addresses in the portable format (a u64 count of
// buckets, then per bucket a u32 high half, the fragment id, and a
// portable 32-bit roaring bitmap of offsets). Segments merge by a k-way
// merge of their tokens, a window of rows per input at a time, the
// posting lists of a token in several inputs joined, deleted rows
// dropped, and tokens left without rows dropped.
package ngram

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/kway"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// File and column names of a segment. Part of the format.
const (
	FileName       = "ngram_postings.lance"
	tokensColumn   = "tokens"
	postingsColumn = "posting_list"
	compressionKey = "lance-encoding:compression"
)

// window is how many rows of each input a merge holds at once.
const window = 1024

// Segment is an opened NGRAM segment.
type Segment struct {
	Meta    *pb.IndexMetadata
	Tokens  uint64
	Version lancefile.Version
	r       *lancefile.Reader
	obj     storage.Object
}

// Close releases the segment's file.
func (s *Segment) Close() {
	if s.obj != nil {
		s.obj.Close()
		s.obj = nil
	}
}

// Open opens a segment and checks its columns.
func Open(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	u := table.IndexUUID(im)
	name := table.IndexDir(im) + FileName
	obj, err := st.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("ngram segment %s: %w", u, err)
	}
	s := &Segment{Meta: im, obj: obj}
	if s.r, err = lancefile.Open(ctx, obj, name, lancefile.Options{}); err != nil {
		s.Close()
		return nil, fmt.Errorf("ngram segment %s: %w", u, err)
	}
	tf, ok1 := s.r.Field(tokensColumn)
	pf, ok2 := s.r.Field(postingsColumn)
	if !ok1 || !ok2 || tf.Type.Kind != lancefile.KindUint32 || pf.Type.Kind != lancefile.KindBinary {
		s.Close()
		return nil, fmt.Errorf("%w: ngram segment %s: %s has no uint32 %q and binary %q columns", errkind.Corrupt, u, FileName, tokensColumn, postingsColumn)
	}
	s.Tokens, s.Version = s.r.NumRows(), s.r.Version()
	return s, nil
}

// cursor streams one input's rows in windows.
type cursor struct {
	seg          *Segment
	order        int
	next         uint64
	tokens, post *lancefile.Array
	i, n         int
}

func (c *cursor) fill(ctx context.Context) (bool, error) {
	if c.next >= c.seg.Tokens {
		return false, nil
	}
	end := min(c.next+window, c.seg.Tokens)
	var err error
	if c.tokens, err = c.seg.r.Read(ctx, tokensColumn, c.next, end); err != nil {
		return false, err
	}
	if c.post, err = c.seg.r.Read(ctx, postingsColumn, c.next, end); err != nil {
		return false, err
	}
	if c.tokens.Len != int(end-c.next) || c.post.Len != c.tokens.Len || c.tokens.NullCount() > 0 || c.post.NullCount() > 0 {
		return false, fmt.Errorf("%w: ngram segment %s: rows [%d,%d) read back with nulls or short", errkind.Corrupt, table.IndexUUID(c.seg.Meta), c.next, end)
	}
	c.i, c.n, c.next = 0, c.tokens.Len, end
	return true, nil
}

func (c *cursor) token() uint32 { return binary.LittleEndian.Uint32(c.tokens.Values[c.i*4:]) }
func (c *cursor) posting() []byte {
	return c.post.Values[c.post.Offsets[c.i]:c.post.Offsets[c.i+1]]
}

func before(a, b *cursor) bool {
	if ta, tb := a.token(), b.token(); ta != tb {
		return ta < tb
	}
	return a.order < b.order
}

// DecodePosting parses a posting list (errkind.Corrupt when it is not a
// well-formed portable 64-bit roaring bitmap that uses all its bytes).
func DecodePosting(b []byte) (bm *roaring64.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("%w: posting list of %d bytes: %v", errkind.Corrupt, len(b), r)
		}
	}()
	bm = roaring64.New()
	n, err := bm.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: posting list of %d bytes: %v", errkind.Corrupt, len(b), err)
	}
	if n != int64(len(b)) {
		return nil, fmt.Errorf("%w: posting list of %d bytes holds %d", errkind.Corrupt, len(b), n)
	}
	return bm, nil
}

// MergeOptions tune Merge.
type MergeOptions struct {
	// IndexUUID names the output.
	IndexUUID uuid.UUID
	// Keep, when set, says for each input which of its rows stay (row
	// addresses, or stable row ids on datasets that have them: then each
	// input keeps the live ids of its own fragments, since an updated row
	// keeps its id in a newer fragment). Nil entries keep every row.
	Keep []func(rowID uint64) bool
	// Remap, when set, gives a kept row's id in the output for the rows
	// of the fragments Moves names (rows of fragments a compaction
	// rewrote move to their new addresses).
	Remap func(rowID uint64) uint64
	Moves func(frag uint32) bool
}

// Result is what Merge wrote.
type Result struct {
	Files                     []*pb.IndexFile
	TokensRead, TokensWritten uint64
	RowsWritten               uint64 // (token, row) pairs
}

// writer accumulates output rows and writes them a window at a time.
type writer struct {
	sw     storage.Writer
	cw     *storage.CountingWriter
	w      *lancefile.Writer
	tokens []byte
	vals   []byte
	offs   []int64
	n      int
	rows   uint64
}

// createPostings starts a segment file at name in file format v (its
// tokens nullable as pylance's builds write them, not as its merges do);
// the caller aborts w.sw unless finish succeeds.
func createPostings(ctx context.Context, st storage.Store, name string, v lancefile.Version, nullableTokens bool) (*writer, error) {
	sw, err := st.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	w := &writer{sw: sw, cw: &storage.CountingWriter{W: sw}}
	post := lancefile.NewField(postingsColumn, lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}, false)
	post.Metadata = map[string][]byte{compressionKey: []byte("none")}
	if w.w, err = lancefile.NewWriter(w.cw, []*lancefile.Field{lancefile.NewField(tokensColumn, lancefile.Primitive(lancefile.KindUint32), nullableTokens), post},
		lancefile.WriterOptions{Version: v}); err != nil {
		sw.Abort()
		return nil, err
	}
	w.reset()
	return w, nil
}

// finish writes the last window and publishes the file.
func (w *writer) finish() ([]*pb.IndexFile, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	if err := w.w.Finish(); err != nil {
		return nil, err
	}
	if err := w.sw.Finish(); err != nil {
		return nil, err
	}
	return []*pb.IndexFile{{Path: FileName, SizeBytes: uint64(w.cw.N)}}, nil
}

func (w *writer) reset() {
	// Fresh buffers: the file writer keeps the arrays it is given until
	// their page is written.
	w.tokens, w.vals, w.offs, w.n = make([]byte, 0, window*4), nil, make([]int64, 1, window+1), 0
}

func (w *writer) add(token uint32, posting []byte) error {
	w.tokens = binary.LittleEndian.AppendUint32(w.tokens, token)
	w.vals = append(w.vals, posting...)
	w.offs = append(w.offs, int64(len(w.vals)))
	w.n++
	w.rows++
	if w.n == window {
		return w.flush()
	}
	return nil
}

func (w *writer) flush() error {
	if w.n == 0 {
		return nil
	}
	if w.vals == nil {
		w.vals = []byte{}
	}
	err := w.w.Write([]*lancefile.Array{
		{Type: lancefile.Primitive(lancefile.KindUint32), Len: w.n, Values: w.tokens},
		{Type: lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}, Len: w.n, Values: w.vals, Offsets: w.offs},
	})
	w.reset()
	return err
}

// Merge merges NGRAM segments into one new segment under
// _indices/<uuid>/ (written, nothing committed).
func Merge(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, opts MergeOptions) (*Result, error) {
	if len(metas) == 0 {
		return nil, fmt.Errorf("%w: at least one ngram segment is required", errkind.InvalidInput)
	}
	segs := make([]*Segment, len(metas))
	defer func() {
		for _, s := range segs {
			if s != nil {
				s.Close()
			}
		}
	}()
	// opened a few at a time: on an object store each open is a round trip
	if err := parallel.Each(len(metas), parallel.Opens, func(i int) (err error) {
		segs[i], err = Open(ctx, st, metas[i])
		return err
	}); err != nil {
		return nil, err
	}
	dir := table.IndexDir(&pb.IndexMetadata{Uuid: &pb.UUID{Uuid: opts.IndexUUID[:]}})
	w, err := createPostings(ctx, st, dir+FileName, segs[0].Version, false)
	if err != nil {
		return nil, err
	}
	defer w.sw.Abort()
	res := &Result{}
	var h []*cursor
	for i, s := range segs {
		c := &cursor{seg: s, order: i}
		ok, err := c.fill(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			h = append(h, c)
		}
	}
	kway.Heapify(h, before)
	// advance moves h[0] to its next row and restores the heap.
	advance := func() error {
		c := h[0]
		if c.i++; c.i == c.n {
			ok, err := c.fill(ctx)
			if err != nil {
				return err
			}
			if !ok {
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
			}
		}
		if len(h) > 0 {
			kway.SiftDown(h, 0, before)
		}
		return nil
	}
	if opts.Keep != nil && len(opts.Keep) != len(segs) {
		return nil, fmt.Errorf("%w: %d keep functions for %d ngram segments", errkind.InvalidInput, len(opts.Keep), len(segs))
	}
	var parts []part
	for len(h) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		tok := h[0].token()
		parts = parts[:0]
		for len(h) > 0 && h[0].token() == tok {
			// Copied: the cursor's window is replaced when it refills.
			p := part{b: append([]byte(nil), h[0].posting()...), remap: opts.Remap, moves: opts.Moves}
			if opts.Keep != nil {
				p.keep = opts.Keep[h[0].order]
			}
			parts = append(parts, p)
			res.TokensRead++
			if err := advance(); err != nil {
				return nil, err
			}
		}
		out, rows, err := joinPostings(parts)
		if err != nil {
			return nil, fmt.Errorf("token %d: %w", tok, err)
		}
		if rows == 0 {
			continue
		}
		res.RowsWritten += rows
		if err := w.add(tok, out); err != nil {
			return nil, err
		}
	}
	if res.Files, err = w.finish(); err != nil {
		return nil, err
	}
	res.TokensWritten = w.rows
	return res, nil
}

// part is one input's posting list of a token, and which of its rows
// stay (nil: all).
type part struct {
	b     []byte
	keep  func(uint64) bool
	remap func(uint64) uint64 // nil: every row where it is
	moves func(uint32) bool   // the fragments whose rows remap moves
}

// joinPostings joins one token's posting lists, each without the rows its
// keep refuses. A single list with nothing to drop is copied as it is.
func joinPostings(parts []part) ([]byte, uint64, error) {
	acc := roaring64.New()
	for _, p := range parts {
		bm, err := DecodePosting(p.b)
		if err != nil {
			return nil, 0, err
		}
		if len(parts) == 1 && p.keep == nil && p.remap == nil {
			return p.b, bm.GetCardinality(), nil
		}
		if p.keep != nil || p.remap != nil {
			drop, moved := roaring64.New(), roaring64.New()
			it := bm.Iterator()
			for it.HasNext() {
				id := it.Next()
				switch {
				case p.keep != nil && !p.keep(id):
					drop.Add(id)
				case p.remap != nil && p.moves(uint32(id>>32)):
					drop.Add(id)
					moved.Add(p.remap(id))
				}
			}
			bm.AndNot(drop)
			bm.Or(moved)
		}
		acc.Or(bm)
	}
	b, err := acc.ToBytes()
	if err != nil {
		return nil, 0, err
	}
	return b, acc.GetCardinality(), nil
}

// Problem is one thing Check found wrong ("structure": tokens and
// posting lists; "row_ids": rows of fragments the segment does not cover).
type Problem struct {
	Check   string
	Message string
}

// CheckResult is what Check read and found.
type CheckResult struct {
	Tokens   uint64
	Rows     uint64 // (token, row) pairs
	Problems []Problem
}

const maxProblems = 8

// Check reads a whole segment once: tokens ascending and each once, every
// posting list well formed and not empty, and, when covered is set, every
// row of a fragment the segment covers.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, covered func(fragment uint32) bool) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &CheckResult{Tokens: s.Tokens}
	problem := func(check, format string, args ...any) {
		if len(res.Problems) < maxProblems {
			res.Problems = append(res.Problems, Problem{check, fmt.Sprintf(format, args...)})
		}
	}
	c := &cursor{seg: s}
	var row uint64
	var prev uint32
	for {
		ok, err := c.fill(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		for c.i = 0; c.i < c.n; c.i++ {
			tok := c.token()
			if row > 0 && tok <= prev {
				problem("structure", "row %d: token %d after %d (tokens must ascend, each once)", row, tok, prev)
			}
			prev = tok
			bm, err := DecodePosting(c.posting())
			if err != nil {
				problem("structure", "row %d (token %d): %v", row, tok, err)
			} else if bm.IsEmpty() {
				problem("structure", "row %d (token %d): an empty posting list", row, tok)
			} else {
				res.Rows += bm.GetCardinality()
				if covered != nil {
					for _, f := range fragmentsOf(bm) {
						if !covered(f) {
							problem("row_ids", "token %d holds rows of fragment %d, which the segment does not cover", tok, f)
							break
						}
					}
				}
			}
			row++
		}
	}
	return res, nil
}

// fragmentsOf lists the fragments (high halves) of a bitmap's rows.
func fragmentsOf(bm *roaring64.Bitmap) []uint32 {
	var out []uint32
	it := bm.Iterator()
	for it.HasNext() {
		f := uint32(it.Next() >> 32)
		if len(out) == 0 || out[len(out)-1] != f {
			out = append(out, f)
		}
		if f == 1<<32-1 {
			break
		}
		it.AdvanceIfNeeded(uint64(f+1) << 32)
	}
	return out
}
