package btree

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

func TestBlockSorterIsAStableSortByKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		key  func(r *rand.Rand) uint64
	}{
		{"narrow span (packed)", 5000, func(r *rand.Rand) uint64 { return 1<<63 + r.Uint64N(2e9) - 1e9 }},
		{"one pass", 5000, func(r *rand.Rand) uint64 { return 1<<40 + r.Uint64N(1e4) }},
		{"three passes", 5000, func(r *rand.Rand) uint64 { return r.Uint64N(1 << 40) }},
		{"a pass of one digit, skipped", 5000, func(r *rand.Rand) uint64 { return 9 + r.Uint64N(100)<<14 }},
		{"few keys, many ties", 5000, func(r *rand.Rand) uint64 { return 42 + r.Uint64N(3) }},
		{"full 64-bit span (pairs)", 5000, func(r *rand.Rand) uint64 { return r.Uint64() }},
		{"one key", 100, func(*rand.Rand) uint64 { return 7 }},
		{"one row", 1, func(r *rand.Rand) uint64 { return r.Uint64() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.n), 3))
			keys, ids := make([]uint64, tc.n), make([]uint64, tc.n)
			for i := range keys {
				keys[i], ids[i] = tc.key(r), uint64(i) // ids record the input order
			}
			type pair struct{ k, id uint64 }
			want := make([]pair, tc.n)
			for i := range want {
				want[i] = pair{keys[i], ids[i]}
			}
			slices.SortStableFunc(want, func(a, b pair) int { return cmp.Compare(a.k, b.k) })
			var bs blockSorter
			for round := range 2 { // the sorter's buffers are reused
				gk, gi := bs.sort(slices.Clone(keys), slices.Clone(ids))
				for i := range want {
					if gk[i] != want[i].k || gi[i] != want[i].id {
						t.Fatalf("round %d, pair %d: got (%d, %d), want %+v", round, i, gk[i], gi[i], want[i])
					}
				}
			}
		})
	}
}

func TestFixedKeysRoundTripAndOrder(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		kind lancefile.Kind
		vals [][]byte // ascending
	}{
		{lancefile.KindBool, [][]byte{{0}, {1}}},
		{lancefile.KindFloat16, [][]byte{{0x00, 0xfc}, {0x00, 0xc0}, {0x00, 0x80}, {0, 0}, {0x00, 0x3e}, {0x00, 0x7c}, {0x00, 0x7e}}},
		{lancefile.KindInt8, [][]byte{{0x80}, {0xff}, {0}, {0x7f}}},
		{lancefile.KindInt16, [][]byte{le.AppendUint16(nil, 0x8000), le.AppendUint16(nil, 0xffff), le.AppendUint16(nil, 3)}},
		{lancefile.KindInt32, [][]byte{le.AppendUint32(nil, 1<<31), le.AppendUint32(nil, 0), le.AppendUint32(nil, math.MaxInt32)}},
		{lancefile.KindUint32, [][]byte{le.AppendUint32(nil, 0), le.AppendUint32(nil, 1<<31), le.AppendUint32(nil, math.MaxUint32)}},
		{lancefile.KindFloat32, [][]byte{
			le.AppendUint32(nil, math.Float32bits(float32(math.Inf(-1)))), le.AppendUint32(nil, math.Float32bits(-2)),
			le.AppendUint32(nil, math.Float32bits(float32(math.Copysign(0, -1)))), le.AppendUint32(nil, 0),
			le.AppendUint32(nil, math.Float32bits(1.5)), le.AppendUint32(nil, math.Float32bits(float32(math.Inf(1)))),
			le.AppendUint32(nil, 0x7fc00001), // a NaN: last
		}},
		{lancefile.KindFloat64, [][]byte{
			le.AppendUint64(nil, math.Float64bits(math.Inf(-1))), le.AppendUint64(nil, math.Float64bits(-1e300)),
			le.AppendUint64(nil, math.Float64bits(0)), le.AppendUint64(nil, math.Float64bits(math.NaN())),
		}},
	} {
		var prev uint64
		for i, v := range tc.vals {
			k := fixedKeys(tc.kind, v, 1, nil)[0]
			if i > 0 && k <= prev {
				t.Errorf("%v: value %d (%x) does not order after value %d", tc.kind, i, v, i-1)
			}
			if i > 0 && (lancefile.SortKey(tc.kind, v) > lancefile.SortKey(tc.kind, tc.vals[i-1])) != (k > prev) {
				t.Errorf("%v: value %d orders otherwise than SortKey", tc.kind, i)
			}
			prev = k
			if got := putFixed(tc.kind, k, nil); !slices.Equal(got, v) {
				t.Errorf("%v: value %x came back as %x", tc.kind, v, got)
			}
		}
	}
}

// Keys spread over the whole int64 range do not pack with a row index
// into one word: the merge takes the pairs' sort and still writes one
// sorted run that checks clean, dropping the rows keep refuses; with a
// few inputs and with many.
func TestMergeKeysOfTheFullSpan(t *testing.T) {
	ctx := context.Background()
	for _, inputs := range []int{3, 300} {
		root := t.TempDir()
		st := storage.NewLocal(root, root)
		r := rand.New(rand.NewPCG(9, 9))
		var metas []*pb.IndexMetadata
		want, read := 0, 0
		for f := range uint32(inputs) {
			rows := make([]row, 9000/inputs+2)
			for i := range rows {
				rows[i] = row{v: int64(r.Uint64()), id: uint64(f)<<32 | uint64(i)}
				if i < 2 {
					rows[i].v = []int64{math.MinInt64, math.MaxInt64}[i]
				}
				if rows[i].id%5 != 0 {
					want++
				}
			}
			read += len(rows)
			metas = append(metas, writeSegment(t, st, rows, 256, f))
		}
		out := uuid.New()
		res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out.String(), Keep: func(id uint64) bool { return id%5 != 0 }})
		if err != nil {
			t.Fatal(err)
		}
		if res.RowsRead != uint64(read) || res.RowsWritten != uint64(want) {
			t.Fatalf("%d inputs: read %d, wrote %d; want %d, %d", inputs, res.RowsRead, res.RowsWritten, read, want)
		}
		chk, err := Check(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}, CheckOptions{})
		if err != nil || len(chk.Problems) > 0 || chk.Rows != uint64(want) {
			t.Fatalf("%d inputs, merged: %v %+v", inputs, err, chk)
		}
	}
}

func TestUpTo(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for n := range 70 {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = r.Uint64N(40)
		}
		slices.Sort(keys)
		for bound := uint64(0); bound < 42; bound++ {
			want := 0
			for want < n && keys[want] <= bound {
				want++
			}
			if got := upTo(keys, bound); got != want {
				t.Fatalf("%v up to %d: %d, want %d", keys, bound, got, want)
			}
		}
	}
}

// readRows reads a segment's rows back in page order.
func readRows(t *testing.T, st storage.Store, im *pb.IndexMetadata) []row {
	t.Helper()
	ctx := context.Background()
	seg, err := Open(ctx, st, im)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	vals, err := seg.data.Read(ctx, valuesColumn, 0, seg.Rows)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seg.data.Read(ctx, idsColumn, 0, seg.Rows)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]row, seg.Rows)
	for i := range out {
		out[i] = row{null: !vals.IsValid(i), id: binary.LittleEndian.Uint64(ids.Values[8*i:])}
		if !out[i].null {
			out[i].v = int64(binary.LittleEndian.Uint64(vals.Values[8*i:]))
		}
	}
	return out
}

// A block is bounded by the last key of the k-th input to run out; an
// input drained to the bound goes on into its next window, which lowers
// the bound unless it is the input's last. The rows come out sorted by
// key, nulls first, every input's rows less those keep refuses, whatever
// the windows and blocks: uniform inputs, an input dense in a narrow
// range, one of a single repeated key (its windows all end at the same
// key), leading nulls over several windows, empty inputs.
func TestBlockBoundsAcrossWindows(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	r := rand.New(rand.NewPCG(4, 4))
	var metas []*pb.IndexMetadata
	var all []row
	for f := uint32(0); f < 40; f++ {
		rows := make([]row, 200+r.IntN(1200))
		for i := range rows {
			id := uint64(f)<<32 | uint64(i)
			switch {
			case f%13 == 3:
				rows = nil // an empty input
			case f%7 == 1:
				rows[i] = row{v: r.Int64N(50), id: id} // dense
			case f%7 == 2:
				rows[i] = row{v: 7, id: id} // one key
			case f%9 == 4 && i < 300:
				rows[i] = row{null: true, id: id}
			default:
				rows[i] = row{v: r.Int64N(20000) - 10000, id: id}
				if r.IntN(30) == 0 {
					rows[i] = row{null: true, id: id}
				}
			}
		}
		seg := slices.Clone(rows)
		metas = append(metas, writeSegment(t, st, seg, 128, f))
		all = append(all, seg...) // as written: sorted by the segment
	}
	keep := func(id uint64) bool { return id%11 != 0 }
	var want []row
	for _, x := range all {
		if keep(x.id) {
			want = append(want, x)
		}
	}
	byKey := func(a, b row) int {
		if a.null != b.null {
			if a.null {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.v, b.v)
	}
	total := func(a, b row) int { return cmp.Or(byKey(a, b), cmp.Compare(a.id, b.id)) }
	slices.SortFunc(want, total)
	// rows of odd fragments move (a compaction's map), after keep
	moved := func(id uint64) uint64 {
		if id>>32%2 == 1 {
			return id + 1000<<32
		}
		return id
	}
	wantMoved := make([]row, len(want))
	for i, x := range want {
		wantMoved[i] = row{v: x.v, null: x.null, id: moved(x.id)}
	}
	slices.SortFunc(wantMoved, total)
	for _, c := range []struct {
		window, block int
		remap         func(uint64) uint64
	}{
		{64, 64, nil},       // k = 1: the first input to run out bounds the block
		{64, 5 * 64, nil},   // k = 5
		{100, 1 << 16, nil}, // k above the inputs: the last to run out bounds it
		{0, 0, nil},         // the budget's windows: one per input
		{64, 5 * 64, moved}, // rows moved by Remap
	} {
		want := want
		if c.remap != nil {
			want = wantMoved
		}
		out := uuid.New()
		res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out.String(), Keep: keep, Remap: c.remap, windowRows: c.window, blockRows: c.block})
		if err != nil {
			t.Fatal(c, err)
		}
		if res.RowsRead != uint64(len(all)) || res.RowsWritten != uint64(len(want)) {
			t.Fatalf("%v: read %d, wrote %d; want %d, %d", c, res.RowsRead, res.RowsWritten, len(all), len(want))
		}
		got := readRows(t, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files})
		if !slices.IsSortedFunc(got, byKey) {
			t.Fatalf("%v: the merged rows are not sorted by key, nulls first", c)
		}
		// the same rows (equal keys may come in any order)
		slices.SortFunc(got, total)
		if !slices.Equal(got, want) {
			t.Fatalf("%v: %d rows, want %d, not the same rows", c, len(got), len(want))
		}
	}
}

// A corrupt input among many (keys out of order, found as it is decoded
// ahead) fails the whole merge with errkind.Corrupt.
func TestACorruptInputFailsTheMerge(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	var metas []*pb.IndexMetadata
	for f := uint32(0); f < 300; f++ {
		rows := []row{{v: 1, id: uint64(f) << 32}, {v: 2, id: uint64(f)<<32 | 1}}
		metas = append(metas, writeSegment(t, st, rows, 128, f))
	}
	// a segment written in the order given: 5 before 3
	id := uuid.New()
	w, err := newPageWriter(ctx, st, table.IndicesDir+id.String()+"/", lancefile.Primitive(lancefile.KindInt64), 128, lancefile.V2_2)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []uint64{5, 3} {
		if err := w.add(ctx, false, binary.LittleEndian.AppendUint64(nil, v), 999<<32|uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	files, err := w.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	metas[205] = &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Name: "k_idx", Fields: []int32{0}, Files: files}
	_, err = Merge(ctx, st, metas, MergeOptions{})
	if !errors.Is(err, errkind.Corrupt) || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("merge: %v, want Corrupt (keys out of order)", err)
	}
}
