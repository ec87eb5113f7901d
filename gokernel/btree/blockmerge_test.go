package btree

import (
	"cmp"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func TestBlockSorterIsAStableSortByKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		key  func(r *rand.Rand) uint64
	}{
		{"narrow span (packed)", 5000, func(r *rand.Rand) uint64 { return 1<<63 + r.Uint64N(2e9) - 1e9 }},
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
// sorted run that checks clean, dropping the rows keep refuses.
func TestMergeKeysOfTheFullSpan(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	r := rand.New(rand.NewPCG(9, 9))
	var metas []*pb.IndexMetadata
	want := 0
	for f := uint32(0); f < 3; f++ {
		rows := make([]row, 3000)
		for i := range rows {
			rows[i] = row{v: int64(r.Uint64()), id: uint64(f)<<32 | uint64(i)}
			if i < 2 {
				rows[i].v = []int64{math.MinInt64, math.MaxInt64}[i]
			}
			if rows[i].id%5 != 0 {
				want++
			}
		}
		metas = append(metas, writeSegment(t, st, rows, 256, f))
	}
	out := uuid.New()
	res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out.String(), Keep: func(id uint64) bool { return id%5 != 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if res.RowsRead != 9000 || res.RowsWritten != uint64(want) {
		t.Fatalf("read %d, wrote %d; want 9000, %d", res.RowsRead, res.RowsWritten, want)
	}
	chk, err := Check(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}, CheckOptions{})
	if err != nil || len(chk.Problems) > 0 || chk.Rows != uint64(want) {
		t.Fatalf("merged: %v %+v", err, chk)
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
