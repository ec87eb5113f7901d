package lancefile

import (
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Array holds Len rows of one column, in the form the merge path wants:
// fixed-width values as one contiguous little-endian byte slice, so that
// rows can be sliced and concatenated without per-row work.
//
// Invariants:
//  1. Fixed-width types (primitives, FixedSizeList): len(Values) ==
//     Len·Type.ValueBits()/8. A null row still occupies its bytes (zeros).
//  2. Validity is nil when every row is valid; otherwise it is an LSB-first
//     bitmap of at least Len bits (bit i set = row i valid).
//  3. ItemValidity (FixedSizeList only) is nil or a bitmap over Len·Dim
//     items.
//  4. Binary (variable width): Offsets has Len+1 entries, non-decreasing,
//     Offsets[0] == 0; row i is Values[Offsets[i]:Offsets[i+1]] (empty
//     for a null row).
//  5. Lists: Offsets has Len+1 entries, non-decreasing, Offsets[0] == 0;
//     Items holds Offsets[Len] items. Values is unused.
//
// Ownership: an Array returned by a Reader owns its slices.
type Array struct {
	Type         DataType
	Len          int
	Values       []byte
	Validity     []byte
	ItemValidity []byte
	Offsets      []int64
	Items        *Array
}

// IsValid reports whether row i is valid.
func (a *Array) IsValid(i int) bool {
	return a.Validity == nil || a.Validity[i/8]&(1<<(i%8)) != 0
}

// NullCount counts the null rows.
func (a *Array) NullCount() int {
	if a.Validity == nil {
		return 0
	}
	n := 0
	for i := 0; i < a.Len; i++ {
		if !a.IsValid(i) {
			n++
		}
	}
	return n
}

// rowBytes is the size of one row of a fixed-width array.
func (a *Array) rowBytes() int { return a.Type.ValueBits() / 8 }

// Slice returns rows [start, end) as a new Array sharing a's buffers where
// it can (values of fixed-width types); bitmaps are copied to start at bit 0.
func (a *Array) Slice(start, end int) *Array {
	out := &Array{}
	a.SliceInto(out, start, end)
	return out
}

// SliceInto is Slice into *out (which it overwrites), for callers that
// recycle their Arrays.
func (a *Array) SliceInto(out *Array, start, end int) {
	if start < 0 || end > a.Len || start > end {
		panic(fmt.Sprintf("lancefile: Slice [%d,%d) of %d rows", start, end, a.Len))
	}
	*out = Array{Type: a.Type, Len: end - start}
	out.Validity = sliceBits(a.Validity, start, end)
	if isList(a.Type) {
		lo, hi := a.Offsets[start], a.Offsets[end]
		out.Offsets = make([]int64, out.Len+1)
		for i := range out.Offsets {
			out.Offsets[i] = a.Offsets[start+i] - lo
		}
		out.Items = a.Items.Slice(int(lo), int(hi))
		return
	}
	if a.Type.Kind == KindBinary {
		lo := a.Offsets[start]
		out.Offsets = make([]int64, out.Len+1)
		for i := range out.Offsets {
			out.Offsets[i] = a.Offsets[start+i] - lo
		}
		out.Values = a.Values[lo:a.Offsets[end]]
		return
	}
	rb := a.rowBytes()
	out.Values = a.Values[start*rb : end*rb]
	if a.ItemValidity != nil {
		out.ItemValidity = sliceBits(a.ItemValidity, start*a.Type.Dim, end*a.Type.Dim)
	}
}

func isList(t DataType) bool { return t.Kind == KindList || t.Kind == KindLargeList }

func sliceBits(bits []byte, start, end int) []byte {
	if bits == nil {
		return nil
	}
	out := make([]byte, (end-start+7)/8)
	for i := start; i < end; i++ {
		if bits[i/8]&(1<<(i%8)) != 0 {
			out[(i-start)/8] |= 1 << ((i - start) % 8)
		}
	}
	return out
}

// appendBits appends n bits of src (from bit 0) to dst, which holds dstLen
// bits. A nil src means all valid; a nil dst means all valid so far.
func appendBits(dst []byte, dstLen int, src []byte, n int) []byte {
	if dst == nil && src == nil {
		return nil
	}
	if dst == nil {
		dst = allValid(dstLen)
	}
	need := (dstLen + n + 7) / 8
	for len(dst) < need {
		dst = append(dst, 0)
	}
	for i := 0; i < n; i++ {
		if src == nil || src[i/8]&(1<<(i%8)) != 0 {
			j := dstLen + i
			dst[j/8] |= 1 << (j % 8)
		}
	}
	return dst
}

func allValid(n int) []byte {
	b := make([]byte, (n+7)/8)
	for i := 0; i < n; i++ {
		b[i/8] |= 1 << (i % 8)
	}
	return b
}

// Concat joins arrays of the same type.
func Concat(t DataType, parts []*Array) (*Array, error) {
	out := &Array{Type: t}
	if isList(t) {
		out.Offsets = []int64{0}
		var items []*Array
		for _, p := range parts {
			base := out.Offsets[len(out.Offsets)-1]
			for _, o := range p.Offsets[1:] {
				out.Offsets = append(out.Offsets, base+o)
			}
			out.Validity = appendBits(out.Validity, out.Len, p.Validity, p.Len)
			out.Len += p.Len
			items = append(items, p.Items)
		}
		var itemType DataType
		if len(items) > 0 {
			itemType = items[0].Type
		}
		var err error
		if out.Items, err = Concat(itemType, items); err != nil {
			return nil, err
		}
		return out, nil
	}
	if t.Kind == KindBinary {
		// sized first: a writer concatenates a page of many small parts
		// (a BITMAP merge's pages, a part per key), and growing by appends
		// was a seventh of that merge
		rows, size := 0, 0
		for _, p := range parts {
			rows, size = rows+p.Len, size+len(p.Values)
		}
		out.Offsets = make([]int64, 1, rows+1)
		out.Values = make([]byte, 0, size)
		for _, p := range parts {
			if p.Type.Kind != KindBinary {
				return nil, fmt.Errorf("%w: lancefile: concat %s with %s", errkind.InvalidInput, t, p.Type)
			}
			base := int64(len(out.Values))
			for _, o := range p.Offsets[1:] {
				out.Offsets = append(out.Offsets, base+o)
			}
			out.Values = append(out.Values, p.Values...)
			out.Validity = appendBits(out.Validity, out.Len, p.Validity, p.Len)
			out.Len += p.Len
		}
		return out, nil
	}
	size := 0
	for _, p := range parts {
		if p.Type.Kind != t.Kind || p.Type.Dim != t.Dim || p.Type.Elem != t.Elem {
			return nil, fmt.Errorf("%w: lancefile: concat %s with %s", errkind.InvalidInput, t, p.Type)
		}
		size += len(p.Values)
	}
	out.Values = make([]byte, 0, size)
	for _, p := range parts {
		out.Values = append(out.Values, p.Values...)
		out.Validity = appendBits(out.Validity, out.Len, p.Validity, p.Len)
		if p.ItemValidity != nil || out.ItemValidity != nil {
			out.ItemValidity = appendBits(out.ItemValidity, out.Len*t.Dim, p.ItemValidity, p.Len*t.Dim)
		}
		out.Len += p.Len
	}
	return out, nil
}
