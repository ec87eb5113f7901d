package lancefile

import (
	"context"
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Options tune a Reader. The zero value means defaults.
type Options struct {
	// MaxMetadataBytes bounds the metadata region (schema, column metadata
	// and offset tables) read at open. Default 256 MiB: a 1M-row index file
	// has a few hundred KiB of it.
	MaxMetadataBytes int64
	// MaxGlobalBufferBytes bounds one global buffer read (IVF centroids, PQ
	// codebooks, RQ rotations). Default 1 GiB: 65536 partitions × 4096-d
	// float32 centroids.
	MaxGlobalBufferBytes int64
	// MaxPageBytes bounds one page buffer read. Default 1 GiB.
	MaxPageBytes int64
	// MaxReadBytes bounds the decoded size of one Read call, so that a file
	// claiming billions of rows cannot make us allocate them. Default 4 GiB.
	MaxReadBytes int64
}

func (o Options) withDefaults() Options {
	if o.MaxMetadataBytes <= 0 {
		o.MaxMetadataBytes = 256 << 20
	}
	if o.MaxGlobalBufferBytes <= 0 {
		o.MaxGlobalBufferBytes = 1 << 30
	}
	if o.MaxPageBytes <= 0 {
		o.MaxPageBytes = 1 << 30
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = 4 << 30
	}
	return o
}

// tailBytes is read in one request at open: the footer and, for most index
// files, all of the metadata.
const tailBytes = 64 << 10

type bufRef struct{ pos, size uint64 }

// Reader reads one Lance file. It holds the decoded metadata; pages and
// global buffers are read on demand with ranged reads.
type Reader struct {
	obj     storage.Object
	name    string
	opts    Options
	foot    footer
	numRows uint64
	schema  *pb.Schema
	fields  []*Field
	globals []bufRef
	columns []*pb.ColumnMetadata
	chunks  chunkCache
	// dict20 holds the physical columns of a 2.0 file's dictionary fields,
	// whose dictionary pages index their items from 0 (dictionary20).
	dict20 map[int]bool
	// metaBytes is the size of the metadata decoded at open.
	metaBytes int64
}

// Open reads the footer and metadata of a Lance file. name is used in
// errors only. The Reader does not own obj: close it after the Reader is
// done.
func Open(ctx context.Context, obj storage.Object, name string, opts Options) (*Reader, error) {
	r := &Reader{obj: obj, name: name, opts: opts.withDefaults()}
	if err := r.readMetadata(ctx); err != nil {
		return nil, fmt.Errorf("lancefile: %s: %w", name, err)
	}
	return r, nil
}

func (r *Reader) readMetadata(ctx context.Context) error {
	size := r.obj.Size()
	if size < FooterLen {
		return fmt.Errorf("%w: file of %d bytes is shorter than its footer", errkind.Corrupt, size)
	}
	tailLen := min(size, tailBytes)
	// Pooled: a plan opens two files per segment, a thousand deltas 2000
	// tails, and fresh ones were most of what a cold plan allocated (and
	// collected). Nothing decoded keeps a reference into it (protobuf
	// decoding copies bytes and strings).
	tail := bufpool.Default.Get(int(tailLen))[:tailLen]
	defer bufpool.Default.Put(tail)
	if err := r.obj.ReadAt(ctx, tail, size-tailLen); err != nil {
		return err
	}
	foot, err := parseFooter(tail[tailLen-FooterLen:], size)
	if err != nil {
		return err
	}
	r.foot = foot
	// The GBO table locates GB0 (the FileDescriptor), which the standard
	// writer puts just before the column metadata; read from whichever comes
	// first to the footer.
	gbo, err := r.span(ctx, tail, foot.gboStart, uint64(foot.numGlobal)*16)
	if err != nil {
		return err
	}
	r.globals = make([]bufRef, foot.numGlobal)
	for i := range r.globals {
		ref := bufRef{binary.LittleEndian.Uint64(gbo[16*i:]), binary.LittleEndian.Uint64(gbo[16*i+8:])}
		if ref.pos > uint64(size) || ref.size > uint64(size)-ref.pos {
			return fmt.Errorf("%w: global buffer %d [%d,+%d) outside the file (%d bytes)", errkind.Corrupt, i, ref.pos, ref.size, size)
		}
		r.globals[i] = ref
	}
	if r.globals[0].size > uint64(r.opts.MaxMetadataBytes) {
		return fmt.Errorf("%w: schema of %d bytes is above the %d-byte limit", errkind.Corrupt, r.globals[0].size, r.opts.MaxMetadataBytes)
	}
	gb0, err := r.span(ctx, tail, r.globals[0].pos, r.globals[0].size)
	if err != nil {
		return err
	}
	fd := &pb.FileDescriptor{}
	if err := proto.Unmarshal(gb0, fd); err != nil {
		return fmt.Errorf("%w: decode file descriptor: %w", errkind.Corrupt, err)
	}
	r.metaBytes = int64(len(gb0)) + int64(foot.gboStart-foot.colMetaStart) + int64(len(gbo))
	r.numRows = fd.GetLength()
	r.schema = fd.GetSchema()
	if r.schema == nil {
		return fmt.Errorf("%w: file descriptor has no schema", errkind.Corrupt)
	}
	if r.fields, err = buildSchema(r.schema.GetFields()); err != nil {
		return err
	}
	want := 0
	for _, f := range r.fields {
		if _, ok := DictValues(f.Type); ok && foot.version == V2_0 {
			if r.dict20 == nil {
				r.dict20 = map[int]bool{}
			}
			r.dict20[want] = true // a leaf: its only column
		}
		want += columnCount(f, foot.version)
	}
	if want != int(foot.numColumns) {
		return fmt.Errorf("%w: schema needs %d columns in a %s file, footer says %d", errkind.Corrupt, want, foot.version, foot.numColumns)
	}

	metaLen := foot.gboStart - foot.colMetaStart
	if metaLen > uint64(r.opts.MaxMetadataBytes) {
		return fmt.Errorf("%w: column metadata of %d bytes is above the %d-byte limit", errkind.Corrupt, metaLen, r.opts.MaxMetadataBytes)
	}
	meta, err := r.span(ctx, tail, foot.colMetaStart, metaLen)
	if err != nil {
		return err
	}
	cmo := meta[foot.cmoStart-foot.colMetaStart:]
	r.columns = make([]*pb.ColumnMetadata, foot.numColumns)
	for i := range r.columns {
		pos, n := binary.LittleEndian.Uint64(cmo[16*i:]), binary.LittleEndian.Uint64(cmo[16*i+8:])
		if pos < foot.colMetaStart || pos > foot.cmoStart || n > foot.cmoStart-pos {
			return fmt.Errorf("%w: column %d metadata [%d,+%d) outside the column metadata section [%d,%d)", errkind.Corrupt, i, pos, n, foot.colMetaStart, foot.cmoStart)
		}
		cm := &pb.ColumnMetadata{}
		if err := proto.Unmarshal(meta[pos-foot.colMetaStart:pos-foot.colMetaStart+n], cm); err != nil {
			return fmt.Errorf("%w: decode column %d metadata: %w", errkind.Corrupt, i, err)
		}
		if err := r.checkColumn(i, cm); err != nil {
			return err
		}
		r.columns[i] = cm
	}
	return nil
}

// checkColumn validates the page table of a column against the file, so
// that later reads can trust it.
func (r *Reader) checkColumn(i int, cm *pb.ColumnMetadata) error {
	size := uint64(r.obj.Size())
	for j, p := range cm.GetPages() {
		if len(p.GetBufferOffsets()) != len(p.GetBufferSizes()) {
			return fmt.Errorf("%w: column %d page %d has %d buffer offsets and %d sizes", errkind.Corrupt, i, j, len(p.GetBufferOffsets()), len(p.GetBufferSizes()))
		}
		for k, off := range p.GetBufferOffsets() {
			n := p.GetBufferSizes()[k]
			if off > size || n > size-off {
				return fmt.Errorf("%w: column %d page %d buffer %d [%d,+%d) outside the file (%d bytes)", errkind.Corrupt, i, j, k, off, n, size)
			}
			if r.foot.version != V2_0 && off%64 != 0 {
				return fmt.Errorf("%w: column %d page %d buffer %d at %d is not 64-byte aligned", errkind.Corrupt, i, j, k, off)
			}
		}
	}
	return nil
}

// span returns the bytes [pos, pos+n), from the tail already read when it
// covers them, else with one more ranged read.
func (r *Reader) span(ctx context.Context, tail []byte, pos, n uint64) ([]byte, error) {
	size := uint64(r.obj.Size())
	if pos > size || n > size-pos {
		return nil, fmt.Errorf("%w: range [%d,+%d) outside the file (%d bytes)", errkind.Corrupt, pos, n, size)
	}
	tailStart := size - uint64(len(tail))
	if pos >= tailStart {
		return tail[pos-tailStart : pos-tailStart+n], nil
	}
	buf := make([]byte, n)
	if err := r.obj.ReadAt(ctx, buf, int64(pos)); err != nil {
		return nil, err
	}
	return buf, nil
}

// Reopen returns a Reader of obj, another handle on the bytes r was opened
// on (a cache that knows both hold the same bytes, by their storage
// identity, decides that), sharing r's decoded metadata instead of reading
// and decoding it again. The metadata is never modified after Open, so
// both Readers can be used concurrently; each keeps its own chunk cache.
func (r *Reader) Reopen(obj storage.Object, name string) *Reader {
	return &Reader{obj: obj, name: name, opts: r.opts, foot: r.foot, numRows: r.numRows, schema: r.schema,
		fields: r.fields, globals: r.globals, columns: r.columns, metaBytes: r.metaBytes}
}

// MetadataBytes is the size of the file's metadata region that Open
// decoded (schema, column metadata, offset tables): what a Reader holds in
// memory before reading any page is a small multiple of it.
func (r *Reader) MetadataBytes() int64 { return r.metaBytes }

// Version is the file format version.
func (r *Reader) Version() Version { return r.foot.version }

// NumRows is the number of top-level rows.
func (r *Reader) NumRows() uint64 { return r.numRows }

// Fields is the schema's top-level fields. Do not modify.
func (r *Reader) Fields() []*Field { return r.fields }

// Field returns the top-level field with that name.
func (r *Reader) Field(name string) (*Field, bool) {
	for _, f := range r.fields {
		if f.Name == name {
			return f, true
		}
	}
	return nil, false
}

// Metadata is the schema metadata (values as stored, UTF-8 for index files).
func (r *Reader) Metadata() map[string][]byte { return r.schema.GetMetadata() }

// MetadataString returns one schema metadata value as a string.
func (r *Reader) MetadataString(key string) (string, bool) {
	v, ok := r.schema.GetMetadata()[key]
	return string(v), ok
}

// NumGlobalBuffers counts the global buffers, the schema (0) included.
func (r *Reader) NumGlobalBuffers() int { return len(r.globals) }

// NumColumns is the number of physical columns.
func (r *Reader) NumColumns() int { return len(r.columns) }

// Size is the file size in bytes.
func (r *Reader) Size() int64 { return r.obj.Size() }

// GlobalBuffer reads global buffer i (0 is the FileDescriptor). The returned
// slice is the caller's.
func (r *Reader) GlobalBuffer(ctx context.Context, i int) ([]byte, error) {
	return r.GlobalBufferInto(ctx, i, nil)
}

// GlobalBufferSize is the stored size of global buffer i, checked against
// the reader's limit.
func (r *Reader) GlobalBufferSize(i int) (int, error) {
	if i < 0 || i >= len(r.globals) {
		return 0, fmt.Errorf("%w: lancefile: %s: global buffer %d of %d", errkind.Corrupt, r.name, i, len(r.globals))
	}
	if size := r.globals[i].size; size > uint64(r.opts.MaxGlobalBufferBytes) {
		return 0, fmt.Errorf("%w: lancefile: %s: global buffer %d of %d bytes is above the %d-byte limit", errkind.Corrupt, r.name, i, size, r.opts.MaxGlobalBufferBytes)
	}
	return int(r.globals[i].size), nil
}

// GlobalBufferInto is GlobalBuffer reading into buf when its capacity holds
// the buffer (a caller that compares and drops what it reads, with a
// pooled buffer), into fresh memory otherwise.
func (r *Reader) GlobalBufferInto(ctx context.Context, i int, buf []byte) ([]byte, error) {
	n, err := r.GlobalBufferSize(i)
	if err != nil {
		return nil, err
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if err := r.obj.ReadAt(ctx, buf, int64(r.globals[i].pos)); err != nil {
		return nil, fmt.Errorf("lancefile: %s: global buffer %d: %w", r.name, i, err)
	}
	return buf, nil
}
