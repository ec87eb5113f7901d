// Package vecdata reads the vectors of one column of a Lance dataset from its
// data files, as an index build sees them: per fragment, in row order, with
// deleted rows, null vectors and vectors holding NaN or infinity skipped (as
// pylance's builder skips them), each vector tagged with its row address
// (fragment id << 32 | row offset).
//
// It streams: Scan reads windows of rows, never a whole fragment, and
// Sample reads only the rows it draws. Float16 columns are widened to
// float32.
package vecdata

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Column is a vector column of a dataset version.
type Column struct {
	Name    string
	FieldID int32
	Dim     int
	// Elem is the element kind: lancefile.KindFloat32, KindFloat16 or
	// KindFloat64 (read narrowed to float32).
	Elem     lancefile.Kind
	Nullable bool
	// Type is the column's type; scalar is set for a column opened by
	// NewValueReader (any type the file reader decodes).
	Type lancefile.DataType
	// Item is a list column's item type (Kind Unknown for other columns),
	// itemID its field id: a 2.1 data file names only the item's field.
	Item   lancefile.DataType
	itemID int32
	scalar bool
}

// fieldAt finds the manifest field that name (a top-level name, or the
// dotted path of a field inside structs) names. errkind.NotFound when
// there is none; errkind.Unsupported for a field inside a list or a map,
// which the data readers do not read.
func fieldAt(snap *table.Snapshot, name string) (*pb.Field, error) {
	f, ok := snap.FieldByPath(name)
	if !ok {
		return nil, fmt.Errorf("%w: vecdata: the dataset has no column %q", errkind.NotFound, name)
	}
	for p := f.GetParentId(); p != -1; {
		pf, ok := snap.FieldByID(p)
		if !ok {
			return nil, fmt.Errorf("%w: vecdata: field %q names parent %d, which the schema lacks", errkind.Corrupt, name, p)
		}
		if lancefile.ParseLogicalType(pf.GetLogicalType()).Kind != lancefile.KindStruct {
			return nil, fmt.Errorf("%w: vecdata: column %q sits inside %q, a %s; only fields inside structs are read", errkind.Unsupported, name, snap.FieldPath(p), pf.GetLogicalType())
		}
		p = pf.GetParentId()
	}
	return f, nil
}

// ResolveColumn finds a FixedSizeList<float32|float16> column: top-level,
// or inside structs ("s.v"). errkind.NotFound when there is no such
// column, InvalidInput when it is not a float vector column.
func ResolveColumn(snap *table.Snapshot, name string) (*Column, error) {
	f, err := fieldAt(snap, name)
	if err != nil {
		return nil, err
	}
	t := lancefile.ParseLogicalType(f.GetLogicalType())
	if t.Kind != lancefile.KindFixedSizeList {
		return nil, fmt.Errorf("%w: vecdata: column %q is %q, not a fixed-size list of floats", errkind.InvalidInput, name, f.GetLogicalType())
	}
	switch t.Elem {
	case lancefile.KindFloat32, lancefile.KindFloat16, lancefile.KindFloat64:
	default:
		return nil, fmt.Errorf("%w: vecdata: column %q holds %q vectors; only float vectors are indexed", errkind.Unsupported, name, f.GetLogicalType())
	}
	return &Column{Name: name, FieldID: f.GetId(), Dim: t.Dim, Elem: t.Elem, Nullable: f.GetNullable()}, nil
}

// Reader reads one vector column of one dataset version.
type Reader struct {
	st    storage.Store
	snap  *table.Snapshot
	col   *Column
	frags map[uint64]*pb.DataFragment
	opts  lancefile.Options
	// stable: Batch.RowIDs are the rows' stable ids (NewBuildReader of a
	// dataset with stable row ids), not their addresses.
	stable bool
}

// NewReader opens the vector column name of snap for reading rows by
// address (checks that compare an index's rows with the data). Datasets
// with stable row ids are refused (errkind.Unsupported): their indices'
// row ids are not row addresses. Builds use NewBuildReader.
func NewReader(st storage.Store, snap *table.Snapshot, name string) (*Reader, error) {
	if snap.Manifest.GetReaderFeatureFlags()&table.FlagStableRowIDs != 0 {
		return nil, fmt.Errorf("%w: vecdata: the dataset uses stable row ids, which its indices hold instead of row addresses; this check reads rows by address", errkind.Unsupported)
	}
	return newReader(st, snap, name)
}

// NewBuildReader is NewReader for building and training: on a dataset
// with stable row ids, Batch.RowIDs are the rows' stable ids (what pylance
// 14.0.2 writes into vector segments there), read from each fragment's row
// id sequence when the fragment is opened (8 bytes per physical row).
// ReadRows, which takes addresses, is not for such a reader.
func NewBuildReader(st storage.Store, snap *table.Snapshot, name string) (*Reader, error) {
	r, err := newReader(st, snap, name)
	if err != nil {
		return nil, err
	}
	r.NameRowsByStableIDs()
	return r, nil
}

// NameRowsByStableIDs makes the rows r hands over (Batch.RowIDs,
// ValueWindow.RowID) their stable row ids, on a dataset that has them:
// each fragment's row id sequence is read when the fragment is opened
// (8 bytes per physical row). Rows are still read by address.
func (r *Reader) NameRowsByStableIDs() { r.stable = r.snap.HasStableRowIDs() }

func newReader(st storage.Store, snap *table.Snapshot, name string) (*Reader, error) {
	col, err := ResolveColumn(snap, name)
	if err != nil {
		return nil, err
	}
	r := &Reader{st: st, snap: snap, col: col, frags: map[uint64]*pb.DataFragment{}}
	for _, f := range snap.Manifest.GetFragments() {
		r.frags[f.GetId()] = f
	}
	return r, nil
}

// Column is the column being read.
func (r *Reader) Column() *Column { return r.col }

// FragmentIDs returns every fragment id of the version, ascending.
func (r *Reader) FragmentIDs() []uint64 { return r.snap.FragmentIDs() }

// CheckFragments verifies that every id names a fragment of the version and
// that none repeats. errkind.InvalidInput otherwise.
func (r *Reader) CheckFragments(ids []uint64) error {
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if _, ok := r.frags[id]; !ok {
			return fmt.Errorf("%w: vecdata: version %d has no fragment %d", errkind.InvalidInput, r.snap.Ref.Version, id)
		}
		if seen[id] {
			return fmt.Errorf("%w: vecdata: fragment %d listed twice", errkind.InvalidInput, id)
		}
		seen[id] = true
		if id > math.MaxUint32 {
			return fmt.Errorf("%w: vecdata: fragment id %d does not fit a row address", errkind.Unsupported, id)
		}
	}
	return nil
}

// Batch is a run of valid vectors.
type Batch struct {
	// RowIDs are row addresses (fragment id << 32 | row offset), or stable
	// row ids (NewBuildReader of a dataset with them).
	RowIDs []uint64
	// Vectors holds len(RowIDs) vectors of Dim float32 values, row-major.
	Vectors []float32
	// Skipped counts rows of the window that were not deleted but held a
	// null vector or a non-finite value.
	Skipped int
}

// Len is the number of vectors.
func (b *Batch) Len() int { return len(b.RowIDs) }

// fragmentFile is an opened data file of a fragment and the name its
// schema gives the column.
type fragmentFile struct {
	obj     storage.Object
	rd      *lancefile.Reader
	name    string
	rows    uint64
	deleted *roaring.Bitmap
	ids     []uint64 // the rows' stable ids, by offset (a stable reader's)
}

func (f *fragmentFile) close() {
	if f.obj != nil {
		f.obj.Close()
	}
}

// open opens the data file of fragment id that holds the column, and its
// deletions.
func (r *Reader) open(ctx context.Context, id uint64) (*fragmentFile, error) {
	frag, ok := r.frags[id]
	if !ok {
		return nil, fmt.Errorf("%w: vecdata: no fragment %d", errkind.InvalidInput, id)
	}
	var df *pb.DataFile
	for _, d := range frag.GetFiles() {
		if fs := d.GetFields(); slices.Contains(fs, r.col.FieldID) || r.col.Item.Kind != lancefile.KindUnknown && slices.Contains(fs, r.col.itemID) {
			df = d
		}
	}
	if df == nil {
		return nil, fmt.Errorf("%w: vecdata: fragment %d has no data file holding column %q (field %d)", errkind.Corrupt, id, r.col.Name, r.col.FieldID)
	}
	dst, name, err := r.snap.DataFileStore(ctx, r.st, df)
	if err != nil {
		return nil, fmt.Errorf("vecdata: fragment %d: %w", id, err)
	}
	obj, err := dst.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("vecdata: fragment %d: %w", id, err)
	}
	ff := &fragmentFile{obj: obj}
	ok = false
	defer func() {
		if !ok {
			ff.close()
		}
	}()
	if ff.rd, err = lancefile.Open(ctx, obj, name, r.opts); err != nil {
		return nil, err
	}
	field, path := fileField(ff.rd.Fields(), r.col.FieldID, "")
	if field == nil {
		return nil, fmt.Errorf("%w: vecdata: %s has no field %d (%q)", errkind.Corrupt, name, r.col.FieldID, r.col.Name)
	}
	if r.col.scalar {
		if field.Type.Kind != r.col.Type.Kind {
			return nil, fmt.Errorf("%w: vecdata: %s stores column %q as %s, the manifest says %s", errkind.Corrupt, name, r.col.Name, field.Type, r.col.Type)
		}
	} else if field.Type.Kind != lancefile.KindFixedSizeList || field.Type.Elem != r.col.Elem || field.Type.Dim != r.col.Dim {
		return nil, fmt.Errorf("%w: vecdata: %s stores column %q as %s, the manifest says fixed_size_list of %d", errkind.Corrupt, name, r.col.Name, field.Type, r.col.Dim)
	}
	ff.name = path
	ff.rows = ff.rd.NumRows()
	if p := frag.GetPhysicalRows(); p != 0 && p != ff.rows {
		return nil, fmt.Errorf("%w: vecdata: %s holds %d rows, fragment %d has %d", errkind.Corrupt, name, ff.rows, id, p)
	}
	if ff.deleted, err = r.snap.DeletedRows(ctx, r.st, frag); err != nil {
		return nil, err
	}
	if r.stable {
		seq, err := r.snap.FragmentRowIDs(ctx, r.st, frag)
		if err != nil {
			return nil, err
		}
		ff.ids = make([]uint64, 0, ff.rows)
		table.WalkRowIDs(seq, func(run table.RowIDRun) {
			for k := range run.N {
				ff.ids = append(ff.ids, run.Start+k)
			}
		})
		if uint64(len(ff.ids)) != ff.rows {
			return nil, fmt.Errorf("%w: vecdata: fragment %d lists %d row ids for %d rows", errkind.Corrupt, id, len(ff.ids), ff.rows)
		}
	}
	ok = true
	return ff, nil
}

// fileField finds the field with the given id in a data file's schema,
// inside structs too, and its dotted path there.
func fileField(fields []*lancefile.Field, id int32, prefix string) (*lancefile.Field, string) {
	for _, f := range fields {
		if f.ID == id {
			return f, prefix + f.Name
		}
		if f.Type.Kind == lancefile.KindStruct {
			if c, p := fileField(f.Children, id, prefix+f.Name+"."); c != nil {
				return c, p
			}
		}
	}
	return nil, ""
}

// DefaultWindowRows is Scan's default window: 32768 rows of 128-d float32
// vectors are 16 MiB.
const DefaultWindowRows = 1 << 15

// Scan calls fn with the valid vectors of each fragment in ids, in the
// order given, in windows of at most windowRows rows (DefaultWindowRows when
// <= 0). The Batch and its slices are reused after fn returns.
func (r *Reader) Scan(ctx context.Context, ids []uint64, windowRows int, fn func(*Batch) error) error {
	if err := r.CheckFragments(ids); err != nil {
		return err
	}
	if windowRows <= 0 {
		windowRows = DefaultWindowRows
	}
	b := &Batch{}
	var buf []byte
	for _, id := range ids {
		ff, err := r.open(ctx, id)
		if err != nil {
			return err
		}
		for start := uint64(0); start < ff.rows; start += uint64(windowRows) {
			if err := ctx.Err(); err != nil {
				ff.close()
				return err
			}
			end := min(ff.rows, start+uint64(windowRows))
			need := lancefile.IntoCap(lancefile.FixedSizeList(r.col.Elem, r.col.Dim), int(end-start))
			if cap(buf) < need {
				buf = make([]byte, need)
			}
			a, err := ff.rd.ReadInto(ctx, ff.name, start, end, buf)
			if err != nil {
				ff.close()
				return err
			}
			b.RowIDs, b.Vectors, b.Skipped = b.RowIDs[:0], b.Vectors[:0], 0
			r.appendValid(b, a, ff, id, start)
			if b.Len() == 0 && b.Skipped == 0 {
				continue
			}
			if err := fn(b); err != nil {
				ff.close()
				return err
			}
		}
		ff.close()
	}
	return nil
}

// appendValid appends the valid rows of a (rows [start, start+a.Len) of
// fragment id, opened as ff) to b.
func (r *Reader) appendValid(b *Batch, a *lancefile.Array, ff *fragmentFile, id, start uint64) {
	b.Vectors = slices.Grow(b.Vectors, a.Len*r.col.Dim)
	b.RowIDs = slices.Grow(b.RowIDs, a.Len)
	for i := 0; i < a.Len; i++ {
		r.appendRow(b, a, i, ff, id, start)
	}
}

// appendRow appends row i of a (row start+i of fragment id, opened as
// ff) to b unless it is deleted (not counted) or holds a null or
// non-finite vector (counted in b.Skipped).
func (r *Reader) appendRow(b *Batch, a *lancefile.Array, i int, ff *fragmentFile, id, start uint64) {
	dim := r.col.Dim
	off := start + uint64(i)
	if ff.deleted != nil && ff.deleted.Contains(uint32(off)) {
		return
	}
	if !a.IsValid(i) || a.ItemValidity != nil && !allBitsSet(a.ItemValidity, i*dim, (i+1)*dim) {
		b.Skipped++
		return
	}
	width := lancefile.Primitive(r.col.Elem).ValueBits() / 8
	n := len(b.Vectors)
	b.Vectors = slices.Grow(b.Vectors, dim)[:n+dim]
	v := b.Vectors[n:]
	raw := a.Values[i*dim*width : (i+1)*dim*width]
	switch width {
	case 4:
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
	case 2:
		for j := range v {
			v[j] = vecmath.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*j:]))
		}
	default: // float64, narrowed: checks and statistics, not builds (segment.Build refuses them)
		for j := range v {
			v[j] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*j:])))
		}
	}
	if !finite(v) {
		b.Vectors = b.Vectors[:n]
		b.Skipped++
		return
	}
	if ff.ids != nil {
		b.RowIDs = append(b.RowIDs, ff.ids[off])
		return
	}
	b.RowIDs = append(b.RowIDs, id<<32|off)
}

func finite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

func allBitsSet(bits []byte, from, to int) bool {
	for i := from; i < to; i++ {
		if bits[i/8]&(1<<(i%8)) == 0 {
			return false
		}
	}
	return true
}

// CountRows returns the rows of the fragments that are not deleted (null
// and non-finite vectors included: telling them apart needs a read).
func (r *Reader) CountRows(ctx context.Context, ids []uint64) (uint64, error) {
	if err := r.CheckFragments(ids); err != nil {
		return 0, err
	}
	var n uint64
	for _, id := range ids {
		f := r.frags[id]
		rows := f.GetPhysicalRows()
		if rows == 0 {
			ff, err := r.open(ctx, id)
			if err != nil {
				return 0, err
			}
			rows = ff.rows
			ff.close()
		}
		n += rows - min(rows, f.GetDeletionFile().GetNumDeletedRows())
	}
	return n, nil
}
