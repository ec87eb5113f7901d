package vecdata

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// sampleGap: sampled rows closer than this are read with one ranged read.
const sampleGap = 64

// Sample returns about n valid vectors drawn uniformly at random (seeded)
// from the fragments in ids, in row order. When the fragments hold no more
// than n rows, it returns every valid vector. Only the drawn rows (and the
// pages holding them) are read.
func (r *Reader) Sample(ctx context.Context, ids []uint64, n int, seed uint64) (*Batch, error) {
	if err := r.CheckFragments(ids); err != nil {
		return nil, err
	}
	out := &Batch{}
	if n <= 0 {
		return out, nil
	}
	live, err := r.CountRows(ctx, ids)
	if err != nil {
		return nil, err
	}
	if live <= uint64(n) {
		err := r.Scan(ctx, ids, 0, func(b *Batch) error {
			out.RowIDs = append(out.RowIDs, b.RowIDs...)
			out.Vectors = append(out.Vectors, b.Vectors...)
			out.Skipped += b.Skipped
			return nil
		})
		return out, err
	}
	// Draw over physical rows, scaled up by the share of deleted rows, so
	// that about n live rows remain.
	type span struct{ id, start, rows uint64 }
	var spans []span
	var physical uint64
	for _, id := range ids {
		rows := r.frags[id].GetPhysicalRows()
		if rows == 0 {
			ff, err := r.open(ctx, id)
			if err != nil {
				return nil, err
			}
			rows = ff.rows
			ff.close()
		}
		spans = append(spans, span{id, physical, rows})
		physical += rows
	}
	k := uint64(float64(n) * float64(physical) / float64(live))
	k = min(max(k, uint64(n)), physical)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pos := Distinct(rng, physical, k)
	slices.Sort(pos)
	out.RowIDs = make([]uint64, 0, len(pos))
	out.Vectors = make([]float32, 0, len(pos)*r.col.Dim)

	si := 0
	var buf []byte
	for i := 0; i < len(pos); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for pos[i] >= spans[si].start+spans[si].rows {
			si++
		}
		sp := spans[si]
		// Rows of this fragment drawn, grouped into runs read at once.
		j := i
		for j < len(pos) && pos[j] < sp.start+sp.rows {
			j++
		}
		ff, err := r.open(ctx, sp.id)
		if err != nil {
			return nil, err
		}
		for a := i; a < j; {
			b := a + 1
			for b < j && pos[b]-pos[b-1] <= sampleGap {
				b++
			}
			lo, hi := pos[a]-sp.start, pos[b-1]-sp.start+1
			need := lancefile.IntoCap(lancefile.FixedSizeList(r.col.Elem, r.col.Dim), int(hi-lo))
			if cap(buf) < need {
				buf = make([]byte, need)
			}
			arr, err := ff.rd.ReadInto(ctx, ff.name, lo, hi, buf)
			if err != nil {
				ff.close()
				return nil, err
			}
			// Decode the drawn rows only (skipped ones, null or
			// non-finite, are counted among the run's).
			for _, p := range pos[a:b] {
				r.appendRow(out, arr, int(p-sp.start-lo), ff, sp.id, lo)
			}
			a = b
		}
		ff.close()
		i = j
	}
	if len(out.RowIDs) > n { // more live rows than expected were drawn
		keep := Distinct(rng, uint64(len(out.RowIDs)), uint64(n))
		slices.Sort(keep)
		dim := r.col.Dim
		for x, k := range keep {
			out.RowIDs[x] = out.RowIDs[k]
			copy(out.Vectors[x*dim:(x+1)*dim], out.Vectors[int(k)*dim:(int(k)+1)*dim])
		}
		out.RowIDs = out.RowIDs[:n]
		out.Vectors = out.Vectors[:n*dim]
	}
	return out, nil
}

// floyd draws k distinct integers from [0, n) (Floyd's algorithm: O(k)
// time and memory whatever n).
func Distinct(rng *rand.Rand, n, k uint64) []uint64 {
	if k >= n {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i)
		}
		return out
	}
	seen := make(map[uint64]struct{}, k)
	out := make([]uint64, 0, k)
	for j := n - k; j < n; j++ {
		t := rng.Uint64N(j + 1)
		if _, dup := seen[t]; dup {
			t = j
		}
		seen[t] = struct{}{}
		out = append(out, t)
	}
	return out
}
