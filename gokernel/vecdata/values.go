package vecdata

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// ValueWindow is a window of one fragment's values, as ScanValues hands
// it over: Values holds rows [Start, Start+Values.Len) of fragment
// Fragment, nulls included; Deleted holds the fragment's deleted row
// offsets (nil when none), which a build skips.
type ValueWindow struct {
	Fragment uint64
	Start    uint64
	Values   *lancefile.Array
	Deleted  *roaring.Bitmap
	ids      []uint64 // the fragment's stable row ids (NameRowsByStableIDs)
}

// Live reports whether row i of the window is not deleted.
func (w *ValueWindow) Live(i int) bool {
	return w.Deleted == nil || !w.Deleted.Contains(uint32(w.Start)+uint32(i))
}

// Value is row i of the window (null, a list of values, or a value), its
// bytes copied.
func (w *ValueWindow) Value(i int) Value { return valueAt(w.Values, i) }

// Addr is the row address of row i of the window.
func (w *ValueWindow) Addr(i int) uint64 { return w.Fragment<<32 | (w.Start + uint64(i)) }

// RowID is how an index names row i of the window: its stable row id when
// the reader names rows so (NameRowsByStableIDs), else its address.
func (w *ValueWindow) RowID(i int) uint64 {
	if w.ids != nil {
		return w.ids[w.Start+uint64(i)]
	}
	return w.Addr(i)
}

// ScanValues calls fn with the values of each fragment of ids (in the
// order given) of a column opened by NewValueReader, in windows of at most
// windowRows rows (DefaultWindowRows when <= 0): a scalar index build reads
// its column this way, a window at a time, never a whole fragment. The
// window is reused after fn returns.
func (r *Reader) ScanValues(ctx context.Context, ids []uint64, windowRows int, fn func(*ValueWindow) error) error {
	if !r.col.scalar {
		return fmt.Errorf("%w: vecdata: ScanValues of a vector reader", errkind.InvalidInput)
	}
	if err := r.CheckFragments(ids); err != nil {
		return err
	}
	if windowRows <= 0 {
		windowRows = DefaultWindowRows
	}
	w := &ValueWindow{}
	for _, id := range ids {
		if err := r.scanFragment(ctx, id, uint64(windowRows), w, fn); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) scanFragment(ctx context.Context, id, windowRows uint64, w *ValueWindow, fn func(*ValueWindow) error) error {
	ff, err := r.open(ctx, id)
	if err != nil {
		return err
	}
	defer ff.close()
	for start := uint64(0); start < ff.rows; start += windowRows {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(ff.rows, start+windowRows)
		a, err := ff.rd.Read(ctx, ff.name, start, end)
		if err != nil {
			return fmt.Errorf("vecdata: fragment %d rows [%d, %d): %w", id, start, end, err)
		}
		if a.Len != int(end-start) {
			return fmt.Errorf("%w: vecdata: fragment %d: read %d rows for [%d, %d)", errkind.Corrupt, id, a.Len, start, end)
		}
		*w = ValueWindow{Fragment: id, Start: start, Values: a, Deleted: ff.deleted, ids: ff.ids}
		if err := fn(w); err != nil {
			return err
		}
	}
	return nil
}

// ReadRange reads rows [lo, hi) of fragment frag of a column opened by
// NewValueReader (hi is cut at the fragment's end), with the fragment's
// deletions: the rows a ZONEMAP zone spans.
func (r *Reader) ReadRange(ctx context.Context, frag, lo, hi uint64) (*ValueWindow, error) {
	if !r.col.scalar {
		return nil, fmt.Errorf("%w: vecdata: ReadRange of a vector reader", errkind.InvalidInput)
	}
	ff, err := r.open(ctx, frag)
	if err != nil {
		return nil, err
	}
	defer ff.close()
	hi = min(hi, ff.rows)
	if lo >= hi {
		return &ValueWindow{Fragment: frag, Start: lo, Values: &lancefile.Array{Type: r.col.Type}, Deleted: ff.deleted}, nil
	}
	a, err := ff.rd.Read(ctx, ff.name, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("vecdata: fragment %d rows [%d, %d): %w", frag, lo, hi, err)
	}
	if a.Len != int(hi-lo) {
		return nil, fmt.Errorf("%w: vecdata: fragment %d: read %d rows for [%d, %d)", errkind.Corrupt, frag, a.Len, lo, hi)
	}
	return &ValueWindow{Fragment: frag, Start: lo, Values: a, Deleted: ff.deleted}, nil
}
