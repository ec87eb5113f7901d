package fts

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Builder collects documents' tokens in memory and writes them as a
// segment of one partition, laid out as pylance 14.0.2's build lays one
// out (FTS format 2, 128-document blocks, an fst token map, positions in
// the shared_stream_v2 layout when kept). Documents are numbered in the
// order they are added; a document without tokens (a null, an empty text,
// stop words only) is left out, as pylance 14.0.2 leaves it out.
//
// Memory: the posting lists of the documents added, uncompressed (about
// 8 bytes per distinct token of a document, 4 more per position), plus
// one document's tokens. Callers bound it by the rows they add (a
// fragment-scoped build adds its fragments' rows).
type Builder struct {
	withPos   bool
	ids       map[string]int32
	tokens    []string
	lists     []tokenList
	rowIDs    []uint64
	numTokens []uint32
	total     uint64
	doc       []occurrence // the current document's tokens
	bytes     int64
}

type tokenList struct{ docs, freqs, deltas []uint32 }

type occurrence struct {
	id  int32
	pos uint32
}

// NewBuilder returns a Builder; withPos keeps each token's positions.
func NewBuilder(withPos bool) *Builder {
	return &Builder{withPos: withPos, ids: map[string]int32{}}
}

// Token adds one token, at position pos, to the current document.
func (b *Builder) Token(tok []byte, pos uint32) error {
	id, ok := b.ids[string(tok)]
	if !ok {
		if len(b.tokens) == math.MaxInt32 {
			return fmt.Errorf("%w: fts build: more than %d distinct tokens", errkind.Unsupported, math.MaxInt32)
		}
		id = int32(len(b.tokens))
		s := string(tok)
		b.ids[s] = id
		b.tokens = append(b.tokens, s)
		b.lists = append(b.lists, tokenList{})
		b.bytes += int64(len(s)) + 96
	}
	b.doc = append(b.doc, occurrence{id, pos})
	return nil
}

// EndDoc ends the current document, the row rowID.
func (b *Builder) EndDoc(rowID uint64) error {
	if len(b.doc) == 0 {
		return nil
	}
	if len(b.rowIDs) == math.MaxUint32 || uint64(len(b.doc)) > math.MaxUint32 {
		return fmt.Errorf("%w: fts build: more than 2^32 documents or tokens in a document", errkind.Unsupported)
	}
	d := uint32(len(b.rowIDs))
	b.rowIDs = append(b.rowIDs, rowID)
	b.numTokens = append(b.numTokens, uint32(len(b.doc)))
	b.total += uint64(len(b.doc))
	// by token, then position (each pair is unique)
	slices.SortFunc(b.doc, func(x, y occurrence) int {
		if x.id != y.id {
			return int(x.id) - int(y.id)
		}
		return int(x.pos) - int(y.pos)
	})
	for i := 0; i < len(b.doc); {
		j := i + 1
		for j < len(b.doc) && b.doc[j].id == b.doc[i].id {
			j++
		}
		l := &b.lists[b.doc[i].id]
		l.docs = append(l.docs, d)
		l.freqs = append(l.freqs, uint32(j-i))
		b.bytes += 8
		if b.withPos {
			prev := uint32(0)
			for _, o := range b.doc[i:j] {
				l.deltas = append(l.deltas, o.pos-prev) // the first absolute
				prev = o.pos
			}
			b.bytes += 4 * int64(j-i)
		}
		i = j
	}
	b.doc = b.doc[:0]
	b.bytes += 12
	return nil
}

// Docs is the number of documents kept; MemoryBytes estimates what the
// builder holds.
func (b *Builder) Docs() int          { return len(b.rowIDs) }
func (b *Builder) MemoryBytes() int64 { return b.bytes }

// WriteOptions say where and how a Builder writes.
type WriteOptions struct {
	// Dir is the segment's directory (_indices/<uuid>/).
	Dir string
	// Params is the analyzer's JSON text, carried as it is.
	Params string
	// Version is the Lance file version of the files.
	Version lancefile.Version
	// Format1 writes FTS format 1 (see Meta.Format1), for an index
	// created in it; else format 2.
	Format1 bool
}

// Write writes the segment's files under opts.Dir (nothing committed);
// on error nothing is left.
func (b *Builder) Write(ctx context.Context, st storage.Store, opts WriteOptions) (*Result, error) {
	keys := map[string]string{keyFormat: "2", keyBlockSize: fmt.Sprint(BlockSize), keyTailCodec: tailVarintDelta}
	switch {
	case opts.Format1:
		keys[keyFormat], keys[keyTailCodec] = "1", tailFixed32
	case b.withPos:
		keys[keyPosLayout], keys[keyPosCodec] = posLayoutShared, posCodecPacked
	}
	var avgdl float32
	if len(b.rowIDs) > 0 {
		avgdl = float32(float32(b.total) / float32(len(b.rowIDs)))
	}
	m := &tokenMerger{order: b.tokens, withPos: b.withPos, format1: opts.Format1, numTokens: b.numTokens, avgdl: avgdl, docs: len(b.rowIDs),
		gather: func(t int, sc *scratch) error {
			l := &b.lists[t]
			sc.merged.Docs = append(sc.merged.Docs, l.docs...)
			sc.merged.Freqs = append(sc.merged.Freqs, l.freqs...)
			sc.posOut = append(sc.posOut, l.deltas...)
			return nil
		}}
	res := &Result{DocsRead: uint64(len(b.rowIDs)), DocsWritten: uint64(len(b.rowIDs))}
	meta := Meta{Params: opts.Params, Keys: keys, Version: opts.Version, positions: b.withPos}
	if len(b.rowIDs) == 0 { // as pylance: no partition at all
		f, err := writeMetadata(ctx, st, opts.Dir, meta, roaring.New(), true)
		if err != nil {
			return nil, err
		}
		res.Files = []*pb.IndexFile{f}
		return res, nil
	}
	if err := writeOutput(ctx, st, opts.Dir, meta, roaring.New(), m, b.rowIDs, b.total, res); err != nil {
		return nil, err
	}
	return res, nil
}
