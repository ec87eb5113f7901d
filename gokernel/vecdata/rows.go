package vecdata

import (
	"context"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// ReadRows returns the vectors of the given row addresses (fragment id <<
// 32 | row offset), sorted by address, each fragment's data file opened
// once and nearby rows read together. Addresses of rows that are deleted,
// null, non-finite, past the end of their fragment or of fragments the
// version does not have are left out (Skipped counts the null and
// non-finite ones), so the caller learns which rows have a vector by the
// RowIDs that come back. Duplicates are read once.
func (r *Reader) ReadRows(ctx context.Context, addrs []uint64) (*Batch, error) {
	out := &Batch{}
	var buf []byte
	err := r.eachRun(ctx, addrs, nil, func(ff *fragmentFile, frag uint64, rows []uint64, lo, hi uint64) error {
		need := lancefile.IntoCap(lancefile.FixedSizeList(r.col.Elem, r.col.Dim), int(hi-lo))
		if cap(buf) < need {
			buf = make([]byte, need)
		}
		arr, err := ff.rd.ReadInto(ctx, ff.name, lo, hi, buf)
		if err != nil {
			return fmt.Errorf("vecdata: fragment %d rows [%d, %d): %w", frag, lo, hi, err)
		}
		if arr.Len != int(hi-lo) {
			return fmt.Errorf("%w: vecdata: fragment %d: read %d rows for [%d, %d)", errkind.Corrupt, frag, arr.Len, lo, hi)
		}
		run := &Batch{}
		byAddr := *ff // rows are asked and answered by address, on any reader
		byAddr.ids = nil
		r.appendValid(run, arr, &byAddr, frag, lo)
		out.Skipped += run.Skipped
		w := 0
		for x, id := range run.RowIDs {
			for w < len(rows) && rows[w] < id {
				w++
			}
			if w < len(rows) && rows[w] == id {
				out.RowIDs = append(out.RowIDs, id)
				out.Vectors = append(out.Vectors, run.Vectors[x*r.col.Dim:(x+1)*r.col.Dim]...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachRun sorts addrs (duplicates dropped), opens each fragment's data
// file once and calls run with each run of nearby rows (sorted, within
// sampleGap of each other) and the row range [lo, hi) that covers it.
// Rows of fragments the version does not have, or past their fragment's
// end, go to absent (when set) instead.
func (r *Reader) eachRun(ctx context.Context, addrs []uint64, absent func(rows []uint64),
	run func(ff *fragmentFile, frag uint64, rows []uint64, lo, hi uint64) error) error {
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if absent == nil {
		absent = func([]uint64) {}
	}
	for i := 0; i < len(sorted); {
		if err := ctx.Err(); err != nil {
			return err
		}
		frag := sorted[i] >> 32
		j := i
		for j < len(sorted) && sorted[j]>>32 == frag {
			j++
		}
		rows := sorted[i:j]
		i = j
		if _, ok := r.frags[frag]; !ok {
			absent(rows)
			continue
		}
		ff, err := r.open(ctx, frag)
		if err != nil {
			return err
		}
		for a := 0; a < len(rows); {
			if uint64(uint32(rows[a])) >= ff.rows {
				absent(rows[a:]) // sorted: the rest are past the end too
				break
			}
			b := a + 1
			for b < len(rows) && uint64(uint32(rows[b])) < ff.rows && rows[b]-rows[b-1] <= sampleGap {
				b++
			}
			if err := run(ff, frag, rows[a:b], uint64(uint32(rows[a])), uint64(uint32(rows[b-1]))+1); err != nil {
				ff.close()
				return err
			}
			a = b
		}
		ff.close()
	}
	return nil
}

// NewValueReader opens a column of any type the file reader decodes (the
// column of a scalar index) for ReadValues, which takes row addresses
// (whether or not the dataset also has stable row ids).
//
// name may be the dotted path of a field inside structs ("s.x"): a row
// whose struct is null reads as null, as pylance indexes it.
func NewValueReader(st storage.Store, snap *table.Snapshot, name string) (*Reader, error) {
	f, err := fieldAt(snap, name)
	if err != nil {
		return nil, err
	}
	col := &Column{Name: name, FieldID: f.GetId(), Nullable: f.GetNullable(), Type: lancefile.ParseLogicalType(f.GetLogicalType()), scalar: true}
	if k := col.Type.Kind; k == lancefile.KindList || k == lancefile.KindLargeList {
		if ch := snap.ChildFields(f.GetId()); len(ch) == 1 {
			col.Item, col.itemID = lancefile.ParseLogicalType(ch[0].GetLogicalType()), ch[0].GetId()
		}
	}
	r := &Reader{st: st, snap: snap, col: col, frags: map[uint64]*pb.DataFragment{}}
	for _, fr := range snap.Manifest.GetFragments() {
		r.frags[fr.GetId()] = fr
	}
	return r, nil
}

// Value is one row's value, as ReadValues found it.
type Value struct {
	Addr    uint64
	Null    bool
	Bytes   []byte // the value's bytes (fixed-width little-endian, or binary)
	Missing bool   // deleted, past its fragment's end, or of no fragment of the version
	// Items are a valid list's items (Bytes is then nil).
	Items []Value
}

// valueAt is row k of arr (null, a list of values, or a value), its bytes copied.
func valueAt(arr *lancefile.Array, k int) Value {
	var v Value
	switch {
	case !arr.IsValid(k):
		v.Null = true
	case arr.Type.Kind == lancefile.KindList || arr.Type.Kind == lancefile.KindLargeList:
		v.Items = make([]Value, 0, arr.Offsets[k+1]-arr.Offsets[k])
		for j := arr.Offsets[k]; j < arr.Offsets[k+1]; j++ {
			v.Items = append(v.Items, valueAt(arr.Items, int(j)))
		}
	case arr.Type.Kind == lancefile.KindBinary:
		v.Bytes = slices.Clone(arr.Values[arr.Offsets[k]:arr.Offsets[k+1]])
	default:
		w := arr.Type.ValueBits() / 8
		v.Bytes = slices.Clone(arr.Values[k*w : (k+1)*w])
	}
	return v
}

// ReadValues reads the values of the given row addresses, sorted and
// without duplicates, nearby rows of one fragment read together.
func (r *Reader) ReadValues(ctx context.Context, addrs []uint64) ([]Value, error) {
	if !r.col.scalar {
		return nil, fmt.Errorf("%w: vecdata: ReadValues of a vector reader", errkind.InvalidInput)
	}
	out := make([]Value, 0, len(addrs))
	absent := func(rows []uint64) {
		for _, a := range rows {
			out = append(out, Value{Addr: a, Missing: true})
		}
	}
	err := r.eachRun(ctx, addrs, absent, func(ff *fragmentFile, frag uint64, rows []uint64, lo, hi uint64) error {
		arr, err := ff.rd.Read(ctx, ff.name, lo, hi)
		if err != nil {
			return fmt.Errorf("vecdata: fragment %d rows [%d, %d): %w", frag, lo, hi, err)
		}
		if arr.Len != int(hi-lo) {
			return fmt.Errorf("%w: vecdata: fragment %d: read %d rows for [%d, %d)", errkind.Corrupt, frag, arr.Len, lo, hi)
		}
		for _, x := range rows {
			v := Value{Missing: true}
			if ff.deleted == nil || !ff.deleted.Contains(uint32(x)) {
				v = valueAt(arr, int(uint64(uint32(x))-lo))
			}
			v.Addr = x
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
