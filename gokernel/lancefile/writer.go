package lancefile

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc20"
)

// Type URLs of the page and column encodings. Part of the file format:
// pylance compares them as whole strings.
const (
	typeURLArrayEncoding  = "/lance.encodings.ArrayEncoding"
	typeURLPageLayout     = "/lance.encodings21.PageLayout"
	typeURLColumnEncoding = "/lance.encodings.ColumnEncoding"
)

// writeBufferBytes is the size of the Writer's output buffer: large writes
// to the store, whatever the size of the pieces a page is made of.
const writeBufferBytes = 1 << 20

// Buffers start on 64-byte boundaries; the gap is filled with 0x48 ('H'),
// as Lance does. Part of the file format (2.1+ readers check alignment).
const (
	bufferAlign = 64
	padByte     = 0x48
)

// WriterOptions tune a Writer. The zero value means defaults.
type WriterOptions struct {
	// Version is the file format version to write. Default 2.2 (pylance
	// 14's default).
	Version Version
	// MaxPageBytes: a column flushes a page once it buffers this many bytes
	// of values. Default 8 MiB, what Lance's writer uses per column; pages
	// that size keep reads efficient and bound the writer's memory to
	// about MaxPageBytes per column.
	MaxPageBytes int
	// ExpectedRows, when known, is about how many rows the file will hold
	// (an upper bound is fine). A column's page buffer then starts at what
	// those rows need rather than at MaxPageBytes, so a small file does not
	// take (and fault in) MaxPageBytes of memory per column; a column that
	// outgrows it grows as a slice does. 0: unknown.
	ExpectedRows int
}

func (o WriterOptions) withDefaults() WriterOptions {
	if o.Version == (Version{}) {
		o.Version = V2_2
	}
	if o.MaxPageBytes <= 0 {
		o.MaxPageBytes = 8 << 20
	}
	return o
}

// Writer streams a Lance file: batches of rows go to per-column buffers,
// which flush to pages as they fill, so memory stays bounded whatever the
// file size. Call Finish to write the metadata; the caller owns (and
// finishes or aborts) the underlying io.Writer. Not safe for concurrent use.
type Writer struct {
	out      *bufio.Writer
	opts     WriterOptions
	pos      uint64
	fields   []*Field
	cols     []*colWriter // one per top-level field
	globals  []bufRef     // index 0 (the schema) is filled at Finish
	metadata map[string][]byte
	rows     uint64
	done     bool
	err      error
}

// NewField returns a top-level field for NewWriter.
func NewField(name string, t DataType, nullable bool) *Field {
	return &Field{Name: name, Type: t, Nullable: nullable}
}

// NewListField returns a list field whose items have type item.
func NewListField(name string, item DataType, nullable, itemNullable bool) *Field {
	return &Field{Name: name, Type: ListType(), Nullable: nullable,
		Children: []*Field{{Name: "item", Type: item, Nullable: itemNullable}}}
}

// NewWriter starts a file with the given top-level fields (ids are assigned
// in pre-order, as Lance does).
func NewWriter(out io.Writer, fields []*Field, opts WriterOptions) (*Writer, error) {
	opts = opts.withDefaults()
	if opts.Version != V2_0 && opts.Version != V2_1 && opts.Version != V2_2 {
		return nil, fmt.Errorf("%w: lancefile: cannot write file version %s", errkind.InvalidInput, opts.Version)
	}
	// Pages stream to the output in many small pieces (chunk headers,
	// chunk data, padding): buffer them into large writes.
	w := &Writer{out: bufio.NewWriterSize(out, writeBufferBytes), opts: opts, globals: []bufRef{{}}, metadata: map[string][]byte{}}
	id := int32(0)
	var assign func(f *Field, parent int32) *Field
	assign = func(f *Field, parent int32) *Field {
		c := &Field{Name: f.Name, ID: id, ParentID: parent, Type: f.Type, Nullable: f.Nullable, Metadata: f.Metadata}
		id++
		for _, ch := range f.Children {
			c.Children = append(c.Children, assign(ch, c.ID))
		}
		return c
	}
	for _, f := range fields {
		c := assign(f, -1)
		cw, err := newColWriter(w, c)
		if err != nil {
			return nil, err
		}
		w.fields = append(w.fields, c)
		w.cols = append(w.cols, cw)
	}
	return w, nil
}

// SetMetadata sets a schema metadata entry.
func (w *Writer) SetMetadata(key string, value []byte) { w.metadata[key] = value }

// AddGlobalBuffer writes a global buffer now and returns its number (1, 2,
// … in call order; 0 is the schema).
func (w *Writer) AddGlobalBuffer(b []byte) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	pos, err := w.writeBuffer(b)
	if err != nil {
		return 0, err
	}
	w.globals = append(w.globals, bufRef{pos, uint64(len(b))})
	return len(w.globals) - 1, nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("lancefile: writer used after Finish")
	}
	return nil
}

// write appends raw bytes.
func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.out.Write(b); err != nil {
		w.err = fmt.Errorf("lancefile: write: %w", err)
		return w.err
	}
	w.pos += uint64(len(b))
	return nil
}

var padding = func() []byte {
	b := make([]byte, bufferAlign)
	for i := range b {
		b[i] = padByte
	}
	return b
}()

// writeBuffer writes b at the current (aligned) position and pads after it
// to the next 64-byte boundary; it returns b's position.
func (w *Writer) writeBuffer(b []byte) (uint64, error) {
	pos := w.pos
	if err := w.write(b); err != nil {
		return 0, err
	}
	if pad := (bufferAlign - len(b)%bufferAlign) % bufferAlign; pad > 0 {
		if err := w.write(padding[:pad]); err != nil {
			return 0, err
		}
	}
	return pos, nil
}

// Write appends one batch: one Array per top-level field, in field order,
// all of the same length. The writer keeps references to the arrays'
// buffers until the page holding their rows is flushed (at most
// MaxPageBytes later, or at Finish): do not modify them after Write.
func (w *Writer) Write(batch []*Array) error {
	parts := make([][]*Array, len(batch))
	for i := range batch {
		parts[i] = batch[i : i+1]
	}
	n, err := w.checkBatch(parts)
	if err != nil {
		return err
	}
	for i, a := range batch {
		if err := w.cols[i].append(a); err != nil {
			return err
		}
	}
	w.rows += uint64(n)
	return nil
}

// WriteChunked appends one batch whose columns come in parts: cols[i] are
// consecutive pieces of field i, and every field's pieces add up to the
// same number of rows. Unlike Write, it copies the rows into the writer's
// own page buffers (reused from page to page): the caller may reuse the
// pieces' buffers as soon as it returns, which lets a streaming caller
// recycle its read buffers instead of allocating new ones per batch.
func (w *Writer) WriteChunked(cols [][]*Array) error {
	n, err := w.checkBatch(cols)
	if err != nil {
		return err
	}
	for i, parts := range cols {
		for _, a := range parts {
			if err := w.cols[i].appendCopy(a); err != nil {
				return err
			}
		}
	}
	w.rows += uint64(n)
	return nil
}

// checkBatch validates a batch given as pieces per field (see
// WriteChunked) before anything is appended, and returns its row count.
func (w *Writer) checkBatch(cols [][]*Array) (int, error) {
	if err := w.usable(); err != nil {
		return 0, err
	}
	if len(cols) != len(w.cols) {
		return 0, fmt.Errorf("%w: lancefile: batch of %d columns for %d fields", errkind.InvalidInput, len(cols), len(w.cols))
	}
	n := -1
	for i, parts := range cols {
		rows := 0
		for _, a := range parts {
			if err := checkArray(a, w.fields[i]); err != nil {
				return 0, err
			}
			rows += a.Len
		}
		if n >= 0 && rows != n {
			return 0, fmt.Errorf("%w: lancefile: column %q has %d rows, column %q %d", errkind.InvalidInput, w.fields[i].Name, rows, w.fields[0].Name, n)
		}
		n = rows
	}
	return n, nil
}

func checkArray(a *Array, f *Field) error {
	t := a.Type
	if t.Kind != f.Type.Kind || t.Dim != f.Type.Dim || t.Elem != f.Type.Elem {
		return fmt.Errorf("%w: lancefile: %s array for field %q of type %s", errkind.InvalidInput, t, f.Name, f.Type)
	}
	if a.Validity != nil && !f.Nullable && a.NullCount() > 0 {
		return fmt.Errorf("%w: lancefile: nulls in non-nullable field %q", errkind.InvalidInput, f.Name)
	}
	if isList(t) {
		if len(a.Offsets) != a.Len+1 || a.Items == nil || int(a.Offsets[a.Len]) != a.Items.Len {
			return fmt.Errorf("%w: lancefile: list field %q: %d offsets for %d rows", errkind.InvalidInput, f.Name, len(a.Offsets), a.Len)
		}
		return checkArray(a.Items, f.Children[0])
	}
	if t.Kind == KindBinary {
		if len(a.Offsets) != a.Len+1 || a.Offsets[0] != 0 || a.Offsets[a.Len] != int64(len(a.Values)) {
			return fmt.Errorf("%w: lancefile: binary field %q: %d offsets for %d rows and %d bytes", errkind.InvalidInput, f.Name, len(a.Offsets), a.Len, len(a.Values))
		}
		for i := 0; i < a.Len; i++ {
			if a.Offsets[i+1] < a.Offsets[i] {
				return fmt.Errorf("%w: lancefile: binary field %q: offsets decrease at row %d", errkind.InvalidInput, f.Name, i)
			}
		}
		return nil
	}
	if t.Kind == KindUnknown && t.Logical != "" && (a.Len == 0 || a.Validity != nil && a.NullCount() == a.Len) {
		return nil // written as all-null pages (allNullPage)
	}
	if t.ValueBits() == 0 || t.ValueBits()%8 != 0 {
		return fmt.Errorf("%w: lancefile: writing %s columns", errkind.Unsupported, t)
	}
	if len(a.Values) != a.Len*t.ValueBits()/8 {
		return fmt.Errorf("%w: lancefile: field %q: %d value bytes for %d rows of %s", errkind.InvalidInput, f.Name, len(a.Values), a.Len, t)
	}
	if a.ItemValidity != nil {
		return fmt.Errorf("%w: lancefile: writing fixed-size lists with null items", errkind.Unsupported)
	}
	return nil
}

// Finish flushes every column, writes the schema, the column metadata, the
// offset tables and the footer. It does not close the underlying writer.
func (w *Writer) Finish() error {
	if err := w.usable(); err != nil {
		return err
	}
	w.done = true
	for _, cw := range w.cols {
		if err := cw.flush(); err != nil {
			return err
		}
		cw.release()
	}
	schema := &pb.Schema{Fields: schemaToProto(w.fields), Metadata: w.metadata}
	fd, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.FileDescriptor{Schema: schema, Length: w.rows})
	if err != nil {
		return fmt.Errorf("lancefile: encode schema: %w", err)
	}
	w.globals[0] = bufRef{w.pos, uint64(len(fd))}
	if err := w.write(fd); err != nil {
		return err
	}
	colEnc, err := columnEncoding()
	if err != nil {
		return err
	}
	colMetaStart := w.pos
	var cmo []byte
	for _, cw := range w.cols {
		for _, pc := range cw.physical() {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.ColumnMetadata{Encoding: colEnc, Pages: pc.pages})
			if err != nil {
				return fmt.Errorf("lancefile: encode column metadata: %w", err)
			}
			cmo = binary.LittleEndian.AppendUint64(cmo, w.pos)
			cmo = binary.LittleEndian.AppendUint64(cmo, uint64(len(b)))
			if err := w.write(b); err != nil {
				return err
			}
		}
	}
	cmoStart := w.pos
	if err := w.write(cmo); err != nil {
		return err
	}
	gboStart := w.pos
	var gbo []byte
	for _, g := range w.globals {
		gbo = binary.LittleEndian.AppendUint64(gbo, g.pos)
		gbo = binary.LittleEndian.AppendUint64(gbo, g.size)
	}
	if err := w.write(gbo); err != nil {
		return err
	}
	foot := footer{colMetaStart: colMetaStart, cmoStart: cmoStart, gboStart: gboStart,
		numGlobal: uint32(len(w.globals)), numColumns: uint32(len(cmo) / 16), version: w.opts.Version}
	if err := w.write(foot.bytes()); err != nil {
		return err
	}
	if err := w.out.Flush(); err != nil {
		w.err = fmt.Errorf("lancefile: write: %w", err)
		return w.err
	}
	return nil
}

// Rows is the number of rows written so far.
func (w *Writer) Rows() uint64 { return w.rows }

func columnEncoding() (*pb.Encoding, error) {
	ce, err := proto.Marshal(&enc20.ColumnEncoding{ColumnEncoding: &enc20.ColumnEncoding_Values{Values: &emptypb.Empty{}}})
	if err != nil {
		return nil, err
	}
	return directEncoding(typeURLColumnEncoding, ce)
}

func directEncoding(url string, value []byte) (*pb.Encoding, error) {
	a, err := proto.Marshal(&anypb.Any{TypeUrl: url, Value: value})
	if err != nil {
		return nil, err
	}
	return &pb.Encoding{Location: &pb.Encoding_Direct{Direct: &pb.DirectEncoding{Encoding: a}}}, nil
}
