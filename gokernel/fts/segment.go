package fts

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// File, column and key names of a segment. Part of the format.
const (
	MetadataFile = "metadata.lance"
	// legacyInvertFile is the single invert file of pylance 0.27 and
	// earlier, whose segments have no metadata.lance.
	legacyInvertFile = "invert.lance"

	deletedColumn   = "deleted_fragments"
	rowIDColumn     = "_rowid"
	numTokensColumn = "_num_tokens"
	fstColumn       = "_token_fst_bytes"
	nextIDColumn    = "_token_next_id"
	tokenLenColumn  = "_token_total_length"
	arrowTokenCol   = "_token"
	arrowTokenIDCol = "_token_id"
	postingColumn   = "_posting"
	maxScoreColumn  = "_max_score"
	lengthColumn    = "_length"
	impactsColumn   = "_impacts"
	positionColumn  = "_compressed_position"
	position1Column = "_position" // FTS format 1
	posOffsetColumn = "_position_block_offset"

	keyPartitions   = "partitions"
	keyParams       = "params"
	keyTotalTokens  = "total_tokens"
	keyFormat       = "format_version"
	keyTokenSet     = "token_set_format"
	keyBlockSize    = "posting_block_size"
	keyTailCodec    = "posting_tail_codec"
	keyPosLayout    = "positions_layout"
	keyPosCodec     = "positions_codec"
	tailVarintDelta = "varint_delta_v1"
	tailFixed32     = "fixed32_v1"
	posLayoutShared = "shared_stream_v2"
	posCodecPacked  = "packed_delta_v1"
)

// TokensFile, DocsFile and InvertFile name partition p's files.
func TokensFile(p uint64) string { return fmt.Sprintf("part_%d_tokens.lance", p) }
func DocsFile(p uint64) string   { return fmt.Sprintf("part_%d_docs.lance", p) }
func InvertFile(p uint64) string { return fmt.Sprintf("part_%d_invert.lance", p) }

// Meta is what metadata.lance says of a segment.
type Meta struct {
	// Params is the analyzer, as the JSON text the segment carries.
	Params string
	// Partitions are the ids of the segment's partitions.
	Partitions []uint64
	// Keys is the file's schema metadata (format_version, token_set_format,
	// posting_block_size, posting_tail_codec, positions_layout...).
	Keys map[string]string
	// Deleted are fragments the segment records as deleted.
	Deleted *roaring.Bitmap
	// Version is the Lance file version of the segment's files.
	Version lancefile.Version
	// positions: the segment stores term positions.
	positions bool
}

// WithPositions reports whether the segment stores term positions.
func (m *Meta) WithPositions() bool { return m.positions }

// FTS format 1 is what pylance 2.0.1 and earlier wrote (with no format
// keys at all: format_version "") and what pylance 14.0.2 still writes
// for an index created in it (its deltas and merges say format_version
// "1", posting_tail_codec fixed32_v1). Its posting blocks are format 2's
// but for the last, partial one:
//
//	f32 block score | u32 documents (absolute) | u32 frequencies
//
// and it keeps positions per document, in a _position column of
// list<list<large_binary>>: per token, per document, a u32 count of
// positions, then each group of 128 as u32 first | u8 width | deltas
// packed 4x (the first delta 0), then the rest as raw u32s. Its invert
// files have no _impacts in 2.0.1; its docs files no total_tokens; its
// metadata.lance no deleted_fragments column. A segment of format 1 is
// read into the format 2 representation (readInvertRange); a merge of
// format 1 inputs writes format 1, as pylance 14.0.2's merge does.

// Format1 reports whether the segment is of FTS format 1.
func (m *Meta) Format1() bool { f := m.Keys[keyFormat]; return f == "" || f == "1" }

// format names the segment's FTS format ("1" for both spellings of 1).
func (m *Meta) format() string {
	if m.Format1() {
		return "1"
	}
	return m.Keys[keyFormat]
}

// layout is what reading an invert file needs to know of its segment.
type layout struct{ positions, format1 bool }

func (m *Meta) layout() layout { return layout{m.positions, m.Format1()} }

// Segment is an opened INVERTED segment.
type Segment struct {
	Index *pb.IndexMetadata
	Meta  Meta
	st    storage.Store
	dir   string
}

// Open reads a segment's metadata.lance and checks that its layout is one
// this package reads: FTS format 2 or 3 with 128-document posting blocks, the
// varint_delta_v1 tail codec, an fst or arrow token set, and positions (if
// any) in the shared_stream_v2 layout with the packed_delta_v1 codec. Any
// other layout is errkind.Unsupported, naming it.
func Open(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	s := &Segment{Index: im, st: st, dir: table.IndexDir(im)}
	r, closeFn, err := s.open(ctx, MetadataFile)
	if errors.Is(err, errkind.NotFound) {
		if obj, lerr := st.Open(ctx, s.dir+legacyInvertFile); lerr == nil {
			obj.Close()
			return nil, fmt.Errorf("%w: INVERTED segment %s has the layout of pylance 0.27 and earlier (%s, tokens.lance, docs.lance), "+
				"which this version does not read; pylance's optimize_indices rewrites it in FTS format 1 when it first adds to the index",
				errkind.Unsupported, table.IndexUUID(im), legacyInvertFile)
		}
	}
	if err != nil {
		return nil, err
	}
	defer closeFn()
	m := &s.Meta
	m.Version = r.Version()
	m.Keys = map[string]string{}
	for k, v := range r.Metadata() {
		m.Keys[k] = string(v)
	}
	m.Params = m.Keys[keyParams]
	delete(m.Keys, keyParams)
	if err := json.Unmarshal([]byte(m.Keys[keyPartitions]), &m.Partitions); err != nil {
		return nil, fmt.Errorf("%w: INVERTED segment %s: partitions %q: %v", errkind.Corrupt, table.IndexUUID(im), m.Keys[keyPartitions], err)
	}
	delete(m.Keys, keyPartitions)
	if len(m.Partitions) > 1<<20 {
		return nil, fmt.Errorf("%w: INVERTED segment %s: %d partitions", errkind.Corrupt, table.IndexUUID(im), len(m.Partitions))
	}
	if err := checkLayout(m.Keys); err != nil {
		return nil, fmt.Errorf("INVERTED segment %s: %w", table.IndexUUID(im), err)
	}
	m.positions = m.Keys[keyPosLayout] != ""
	if m.Format1() {
		var p struct {
			WithPosition bool `json:"with_position"`
		}
		if err := json.Unmarshal([]byte(m.Params), &p); err != nil {
			return nil, fmt.Errorf("%w: INVERTED segment %s: params %q: %v", errkind.Corrupt, table.IndexUUID(im), m.Params, err)
		}
		m.positions = p.WithPosition
	}
	m.Deleted = roaring.New()
	if m.Keys[keyFormat] == "" && r.NumRows() == 0 {
		return s, nil // 2.0.1: no deleted_fragments column
	}
	del, err := r.ReadAll(ctx, deletedColumn)
	if err != nil {
		return nil, fmt.Errorf("INVERTED segment %s: %w", table.IndexUUID(im), err)
	}
	if del.Len > 0 && del.IsValid(0) {
		if _, err := m.Deleted.FromUnsafeBytes(del.Values[del.Offsets[0]:del.Offsets[1]]); err != nil {
			return nil, fmt.Errorf("%w: INVERTED segment %s: deleted fragments: %v", errkind.Corrupt, table.IndexUUID(im), err)
		}
		m.Deleted = m.Deleted.Clone()
	}
	return s, nil
}

// checkLayout refuses index layouts this package does not read. FTS
// formats 2 and 3 lay out 128-document blocks alike (pylance 14.0.2 writes
// 2 by default, 3 with format_version=3); 256-document blocks (format 3
// with block_size=256) pack 8 lanes and patch frequencies, and are not
// read yet.
func checkLayout(keys map[string]string) error {
	want := map[string]string{keyBlockSize: strconv.Itoa(BlockSize), keyTailCodec: tailVarintDelta}
	switch keys[keyFormat] {
	case "2", "3":
	case "1":
		want[keyTailCodec] = tailFixed32
	case "":
		want = map[string]string{keyBlockSize: "", keyTailCodec: ""}
	default:
		return fmt.Errorf("%w: format_version %q (this version reads FTS formats 1, 2 and 3)", errkind.Unsupported, keys[keyFormat])
	}
	for k, v := range want {
		if keys[k] != v {
			return fmt.Errorf("%w: %s %q (this version reads %s %q)", errkind.Unsupported, k, keys[k], k, v)
		}
	}
	if ts := keys[keyTokenSet]; ts != "fst" && ts != "arrow" {
		return fmt.Errorf("%w: token_set_format %q (fst and arrow are read)", errkind.Unsupported, ts)
	}
	if l := keys[keyPosLayout]; l != "" && (l != posLayoutShared || keys[keyPosCodec] != posCodecPacked) {
		return fmt.Errorf("%w: positions layout %q codec %q (%s %s is read)", errkind.Unsupported, l, keys[keyPosCodec], posLayoutShared, posCodecPacked)
	}
	return nil
}

func (s *Segment) open(ctx context.Context, name string) (*lancefile.Reader, func(), error) {
	obj, err := s.st.Open(ctx, s.dir+name)
	if err != nil {
		return nil, nil, fmt.Errorf("INVERTED segment %s: %w", table.IndexUUID(s.Index), err)
	}
	r, err := lancefile.Open(ctx, obj, s.dir+name, lancefile.Options{})
	if err != nil {
		obj.Close()
		return nil, nil, err
	}
	return r, func() { obj.Close() }, nil
}

// Docs are a partition's documents: document d is row d.
type Docs struct {
	RowIDs      []uint64
	NumTokens   []uint32
	TotalTokens uint64
}

// ReadDocs reads partition p's documents.
func (s *Segment) ReadDocs(ctx context.Context, p uint64) (*Docs, error) {
	r, closeFn, err := s.open(ctx, DocsFile(p))
	if err != nil {
		return nil, err
	}
	defer closeFn()
	ids, err := r.ReadAll(ctx, rowIDColumn)
	if err != nil {
		return nil, err
	}
	nt, err := r.ReadAll(ctx, numTokensColumn)
	if err != nil {
		return nil, err
	}
	if ids.Type.Kind != lancefile.KindUint64 || nt.Type.Kind != lancefile.KindUint32 || ids.Len != nt.Len {
		return nil, fmt.Errorf("%w: %s: columns %s[%d] and %s[%d]", errkind.Corrupt, DocsFile(p), ids.Type, ids.Len, nt.Type, nt.Len)
	}
	d := &Docs{RowIDs: make([]uint64, ids.Len), NumTokens: make([]uint32, nt.Len)}
	var sum uint64
	for i := range d.RowIDs {
		d.RowIDs[i] = binary.LittleEndian.Uint64(ids.Values[8*i:])
		d.NumTokens[i] = binary.LittleEndian.Uint32(nt.Values[4*i:])
		sum += uint64(d.NumTokens[i])
	}
	tt, ok := r.MetadataString(keyTotalTokens)
	if !ok && s.Meta.Keys[keyFormat] == "" {
		tt = strconv.FormatUint(sum, 10) // 2.0.1 wrote no total
	}
	if d.TotalTokens, err = strconv.ParseUint(tt, 10, 64); err != nil || d.TotalTokens != sum {
		return nil, fmt.Errorf("%w: %s: total_tokens %q, documents hold %d", errkind.Corrupt, DocsFile(p), tt, sum)
	}
	return d, nil
}

// ReadTokens reads partition p's token dictionary of n tokens (the rows
// of its posting lists): token id i is tokens[i].
func (s *Segment) ReadTokens(ctx context.Context, p uint64, n int) ([]string, error) {
	r, closeFn, err := s.open(ctx, TokensFile(p))
	if err != nil {
		return nil, err
	}
	defer closeFn()
	var toks []string
	if s.Meta.Keys[keyTokenSet] == "arrow" {
		toks, err = readArrowTokens(ctx, r)
	} else {
		toks, err = readFSTTokens(ctx, r, n)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", TokensFile(p), err)
	}
	if len(toks) != n {
		return nil, fmt.Errorf("%w: %s: %d tokens for %d posting lists", errkind.Corrupt, TokensFile(p), len(toks), n)
	}
	return toks, nil
}

func readFSTTokens(ctx context.Context, r *lancefile.Reader, n int) ([]string, error) {
	var cols [3]*lancefile.Array
	for i, name := range []string{fstColumn, nextIDColumn, tokenLenColumn} {
		a, err := r.ReadAll(ctx, name)
		if err != nil {
			return nil, err
		}
		if a.Len != 1 {
			return nil, fmt.Errorf("%w: %s has %d rows", errkind.Corrupt, name, a.Len)
		}
		cols[i] = a
	}
	if cols[1].Type.Kind != lancefile.KindUint32 || cols[2].Type.Kind != lancefile.KindUint64 {
		return nil, fmt.Errorf("%w: token set columns of %s and %s", errkind.Corrupt, cols[1].Type, cols[2].Type)
	}
	if next := binary.LittleEndian.Uint32(cols[1].Values); int64(next) != int64(n) {
		return nil, fmt.Errorf("%w: %d tokens for %d posting lists", errkind.Corrupt, next, n)
	}
	fb := cols[0]
	return fstTokens(fb.Values[fb.Offsets[0]:fb.Offsets[1]], n, binary.LittleEndian.Uint64(cols[2].Values))
}

func readArrowTokens(ctx context.Context, r *lancefile.Reader) ([]string, error) {
	toks, err := r.ReadAll(ctx, arrowTokenCol)
	if err != nil {
		return nil, err
	}
	ids, err := r.ReadAll(ctx, arrowTokenIDCol)
	if err != nil {
		return nil, err
	}
	if ids.Len != toks.Len || ids.Type.Kind != lancefile.KindUint32 {
		return nil, fmt.Errorf("%w: arrow token set: %d tokens, %d ids", errkind.Corrupt, toks.Len, ids.Len)
	}
	out := make([]string, toks.Len)
	seen := make([]bool, toks.Len)
	for i := 0; i < toks.Len; i++ {
		id := binary.LittleEndian.Uint32(ids.Values[4*i:])
		if int(id) >= len(out) || seen[id] {
			return nil, fmt.Errorf("%w: arrow token set: token id %d of %d tokens", errkind.Corrupt, id, len(out))
		}
		seen[id] = true
		out[id] = string(toks.Values[toks.Offsets[i]:toks.Offsets[i+1]])
	}
	return out, nil
}

// Invert is a partition's posting lists, one row per token id, as stored.
type Invert struct {
	Postings  *lancefile.Array // list<large_binary>: the blocks of each token
	MaxScore  []float32
	Length    []uint32
	Positions *lancefile.Array // large_binary, nil without positions
	PosBlocks *lancefile.Array // list<uint32>: byte offset of each block's positions
}

// Tokens is the number of token rows.
func (v *Invert) Tokens() int { return len(v.Length) }

// Blocks returns token t's posting blocks.
func (v *Invert) Blocks(t int) [][]byte { return v.blocksInto(t, nil) }

// blocksInto appends token t's posting blocks to dst.
func (v *Invert) blocksInto(t int, dst [][]byte) [][]byte {
	it := v.Postings.Items
	for i := v.Postings.Offsets[t]; i < v.Postings.Offsets[t+1]; i++ {
		dst = append(dst, it.Values[it.Offsets[i]:it.Offsets[i+1]])
	}
	return dst
}

// readInvertRow reads token t's row of an invert file.
func readInvertRow(ctx context.Context, r *lancefile.Reader, t uint64, lay layout) (*Invert, error) {
	v, err := readInvertRange(ctx, r, t, t+1, lay, false)
	if err != nil {
		return nil, fmt.Errorf("invert file: %w", err)
	}
	return v, nil
}

// openedPart is a partition's documents and token map, with its invert
// file open to be read in windows (close releases it).
type openedPart struct {
	docs   *Docs
	tokens []string
	inv    *lancefile.Reader
	close  func()
}

// openPartition reads partition p's documents and token map and opens its
// invert file, whose rows the token map must match.
func (s *Segment) openPartition(ctx context.Context, p uint64) (*openedPart, error) {
	docs, err := s.ReadDocs(ctx, p)
	if err != nil {
		return nil, err
	}
	r, closeFn, err := s.open(ctx, InvertFile(p))
	if err != nil {
		return nil, err
	}
	toks, err := s.ReadTokens(ctx, p, int(r.NumRows()))
	if err != nil {
		closeFn()
		return nil, err
	}
	return &openedPart{docs: docs, tokens: toks, inv: r, close: closeFn}, nil
}

// ReadInvert reads partition p's posting lists.
func (s *Segment) ReadInvert(ctx context.Context, p uint64) (*Invert, error) {
	r, closeFn, err := s.open(ctx, InvertFile(p))
	if err != nil {
		return nil, err
	}
	defer closeFn()
	v, err := readInvertRange(ctx, r, 0, r.NumRows(), s.Meta.layout(), true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", InvertFile(p), err)
	}
	return v, nil
}

// readInvertRange reads rows [lo, hi) of an invert file (their max
// scores only when scores is set: a merge computes them afresh), in the
// format 2 representation whatever the segment's format.
func readInvertRange(ctx context.Context, r *lancefile.Reader, lo, hi uint64, lay layout, scores bool) (*Invert, error) {
	v := &Invert{}
	var err error
	if v.Postings, err = r.Read(ctx, postingColumn, lo, hi); err != nil {
		return nil, err
	}
	n := int(hi - lo)
	if v.Postings.Len != n || v.Postings.Items == nil || v.Postings.Items.Type.Kind != lancefile.KindBinary {
		return nil, fmt.Errorf("%w: rows [%d,%d): column %s is %s of %d rows", errkind.Corrupt, lo, hi, postingColumn, v.Postings.Type, v.Postings.Len)
	}
	if v.Length, err = readU32s(ctx, r, lengthColumn, lo, hi); err != nil {
		return nil, err
	}
	if scores {
		ms, err := readU32s(ctx, r, maxScoreColumn, lo, hi)
		if err != nil {
			return nil, err
		}
		v.MaxScore = make([]float32, n)
		for i, b := range ms {
			v.MaxScore[i] = math.Float32frombits(b)
		}
	}
	if lay.format1 {
		if err := v.tailsFromFixed32(); err != nil {
			return nil, fmt.Errorf("rows [%d,%d): %w", lo, hi, err)
		}
	}
	if lay.positions && lay.format1 {
		col, err := r.Read(ctx, position1Column, lo, hi)
		if err != nil {
			return nil, err
		}
		if v.Positions, v.PosBlocks, err = positionsFromFormat1(col, v.Length); err != nil {
			return nil, fmt.Errorf("rows [%d,%d): %w", lo, hi, err)
		}
	} else if lay.positions {
		if v.Positions, err = r.Read(ctx, positionColumn, lo, hi); err != nil {
			return nil, err
		}
		if v.PosBlocks, err = r.Read(ctx, posOffsetColumn, lo, hi); err != nil {
			return nil, err
		}
		if v.Positions.Len != n || v.PosBlocks.Len != n || v.PosBlocks.Items == nil {
			return nil, fmt.Errorf("%w: rows [%d,%d): positions of %d and %d rows", errkind.Corrupt, lo, hi, v.Positions.Len, v.PosBlocks.Len)
		}
	}
	return v, nil
}

// readU32s reads rows [lo, hi) of a uint32 or float32 column as bits.
func readU32s(ctx context.Context, r *lancefile.Reader, name string, lo, hi uint64) ([]uint32, error) {
	a, err := r.Read(ctx, name, lo, hi)
	if err != nil {
		return nil, err
	}
	if a.Len != int(hi-lo) || (a.Type.Kind != lancefile.KindUint32 && a.Type.Kind != lancefile.KindFloat32) || len(a.Values) < 4*a.Len {
		return nil, fmt.Errorf("%w: rows [%d,%d): column %s is %s of %d rows", errkind.Corrupt, lo, hi, name, a.Type, a.Len)
	}
	out := make([]uint32, a.Len)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(a.Values[4*i:])
	}
	return out, nil
}

// Description is what a listing says of a segment, read from its files'
// metadata alone.
type Description struct {
	Partitions int
	Docs       uint64 // documents (rows with at least one token)
	Tokens     uint64 // token rows, summed over partitions
	Version    lancefile.Version
	Params     string
}

// Describe opens a segment's files and counts its documents and tokens.
func Describe(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Description, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	d := &Description{Partitions: len(s.Meta.Partitions), Version: s.Meta.Version, Params: s.Meta.Params}
	for _, p := range s.Meta.Partitions {
		for _, name := range []string{DocsFile(p), InvertFile(p)} {
			r, closeFn, err := s.open(ctx, name)
			if err != nil {
				return nil, err
			}
			if name == DocsFile(p) {
				d.Docs += r.NumRows()
			} else {
				d.Tokens += r.NumRows()
			}
			closeFn()
		}
	}
	return d, nil
}
