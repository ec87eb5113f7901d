package ngram

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

func posting(t *testing.T, ids ...uint64) []byte {
	t.Helper()
	b, err := roaring64.BitmapOf(ids...).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeSegment writes a segment of (token, rows) in the given order.
func writeSegment(t *testing.T, st storage.Store, tokens []uint32, rows [][]uint64, raw map[int][]byte) *pb.IndexMetadata {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	sw, err := st.Create(ctx, table.IndicesDir+id.String()+"/"+FileName)
	if err != nil {
		t.Fatal(err)
	}
	cw := &storage.CountingWriter{W: sw}
	lw, err := lancefile.NewWriter(cw, []*lancefile.Field{lancefile.NewField(tokensColumn, lancefile.Primitive(lancefile.KindUint32), false),
		lancefile.NewField(postingsColumn, lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}, false)}, lancefile.WriterOptions{Version: lancefile.V2_2})
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{w: lw}
	w.reset()
	for i, tok := range tokens {
		p := raw[i]
		if p == nil {
			p = posting(t, rows[i]...)
		}
		if err := w.add(tok, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if err := lw.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(); err != nil {
		t.Fatal(err)
	}
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: []*pb.IndexFile{{Path: FileName, SizeBytes: uint64(cw.N)}}}
}

func TestDecodePostingRefusesHostileBytes(t *testing.T) {
	good := posting(t, 1, 2, 3<<32|7)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short count", good[:4]},
		{"truncated", good[:len(good)-1]},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
		{"huge bucket count", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"bad cookie", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodePosting(tc.b); !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("err = %v, want Corrupt", err)
			}
		})
	}
	if bm, err := DecodePosting(good); err != nil || bm.GetCardinality() != 3 {
		t.Fatalf("good posting: %v", err)
	}
}

func TestMergeJoinsTokensAndDropsRows(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	// Tokens interleave and repeat across inputs; more than a window each.
	var ta, tb []uint32
	var ra, rb [][]uint64
	for i := uint32(0); i < 3000; i++ {
		if i%2 == 0 || i%3 == 0 {
			ta, ra = append(ta, i), append(ra, []uint64{uint64(i % 50)})
		}
		if i%2 == 1 || i%3 == 0 {
			tb, rb = append(tb, i), append(rb, []uint64{1<<32 | uint64(i%70)})
		}
	}
	a, b := writeSegment(t, st, ta, ra, nil), writeSegment(t, st, tb, rb, nil)
	out := uuid.New()
	// Drop row 0 of fragment 0: tokens holding only it go.
	res, err := Merge(ctx, st, []*pb.IndexMetadata{a, b}, MergeOptions{IndexUUID: out, Keep: slices.Repeat([]func(uint64) bool{func(id uint64) bool { return id != 0 }}, 2)})
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(0)
	for i := uint32(0); i < 3000; i++ {
		inA, inB := i%2 == 0 || i%3 == 0, i%2 == 1 || i%3 == 0
		if inB || (inA && i%50 != 0) {
			want++
		}
	}
	if res.TokensRead != uint64(len(ta)+len(tb)) || res.TokensWritten != want {
		t.Fatalf("read %d written %d, want %d and %d", res.TokensRead, res.TokensWritten, len(ta)+len(tb), want)
	}
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
	chk, err := Check(ctx, st, merged, func(f uint32) bool { return f <= 1 })
	if err != nil || len(chk.Problems) > 0 || chk.Tokens != want || chk.Rows != res.RowsWritten {
		t.Fatalf("merged: %v %+v (rows written %d)", err, chk, res.RowsWritten)
	}
	// Check finds disorder, a repeated token, a malformed and an empty
	// posting list, and a row of an uncovered fragment.
	bad := writeSegment(t, st, []uint32{5, 3, 3, 8, 9}, [][]uint64{{1}, {1}, {1}, nil, {9 << 32}}, map[int][]byte{3: posting(t), 2: {1, 2, 3}})
	chk, err = Check(ctx, st, bad, func(f uint32) bool { return f == 0 })
	if err != nil || len(chk.Problems) != 5 {
		t.Fatalf("bad segment: %v %+v", err, chk)
	}
}

// TestJoinPostingsMovesRows: a posting list's rows of moved fragments
// land at their new addresses, after the rows keep refuses are dropped;
// the rows of other fragments stay, and a lone list with nothing to move
// or drop is copied as it is.
func TestJoinPostingsMovesRows(t *testing.T) {
	posting := func(ids ...uint64) []byte {
		b, err := roaring64.BitmapOf(ids...).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	moves := func(f uint32) bool { return f == 1 }
	remap := func(a uint64) uint64 { return 5<<32 | uint64(uint32(a)+10) } // fragment 1's rows into 5, shifted
	keep := func(a uint64) bool { return a != 1<<32|3 }                    // row 3 of fragment 1 deleted
	parts := []part{
		{b: posting(1<<32|1, 1<<32|3, 2<<32|4), keep: keep, remap: remap, moves: moves},
		{b: posting(5<<32 | 1), remap: remap, moves: moves}, // a newer input's row of fragment 5
	}
	out, rows, err := joinPostings(parts)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := DecodePosting(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{2<<32 | 4, 5<<32 | 1, 5<<32 | 11}; !slices.Equal(bm.ToArray(), want) || rows != 3 {
		t.Fatalf("rows %v (%d), want %v", bm.ToArray(), rows, want)
	}
	lone := posting(2<<32 | 4)
	if out, _, err := joinPostings([]part{{b: lone}}); err != nil || &out[0] != &lone[0] {
		t.Fatalf("a lone list to keep whole was not copied as it is (%v)", err)
	}
}
