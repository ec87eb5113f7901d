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
	d := decoder20{ctx: ctx, pg: pg}
	out := &Array{Type: t, Len: b - a}
	var err error
	out.Values, out.Validity, out.ItemValidity, err = d.decode(enc, t, a, b)
	return out, err
}

type decoder20 struct {
	ctx context.Context
	pg  *pageIO
}

// decode returns the values of rows [a, b) of type t under enc, the row
// validity (nil = all valid) and, for a FixedSizeList, the item validity.
func (d decoder20) decode(enc *enc20.ArrayEncoding, t DataType, a, b int) (values, validity, itemValidity []byte, err error) {
	switch e := enc.GetArrayEncoding().(type) {
	case *enc20.ArrayEncoding_Nullable:
		switch n := e.Nullable.GetNullability().(type) {
		case *enc20.Nullable_NoNulls:
			return d.decode(n.NoNulls.GetValues(), t, a, b)
		case *enc20.Nullable_SomeNulls:
			validity, err = d.bits(n.SomeNulls.GetValidity(), a, b)
			if err != nil {
				return nil, nil, nil, err
			}
			values, _, itemValidity, err = d.decode(n.SomeNulls.GetValues(), t, a, b)
			return values, validity, itemValidity, err
		case *enc20.Nullable_AllNulls:
			return make([]byte, (b-a)*t.ValueBits()/8), make([]byte, (b-a+7)/8), nil, nil
		default:
			return nil, nil, nil, fmt.Errorf("%w: 2.0 nullable encoding without nullability", errkind.Corrupt)
		}
	case *enc20.ArrayEncoding_Flat:
		bits := int(e.Flat.GetBitsPerValue())
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
	case nil:
		return nil, nil, nil, fmt.Errorf("%w: 2.0 page without an array encoding", errkind.Corrupt)
	default:
		return nil, nil, nil, fmt.Errorf("%w: 2.0 array encoding %T", errkind.Unsupported, e)
	}
}

func (d decoder20) flat(f *enc20.Flat, off, n int) ([]byte, error) {
	if f.GetCompression().GetScheme() != "" {
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
// rows are numbered across all offsets pages.
func (r *Reader) readList20(ctx context.Context, cols []int, t, item DataType, start, end int) (*Array, error) {
	if len(cols) != 2 {
		return nil, fmt.Errorf("%w: 2.0 list of %s over %d columns", errkind.Unsupported, item, len(cols))
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
			items, err := r.readColumn(ctx, cols[1], item, DataType{}, int(itemBase+first), int(itemBase+prev))
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
	items, err := Concat(item, itemParts)
	if err != nil {
		return nil, err
	}
	out.Items = items
	if out.Len != end-start {
		return nil, fmt.Errorf("%w: list pages hold %d of rows [%d,%d)", errkind.Corrupt, out.Len, start, end)
	}
	return out, nil
}

func boolBit(v bool) []byte {
	if v {
		return nil
	}
	return []byte{0}
}
