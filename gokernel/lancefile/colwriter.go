package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc20"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// physCol collects the pages of one physical column.
type physCol struct{ pages []*pb.Page }

// colWriter buffers the rows of one top-level field until a page is full.
// Pending rows are either references to the caller's arrays (Write) or
// bytes copied into own (WriteChunked), which is reused page after page.
type colWriter struct {
	w       *Writer
	f       *Field
	pending []*Array
	own     []byte // pending values, when ownRows > 0 (pending is then empty)
	ownRows int
	// bin holds a binary column's pending rows copied by WriteChunked (when
	// bin.rows > 0, pending is empty): reused page after page.
	bin      ownedBinary
	bytes    int
	rows     int
	firstRow uint64 // top-level row number of the first pending row
	phys     []*physCol
}

func newColWriter(w *Writer, f *Field) (*colWriter, error) {
	c := &colWriter{w: w, f: f}
	switch {
	case isList(f.Type):
		// Lists of binary: a List page over a Binary page in 2.0, full-zip
		// pages in 2.1 and 2.2 (binaryListPage21).
		binaryItems := len(f.Children) == 1 && f.Children[0].Type.Kind == KindBinary
		if w.opts.Version == V2_0 && len(f.Children) == 1 && isList(f.Children[0].Type) {
			// Lists of lists: 2.0 only (FTS format 1 positions).
			if err := leafOfLists(f.Children[0]); err != nil {
				return nil, fmt.Errorf("%w: lancefile: writing list field %q: %w", errkind.Unsupported, f.Name, err)
			}
			break
		}
		if !binaryItems && (len(f.Children) != 1 || f.Children[0].Type.ValueBits() == 0 || f.Children[0].Type.ValueBits()%8 != 0) {
			return nil, fmt.Errorf("%w: lancefile: writing list field %q of %v", errkind.Unsupported, f.Name, f.Children)
		}
	case f.Type.Kind == KindBinary || f.Type.Kind == KindBool:
	case f.Type.Kind == KindUnknown && f.Type.Logical != "" && len(f.Children) == 0:
		// a type carried as it is (a dictionary...): all-null rows only
	case f.Type.ValueBits() == 0 || f.Type.ValueBits()%8 != 0:
		return nil, fmt.Errorf("%w: lancefile: writing %s field %q", errkind.Unsupported, f.Type, f.Name)
	}
	for i := 0; i < columnCount(f, w.opts.Version); i++ {
		c.phys = append(c.phys, &physCol{})
	}
	return c, nil
}

func (c *colWriter) physical() []*physCol { return c.phys }

func arrayBytes(a *Array) int {
	if isList(a.Type) {
		return 8*a.Len + arrayBytes(a.Items)
	}
	if a.Type.Kind == KindBinary {
		return 8*a.Len + len(a.Values) + len(a.Validity)
	}
	return len(a.Values) + len(a.Validity)
}

// ownable reports whether a's rows can be kept as plain copied bytes: a
// fixed-width array without nulls.
func (c *colWriter) ownable(a *Array) bool {
	return !isList(c.f.Type) && c.f.Type.Kind != KindBinary && (a.Validity == nil || a.NullCount() == 0)
}

// ownedBinary is a binary column's rows copied into buffers the column
// keeps: the rows' bytes, their end offsets and their validity.
type ownedBinary struct {
	values   []byte
	offsets  []int64 // offsets[0] is 0
	validity []byte
	nulls    bool
	rows     int
}

// add copies a's rows.
func (o *ownedBinary) add(a *Array) {
	if o.offsets == nil {
		o.offsets = []int64{0}
	}
	base := int64(len(o.values)) - a.Offsets[0]
	o.values = append(o.values, a.Values[a.Offsets[0]:a.Offsets[a.Len]]...)
	for _, off := range a.Offsets[1 : a.Len+1] {
		o.offsets = append(o.offsets, off+base)
	}
	need := (o.rows + a.Len + 7) / 8
	for len(o.validity) < need {
		o.validity = append(o.validity, 0)
	}
	for i := range a.Len {
		if a.IsValid(i) {
			o.validity[(o.rows+i)/8] |= 1 << ((o.rows + i) % 8)
		} else {
			o.nulls = true
		}
	}
	o.rows += a.Len
}

// array is the owned rows as one array (sharing the buffers).
func (o *ownedBinary) array(t DataType) *Array {
	a := &Array{Type: t, Len: o.rows, Values: o.values, Offsets: o.offsets}
	if o.nulls {
		a.Validity = o.validity
	}
	return a
}

// reset empties the buffers, keeping their memory.
func (o *ownedBinary) reset() {
	o.values, o.offsets, o.nulls, o.rows = o.values[:0], o.offsets[:1], false, 0
	clear(o.validity)
	o.validity = o.validity[:0]
}

// appendCopy adds a's rows without keeping a reference to a's buffers.
func (c *colWriter) appendCopy(a *Array) error {
	if a.Len == 0 {
		return nil
	}
	if c.f.Type.Kind == KindBinary && len(c.pending) == 0 {
		// copied into the column's own buffers, which the page's write
		// reads and the next page reuses
		c.bin.add(a)
		c.bytes += arrayBytes(a)
		c.rows += a.Len
		if c.bytes >= c.w.opts.MaxPageBytes {
			return c.flush()
		}
		return nil
	}
	if !c.ownable(a) || !allOwnable(c, c.pending) {
		clone, err := Concat(a.Type, []*Array{a}) // a deep copy
		if err != nil {
			return err
		}
		return c.append(clone)
	}
	if c.own == nil {
		// From the process-wide pool: a process that merges segment after
		// segment does not grow a new 8 MiB buffer per column each time.
		size := c.w.opts.MaxPageBytes
		if n := c.w.opts.ExpectedRows; n > 0 {
			size = min(size, (n*c.f.Type.ValueBits()+7)/8)
		}
		if w := c.rowWidth(); w > 0 {
			size += w // a page closes with the row that fills it
		} else {
			size += len(a.Values) // a's rows are not split: room for all of them
		}
		c.own = bufpool.Default.Get(size)
	}
	for _, p := range c.pending { // earlier references join the copy
		c.own = append(c.own, p.Values...)
		c.ownRows += p.Len
	}
	c.pending = nil
	return c.appendOwned(a)
}

// appendOwned copies a's values into the column's page buffer, flushing a
// page once it is full. Rows of whole bytes are copied a page at a time,
// so the buffer never grows past a page whatever a's length: in a fresh
// process every byte of it is memory the kernel faults in, and a buffer
// refilled page after page stays in the cache.
func (c *colWriter) appendOwned(a *Array) error {
	values, rows := a.Values, a.Len
	for rows > 0 {
		n, nb := rows, len(values)
		if per := c.rowWidth(); per > 0 && c.bytes+nb > c.w.opts.MaxPageBytes {
			n = (c.w.opts.MaxPageBytes - c.bytes + per - 1) / per // the rows that fill the page
			nb = n * per
		}
		c.own = append(c.own, values[:nb]...)
		values, rows = values[nb:], rows-n
		c.ownRows += n
		c.bytes += nb
		c.rows += n
		if c.bytes >= c.w.opts.MaxPageBytes {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// rowWidth is the bytes of one row of the column when its values are
// whole bytes per row (appendOwned splits such arrays at page
// boundaries), else 0.
func (c *colWriter) rowWidth() int {
	if b := c.f.Type.ValueBits(); b > 0 && b%8 == 0 {
		return b / 8
	}
	return 0
}

// release hands the column's page buffer back to the pool once the
// writer is done with it.
func (c *colWriter) release() {
	if c.own != nil && c.ownRows == 0 {
		bufpool.Default.Put(c.own)
	}
	c.own = nil
}

func allOwnable(c *colWriter, as []*Array) bool {
	for _, a := range as {
		if !c.ownable(a) {
			return false
		}
	}
	return true
}

func (c *colWriter) append(a *Array) error {
	if a.Len == 0 {
		return nil
	}
	if c.bin.rows > 0 {
		// the copied rows become a reference of their own (the buffers
		// are reused after every flush)
		clone, err := Concat(c.f.Type, []*Array{c.bin.array(c.f.Type)}) // a deep copy
		if err != nil {
			return err
		}
		c.pending = []*Array{clone}
		c.bin.reset()
	}
	if c.ownRows > 0 {
		if c.ownable(a) {
			return c.appendOwned(a)
		}
		// The copied rows become a reference of their own (own is reused
		// after every flush, so hand them fresh memory).
		c.pending = []*Array{{Type: c.f.Type, Len: c.ownRows, Values: slices.Clone(c.own)}}
		c.own, c.ownRows = c.own[:0], 0
	}
	c.pending = append(c.pending, a)
	c.bytes += arrayBytes(a)
	c.rows += a.Len
	if c.bytes >= c.w.opts.MaxPageBytes {
		return c.flush()
	}
	return nil
}

// flush writes the pending rows as one page (per physical column).
func (c *colWriter) flush() error {
	if c.rows == 0 {
		return nil
	}
	if c.bin.rows > 0 {
		// Written synchronously: the buffers are refilled once this returns.
		a, first := c.bin.array(c.f.Type), c.firstRow
		c.firstRow += uint64(c.rows)
		c.bytes, c.rows = 0, 0
		defer c.bin.reset()
		if c.w.opts.Version == V2_0 {
			return c.flush20(a)
		}
		return c.flush21(a, first)
	}
	if c.ownRows > 0 {
		// Written synchronously: own can be refilled once this returns.
		parts := []*Array{{Type: c.f.Type, Len: c.ownRows, Values: c.own}}
		rows, first := c.rows, c.firstRow
		c.own, c.ownRows, c.bytes, c.rows = c.own[:0], 0, 0, 0
		c.firstRow += uint64(rows)
		return c.flushStream(newRowSource(parts), rows, first)
	}
	if c.streamable() {
		parts, rows, first := c.pending, c.rows, c.firstRow
		c.pending, c.bytes, c.rows = nil, 0, 0
		c.firstRow += uint64(rows)
		return c.flushStream(newRowSource(parts), rows, first)
	}
	a := c.pending[0]
	if len(c.pending) > 1 {
		var err error
		if a, err = Concat(c.f.Type, c.pending); err != nil {
			return err
		}
	}
	c.pending, c.bytes = nil, 0
	first := c.firstRow
	c.firstRow += uint64(c.rows)
	c.rows = 0
	if c.w.opts.Version == V2_0 {
		return c.flush20(a)
	}
	return c.flush21(a, first)
}

// page writes the buffers of one page and records it in physical column i.
func (c *colWriter) page(i int, url string, enc proto.Message, bufs [][]byte, rows int, priority uint64) error {
	refs := make([]bufRef, len(bufs))
	for k, b := range bufs {
		pos, err := c.w.writeBuffer(b)
		if err != nil {
			return err
		}
		refs[k] = bufRef{pos, uint64(len(b))}
	}
	return c.pageRefs(i, url, enc, refs, rows, priority)
}

// pageRefs records a page whose buffers are already written.
func (c *colWriter) pageRefs(i int, url string, enc proto.Message, refs []bufRef, rows int, priority uint64) error {
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(enc)
	if err != nil {
		return fmt.Errorf("lancefile: encode page: %w", err)
	}
	e, err := directEncoding(url, value)
	if err != nil {
		return err
	}
	p := &pb.Page{Length: uint64(rows), Encoding: e, Priority: priority}
	for _, r := range refs {
		p.BufferOffsets = append(p.BufferOffsets, r.pos)
		p.BufferSizes = append(p.BufferSizes, r.size)
	}
	c.phys[i].pages = append(c.phys[i].pages, p)
	return nil
}

// ---- streaming fast path ------------------------------------------------
//
// Fixed-width columns without nulls (what index files hold) are written
// straight from the pending arrays: no concatenation, and pages stream to
// the output chunk by chunk, so a page costs about one copy of its bytes.

func (c *colWriter) streamable() bool {
	if isList(c.f.Type) || c.f.Type.Kind == KindBinary || c.f.Type.Kind == KindBool {
		return false
	}
	for _, a := range c.pending {
		if a.Validity != nil && a.NullCount() > 0 {
			return false
		}
	}
	return true
}

// rowSource reads row ranges across the pending arrays.
type rowSource struct {
	parts  []*Array
	starts []int // first row of each part
	rb     int   // bytes per row
	buf    []byte
}

func newRowSource(parts []*Array) *rowSource {
	s := &rowSource{parts: parts, rb: parts[0].Type.ValueBits() / 8}
	n := 0
	for _, p := range parts {
		s.starts = append(s.starts, n)
		n += p.Len
	}
	return s
}

// rows returns the bytes of rows [lo, hi): a slice of one part when the
// range lies within it, else a copy in a scratch buffer that stays valid
// until the next call.
func (s *rowSource) rows(lo, hi int) []byte {
	k := sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > lo }) - 1
	if off := lo - s.starts[k]; hi-s.starts[k] <= s.parts[k].Len {
		return s.parts[k].Values[off*s.rb : (hi-s.starts[k])*s.rb]
	}
	s.buf = s.buf[:0]
	for lo < hi {
		off := lo - s.starts[k]
		end := min(hi, s.starts[k]+s.parts[k].Len)
		s.buf = append(s.buf, s.parts[k].Values[off*s.rb:(end-s.starts[k])*s.rb]...)
		lo = end
		k++
	}
	return s.buf
}

// each calls f on consecutive byte slices covering all rows.
func (s *rowSource) each(f func([]byte) error) error {
	for _, p := range s.parts {
		if err := f(p.Values); err != nil {
			return err
		}
	}
	return nil
}

// streamBuffer writes one page buffer from pieces and pads it.
func (w *Writer) streamBuffer(fill func(put func([]byte) error) error) (bufRef, error) {
	pos := w.pos
	if err := fill(w.write); err != nil {
		return bufRef{}, err
	}
	ref := bufRef{pos, w.pos - pos}
	if pad := (bufferAlign - ref.size%bufferAlign) % bufferAlign; pad > 0 {
		if err := w.write(padding[:pad]); err != nil {
			return bufRef{}, err
		}
	}
	return ref, nil
}

func (c *colWriter) flushStream(src *rowSource, rows int, firstRow uint64) error {
	t := c.f.Type
	vb := t.ValueBits() / 8
	whole := func(put func([]byte) error) error { return src.each(put) }
	if c.w.opts.Version == V2_0 {
		enc, _ := values20(&Array{Type: t, Len: rows})
		ref, err := c.w.streamBuffer(whole)
		if err != nil {
			return err
		}
		return c.pageRefs(0, typeURLArrayEncoding, enc, []bufRef{ref}, rows, 0)
	}
	layers := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM}
	if vb >= miniBlockMaxValueBytes {
		l := &enc21.FullZipLayout{Details: &enc21.FullZipLayout_BitsPerValue{BitsPerValue: uint32(t.ValueBits())},
			NumItems: uint32(rows), NumVisibleItems: uint32(rows), ValueCompression: valueCompression(t), Layers: layers}
		ref, err := c.w.streamBuffer(whole)
		if err != nil {
			return err
		}
		return c.pageRefs(0, typeURLPageLayout, pageLayout(l), []bufRef{ref}, rows, firstRow)
	}

	// Mini-block: size every chunk first (the metadata buffer comes first),
	// then stream the chunks.
	large := c.w.opts.Version == V2_2
	per := valuesPerChunk(vb)
	valueEnc := valueCompression(t)
	packed := false
	// pylance 14 bitpacks int64 pages as well, by their two's-complement
	// bits: a page of non-negative values packs, one with a negative
	// value is flat.
	var widths []int // bitpacked chunks: their width, each measured once
	if t.Kind == KindUint32 || t.Kind == KindUint64 || t.Kind == KindInt64 {
		for lo := 0; lo < rows; lo += flValues {
			w := bitWidth(src.rows(lo, min(lo+flValues, rows)), t.ValueBits())
			if w == t.ValueBits() {
				widths = nil // a chunk needs every bit: the page stays flat
				break
			}
			widths = append(widths, w)
		}
		packed = widths != nil
	}
	if packed {
		per = flValues
		valueEnc = &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_InlineBitpacking{
			InlineBitpacking: &enc21.InlineBitpacking{UncompressedBitsPerValue: uint64(t.ValueBits())}}}
	}
	header := 2 + 2 // num_levels, one value buffer size (u16)
	if large {
		header = 2 + 4
	}
	headerPadded := (header + 7) &^ 7
	nChunks := (rows + per - 1) / per
	meta := make([]byte, 0, 4*nChunks)
	for k := 0; k < nChunks; k++ {
		lo, hi := k*per, min((k+1)*per, rows)
		dataBytes := (hi - lo) * vb
		if packed {
			dataBytes = vb + packedBytes(t.ValueBits(), widths[k])
		}
		var err error
		if meta, err = appendChunkMeta(meta, headerPadded+(dataBytes+7)&^7, hi-lo, k == nChunks-1, large); err != nil {
			return err
		}
	}
	metaPos, err := c.w.writeBuffer(meta)
	if err != nil {
		return err
	}
	metaRef := bufRef{metaPos, uint64(len(meta))}
	fe := [8]byte{0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe}
	hdr := make([]byte, 0, 8)
	var packer bitpacker
	dataRef, err := c.w.streamBuffer(func(put func([]byte) error) error {
		for k := 0; k < nChunks; k++ {
			lo, hi := k*per, min((k+1)*per, rows)
			data := src.rows(lo, hi)
			if packed {
				data = packer.pack(data, t.ValueBits(), widths[k])
			}
			hdr = binary.LittleEndian.AppendUint16(hdr[:0], 0)
			if large {
				hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(data)))
			} else {
				hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(data)))
			}
			hdr = append(hdr, fe[:headerPadded-len(hdr)]...)
			if err := put(hdr); err != nil {
				return err
			}
			if err := put(data); err != nil {
				return err
			}
			if pad := (8 - len(data)%8) % 8; pad > 0 {
				if err := put(fe[:pad]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	l := &enc21.MiniBlockLayout{ValueCompression: valueEnc, Layers: layers, NumBuffers: 1, NumItems: uint64(rows), HasLargeChunk: large}
	return c.pageRefs(0, typeURLPageLayout, pageLayout(l), []bufRef{metaRef, dataRef}, rows, firstRow)
}

// ---- 2.0 ----------------------------------------------------------------

func flat20(bits uint64, buf uint32) *enc20.ArrayEncoding {
	return &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Flat{Flat: &enc20.Flat{
		BitsPerValue: bits, Buffer: &enc20.Buffer{BufferIndex: buf, BufferType: enc20.Buffer_page}}}}
}

func noNull20(v *enc20.ArrayEncoding) *enc20.ArrayEncoding {
	return &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Nullable{Nullable: &enc20.Nullable{
		Nullability: &enc20.Nullable_NoNulls{NoNulls: &enc20.Nullable_NoNull{Values: v}}}}}
}

// values20 encodes fixed-width rows: Nullable{NoNull|SomeNull{…}} over Flat
// or FixedSizeList{Nullable{NoNull{Flat}}}, the tree the 2.0 writer uses.
func values20(a *Array) (*enc20.ArrayEncoding, [][]byte) {
	t := a.Type
	nulls := a.Validity != nil && a.NullCount() > 0
	buf := uint32(0)
	if nulls {
		buf = 1
	}
	values := a.Values
	var leaf *enc20.ArrayEncoding
	if t.Kind == KindBool {
		// one bit a value, least significant first (we hold a byte each)
		values = make([]byte, (a.Len+7)/8)
		for i, v := range a.Values[:a.Len] {
			if v != 0 {
				values[i/8] |= 1 << (i % 8)
			}
		}
		leaf = flat20(1, buf)
	} else if t.Kind == KindFixedSizeList {
		leaf = &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_FixedSizeList{FixedSizeList: &enc20.FixedSizeList{
			Dimension: uint32(t.Dim), Items: noNull20(flat20(uint64(t.ElemBits()), buf))}}}
	} else {
		leaf = flat20(uint64(t.ValueBits()), buf)
	}
	if !nulls {
		return noNull20(leaf), [][]byte{values}
	}
	enc := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Nullable{Nullable: &enc20.Nullable{
		Nullability: &enc20.Nullable_SomeNulls{SomeNulls: &enc20.Nullable_SomeNull{Validity: flat20(1, 0), Values: leaf}}}}}
	return enc, [][]byte{sliceBits(a.Validity, 0, a.Len), values}
}

// binary20 encodes strings and binaries as pylance's 2.0 writer does for
// many distinct values: Binary{u64 end offsets from the page's first byte,
// a null's plus null_adjustment = bytes + 1; the bytes}, no Nullable around
// it. (pylance dictionary-encodes low-cardinality pages; both read alike.)
func binary20(a *Array) (*enc20.ArrayEncoding, [][]byte) {
	base := a.Offsets[0]
	data := a.Values[base:a.Offsets[a.Len]]
	adj := uint64(len(data)) + 1
	ends := make([]byte, 8*a.Len)
	for i := 0; i < a.Len; i++ {
		v := uint64(a.Offsets[i+1] - base)
		if !a.IsValid(i) {
			v += adj
		}
		binary.LittleEndian.PutUint64(ends[8*i:], v)
	}
	enc := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Binary{Binary: &enc20.Binary{
		Indices: noNull20(flat20(64, 0)), Bytes: flat20(8, 1), NullAdjustment: adj}}}
	return enc, [][]byte{ends, data}
}

func (c *colWriter) flush20(a *Array) error {
	if a.Type.Kind == KindUnknown {
		return c.allNullPage(a, 0)
	}
	if a.Type.Kind == KindBinary {
		enc, bufs := binary20(a)
		return c.page(0, typeURLArrayEncoding, enc, bufs, a.Len, 0)
	}
	if !isList(a.Type) {
		enc, bufs := values20(a)
		return c.page(0, typeURLArrayEncoding, enc, bufs, a.Len, 0)
	}
	return c.list20(0, a)
}

// list20 writes a page of list rows a to physical column col (the
// offsets) and their items to the columns after it: one more offsets
// column per level of nesting, then the leaf values.
func (c *colWriter) list20(col int, a *Array) error {
	// Offsets column: u64 end offsets relative to this page's first item;
	// a null row adds null_offset_adjustment = num_items + 1.
	items := int(a.Offsets[a.Len] - a.Offsets[0])
	adj := uint64(items) + 1
	offs := make([]byte, 8*a.Len)
	for i := 0; i < a.Len; i++ {
		v := uint64(a.Offsets[i+1] - a.Offsets[0])
		if !a.IsValid(i) {
			v += adj
		}
		binary.LittleEndian.PutUint64(offs[8*i:], v)
	}
	list := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_List{List: &enc20.List{
		Offsets: noNull20(flat20(64, 0)), NullOffsetAdjustment: adj, NumItems: uint64(items)}}}
	if err := c.page(col, typeURLArrayEncoding, list, [][]byte{offs}, a.Len, 0); err != nil {
		return err
	}
	if items == 0 {
		return nil
	}
	it := a.Items
	if a.Offsets[0] != 0 || int(a.Offsets[a.Len]) != it.Len {
		it = it.Slice(int(a.Offsets[0]), int(a.Offsets[a.Len]))
	}
	if isList(it.Type) {
		return c.list20(col+1, it)
	}
	enc, bufs := values20(it)
	if it.Type.Kind == KindBinary {
		enc, bufs = binary20(it)
	}
	return c.page(col+1, typeURLArrayEncoding, enc, bufs, items, 0)
}

// allNullPage writes rows of a type this package does not encode, which
// must all be null, as pylance writes them: an all-null layout with
// nothing stored (2.1+), an all-nulls encoding (2.0).
func (c *colWriter) allNullPage(a *Array, firstRow uint64) error {
	if a.Validity == nil || a.NullCount() != a.Len {
		return fmt.Errorf("%w: lancefile: writing values of type %s (only nulls are written)", errkind.Unsupported, a.Type)
	}
	if c.w.opts.Version == V2_0 {
		if enc, bufs, ok := nullDictionary20(a); ok {
			return c.page(0, typeURLArrayEncoding, enc, bufs, a.Len, 0)
		}
		enc := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Nullable{Nullable: &enc20.Nullable{
			Nullability: &enc20.Nullable_AllNulls{AllNulls: &enc20.Nullable_AllNull{}}}}}
		return c.page(0, typeURLArrayEncoding, enc, nil, a.Len, 0)
	}
	l := &enc21.ConstantLayout{Layers: []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_NULLABLE_ITEM}}
	return c.page(0, typeURLPageLayout, pageLayout(l), nil, a.Len, firstRow)
}

// nullDictionary20 encodes null rows of a dictionary column as pylance
// 14.0.2 writes them in 2.0 (the bounds of a ZONEMAP of such a column): a
// dictionary of one null item, every row's index 0 (see
// decoder20.dictionary), the indices of the column's index type. The item
// is a Binary (strings, binary) or an all-null Nullable (fixed width).
func nullDictionary20(a *Array) (*enc20.ArrayEncoding, [][]byte, bool) {
	v, idx, ok := dictTypes(a.Type)
	if !ok {
		return nil, nil, false
	}
	bits := primitiveBits[idx]
	indices := make([]byte, a.Len*bits/8)
	if v.Kind != KindBinary {
		enc := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Dictionary{Dictionary: &enc20.Dictionary{
			Indices: noNull20(flat20(uint64(bits), 0)), NumDictionaryItems: 1,
			Items: &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Nullable{Nullable: &enc20.Nullable{
				Nullability: &enc20.Nullable_AllNulls{AllNulls: &enc20.Nullable_AllNull{}}}}}}}}
		return enc, [][]byte{indices}, true
	}
	items := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Binary{Binary: &enc20.Binary{
		Indices: noNull20(flat20(64, 1)), Bytes: flat20(8, 2), NullAdjustment: 1}}}
	enc := &enc20.ArrayEncoding{ArrayEncoding: &enc20.ArrayEncoding_Dictionary{Dictionary: &enc20.Dictionary{
		Indices: noNull20(flat20(uint64(bits), 0)), Items: items, NumDictionaryItems: 1}}}
	// the item's end offset is its null adjustment: 0 bytes, plus 1
	return enc, [][]byte{indices, binary.LittleEndian.AppendUint64(nil, 1), {}}, true
}

// nullListPage writes a page of null lists as pylance writes one (the
// bounds of a ZONEMAP of a list column): a constant layout without a
// value, whose repetition and definition levels, 16 bits each, are all 1
// (each row starts a list; the list is null).
func (c *colWriter) nullListPage(a *Array, firstRow uint64) error {
	ones := make([]byte, 2*a.Len)
	for i := 0; i < a.Len; i++ {
		ones[2*i] = 1
	}
	l := &enc21.ConstantLayout{
		Layers:         []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM, enc21.RepDefLayer_REPDEF_NULLABLE_LIST},
		RepCompression: flat21(16), DefCompression: flat21(16),
		NumRepValues: uint64(a.Len), NumDefValues: uint64(a.Len),
	}
	return c.page(0, typeURLPageLayout, pageLayout(l), [][]byte{ones, ones}, a.Len, firstRow)
}

// ---- 2.1 / 2.2 -----------------------------------------------------------

// Mini-block chunk sizing, as Lance's writer does it: the largest power of
// two values per chunk, starting at 2, such that the chunk's value bytes
// stay below maxChunkValueBytes and its count at most maxChunkValues.
const (
	maxChunkValueBytes = 8*1024 - 6
	maxChunkValues     = 4096
	// miniBlockMaxValueBytes: values this wide or wider go to full-zip.
	miniBlockMaxValueBytes = 256
)

func valuesPerChunk(valueBytes int) int {
	n := 2
	for 2*n*valueBytes < maxChunkValueBytes && 2*n <= maxChunkValues {
		n *= 2
	}
	return n
}

func flat21(bits int) *enc21.CompressiveEncoding {
	return &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_Flat{Flat: &enc21.Flat{BitsPerValue: uint64(bits)}}}
}

func valueCompression(t DataType) *enc21.CompressiveEncoding {
	if t.Kind == KindFixedSizeList {
		return &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_FixedSizeList{FixedSizeList: &enc21.FixedSizeList{
			ItemsPerValue: uint64(t.Dim), Values: flat21(t.ElemBits())}}}
	}
	return flat21(t.ValueBits())
}

func pageLayout(l any) *enc21.PageLayout {
	switch v := l.(type) {
	case *enc21.MiniBlockLayout:
		return &enc21.PageLayout{Layout: &enc21.PageLayout_MiniBlockLayout{MiniBlockLayout: v}}
	case *enc21.FullZipLayout:
		return &enc21.PageLayout{Layout: &enc21.PageLayout_FullZipLayout{FullZipLayout: v}}
	case *enc21.ConstantLayout:
		return &enc21.PageLayout{Layout: &enc21.PageLayout_AllNullLayout{AllNullLayout: v}}
	}
	panic(fmt.Sprintf("lancefile: pageLayout(%T)", l))
}

func (c *colWriter) flush21(a *Array, firstRow uint64) error {
	t := a.Type
	if t.Kind == KindUnknown {
		return c.allNullPage(a, firstRow)
	}
	if isList(t) && a.Items.Len == 0 && a.Validity != nil && a.NullCount() == a.Len {
		return c.nullListPage(a, firstRow)
	}
	if isList(t) && a.Items.Type.Kind == KindBinary {
		return c.binaryListPage21(a, firstRow)
	}
	if isList(t) {
		return c.listPage21(a, firstRow)
	}
	if t.Kind == KindBinary {
		return c.binaryPage21(a, firstRow)
	}
	if t.Kind == KindBool {
		return c.boolPage21(a, firstRow)
	}
	nulls := a.Validity != nil && a.NullCount() > 0
	layers := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM}
	if nulls {
		layers[0] = enc21.RepDefLayer_REPDEF_NULLABLE_ITEM
	}
	vb := t.ValueBits() / 8
	if vb >= miniBlockMaxValueBytes {
		// Full-zip: rows back to back, each behind a one-byte control word
		// (its definition level) when there are nulls.
		l := &enc21.FullZipLayout{Details: &enc21.FullZipLayout_BitsPerValue{BitsPerValue: uint32(t.ValueBits())},
			NumItems: uint32(a.Len), NumVisibleItems: uint32(a.Len), ValueCompression: valueCompression(t), Layers: layers}
		data := a.Values
		if nulls {
			l.BitsDef = 1
			data = make([]byte, 0, a.Len*(vb+1))
			for i := 0; i < a.Len; i++ {
				d := byte(0)
				if !a.IsValid(i) {
					d = 1
				}
				data = append(data, d)
				data = append(data, a.Values[i*vb:(i+1)*vb]...)
			}
		}
		return c.page(0, typeURLPageLayout, pageLayout(l), [][]byte{data}, a.Len, firstRow)
	}
	var def []uint16
	if nulls {
		def = make([]uint16, a.Len)
		for i := range def {
			if !a.IsValid(i) {
				def[i] = 1
			}
		}
	}
	per := valuesPerChunk(vb)
	var chunks []miniChunk
	for lo := 0; lo < a.Len; lo += per {
		hi := min(lo+per, a.Len)
		ch := miniChunk{values: hi - lo, data: a.Values[lo*vb : hi*vb]}
		if def != nil {
			ch.def, ch.levels = def[lo:hi], hi-lo
		}
		chunks = append(chunks, ch)
	}
	l := &enc21.MiniBlockLayout{ValueCompression: valueCompression(t), Layers: layers, NumBuffers: 1, NumItems: uint64(a.Len)}
	if def != nil {
		l.DefCompression = flat21(16)
	}
	return c.miniBlockPage(l, chunks, nil, a.Len, firstRow)
}

// boolPage21 writes bools as pylance 14.0.2 does: a mini-block page of
// 1-bit Flat values, chunks of up to 4,096 values (512 bytes), with u16
// definition levels when the page has nulls.
func (c *colWriter) boolPage21(a *Array, firstRow uint64) error {
	layers := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM}
	var def []uint16
	if a.Validity != nil && a.NullCount() > 0 {
		layers[0] = enc21.RepDefLayer_REPDEF_NULLABLE_ITEM
		def = make([]uint16, a.Len)
		for i := range def {
			if !a.IsValid(i) {
				def[i] = 1
			}
		}
	}
	var chunks []miniChunk
	for lo := 0; lo < a.Len; lo += maxChunkValues {
		hi := min(lo+maxChunkValues, a.Len)
		ch := miniChunk{values: hi - lo, data: packBools(a.Values[lo:hi])}
		if def != nil {
			ch.def, ch.levels = def[lo:hi], hi-lo
		}
		chunks = append(chunks, ch)
	}
	l := &enc21.MiniBlockLayout{ValueCompression: flat21(1), Layers: layers, NumBuffers: 1, NumItems: uint64(a.Len)}
	if def != nil {
		l.DefCompression = flat21(16)
	}
	return c.miniBlockPage(l, chunks, nil, a.Len, firstRow)
}

// bitpacker packs mini-block chunks with inline bitpacking, reusing its
// buffers: a packed chunk stays valid until the next call.
type bitpacker struct{ group, out []byte }

// pack packs up to 1024 values (zero-padded to 1024) of width w (their
// bitWidth) as one chunk buffer: [W as a T-bit word][1024·W/T packed
// words].
func (b *bitpacker) pack(values []byte, t, w int) []byte {
	bw := t / 8
	b.group = slices.Grow(b.group[:0], flValues*bw)[:flValues*bw]
	clear(b.group[copy(b.group, values):])
	n := bw + packedBytes(t, w)
	b.out = slices.Grow(b.out[:0], n)[:n]
	clear(b.out)
	writeWord(b.out, 0, bw, uint64(w))
	packFastLanesInto(b.out[bw:], b.group, t, w)
	return b.out
}

// appendChunkMeta appends a mini-block chunk's metadata word: its size in
// 8-byte words minus one, and log2 of its value count (0 for the last
// chunk, which may hold any number; every other chunk holds a power of
// two). 2.1 pages have 16-bit words, 2.2 pages (large chunks) 32-bit ones.
func appendChunkMeta(meta []byte, size, values int, last, large bool) ([]byte, error) {
	words := size/8 - 1
	if (!large && words >= 1<<12) || words >= 1<<28 {
		return meta, fmt.Errorf("%w: lancefile: mini-block chunk of %d bytes is too large", errkind.Unsupported, size)
	}
	log2 := 0
	if !last {
		for 1<<log2 < values {
			log2++
		}
		if 1<<log2 != values {
			return meta, fmt.Errorf("lancefile: internal: a chunk holds %d values, not a power of two", values)
		}
	}
	w := uint32(words)<<4 | uint32(log2)
	if large {
		return binary.LittleEndian.AppendUint32(meta, w), nil
	}
	return binary.LittleEndian.AppendUint16(meta, uint16(w)), nil
}

// miniChunk is one mini-block chunk before serialisation.
type miniChunk struct {
	values   int
	levels   int
	rep, def []uint16
	data     []byte
}

// miniBlockPage serialises chunks (see decodeChunk for the layout) and
// writes the page: [chunk metadata][chunk data][repetition index].
func (c *colWriter) miniBlockPage(l *enc21.MiniBlockLayout, chunks []miniChunk, repIndex []byte, rows int, firstRow uint64) error {
	large := c.w.opts.Version == V2_2
	l.HasLargeChunk = large
	size := 0
	for _, ch := range chunks {
		size += len(ch.data) + 4*len(ch.rep) + 24 + 16
	}
	meta := make([]byte, 0, 4*len(chunks))
	data := make([]byte, 0, size)
	for i, ch := range chunks {
		start := len(data)
		data = binary.LittleEndian.AppendUint16(data, uint16(ch.levels))
		if l.RepCompression != nil {
			data = binary.LittleEndian.AppendUint16(data, uint16(2*len(ch.rep)))
		}
		if l.DefCompression != nil {
			data = binary.LittleEndian.AppendUint16(data, uint16(2*len(ch.def)))
		}
		if large {
			data = binary.LittleEndian.AppendUint32(data, uint32(len(ch.data)))
		} else {
			data = binary.LittleEndian.AppendUint16(data, uint16(len(ch.data)))
		}
		pad8 := func() {
			for (len(data)-start)%8 != 0 {
				data = append(data, 0xfe)
			}
		}
		pad8()
		if l.RepCompression != nil {
			for _, v := range ch.rep {
				data = binary.LittleEndian.AppendUint16(data, v)
			}
			pad8()
		}
		if l.DefCompression != nil {
			for _, v := range ch.def {
				data = binary.LittleEndian.AppendUint16(data, v)
			}
			pad8()
		}
		data = append(data, ch.data...)
		pad8()
		var err error
		if meta, err = appendChunkMeta(meta, len(data)-start, ch.values, i == len(chunks)-1, large); err != nil {
			return err
		}
	}
	bufs := [][]byte{meta, data}
	if repIndex != nil {
		bufs = append(bufs, repIndex)
	}
	return c.page(0, typeURLPageLayout, pageLayout(l), bufs, rows, firstRow)
}

// listPage21 writes a page of list rows as one mini-block page: repetition
// levels (1 at each row start) and, when some lists are null or empty (or
// items null), definition levels, both stored flat as u16; the values flat;
// and the repetition index Lance needs to map rows to chunks.
func (c *colWriter) listPage21(a *Array, firstRow uint64) error {
	it := a.Items.Type
	vb := it.ValueBits() / 8
	if vb >= miniBlockMaxValueBytes {
		return fmt.Errorf("%w: lancefile: writing lists of %s", errkind.Unsupported, it)
	}
	itemNulls := a.Items.Validity != nil && a.Items.NullCount() > 0
	var hasNull, hasEmpty bool
	for i := 0; i < a.Len; i++ {
		if !a.IsValid(i) {
			hasNull = true
		} else if a.Offsets[i+1] == a.Offsets[i] {
			hasEmpty = true
		}
	}
	layers := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM, enc21.RepDefLayer_REPDEF_ALL_VALID_LIST}
	next := uint16(1)
	if itemNulls {
		layers[0] = enc21.RepDefLayer_REPDEF_NULLABLE_ITEM
		next++
	}
	var nullDef, emptyDef uint16
	switch {
	case hasNull && hasEmpty:
		layers[1] = enc21.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST
		nullDef, emptyDef = next, next+1
	case hasNull:
		layers[1] = enc21.RepDefLayer_REPDEF_NULLABLE_LIST
		nullDef = next
	case hasEmpty:
		layers[1] = enc21.RepDefLayer_REPDEF_EMPTYABLE_LIST
		emptyDef = next
	}
	withDef := itemNulls || hasNull || hasEmpty

	// Levels, and for each value the index of the level that holds it.
	var rep, def []uint16
	valueLevel := make([]int, 0, a.Items.Len)
	for i := 0; i < a.Len; i++ {
		lo, hi := a.Offsets[i], a.Offsets[i+1]
		switch {
		case !a.IsValid(i):
			rep, def = append(rep, 1), append(def, nullDef)
			continue
		case lo == hi:
			rep, def = append(rep, 1), append(def, emptyDef)
			continue
		}
		for k := lo; k < hi; k++ {
			r := uint16(0)
			if k == lo {
				r = 1
			}
			d := uint16(0)
			if !a.Items.IsValid(int(k)) {
				d = 1
			}
			valueLevel = append(valueLevel, len(rep))
			rep, def = append(rep, r), append(def, d)
		}
	}
	nValues := a.Items.Len
	if nValues == 0 {
		// Only null or empty lists: a constant layout with the levels
		// stored raw, as Lance writes such pages.
		l := &enc21.ConstantLayout{Layers: layers}
		return c.page(0, typeURLPageLayout, pageLayout(l), [][]byte{u16Bytes(rep), u16Bytes(def)}, a.Len, firstRow)
	}

	// Chunks hold a power-of-two number of values; each chunk's levels run
	// from the level of its first value (the first chunk from level 0) to
	// just before the next chunk's first value, so placeholder levels
	// (null / empty lists) stay with the values before them.
	per := valuesPerChunk(vb)
	var chunks []miniChunk
	for lo := 0; lo < nValues; lo += per {
		hi := min(lo+per, nValues)
		l0 := valueLevel[lo]
		if lo == 0 {
			l0 = 0
		}
		l1 := len(rep)
		if hi < nValues {
			l1 = valueLevel[hi]
		}
		ch := miniChunk{values: hi - lo, levels: l1 - l0, rep: rep[l0:l1], data: a.Items.Values[lo*vb : hi*vb]}
		if withDef {
			ch.def = def[l0:l1]
		}
		if ch.levels > 1<<15-1 {
			return fmt.Errorf("%w: lancefile: %d levels in one mini-block chunk (too many empty lists in a row)", errkind.Unsupported, ch.levels)
		}
		chunks = append(chunks, ch)
	}
	l := &enc21.MiniBlockLayout{RepCompression: flat21(16), ValueCompression: valueCompression(it), Layers: layers,
		NumBuffers: 1, RepetitionIndexDepth: 1, NumItems: uint64(nValues)}
	if withDef {
		l.DefCompression = flat21(16)
	}
	return c.miniBlockPage(l, chunks, repetitionIndex(chunks), a.Len, firstRow)
}

// repetitionIndex computes, per chunk, (rows that finish in the chunk,
// levels left over after the chunk's last row start), as u64 pairs.
func repetitionIndex(chunks []miniChunk) []byte {
	type entry struct{ rows, leftover uint64 }
	idx := make([]entry, len(chunks))
	for c, ch := range chunks {
		last := -1
		for i, r := range ch.rep {
			if r == 1 {
				if i >= 1 {
					idx[c].rows++
				}
				last = i
			}
		}
		switch {
		case c == len(chunks)-1:
			idx[c].rows++
		case last >= 0:
			idx[c].leftover = uint64(len(ch.rep) - last)
		default:
			idx[c].leftover = uint64(len(ch.rep))
		}
		if c > 0 && len(ch.rep) > 0 && ch.rep[0] == 1 && idx[c-1].leftover != 0 {
			idx[c-1].rows++
			idx[c-1].leftover = 0
		}
	}
	out := make([]byte, 0, 16*len(idx))
	for _, e := range idx {
		out = binary.LittleEndian.AppendUint64(out, e.rows)
		out = binary.LittleEndian.AppendUint64(out, e.leftover)
	}
	return out
}

func u16Bytes(v []uint16) []byte {
	out := make([]byte, 0, 2*len(v))
	for _, x := range v {
		out = binary.LittleEndian.AppendUint16(out, x)
	}
	return out
}
