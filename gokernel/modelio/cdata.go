// Package modelio moves index models across boundaries: in from and out to
// the Arrow C Data Interface (the arrays of a model a Python caller holds:
// numpy, pyarrow FixedSizeList or FixedShapeTensor arrays, pylance's
// IvfModel / PqModel), and in from the files of an existing index segment.
//
// Arrays coming in through the C Data Interface are untrusted: the
// ArrowSchema and ArrowArray structs are checked (type, nulls, offsets,
// buffer presence, sizes that could overflow) before they are imported, and
// a float32 array is used in place, without a copy, for as long as the
// caller keeps the import open.
package modelio

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// cSchema and cArray mirror struct ArrowSchema and struct ArrowArray of the
// C Data Interface (a stable ABI), so that their fields can be checked
// before arrow-go imports them.
type cSchema struct {
	format, name, metadata *byte
	flags, nChildren       int64
	children               **cSchema
	dictionary             *cSchema
	release, privateData   unsafe.Pointer
}

type cArray struct {
	length, nullCount, offset, nBuffers, nChildren int64
	buffers                                        *unsafe.Pointer
	children                                       **cArray
	dictionary                                     *cArray
	release, privateData                           unsafe.Pointer
}

// maxValues bounds the values of one imported matrix (4 GiB of float32).
const maxValues = 1 << 30

// cString reads a NUL-terminated string of at most limit bytes.
func cString(p *byte, limit int) (string, bool) {
	if p == nil {
		return "", false
	}
	var b []byte
	for i := 0; i < limit; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			return string(b), true
		}
		b = append(b, c)
	}
	return "", false
}

// cMetadata decodes the schema metadata (int32 count, then length-prefixed
// keys and values), bounded.
func cMetadata(p *byte) (map[string]string, error) {
	if p == nil {
		return nil, nil
	}
	rd := func(off int) int32 { return *(*int32)(unsafe.Add(unsafe.Pointer(p), off)) }
	n := rd(0)
	if n < 0 || n > 64 {
		return nil, fmt.Errorf("%d metadata entries", n)
	}
	out := map[string]string{}
	off := 4
	str := func() (string, error) {
		l := rd(off)
		off += 4
		if l < 0 || l > 1<<16 {
			return "", fmt.Errorf("metadata string of %d bytes", l)
		}
		s := string(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), off)), l))
		off += int(l)
		return s, nil
	}
	for i := int32(0); i < n; i++ {
		k, err := str()
		if err != nil {
			return nil, err
		}
		v, err := str()
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// Matrix is a rows × cols float32 matrix imported from the C Data
// Interface. Values may point into the exporter's memory: call Release
// once it is no longer used (not before).
type Matrix struct {
	Rows, Cols int
	Values     []float32
	release    func()
}

// Release hands the imported buffers back to their exporter.
func (m *Matrix) Release() {
	if m != nil && m.release != nil {
		m.release()
		m.release = nil
	}
}

func invalid(name, format string, args ...any) error {
	return fmt.Errorf("%w: model array %q: "+format, append([]any{errkind.InvalidInput, name}, args...)...)
}

// ImportMatrix imports an ArrowArray/ArrowSchema pair (the addresses of the
// two structs, filled by an exporter such as pyarrow's _export_to_c) that
// holds a matrix: a FixedSizeList<float32|float16|float64>[cols] array (also
// as the storage of an arrow.fixed_shape_tensor extension array), or a flat
// float array with cols > 0 given. It takes ownership of the structs: they
// are released on error too. Nulls, a list size that does not match cols,
// or sizes that would overflow are refused with errkind.InvalidInput.
func ImportMatrix(name string, arrayPtr, schemaPtr uintptr, cols int) (*Matrix, error) {
	if arrayPtr == 0 || schemaPtr == 0 {
		return nil, invalid(name, "null ArrowArray or ArrowSchema pointer")
	}
	ca, cs := cdata.ArrayFromPtr(arrayPtr), cdata.SchemaFromPtr(schemaPtr)
	sch := (*cSchema)(unsafe.Pointer(cs))
	arr := (*cArray)(unsafe.Pointer(ca))
	releaseRaw := func() {
		if arr.release != nil {
			cdata.ReleaseCArrowArray(ca)
		}
		if sch.release != nil {
			cdata.ReleaseCArrowSchema(cs)
		}
	}
	if err := checkMatrix(name, sch, arr, cols); err != nil {
		releaseRaw()
		return nil, err
	}
	_, imported, err := cdata.ImportCArray(ca, cs)
	if err != nil {
		releaseRaw()
		return nil, invalid(name, "import: %v", err)
	}
	m, err := matrixOf(name, imported, cols)
	if err != nil {
		imported.Release()
		return nil, err
	}
	return m, nil
}

// checkMatrix validates the C structs before anything reads their buffers.
func checkMatrix(name string, s *cSchema, a *cArray, cols int) error {
	if s.release == nil || a.release == nil {
		return invalid(name, "the ArrowArray or ArrowSchema is already released")
	}
	format, ok := cString(s.format, 64)
	if !ok {
		return invalid(name, "unreadable format string")
	}
	if a.length < 0 || a.offset < 0 || a.nBuffers < 0 || a.nChildren < 0 || a.length > maxValues || a.offset > maxValues {
		return invalid(name, "length %d, offset %d", a.length, a.offset)
	}
	if a.length == 0 {
		return invalid(name, "empty")
	}
	noNulls := func(x *cArray) bool {
		if x.nullCount == 0 {
			return true
		}
		return x.nBuffers > 0 && *x.buffers == nil // no validity bitmap
	}
	if !noNulls(a) {
		return invalid(name, "holds nulls")
	}
	leaf := func(f string) bool { return f == "f" || f == "e" || f == "g" }
	switch {
	case strings.HasPrefix(format, "+w:"):
		n, err := strconv.Atoi(format[3:])
		if err != nil || n <= 0 || n > 1<<20 {
			return invalid(name, "fixed-size list format %q", format)
		}
		if cols > 0 && n != cols {
			return invalid(name, "rows of %d values, want %d", n, cols)
		}
		if s.nChildren != 1 || a.nChildren != 1 || s.children == nil || a.children == nil || a.nBuffers != 1 {
			return invalid(name, "a fixed-size list needs one child and one buffer")
		}
		cs, ca := *s.children, *a.children
		if cs == nil || ca == nil {
			return invalid(name, "null child")
		}
		cf, ok := cString(cs.format, 8)
		if !ok || !leaf(cf) {
			return invalid(name, "a fixed-size list of %q; want float32, float16 or float64 values", cf)
		}
		if !noNulls(ca) {
			return invalid(name, "holds null values")
		}
		if ca.nBuffers != 2 || ca.buffers == nil || *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(ca.buffers), unsafe.Sizeof(uintptr(0)))) == nil {
			return invalid(name, "child values buffer missing")
		}
		if ca.offset < 0 || ca.length < 0 {
			return invalid(name, "child offset %d, length %d", ca.offset, ca.length)
		}
		need := (a.offset + a.length) * int64(n)
		if need/int64(n) != a.offset+a.length || need > maxValues {
			return invalid(name, "%d rows of %d values overflow", a.offset+a.length, n)
		}
		if ca.length < need {
			return invalid(name, "child holds %d values, %d rows of %d need %d", ca.length, a.offset+a.length, n, need)
		}
	case leaf(format):
		if cols <= 0 {
			return invalid(name, "a flat array needs a row width")
		}
		if a.length%int64(cols) != 0 {
			return invalid(name, "%d values do not make rows of %d", a.length, cols)
		}
		if a.nBuffers != 2 || a.buffers == nil || *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(a.buffers), unsafe.Sizeof(uintptr(0)))) == nil {
			return invalid(name, "values buffer missing")
		}
	default:
		return invalid(name, "Arrow format %q; want a fixed-size list of floats", format)
	}
	if md, err := cMetadata(s.metadata); err != nil {
		return invalid(name, "schema metadata: %v", err)
	} else if ext := md["ARROW:extension:name"]; ext != "" && ext != "arrow.fixed_shape_tensor" {
		return invalid(name, "extension type %q", ext)
	}
	return nil
}

// matrixOf reads the imported array's values (in place for float32).
func matrixOf(name string, a arrow.Array, cols int) (*Matrix, error) {
	if ext, ok := a.(array.ExtensionArray); ok {
		a = ext.Storage()
	}
	var vals arrow.Array
	rows := a.Len()
	switch x := a.(type) {
	case *array.FixedSizeList:
		n := int(x.DataType().(*arrow.FixedSizeListType).Len())
		cols = n
		start, _ := x.ValueOffsets(0)
		vals = array.NewSlice(x.ListValues(), start, start+int64(rows*n))
	default:
		vals = a
		rows = a.Len() / cols
		vals.Retain()
	}
	defer vals.Release()
	m := &Matrix{Rows: rows, Cols: cols, release: a.Release}
	switch v := vals.(type) {
	case *array.Float32:
		m.Values = v.Float32Values()
	case *array.Float16:
		m.Values = make([]float32, v.Len())
		for i, h := range v.Values() {
			m.Values[i] = vecmath.HalfToFloat32(h.Uint16())
		}
	case *array.Float64:
		m.Values = make([]float32, v.Len())
		for i, f := range v.Float64Values() {
			m.Values[i] = float32(f)
		}
	default:
		return nil, invalid(name, "values of type %s", vals.DataType())
	}
	if len(m.Values) != rows*cols {
		return nil, invalid(name, "%d values for %d rows of %d", len(m.Values), rows, cols)
	}
	for _, x := range m.Values {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, invalid(name, "holds NaN or infinite values")
		}
	}
	return m, nil
}

// ExportMatrix exports rows × cols float32 values (copied into Arrow
// memory) as a FixedSizeList<float32>[cols] array into the ArrowArray and
// ArrowSchema structs at the given addresses, which the caller (e.g.
// pyarrow's _import_from_c) then owns.
func ExportMatrix(values []float32, rows, cols int, arrayPtr, schemaPtr uintptr) error {
	if arrayPtr == 0 || schemaPtr == 0 {
		return fmt.Errorf("%w: null ArrowArray or ArrowSchema pointer", errkind.InvalidInput)
	}
	if rows*cols != len(values) {
		return fmt.Errorf("%w: %d values for %d×%d", errkind.InvalidInput, len(values), rows, cols)
	}
	b := array.NewFixedSizeListBuilder(memory.DefaultAllocator, int32(cols), arrow.PrimitiveTypes.Float32)
	defer b.Release()
	vb := b.ValueBuilder().(*array.Float32Builder)
	for r := 0; r < rows; r++ {
		b.Append(true)
	}
	vb.AppendValues(values, nil)
	arr := b.NewArray()
	defer arr.Release()
	cdata.ExportArrowArray(arr, cdata.ArrayFromPtr(arrayPtr), cdata.SchemaFromPtr(schemaPtr))
	return nil
}
