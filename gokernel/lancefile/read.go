package lancefile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// fieldColumns are the physical columns of one field, in pre-order: one
// for a primitive or FixedSizeList; for a list, in 2.0 the offsets column
// then the item's column, in 2.1+ only the leaf. name is a top-level
// field's name or the dotted path of a field inside structs ("s.x"); at
// each level a field whose own name holds the dots wins.
func (r *Reader) fieldColumns(name string) (*Field, []int, error) {
	f, first, ok := r.member(r.fields, 0, name)
	if !ok {
		return nil, nil, fmt.Errorf("%w: lancefile: %s has no column %q", errkind.NotFound, r.name, name)
	}
	cols := make([]int, columnCount(f, r.foot.version))
	for i := range cols {
		cols[i] = first + i
	}
	return f, cols, nil
}

// member finds the field at dotted path name among fields, whose columns
// start at col: the field and its first column.
func (r *Reader) member(fields []*Field, col int, name string) (*Field, int, bool) {
	c := col
	for _, f := range fields {
		if f.Name == name {
			return f, c, true
		}
		c += columnCount(f, r.foot.version)
	}
	for _, f := range fields {
		if rest, ok := strings.CutPrefix(name, f.Name+"."); ok && f.Type.Kind == KindStruct {
			inner := col
			if r.foot.version == V2_0 {
				inner++ // the struct's own column
			}
			if m, first, ok := r.member(f.Children, inner, rest); ok {
				return m, first, true
			}
		}
		col += columnCount(f, r.foot.version)
	}
	return nil, 0, false
}

// ReadAll reads every row of a field: a top-level name, or a path into
// structs (see fieldColumns).
func (r *Reader) ReadAll(ctx context.Context, name string) (*Array, error) {
	return r.Read(ctx, name, 0, r.numRows)
}

// Read reads rows [start, end) of a field (see ReadAll). Only the pages that
// hold those rows are read; inside a page, fixed-width layouts read only the
// chunks (mini-block) or rows (full-zip, 2.0 flat) of the range, so one IVF
// partition costs about its own bytes. Lists read their whole pages. A
// dictionary column reads as its values (DictValues).
func (r *Reader) Read(ctx context.Context, name string, start, end uint64) (*Array, error) {
	return r.ReadInto(ctx, name, start, end, nil)
}

// ReadInto is Read, decoding a fixed-width column into dst's memory when
// cap(dst) >= IntoCap(type, end-start), and the bytes of a binary column's
// rows of one full-zip page when dst holds them: a caller that streams
// windows recycles its buffers instead of allocating new ones. The
// returned array may share dst's memory (so dst must not be reused while
// it is in use); dst may be nil.
func (r *Reader) ReadInto(ctx context.Context, name string, start, end uint64, dst []byte) (*Array, error) {
	f, cols, err := r.fieldColumns(name)
	if err != nil {
		return nil, err
	}
	if start > end || end > r.numRows {
		return nil, fmt.Errorf("%w: lancefile: %s: rows [%d,%d) of %d", errkind.InvalidInput, r.name, start, end, r.numRows)
	}
	t := f.Type
	if v, ok := DictValues(t); ok && len(cols) == 1 {
		// a dictionary column reads as its values: each of its pages is a
		// dictionary page of the value type (a null index, a null row)
		t = v
	}
	switch {
	case t.Kind == KindUnknown && len(cols) == 1 && r.allNull(ctx, cols[0]):
		// A type this package does not decode (a dictionary...), whose
		// rows are all null: pylance writes ZONEMAP bounds so.
		n := int(end - start)
		return &Array{Type: t, Len: n, Validity: make([]byte, (n+7)/8)}, nil
	case t.Kind == KindStruct || t.Kind == KindUnknown:
		return nil, fmt.Errorf("%w: lancefile: %s: reading %s columns", errkind.Unsupported, r.name, t)
	case isList(t):
		if len(f.Children) != 1 {
			return nil, fmt.Errorf("%w: lancefile: %s: list %q has %d children", errkind.Corrupt, r.name, name, len(f.Children))
		}
		it := f.Children[0].Type
		if r.foot.version == V2_0 && isList(it) {
			// Lists of lists (FTS format 1 positions): one offsets
			// column per level, then the leaf's.
			if err := leafOfLists(f.Children[0]); err != nil {
				return nil, fmt.Errorf("%w: lancefile: %s: %w", errkind.Unsupported, r.name, err)
			}
			out, err := r.readList20(ctx, cols, f, int(start), int(end))
			if err != nil {
				return nil, fmt.Errorf("lancefile: %s: column %q rows [%d,%d): %w", r.name, name, start, end, err)
			}
			return out, nil
		}
		if it.Kind != KindBinary && (it.ValueBits() == 0 || it.ValueBits()%8 != 0) {
			return nil, fmt.Errorf("%w: lancefile: %s: lists of %s", errkind.Unsupported, r.name, it)
		}
		if r.foot.version == V2_0 {
			return r.readList20(ctx, cols, f, int(start), int(end))
		}
	case t.Kind == KindBinary:
	default:
		if t.ValueBits() == 0 || t.ValueBits()%8 != 0 {
			return nil, fmt.Errorf("%w: lancefile: %s: reading %s columns", errkind.Unsupported, r.name, t)
		}
	}
	var item DataType
	if isList(t) {
		item = f.Children[0].Type
	} else if n := (end - start) * uint64(t.ValueBits()/8); n > uint64(r.opts.MaxReadBytes) {
		return nil, fmt.Errorf("%w: lancefile: %s: reading rows [%d,%d) of %q would decode %d bytes, above the %d-byte limit",
			errkind.InvalidInput, r.name, start, end, name, n, r.opts.MaxReadBytes)
	}
	var out *Array
	if dst != nil && t.Kind == KindBinary && r.foot.version != V2_0 {
		out, err = r.readColumnInto(ctx, cols[0], t, item, int(start), int(end), dst)
	} else if dst != nil && !isList(t) && t.Kind != KindBinary && r.foot.version != V2_0 {
		var ok bool
		if out, ok, err = r.readFixedInto(ctx, cols[0], t, int(start), int(end), dst); !ok && err == nil {
			out, err = r.readColumn(ctx, cols[0], t, item, int(start), int(end))
		}
	} else {
		out, err = r.readColumn(ctx, cols[0], t, item, int(start), int(end))
	}
	if err != nil {
		return nil, fmt.Errorf("lancefile: %s: column %q rows [%d,%d): %w", r.name, name, start, end, err)
	}
	return out, nil
}

// allNull reports whether every page of physical column col holds only
// nulls: an all-null layout with nothing stored (2.1+); in 2.0 an
// all-nulls encoding, or a dictionary whose every index is 0 (null), as
// pylance writes a dictionary column of nulls.
func (r *Reader) allNull(ctx context.Context, col int) bool {
	if r.foot.version == V2_0 {
		a, err := r.readColumn(ctx, col, DataType{Kind: KindBinary, Logical: "binary"}, DataType{}, 0, int(r.numRows))
		return err == nil && a.NullCount() == a.Len
	}
	for _, p := range r.columns[col].GetPages() {
		l := &enc21.PageLayout{}
		if decodeAny(p, "lance.encodings21.PageLayout", l) != nil {
			return false
		}
		c := l.GetAllNullLayout()
		if c == nil || c.InlineValue != nil || c.GetDefCompression() != nil || len(p.GetBufferSizes()) != 0 ||
			!slices.Equal(c.GetLayers(), []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_NULLABLE_ITEM}) {
			return false
		}
	}
	return true
}

// leafOfLists checks that f is a list (of lists...) of binary or of
// byte-aligned fixed-width values: what a 2.0 list reader decodes.
func leafOfLists(f *Field) error {
	for isList(f.Type) {
		if len(f.Children) != 1 {
			return fmt.Errorf("list %q has %d children", f.Name, len(f.Children))
		}
		f = f.Children[0]
	}
	if it := f.Type; it.Kind != KindBinary && (it.ValueBits() == 0 || it.ValueBits()%8 != 0) {
		return fmt.Errorf("lists of %s", it)
	}
	return nil
}

// readColumn reads rows [start, end) of one physical column, page by page.
func (r *Reader) readColumn(ctx context.Context, col int, t, item DataType, start, end int) (*Array, error) {
	return r.readColumnInto(ctx, col, t, item, start, end, nil)
}

// readColumnInto is readColumn, the first page's rows decoded into into's
// memory where the page's layout can (a binary full-zip page: see
// ReadInto); rows of several pages are then copied together.
func (r *Reader) readColumnInto(ctx context.Context, col int, t, item DataType, start, end int, into []byte) (*Array, error) {
	if !isList(t) && t.Kind != KindBinary && r.foot.version != V2_0 && pagesTouched(r.columns[col].GetPages(), start, end) > 1 {
		if out, ok, err := r.readFixedInto(ctx, col, t, start, end, nil); ok || err != nil {
			return out, err
		}
	}
	var parts []*Array
	pageStart := 0
	for pi, p := range r.columns[col].GetPages() {
		n := int(p.GetLength())
		a, b := max(start, pageStart), min(end, pageStart+n)
		if a < b {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			pg := &pageIO{r: r, col: col, idx: pi, page: p}
			if len(parts) == 0 {
				pg.into = into
			}
			var arr *Array
			var err error
			if r.foot.version == V2_0 {
				arr, err = r.readPage20(ctx, pg, t, a-pageStart, b-pageStart)
			} else {
				arr, err = r.readPage21(ctx, pg, t, item, a-pageStart, b-pageStart)
			}
			if err != nil {
				return nil, fmt.Errorf("page %d: %w", pi, err)
			}
			if arr.Len != b-a {
				return nil, fmt.Errorf("%w: page %d gave %d rows, want %d", errkind.Corrupt, pi, arr.Len, b-a)
			}
			parts = append(parts, arr)
		}
		pageStart += n
		if pageStart >= end {
			break
		}
	}
	if pageStart < end {
		return nil, fmt.Errorf("%w: column %d pages hold %d rows, file has %d", errkind.Corrupt, col, pageStart, r.numRows)
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	if len(parts) == 0 {
		return emptyArray(t, item), nil
	}
	return Concat(t, parts)
}

// intoSlackBytes is the room left, past a column's rows, for the values a
// page decodes beyond the requested range (whole mini-block chunks at
// either end). Lance's chunks hold at most 4096 values and about 8 KiB of
// encoded bytes (a bitpacked chunk of 1024 64-bit values decodes to
// 8 KiB), so 64 KiB covers both ends several times over; a page that
// decodes more still works (ReadInto then allocates). Bytes, not rows: a
// merge keeps one buffer per input and column, twice, and a row-based
// slack of wide rows (128-byte codes) cost a megabyte per buffer.
const intoSlackBytes = 64 << 10

// IntoCap is the capacity ReadInto needs in dst to decode rows rows of a
// fixed-width type t without allocating: the rows, plus room for the
// values a mini-block chunk holds beyond the range.
func IntoCap(t DataType, rows int) int { return rows*t.ValueBits()/8 + intoSlackBytes }

// IntoCap is the package's IntoCap for this file: the slack never exceeds
// the file's own rows (a chunk decodes only rows the file holds), so a
// small file's buffer is the size of its column, not the size of the slack.
// A merge of a thousand 1000-row deltas keeps one such buffer per input and
// column.
func (r *Reader) IntoCap(t DataType, rows int) int {
	return min(IntoCap(t, rows), int(r.numRows)*t.ValueBits()/8)
}

func pagesTouched(pages []*pb.Page, start, end int) int {
	touched, pageStart := 0, 0
	for _, p := range pages {
		n := int(p.GetLength())
		if max(start, pageStart) < min(end, pageStart+n) {
			touched++
		}
		pageStart += n
	}
	return touched
}

// readFixedInto reads rows [start, end) of a fixed-width 2.1+ column by
// decoding every page straight into one buffer (each page's values land
// after the previous page's, and the rows a chunk holds outside the range
// are moved out), instead of decoding each page into its own buffer and
// concatenating them. The buffer is dst when its capacity suffices. ok is
// false when the path does not apply (a page with nulls): the caller reads
// the general way.
func (r *Reader) readFixedInto(ctx context.Context, col int, t DataType, start, end int, dst []byte) (*Array, bool, error) {
	pages := r.columns[col].GetPages()
	w := t.ValueBits() / 8
	buf := dst[:0]
	if need := r.IntoCap(t, end-start); cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	pageStart := 0
	for pi, p := range pages {
		n := int(p.GetLength())
		a, b := max(start, pageStart), min(end, pageStart+n)
		if a < b {
			if err := ctx.Err(); err != nil {
				return nil, true, err
			}
			pos := len(buf)
			pg := &pageIO{r: r, col: col, idx: pi, page: p, into: buf[pos:pos]}
			arr, err := r.readPage21(ctx, pg, t, DataType{}, a-pageStart, b-pageStart)
			if err != nil {
				return nil, true, fmt.Errorf("page %d: %w", pi, err)
			}
			if arr.Len != b-a || len(arr.Values) != arr.Len*w {
				return nil, true, fmt.Errorf("%w: page %d gave %d rows, want %d", errkind.Corrupt, pi, arr.Len, b-a)
			}
			if arr.Validity != nil || arr.ItemValidity != nil {
				return nil, false, nil
			}
			// arr.Values usually sits in buf past pos (after the chunk's
			// leading rows); append moves it down (memmove allows overlap),
			// or copies it when the page outgrew buf's capacity.
			buf = append(buf[:pos], arr.Values...)
		}
		pageStart += n
		if pageStart >= end {
			break
		}
	}
	if pageStart < end {
		return nil, true, fmt.Errorf("%w: column %d pages hold %d rows, file has %d", errkind.Corrupt, col, pageStart, r.numRows)
	}
	return &Array{Type: t, Len: end - start, Values: buf}, true, nil
}

// emptyArray is emptyOf a column of type t (of items item, for a list).
func emptyArray(t, item DataType) *Array {
	f := &Field{Type: t}
	if isList(t) {
		f.Children = []*Field{{Type: item}}
	}
	return emptyOf(f)
}

// pageIO reads the buffers of one page, with bounds checks.
type pageIO struct {
	r    *Reader
	col  int
	idx  int
	page *pb.Page
	// into, when not nil, is where a mini-block page of a fixed-width
	// column appends its decoded values (see readFixedInto).
	into []byte
}

func (p *pageIO) numBuffers() int { return len(p.page.GetBufferSizes()) }

func (p *pageIO) bufferSize(i int) int { return int(p.page.GetBufferSizes()[i]) }

// readInto reads n bytes at off within page buffer i into buf (len n).
func (p *pageIO) readInto(ctx context.Context, i int, off, n int, buf []byte) ([]byte, error) {
	if i < 0 || i >= p.numBuffers() {
		return nil, fmt.Errorf("%w: page buffer %d of %d", errkind.Corrupt, i, p.numBuffers())
	}
	size := p.bufferSize(i)
	if off < 0 || n < 0 || off+n > size {
		return nil, fmt.Errorf("%w: range [%d,+%d) of a %d-byte page buffer", errkind.Corrupt, off, n, size)
	}
	if n > 0 {
		if err := p.r.obj.ReadAt(ctx, buf[:n], int64(p.page.GetBufferOffsets()[i])+int64(off)); err != nil {
			return nil, err
		}
	}
	return buf[:n], nil
}

// read returns n bytes at off within page buffer i.
func (p *pageIO) read(ctx context.Context, i int, off, n int) ([]byte, error) {
	if i < 0 || i >= p.numBuffers() {
		return nil, fmt.Errorf("%w: page buffer %d of %d", errkind.Corrupt, i, p.numBuffers())
	}
	size := p.bufferSize(i)
	if off < 0 || n < 0 || off+n > size {
		return nil, fmt.Errorf("%w: range [%d,+%d) of a %d-byte page buffer", errkind.Corrupt, off, n, size)
	}
	if int64(n) > p.r.opts.MaxPageBytes {
		return nil, fmt.Errorf("%w: page buffer read of %d bytes above the %d-byte limit", errkind.Corrupt, n, p.r.opts.MaxPageBytes)
	}
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	if err := p.r.obj.ReadAt(ctx, buf, int64(p.page.GetBufferOffsets()[i])+int64(off)); err != nil {
		return nil, err
	}
	return buf, nil
}

func (p *pageIO) whole(ctx context.Context, i int) ([]byte, error) {
	if i < 0 || i >= p.numBuffers() {
		return nil, fmt.Errorf("%w: page buffer %d of %d", errkind.Corrupt, i, p.numBuffers())
	}
	return p.read(ctx, i, 0, p.bufferSize(i))
}

// encoding unwraps the page's Any.
func pageAny(p *pb.Page) (*anypb.Any, error) {
	d := p.GetEncoding().GetDirect()
	if d == nil {
		if p.GetEncoding().GetIndirect() != nil {
			return nil, fmt.Errorf("%w: deferred (indirect) page encodings", errkind.Unsupported)
		}
		return nil, fmt.Errorf("%w: page without an encoding", errkind.Corrupt)
	}
	a := &anypb.Any{}
	if err := proto.Unmarshal(d.GetEncoding(), a); err != nil {
		return nil, fmt.Errorf("%w: page encoding: %w", errkind.Corrupt, err)
	}
	return a, nil
}

func decodeAny(p *pb.Page, suffix string, m proto.Message) error {
	a, err := pageAny(p)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(a.GetTypeUrl(), suffix) {
		return fmt.Errorf("%w: page encoding %q, want %s", errkind.Corrupt, a.GetTypeUrl(), suffix)
	}
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return fmt.Errorf("%w: page encoding: %w", errkind.Corrupt, err)
	}
	return nil
}

// chunkTable caches the decoded chunk metadata of mini-block pages: reading
// one partition at a time would otherwise re-read it for every partition.
type chunkTable struct {
	offsets []int // byte offset of each chunk in buffer 1
	sizes   []int
	values  []int // values in each chunk
	first   []int // first value index of each chunk
}

type chunkKey struct{ col, page int }

// chunkCache holds what a Reader decodes once per page: mini-block chunk
// tables and 2.1+ page layouts.
type chunkCache struct {
	mu      sync.Mutex
	m       map[chunkKey]*chunkTable
	layouts map[chunkKey]*enc21.PageLayout
}
