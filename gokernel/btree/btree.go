// Package btree reads and merges the segments of Lance BTREE scalar
// indices, as pylance 14.0.2 writes them.
//
// A segment is two Lance files (format 2.2 from pylance 14):
//
//   - page_data.lance: columns "values" (the key type, nullable) and "ids"
//     ("row_ids" before pylance 2.0: read, never written)
//     (uint64 row ids), every row of the segment sorted by value, nulls
//     first (floats in total order, strings and binary by their bytes);
//     page i is rows [i*B, (i+1)*B), B the batch size, only the last page
//     shorter;
//   - page_lookup.lance: one row per page: "min" and "max" (the page's first
//     and last values, so null when the page starts with nulls), "null_count"
//     (uint32) and "page_idx" (uint32); schema metadata "batch_size" (B,
//     default 4096) and "range_partitioned" ("false"; the range-partitioned
//     variant, part_N_page_data.lance files, is not read here).
//
// pylance finds the pages of a query by binary search over "min", so the
// pages of a segment must hold one sorted run: a merge is a k-way merge of
// the inputs' rows, re-paged. Merge streams each input in windows and
// writes pages as they fill, so memory is bounded by the windows and one
// page, whatever the segments' sizes.
package btree

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// File names and defaults of a BTREE segment. Part of the format.
const (
	DataFile         = "page_data.lance"
	LookupFile       = "page_lookup.lance"
	DefaultBatchSize = 4096
	valuesColumn     = "values"
	idsColumn        = "ids"
	// oldIDsColumn is what releases before pylance 2.0 (0.23, 0.27) named
	// the row ids column: read, never written.
	oldIDsColumn = "row_ids"
)

// maxBatchSize bounds a segment's page size (untrusted metadata): a page
// is held in memory while it is written.
const maxBatchSize = 1 << 24

// Each input is read in windows of at most maxWindowRows rows, fewer when
// there are many inputs, so that all windows together hold about
// windowBudget bytes of values and row ids (a thousand deltas must not
// take a thousand full windows), and at least minWindowRows.
const (
	maxWindowRows = 1 << 15
	minWindowRows = 1 << 10
	windowBudget  = 64 << 20
	// binaryRowBytes is what a row of binary keys is budgeted at: an
	// offset, a row id, a sort key and 40 bytes of value.
	binaryRowBytes = 8 + 8 + 8 + 40
)

// Segment is an opened BTREE segment.
type Segment struct {
	Meta      *pb.IndexMetadata
	KeyType   lancefile.DataType
	BatchSize int
	Rows      uint64
	Pages     uint64
	Version   lancefile.Version
	data      *lancefile.Reader
	idsCol    string // the row ids column's name in data
	objs      []storage.Object
}

// Close releases the segment's files.
func (s *Segment) Close() {
	for _, o := range s.objs {
		o.Close()
	}
	s.objs = nil
}

// Open opens a segment's files and checks their shape: errkind.Unsupported
// for a layout or key type this package does not handle, errkind.Corrupt
// for files that contradict each other.
func Open(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	s := &Segment{Meta: im}
	dir := table.IndexDir(im)
	u := table.IndexUUID(im)
	open := func(name string) (*lancefile.Reader, error) {
		obj, err := st.Open(ctx, dir+name)
		if err != nil {
			return nil, fmt.Errorf("btree segment %s: %w", u, err)
		}
		s.objs = append(s.objs, obj)
		r, err := lancefile.Open(ctx, obj, dir+name, lancefile.Options{})
		if err != nil {
			return nil, fmt.Errorf("btree segment %s: %w", u, err)
		}
		return r, nil
	}
	lookup, err := open(LookupFile)
	if err != nil {
		s.Close()
		return nil, err
	}
	if v, _ := lookup.MetadataString("range_partitioned"); v == "true" {
		s.Close()
		return nil, fmt.Errorf("%w: btree segment %s is range-partitioned (part_N_page_data.lance files)", errkind.Unsupported, u)
	}
	s.BatchSize = DefaultBatchSize
	if v, ok := lookup.MetadataString("batch_size"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBatchSize {
			s.Close()
			return nil, fmt.Errorf("%w: btree segment %s: batch_size %q (1 to %d)", errkind.Corrupt, u, v, maxBatchSize)
		}
		s.BatchSize = n
	}
	if s.data, err = open(DataFile); err != nil {
		s.Close()
		return nil, err
	}
	vf, ok1 := s.data.Field(valuesColumn)
	s.idsCol = idsColumn
	idf, ok2 := s.data.Field(idsColumn)
	if !ok2 {
		s.idsCol = oldIDsColumn
		idf, ok2 = s.data.Field(oldIDsColumn)
	}
	if !ok1 || !ok2 || idf.Type.Kind != lancefile.KindUint64 {
		s.Close()
		return nil, fmt.Errorf("%w: btree segment %s: %s has no %q and uint64 %q columns", errkind.Corrupt, u, DataFile, valuesColumn, idsColumn)
	}
	if !lancefile.Orderable(vf.Type.Kind) && !lancefile.Wide(vf.Type) {
		s.Close()
		return nil, fmt.Errorf("%w: btree segment %s: keys of type %s (merges handle bool, integer, floating-point, decimal, string and binary keys)", errkind.Unsupported, u, vf.Type)
	}
	s.KeyType = vf.Type
	s.Rows = s.data.NumRows()
	s.Pages = (s.Rows + uint64(s.BatchSize) - 1) / uint64(s.BatchSize)
	if lookup.NumRows() != s.Pages {
		s.Close()
		return nil, fmt.Errorf("%w: btree segment %s: %d rows in pages of %d make %d pages, %s lists %d", errkind.Corrupt, u, s.Rows, s.BatchSize, s.Pages, LookupFile, lookup.NumRows())
	}
	s.Version = s.data.Version()
	// Only page_data stays open: a merge of a thousand inputs holds one
	// descriptor per input, not two.
	s.objs[0].Close()
	s.objs = s.objs[1:]
	return s, nil
}

// cursor streams one input's rows in windows.
type cursor struct {
	seg    *Segment
	order  int // the input's position: ties keep input order
	next   uint64
	vals   *lancefile.Array
	ids    *lancefile.Array
	i, n   int
	width  int  // of a fixed-width value
	binary bool // variable-width values (Offsets delimit them)
	wide   bool // values k orders up to ties (lancefile.Wide)
	window int  // rows read at once
	valid  bool // the current row's value is not null
	// k is the current row's sort key: the value's order for narrow
	// values, its PrefixKey for wide ones (ties compare the values).
	k    uint64
	keys []uint64 // the window's sort keys
}

func newCursor(s *Segment, window int) *cursor {
	return &cursor{seg: s, width: s.KeyType.ValueBits() / 8, binary: s.KeyType.Kind == lancefile.KindBinary, wide: lancefile.Wide(s.KeyType), window: window}
}

func (c *cursor) fill(ctx context.Context) (bool, error) {
	c.window = max(c.window, minWindowRows)
	return c.fillExact(ctx)
}

// fillExact reads the next window of exactly c.window rows (fewer at the
// end).
func (c *cursor) fillExact(ctx context.Context) (bool, error) {
	if c.next >= c.seg.Rows {
		return false, nil
	}
	end := min(c.next+uint64(c.window), c.seg.Rows)
	var err error
	if c.vals, err = c.seg.data.Read(ctx, valuesColumn, c.next, end); err != nil {
		return false, err
	}
	if c.ids, err = c.seg.data.Read(ctx, c.seg.idsCol, c.next, end); err != nil {
		return false, err
	}
	if c.vals.Len != int(end-c.next) || c.ids.Len != c.vals.Len {
		return false, fmt.Errorf("%w: btree segment %s: a window of %d rows read back as %d values and %d ids", errkind.Corrupt, table.IndexUUID(c.seg.Meta), end-c.next, c.vals.Len, c.ids.Len)
	}
	c.i, c.n, c.next = 0, c.vals.Len, end
	if c.wide {
		c.keys = lancefile.AppendPrefixKeys(c.vals, c.keys[:0])
	} else {
		c.keys = lancefile.AppendSortKeys(c.seg.KeyType.Kind, c.vals.Values, c.n, c.keys[:0])
	}
	return true, nil
}

func (c *cursor) null() bool { return !c.vals.IsValid(c.i) }
func (c *cursor) value() []byte {
	if c.binary {
		return c.vals.Values[c.vals.Offsets[c.i]:c.vals.Offsets[c.i+1]]
	}
	return c.vals.Values[c.i*c.width : (c.i+1)*c.width]
}
func (c *cursor) rowID() uint64 { return binary.LittleEndian.Uint64(c.ids.Values[c.i*8:]) }
func (c *cursor) key() (bool, uint64) {
	if c.null() {
		return false, 0
	}
	return true, c.keys[c.i]
}

// load caches the current row's order (computed once per row, compared
// about log2(inputs) times).
func (c *cursor) load() { c.valid, c.k = c.key() }

// before orders cursors by their current rows: nulls first, then by key,
// then by input (a stable merge).
func before(a, b *cursor) bool {
	if a.valid != b.valid {
		return !a.valid
	}
	if a.k != b.k {
		return a.k < b.k
	}
	if a.wide && a.valid {
		if c := lancefile.CompareWide(a.seg.KeyType, a.value(), b.value()); c != 0 {
			return c < 0
		}
	}
	return a.order < b.order
}

// siftDown restores the heap order below i (a min-heap by before; the
// hand-written heap saves container/heap's interface calls per row).
func siftDown(h []*cursor, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && before(h[r], h[l]) {
			j = r
		}
		if !before(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// MergeOptions tune Merge.
type MergeOptions struct {
	// IndexUUID names the output; a new uuid when "".
	IndexUUID string
	// Keep, when set, says which row ids stay (the live rows of the
	// dataset version); rows of other ids are dropped.
	Keep func(rowID uint64) bool
	// Remap, when set, gives a kept row's id in the output (rows of
	// fragments a compaction rewrote move to their new addresses).
	Remap func(rowID uint64) uint64

	// windowRows and blockRows, when set (tests), replace the rows of an
	// input's window and of a block.
	windowRows, blockRows int
}

// Result is what Merge wrote.
type Result struct {
	// Files are the output's files (page_data first); the caller builds
	// its manifest entry.
	Files       []*pb.IndexFile
	RowsRead    uint64
	RowsWritten uint64
	Pages       uint64
}

// openAll opens the segments metas, a few at a time (each open reads two
// files' metadata: a thousand inputs took 0.1-0.2 s one after the other,
// and as many round trips on an object store). On error it returns the
// first failure in metas' order, and the segments that did open, to
// close (nil where one did not).
func openAll(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) ([]*Segment, error) {
	segs := make([]*Segment, len(metas))
	err := parallel.Each(len(metas), parallel.Opens, func(i int) (err error) {
		segs[i], err = Open(ctx, st, metas[i])
		return err
	})
	return segs, err
}

// Merge merges BTREE segments of one index into one new segment under
// _indices/<uuid>/ (files written, nothing committed). The inputs must
// share their field, key type and batch size.
func Merge(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, opts MergeOptions) (*Result, error) {
	if len(metas) == 0 {
		return nil, fmt.Errorf("%w: at least one btree segment is required", errkind.InvalidInput)
	}
	id := uuid.New()
	if opts.IndexUUID != "" {
		var err error
		if id, err = uuid.Parse(opts.IndexUUID); err != nil {
			return nil, fmt.Errorf("%w: output uuid %q", errkind.InvalidInput, opts.IndexUUID)
		}
	}
	segs, err := openAll(ctx, st, metas)
	defer func() {
		for _, s := range segs {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		if s.KeyType != segs[0].KeyType || s.BatchSize != segs[0].BatchSize {
			return nil, fmt.Errorf("%w: btree segments %s (%s keys, pages of %d) and %s (%s, %d) cannot merge", errkind.InvalidInput,
				table.IndexUUID(segs[0].Meta), segs[0].KeyType, segs[0].BatchSize, table.IndexUUID(s.Meta), s.KeyType, s.BatchSize)
		}
	}
	dir := table.IndexDir(&pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}})
	w, err := newPageWriter(ctx, st, dir, segs[0].KeyType, segs[0].BatchSize, segs[0].Version)
	if err != nil {
		return nil, err
	}
	defer w.abort()
	res := &Result{}
	if !lancefile.Wide(segs[0].KeyType) {
		// per row of a window: its decode buffers, two windows of pairs
		// (one merged, one decoded ahead), the block and the sort's
		// buffers
		window := min(maxWindowRows, max(minWindowRows, windowBudget/(segs[0].KeyType.ValueBits()/8+8+32+48)/len(segs)))
		sink := &pageSink{ctx: ctx, w: w, kind: segs[0].KeyType.Kind, keep: opts.Keep, remap: opts.Remap, res: res}
		if err := mergeFixed(ctx, segs, sink, cmp.Or(opts.windowRows, window), cmp.Or(opts.blockRows, blockRows)); err != nil {
			return nil, err
		}
		return finishMerge(ctx, w, res)
	}
	var h []*cursor
	rowBytes := segs[0].KeyType.ValueBits()/8 + 8 + 8 // value, row id, sort key
	if segs[0].KeyType.Kind == lancefile.KindBinary {
		rowBytes = binaryRowBytes
	}
	window := min(maxWindowRows, max(minWindowRows, windowBudget/rowBytes/len(segs)))
	for i, s := range segs {
		c := newCursor(s, window)
		c.order = i
		ok, err := c.fill(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			c.load()
			h = append(h, c)
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for len(h) > 0 {
		c := h[0]
		res.RowsRead++
		if rid := c.rowID(); opts.Keep == nil || opts.Keep(rid) {
			if opts.Remap != nil {
				rid = opts.Remap(rid)
			}
			if err := w.add(ctx, !c.valid, c.value(), rid); err != nil {
				return nil, err
			}
		}
		c.i++
		if c.i == c.n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			ok, err := c.fill(ctx)
			if err != nil {
				return nil, err
			}
			if !ok {
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
				siftDown(h, 0)
				continue
			}
		}
		c.load()
		siftDown(h, 0)
	}
	return finishMerge(ctx, w, res)
}

func finishMerge(ctx context.Context, w *pageWriter, res *Result) (*Result, error) {
	files, err := w.finish(ctx)
	if err != nil {
		return nil, err
	}
	res.RowsWritten, res.Pages = w.rows, w.pages
	res.Files = files
	return res, nil
}
