package vecdata

import (
	"context"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// ReadRows returns the vectors of the given row addresses (fragment id <<
// 32 | row offset), sorted by address, each fragment's data file opened
// once and nearby rows read together. Addresses of rows that are deleted,
// null, non-finite, past the end of their fragment or of fragments the
// version does not have are left out (Skipped counts the null and
// non-finite ones), so the caller learns which rows have a vector by the
// RowIDs that come back. Duplicates are read once.
func (r *Reader) ReadRows(ctx context.Context, addrs []uint64) (*Batch, error) {
	sorted := slices.Clone(addrs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	out := &Batch{}
	var buf []byte
	for i := 0; i < len(sorted); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		frag := sorted[i] >> 32
		j := i
		for j < len(sorted) && sorted[j]>>32 == frag {
			j++
		}
		rows := sorted[i:j]
		i = j
		if _, ok := r.frags[frag]; !ok {
			continue
		}
		ff, err := r.open(ctx, frag)
		if err != nil {
			return nil, err
		}
		for a := 0; a < len(rows); {
			if uint64(uint32(rows[a])) >= ff.rows {
				break // sorted: the rest are past the end too
			}
			b := a + 1
			for b < len(rows) && uint64(uint32(rows[b])) < ff.rows && rows[b]-rows[b-1] <= sampleGap {
				b++
			}
			lo, hi := uint64(uint32(rows[a])), uint64(uint32(rows[b-1]))+1
			need := lancefile.IntoCap(lancefile.FixedSizeList(r.col.Elem, r.col.Dim), int(hi-lo))
			if cap(buf) < need {
				buf = make([]byte, need)
			}
			arr, err := ff.rd.ReadInto(ctx, ff.name, lo, hi, buf)
			if err != nil {
				ff.close()
				return nil, fmt.Errorf("vecdata: fragment %d rows [%d, %d): %w", frag, lo, hi, err)
			}
			if arr.Len != int(hi-lo) {
				ff.close()
				return nil, fmt.Errorf("%w: vecdata: fragment %d: read %d rows for [%d, %d)", errkind.Corrupt, frag, arr.Len, lo, hi)
			}
			run := &Batch{}
			r.appendValid(run, arr, frag, lo, ff.deleted)
			out.Skipped += run.Skipped
			want := rows[a:b]
			w := 0
			for x, id := range run.RowIDs {
				for w < len(want) && want[w] < id {
					w++
				}
				if w < len(want) && want[w] == id {
					out.RowIDs = append(out.RowIDs, id)
					out.Vectors = append(out.Vectors, run.Vectors[x*r.col.Dim:(x+1)*r.col.Dim]...)
				}
			}
			a = b
		}
		ff.close()
	}
	return out, nil
}
