package lancefile

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc20"
)

// File version 2.0 pages: a tree of ArrayEncoding messages whose leaves are
// Flat buffers of raw values, so any row range maps to a byte range.

func (r *Reader) readPage20(ctx context.Context, pg *pageIO, t DataType, a, b int) (*Array, error) {
	enc := &enc20.ArrayEncoding{}
	if err := decodeAny(pg.page, "lance.encodings.ArrayEncoding", enc); err != nil {
		return nil, err
	}
	d := decoder20{ctx: ctx, pg: pg, direct: pg.r.dict20[pg.col]}
	if t.Kind == KindBinary {
		return d.binary(enc, t, a, b)
	}
	out := &Array{Type: t, Len: b - a}
	var err error
	out.Values, out.Validity, out.ItemValidity, err = d.decode(enc, t, a, b)
	return out, err
}

type decoder20 struct {
	ctx context.Context
	pg  *pageIO
	// direct is set for a page of a dictionary field (see dictionary)
	direct bool
}

// decode returns the values of rows [a, b) of type t under enc, the row
// validity (nil = all valid) and, for a FixedSizeList, the item validity.
func (d decoder20) decode(enc *enc20.ArrayEncoding, t DataType, a, b int) (values, validity, itemValidity []byte, err error) {
	switch e := enc.GetArrayEncoding().(type) {
	case *enc20.ArrayEncoding_Nullable:
		inner, nulls, err := d.nullable(e.Nullable, a, b)
		switch {
		case err != nil:
			return nil, nil, nil, err
		case inner == nil:
			return make([]byte, (b-a)*t.ValueBits()/8), nulls, nil, nil
		case nulls == nil:
			return d.decode(inner, t, a, b)
		}
		values, _, itemValidity, err = d.decode(inner, t, a, b)
		return values, nulls, itemValidity, err
	case *enc20.ArrayEncoding_Flat:
		bits := int(e.Flat.GetBitsPerValue())
		if t.Kind == KindBool && bits == 1 { // a bit each, held as a byte each
			lo, hi := a/8, (b+7)/8
			raw, err := d.flat(e.Flat, lo, hi-lo)
			if err != nil {
				return nil, nil, nil, err
			}
			packed := sliceBits(raw, a-8*lo, b-8*lo)
			values = make([]byte, b-a)
			for i := range values {
				values[i] = packed[i/8] >> (i % 8) & 1
			}
			return values, nil, nil, nil
		}
		if bits != t.ValueBits() {
			return nil, nil, nil, fmt.Errorf("%w: flat %d-bit values for %s", errkind.Corrupt, bits, t)
		}
		values, err = d.flat(e.Flat, a*bits/8, (b-a)*bits/8)
		return values, nil, nil, err
	case *enc20.ArrayEncoding_FixedSizeList:
		fsl := e.FixedSizeList
		dim := int(fsl.GetDimension())
		if t.Kind != KindFixedSizeList || dim != t.Dim {
			return nil, nil, nil, fmt.Errorf("%w: fixed-size list of %d for %s", errkind.Corrupt, dim, t)
		}
		if fsl.GetHasValidity() {
			return nil, nil, nil, fmt.Errorf("%w: 2.0 fixed-size list with its own validity", errkind.Unsupported)
		}
		values, itemValidity, _, err = d.decode(fsl.GetItems(), Primitive(t.Elem), a*dim, b*dim)
		return values, nil, itemValidity, err
	case *enc20.ArrayEncoding_Dictionary:
		if !d.direct || t.ValueBits() == 0 || t.ValueBits()%8 != 0 || t.Kind == KindFixedSizeList {
			return nil, nil, nil, fmt.Errorf("%w: 2.0 dictionary of %s values", errkind.Unsupported, t)
		}
		return d.fixedDictionary(e.Dictionary, t, a, b)
	case nil:
		return nil, nil, nil, fmt.Errorf("%w: 2.0 page without an array encoding", errkind.Corrupt)
	default:
		return nil, nil, nil, fmt.Errorf("%w: 2.0 array encoding %T", errkind.Unsupported, e)
	}
}

// fixedDictionary reads rows [a, b) of a page of a dictionary field of
// fixed-width values: an index per row, from 0, into items decoded as any
// fixed-width page (a null item where the rows are null; pylance 14.0.2
// writes a ZONEMAP's null bounds of such a column as one null item).
func (d decoder20) fixedDictionary(e *enc20.Dictionary, t DataType, a, b int) (values, validity, itemValidity []byte, err error) {
	w := t.ValueBits() / 8
	if e.GetItems().GetNullable().GetAllNulls() != nil {
		// every item null, so every row: nothing stored to size them by
		return make([]byte, (b-a)*w), make([]byte, (b-a+7)/8), nil, nil
	}
	// the item count is checked against the page's buffers (pageIO.read)
	// before anything of its size is allocated
	n := int(e.GetNumDictionaryItems()) // a u32
	items, itemsValid, _, err := d.decode(e.GetItems(), t, 0, n)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("2.0 dictionary items: %w", err)
	}
	idx, err := d.fixed(e.GetIndices(), a, b)
	if err != nil {
		return nil, nil, nil, err
	}
	values = make([]byte, (b-a)*w)
	if itemsValid != nil {
		validity = make([]byte, (b-a+7)/8)
	}
	for i, k := range idx {
		if k >= uint64(n) {
			return nil, nil, nil, fmt.Errorf("%w: 2.0 dictionary index %d of %d items", errkind.Corrupt, k, n)
		}
		if itemsValid != nil && itemsValid[k/8]&(1<<(k%8)) == 0 {
			continue
		}
		copy(values[i*w:], items[int(k)*w:int(k+1)*w])
		if validity != nil {
			validity[i/8] |= 1 << (i % 8)
		}
	}
	return values, validity, nil, nil
}

// nullable splits a Nullable into the encoding of its values (nil when
// every row is null) and the validity of rows [a, b) (nil when none is).
func (d decoder20) nullable(n *enc20.Nullable, a, b int) (*enc20.ArrayEncoding, []byte, error) {
	var values *enc20.ArrayEncoding
	var validity []byte
	switch v := n.GetNullability().(type) {
	case *enc20.Nullable_NoNulls:
		values = v.NoNulls.GetValues()
	case *enc20.Nullable_SomeNulls:
		values = v.SomeNulls.GetValues()
		var err error
		if validity, err = d.bits(v.SomeNulls.GetValidity(), a, b); err != nil {
			return nil, nil, err
		}
	case *enc20.Nullable_AllNulls:
		return nil, make([]byte, (b-a+7)/8), nil
	default:
		return nil, nil, fmt.Errorf("%w: 2.0 nullable encoding without nullability", errkind.Corrupt)
	}
	if values == nil {
		return nil, nil, fmt.Errorf("%w: 2.0 nullable encoding without values", errkind.Corrupt)
	}
	return values, validity, nil
}

// binary reads rows [a, b) of a 2.0 string or binary page: a Binary (u64
// end offsets counted from the page's first byte, a null's plus
// null_adjustment, then the bytes) or a Dictionary (an index per row over
// a Binary of the items: see dictionary), either possibly under a Nullable.
func (d decoder20) binary(enc *enc20.ArrayEncoding, t DataType, a, b int) (*Array, error) {
	switch e := enc.GetArrayEncoding().(type) {
	case *enc20.ArrayEncoding_Nullable:
		inner, nulls, err := d.nullable(e.Nullable, a, b)
		if err != nil {
			return nil, err
		}
		if inner == nil {
			return &Array{Type: t, Len: b - a, Offsets: make([]int64, b-a+1), Values: []byte{}, Validity: nulls}, nil
		}
		out, err := d.binary(inner, t, a, b)
		if err != nil {
			return nil, err
		}
		for i := range nulls {
			out.Validity[i] &= nulls[i]
		}
		return out, nil
	case *enc20.ArrayEncoding_Binary:
		return d.plainBinary(e.Binary, t, a, b)
	case *enc20.ArrayEncoding_Dictionary:
		return d.dictionary(e.Dictionary, t, a, b)
	default:
		return nil, fmt.Errorf("%w: 2.0 %s page encoded as %T", errkind.Unsupported, t, e)
	}
}

// fixed reads rows [a, b) of a Flat buffer of bits-wide unsigned values
// (bits 8, 16, 32 or 64), under at most a no-null Nullable.
func (d decoder20) fixed(enc *enc20.ArrayEncoding, a, b int) ([]uint64, error) {
	if nn := enc.GetNullable().GetNoNulls(); nn != nil {
		enc = nn.GetValues()
	}
	f := enc.GetFlat()
	bits := int(f.GetBitsPerValue())
	if f == nil || bits != 8 && bits != 16 && bits != 32 && bits != 64 {
		return nil, fmt.Errorf("%w: 2.0 offsets or indices encoded as %v", errkind.Unsupported, enc)
	}
	raw, err := d.flat(f, a*bits/8, (b-a)*bits/8)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, b-a)
	for i := range out {
		switch bits {
		case 8:
			out[i] = uint64(raw[i])
		case 16:
			out[i] = uint64(binary.LittleEndian.Uint16(raw[2*i:]))
		case 32:
			out[i] = uint64(binary.LittleEndian.Uint32(raw[4*i:]))
		default:
			out[i] = binary.LittleEndian.Uint64(raw[8*i:])
		}
	}
	return out, nil
}

func (d decoder20) plainBinary(e *enc20.Binary, t DataType, a, b int) (*Array, error) {
	lo := max(a-1, 0)
	ends, err := d.fixed(e.GetIndices(), lo, b)
	if err != nil {
		return nil, err
	}
	adj := e.GetNullAdjustment()
	end := func(v uint64) (uint64, bool) {
		if adj > 0 && v >= adj {
			return v - adj, false
		}
		return v, true
	}
	first := uint64(0)
	if a > 0 {
		first, _ = end(ends[0])
		ends = ends[1:]
	}
	out := &Array{Type: t, Len: b - a, Offsets: make([]int64, 1, b-a+1), Validity: make([]byte, (b-a+7)/8)}
	prev := first
	for i, v := range ends {
		stop, valid := end(v)
		if stop < prev {
			return nil, fmt.Errorf("%w: 2.0 binary offsets go back (%d after %d)", errkind.Corrupt, stop, prev)
		}
		prev = stop
		out.Offsets = append(out.Offsets, int64(stop-first))
		if valid {
			out.Validity[i/8] |= 1 << (i % 8)
		}
	}
	if limit := uint64(d.pg.r.opts.MaxReadBytes); prev-first > limit {
		return nil, fmt.Errorf("%w: 2.0 binary rows [%d,%d) hold %d bytes, above the %d-byte limit", errkind.InvalidInput, a, b, prev-first, limit)
	}
	f := e.GetBytes().GetFlat()
	if f == nil || f.GetBitsPerValue() != 8 {
		return nil, fmt.Errorf("%w: 2.0 binary bytes encoded as %v", errkind.Unsupported, e.GetBytes())
	}
	if out.Values, err = d.flat(f, int(first), int(prev-first)); err != nil {
		return nil, err
	}
	return out, nil
}

func (d decoder20) dictionary(e *enc20.Dictionary, t DataType, a, b int) (*Array, error) {
	items := e.GetItems().GetBinary()
	if items == nil {
		return nil, fmt.Errorf("%w: 2.0 dictionary items encoded as %T", errkind.Unsupported, e.GetItems().GetArrayEncoding())
	}
	// the item count is checked against the page's buffers (pageIO.read)
	// before anything of its size is allocated
	n := int(e.GetNumDictionaryItems()) // a u32
	dict, err := d.plainBinary(items, t, 0, n)
	if err != nil {
		return nil, err
	}
	idx, err := d.fixed(e.GetIndices(), a, b)
	if err != nil {
		return nil, err
	}
	// A string column's own dictionary numbers its items from 1, 0 being
	// null; a dictionary field's pages keep the column's indices, from 0,
	// with a null item where the rows are null (pylance 14.0.2, both
	// proven against its reads).
	base := uint64(1)
	if d.direct {
		base = 0
	}
	out := &Array{Type: t, Len: b - a, Offsets: make([]int64, 1, b-a+1), Values: []byte{}, Validity: make([]byte, (b-a+7)/8)}
	for i, k := range idx {
		if k > uint64(n) || k == uint64(n) && base == 0 {
			return nil, fmt.Errorf("%w: 2.0 dictionary index %d of %d items", errkind.Corrupt, k, n)
		}
		if k >= base && dict.IsValid(int(k-base)) {
			out.Values = append(out.Values, dict.Values[dict.Offsets[k-base]:dict.Offsets[k-base+1]]...)
			out.Validity[i/8] |= 1 << (i % 8)
		}
		out.Offsets = append(out.Offsets, int64(len(out.Values)))
	}
	return out, nil
}

func (d decoder20) flat(f *enc20.Flat, off, n int) ([]byte, error) {
	// "none" is how writers that set the field (posting lists of an NGRAM
	// segment pylance 2.0.1 wrote) say what "" says
	if s := f.GetCompression().GetScheme(); s != "" && s != "none" {
		return nil, fmt.Errorf("%w: 2.0 flat buffer compressed with %q", errkind.Unsupported, f.GetCompression().GetScheme())
	}
	if f.GetBuffer().GetBufferType() != enc20.Buffer_page {
		return nil, fmt.Errorf("%w: 2.0 values in a %v buffer", errkind.Unsupported, f.GetBuffer().GetBufferType())
	}
	return d.pg.read(d.ctx, int(f.GetBuffer().GetBufferIndex()), off, n)
}

// bits reads bits [a, b) of a 1-bit Flat buffer, re-based to bit 0.
func (d decoder20) bits(enc *enc20.ArrayEncoding, a, b int) ([]byte, error) {
	f := enc.GetFlat()
	if f == nil || f.GetBitsPerValue() != 1 {
		return nil, fmt.Errorf("%w: 2.0 validity encoded as %v", errkind.Unsupported, enc)
	}
	lo, hi := a/8, (b+7)/8
	raw, err := d.flat(f, lo, hi-lo)
	if err != nil {
		return nil, err
	}
	return sliceBits(raw, a-8*lo, b-8*lo), nil
}

// readList20 reads list rows [start, end): 2.0 stores a list as an offsets
// column (u64 end offsets per row, relative to the page's first item, plus
// null_offset_adjustment for null rows) and a separate items column whose
// rows are numbered across all offsets pages. Items that are lists
// themselves are read the same way from the columns after the offsets.
func (r *Reader) readList20(ctx context.Context, cols []int, f *Field, start, end int) (*Array, error) {
	t, child := f.Type, f.Children[0]
	item := child.Type
	if want := columnCount(f, V2_0); len(cols) != want {
		return nil, fmt.Errorf("%w: 2.0 list of %s over %d columns, not %d", errkind.Corrupt, item, len(cols), want)
	}
	out := &Array{Type: t, Offsets: []int64{0}}
	var itemParts []*Array
	pageStart, itemBase := 0, int64(0)
	for pi, p := range r.columns[cols[0]].GetPages() {
		n := int(p.GetLength())
		a, b := max(start, pageStart), min(end, pageStart+n)
		enc := &enc20.ArrayEncoding{}
		if err := decodeAny(p, "lance.encodings.ArrayEncoding", enc); err != nil {
			return nil, err
		}
		l := enc.GetList()
		if l == nil {
			return nil, fmt.Errorf("%w: 2.0 list offsets page %d encoded as %T", errkind.Corrupt, pi, enc.GetArrayEncoding())
		}
		if a < b {
			pg := &pageIO{r: r, col: cols[0], idx: pi, page: p}
			lo := a - pageStart
			from := max(lo-1, 0)
			raw, _, _, err := decoder20{ctx: ctx, pg: pg}.decode(l.GetOffsets(), Primitive(KindUint64), from, b-pageStart)
			if err != nil {
				return nil, fmt.Errorf("list offsets page %d: %w", pi, err)
			}
			adj := l.GetNullOffsetAdjustment()
			ends := make([]int64, len(raw)/8)
			valid := make([]bool, len(ends))
			for i := range ends {
				v := binary.LittleEndian.Uint64(raw[8*i:])
				valid[i] = adj == 0 || v < adj
				if !valid[i] {
					v -= adj
				}
				if v > l.GetNumItems() {
					return nil, fmt.Errorf("%w: list offset %d past the page's %d items", errkind.Corrupt, v, l.GetNumItems())
				}
				ends[i] = int64(v)
			}
			var prev int64
			if lo > 0 {
				prev, ends, valid = ends[0], ends[1:], valid[1:]
			}
			first := prev
			for i, e := range ends {
				if e < prev {
					return nil, fmt.Errorf("%w: list offsets decrease", errkind.Corrupt)
				}
				out.Validity = appendBits(out.Validity, out.Len, boolBit(valid[i]), 1)
				out.Len++
				out.Offsets = append(out.Offsets, out.Offsets[len(out.Offsets)-1]+e-prev)
				prev = e
			}
			var items *Array
			if first == prev {
				items = emptyOf(child)
			} else if isList(item) {
				items, err = r.readList20(ctx, cols[1:], child, int(itemBase+first), int(itemBase+prev))
			} else {
				items, err = r.readColumn(ctx, cols[1], item, DataType{}, int(itemBase+first), int(itemBase+prev))
			}
			if err != nil {
				return nil, fmt.Errorf("list items: %w", err)
			}
			itemParts = append(itemParts, items)
		}
		pageStart += n
		itemBase += int64(l.GetNumItems())
		if pageStart >= end {
			break
		}
	}
	out.Items = emptyOf(child)
	if len(itemParts) > 0 {
		items, err := Concat(item, itemParts)
		if err != nil {
			return nil, err
		}
		out.Items = items
	}
	if out.Len != end-start {
		return nil, fmt.Errorf("%w: list pages hold %d of rows [%d,%d)", errkind.Corrupt, out.Len, start, end)
	}
	return out, nil
}

// NullLists returns n null rows of the list type t whose items have type
// item: what pylance writes for the bounds of a ZONEMAP of a list column.
func NullLists(t, item DataType, n int) *Array {
	a := emptyArray(t, item)
	a.Len, a.Offsets, a.Validity = n, make([]int64, n+1), make([]byte, (n+7)/8)
	return a
}

// emptyOf is an array of no rows of field f's type, lists' items too.
func emptyOf(f *Field) *Array {
	a := &Array{Type: f.Type, Values: []byte{}}
	if isList(f.Type) || f.Type.Kind == KindBinary {
		a.Offsets = []int64{0}
	}
	if isList(f.Type) && len(f.Children) == 1 {
		a.Values, a.Items = nil, emptyOf(f.Children[0])
	}
	return a
}

func boolBit(v bool) []byte {
	if v {
		return nil
	}
	return []byte{0}
}
