package search

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Partition is one IVF partition's rows of a segment, codes row-major.
type Partition struct {
	ID     int
	RowIDs []uint64
	// Codes holds one row of CodeWidth bytes per row id, row-major (the
	// layout undone).
	Codes []byte
	// RQ factors and extended codes (nil when the segment has none); Ex
	// holds ExBits-bit values, one byte per dimension per row.
	Add, Scale, Err []float32
	Ex              []byte
	ExAdd, ExScale  []float32
}

// Len is the number of rows.
func (p *Partition) Len() int { return len(p.RowIDs) }

// DeclaredDepth is how many times the layout transformation has been
// applied to a segment's stored codes according to its metadata: 1 for
// PQ codes flagged transposed and RQ codes flagged packed, else 0.
func DeclaredDepth(f *ivf.Files) int {
	q := f.Quant
	if q == nil {
		return 0
	}
	switch f.Type.Quantizer() {
	case "pq":
		if q.Transposed != nil && *q.Transposed {
			return 1
		}
	case "rq":
		if q.Packed != nil && *q.Packed {
			return 1
		}
	}
	return 0
}

// Undo brings a partition of n rows of width-byte codes from its stored
// form, with the layout of quantizer quant ("pq" transposed, "rq" packed)
// applied depth times, to row-major order. Other quantizers have no layout:
// codes come back as they are.
func Undo(quant string, stored []byte, n, width, depth int) []byte {
	out := stored
	for i := 0; i < depth; i++ {
		next := make([]byte, len(out))
		switch quant {
		case "pq":
			ivf.UntransposePQ(next, out, n, width)
		case "rq":
			ivf.UnpackRQ(next, out, n, width)
		default:
			return out
		}
		out = next
	}
	return out
}

// Reader reads partitions of one segment for an index built from its
// model.
type Reader struct {
	ix *Index
	f  *ivf.Files
	// depth is how many times the stored codes had the layout applied.
	depth int
	cols  map[string]bool
	// flatElem is the element of an IVF_FLAT segment's stored vectors:
	// pylance keeps the column's own (float16 and float64 as well as
	// float32); they are read as float32.
	flatElem lancefile.Kind
}

// NewReader checks that the segment's auxiliary file has the columns the
// index's quantizer needs, with the widths the model implies
// (errkind.Corrupt otherwise), and reads its partitions as having the
// layout applied depth times (DeclaredDepth for what the metadata says).
func NewReader(ix *Index, f *ivf.Files, depth int) (*Reader, error) {
	r := &Reader{ix: ix, f: f, depth: depth, cols: map[string]bool{}}
	for _, c := range Columns(ix) {
		fd, ok := f.Aux.Field(c.Name)
		if !ok {
			if c.Name == encode.ColRQExCodes {
				if _, legacy := f.Aux.Field(encode.ColRQLegacyExCod); legacy {
					return nil, fmt.Errorf("%w: search: %s stores legacy sequential RQ ex codes (%s)", errkind.Unsupported, f.Dir, encode.ColRQLegacyExCod)
				}
			}
			if c.Optional {
				continue
			}
			return nil, fmt.Errorf("%w: search: %s%s has no %s column", errkind.Corrupt, f.Dir, ivf.AuxiliaryFileName, c.Name)
		}
		if c.Name == encode.ColFlat && fd.Type.Kind == c.Type.Kind && fd.Type.Dim == c.Type.Dim &&
			(fd.Type.Elem == lancefile.KindFloat16 || fd.Type.Elem == lancefile.KindFloat64) {
			r.flatElem = fd.Type.Elem
		} else if fd.Type.Kind != c.Type.Kind || fd.Type.Elem != c.Type.Elem || fd.Type.Dim != c.Type.Dim {
			return nil, fmt.Errorf("%w: search: %s%s column %s is %s, the model needs %s", errkind.Corrupt, f.Dir, ivf.AuxiliaryFileName, c.Name, fd.Type, c.Type)
		}
		r.cols[c.Name] = true
	}
	if ix.quant == "rq" && ix.rawQuery && ix.exBits > 0 {
		for _, n := range []string{encode.ColRQExCodes, encode.ColRQExAdd, encode.ColRQExScale} {
			if !r.cols[n] {
				return nil, fmt.Errorf("%w: search: %s: %d-bit RQ needs the %s column", errkind.Corrupt, f.Dir, ix.m.RQ.NumBits, n)
			}
		}
	}
	return r, nil
}

// WidenHalf converts float16 values to float32 bytes (widenFlat).
func WidenHalf(b []byte) []byte { return widenFlat(lancefile.KindFloat16, b) }

// widenFlat converts stored float16 or float64 vector values to float32
// bytes, the form the searches and checks work on.
func widenFlat(k lancefile.Kind, b []byte) []byte {
	w := lancefile.Primitive(k).ValueBits() / 8
	out := make([]byte, len(b)/w*4)
	for i := range len(b) / w {
		var f float32
		if w == 2 {
			f = vecmath.HalfToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		} else {
			f = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
	}
	return out
}

// Column is a column a segment's auxiliary file holds.
type Column struct {
	Name     string
	Type     lancefile.DataType
	Optional bool
}

// Columns lists the auxiliary columns a model's segments hold.
func Columns(ix *Index) []Column {
	u8 := func(n int) lancefile.DataType { return lancefile.FixedSizeList(lancefile.KindUint8, n) }
	f32 := lancefile.Primitive(lancefile.KindFloat32)
	cols := []Column{{Name: encode.ColRowID, Type: lancefile.Primitive(lancefile.KindUint64)}}
	switch ix.quant {
	case "flat":
		cols = append(cols, Column{Name: encode.ColFlat, Type: lancefile.FixedSizeList(lancefile.KindFloat32, ix.dim)})
	case "sq", "pq":
		cols = append(cols, Column{Name: ix.CodeColumn(), Type: u8(ix.CodeWidth())})
	case "rq":
		cols = append(cols, Column{Name: encode.ColRQ, Type: u8(ix.CodeWidth())},
			Column{Name: encode.ColRQAdd, Type: f32}, Column{Name: encode.ColRQScale, Type: f32})
		if ix.rawQuery {
			cols = append(cols, Column{Name: encode.ColRQError, Type: f32, Optional: true})
			if ix.exBits > 0 {
				cols = append(cols, Column{Name: encode.ColRQExCodes, Type: u8(encode.BlockedExCodeBytes(ix.dim, ix.exBits))},
					Column{Name: encode.ColRQExAdd, Type: f32}, Column{Name: encode.ColRQExScale, Type: f32})
			}
		}
	}
	return cols
}

// Stored reads partition p's row ids and stored code bytes as they are in
// the file (no layout undone).
func (r *Reader) Stored(ctx context.Context, p int) (ids []uint64, codes []byte, err error) {
	iv := r.f.IVF
	if p < 0 || p >= len(iv.Lengths) {
		return nil, nil, fmt.Errorf("%w: search: partition %d of %d", errkind.InvalidInput, p, len(iv.Lengths))
	}
	lo, hi := iv.Offsets[p], iv.Offsets[p]+uint64(iv.Lengths[p])
	a, err := r.f.Aux.Read(ctx, encode.ColRowID, lo, hi)
	if err != nil {
		return nil, nil, err
	}
	ids = make([]uint64, a.Len)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint64(a.Values[8*i:])
	}
	c, err := r.f.Aux.Read(ctx, r.ix.CodeColumn(), lo, hi)
	if err != nil {
		return nil, nil, err
	}
	if r.flatElem != lancefile.KindUnknown && c.Len == a.Len && len(c.Values) == a.Len*r.ix.dim*lancefile.Primitive(r.flatElem).ValueBits()/8 {
		c.Values = widenFlat(r.flatElem, c.Values)
	}
	if c.Len != a.Len || len(c.Values) != a.Len*r.ix.CodeWidth() {
		return nil, nil, fmt.Errorf("%w: search: partition %d: %d row ids, %d code rows of %d bytes", errkind.Corrupt, p, a.Len, c.Len, len(c.Values))
	}
	return ids, c.Values, nil
}

// Read reads partition p with its codes brought to row-major order.
func (r *Reader) Read(ctx context.Context, p int) (*Partition, error) {
	ids, stored, err := r.Stored(ctx, p)
	if err != nil {
		return nil, err
	}
	n := len(ids)
	part := &Partition{ID: p, RowIDs: ids, Codes: Undo(r.ix.quant, stored, n, r.ix.CodeWidth(), r.depth)}
	if r.ix.quant != "rq" {
		return part, nil
	}
	iv := r.f.IVF
	lo, hi := iv.Offsets[p], iv.Offsets[p]+uint64(iv.Lengths[p])
	floats := func(name string) ([]float32, error) {
		if !r.cols[name] {
			return nil, nil
		}
		a, err := r.f.Aux.Read(ctx, name, lo, hi)
		if err != nil {
			return nil, err
		}
		if a.Len != n || len(a.Values) != 4*n {
			return nil, fmt.Errorf("%w: search: partition %d: column %s has %d rows, not %d", errkind.Corrupt, p, name, a.Len, n)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Values[4*i:]))
		}
		return out, nil
	}
	if part.Add, err = floats(encode.ColRQAdd); err != nil {
		return nil, err
	}
	if part.Scale, err = floats(encode.ColRQScale); err != nil {
		return nil, err
	}
	if part.Err, err = floats(encode.ColRQError); err != nil {
		return nil, err
	}
	if r.cols[encode.ColRQExCodes] {
		a, err := r.f.Aux.Read(ctx, encode.ColRQExCodes, lo, hi)
		if err != nil {
			return nil, err
		}
		w := encode.BlockedExCodeBytes(r.ix.dim, r.ix.exBits)
		if a.Len != n || len(a.Values) != n*w {
			return nil, fmt.Errorf("%w: search: partition %d: %d ex-code rows, not %d", errkind.Corrupt, p, a.Len, n)
		}
		part.Ex = make([]byte, 0, n*r.ix.dim)
		for i := 0; i < n; i++ {
			part.Ex = append(part.Ex, encode.UnpackBlockedRow(a.Values[i*w:(i+1)*w], r.ix.exBits, r.ix.dim)...)
		}
		if part.ExAdd, err = floats(encode.ColRQExAdd); err != nil {
			return nil, err
		}
		if part.ExScale, err = floats(encode.ColRQExScale); err != nil {
			return nil, err
		}
	}
	return part, nil
}
