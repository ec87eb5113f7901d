package table

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func rng(a, b uint64) *pb.U64Segment {
	return &pb.U64Segment{Segment: &pb.U64Segment_Range_{Range: &pb.U64Segment_Range{Start: a, End: b}}}
}

func u16s(base uint64, offs ...uint16) *pb.EncodedU64Array {
	var b []byte
	for _, o := range offs {
		b = binary.LittleEndian.AppendUint16(b, o)
	}
	return &pb.EncodedU64Array{Array: &pb.EncodedU64Array_U16Array_{U16Array: &pb.EncodedU64Array_U16Array{Base: base, Offsets: b}}}
}

func u32s(base uint64, offs ...uint32) *pb.EncodedU64Array {
	var b []byte
	for _, o := range offs {
		b = binary.LittleEndian.AppendUint32(b, o)
	}
	return &pb.EncodedU64Array{Array: &pb.EncodedU64Array_U32Array_{U32Array: &pb.EncodedU64Array_U32Array{Base: base, Offsets: b}}}
}

func u64s(vals ...uint64) *pb.EncodedU64Array {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return &pb.EncodedU64Array{Array: &pb.EncodedU64Array_U64Array_{U64Array: &pb.EncodedU64Array_U64Array{Values: b}}}
}

func encodeSeq(t testing.TB, segs ...*pb.U64Segment) []byte {
	b, err := proto.Marshal(&pb.RowIdSequence{Segments: segs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func walkAll(seq *pb.RowIdSequence) []uint64 {
	var out []uint64
	var off uint64
	WalkRowIDs(seq, func(r RowIDRun) {
		if r.Offset != off {
			panic("runs out of order")
		}
		for k := uint64(0); k < r.N; k++ {
			out = append(out, r.Start+k)
		}
		off += r.N
	})
	return out
}

func TestRowIDSequenceEncodings(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []*pb.U64Segment
		want []uint64
	}{
		{"range", []*pb.U64Segment{rng(5, 9)}, []uint64{5, 6, 7, 8}},
		{"empty range", []*pb.U64Segment{rng(5, 5), rng(0, 2)}, []uint64{0, 1}},
		{"holes", []*pb.U64Segment{{Segment: &pb.U64Segment_RangeWithHoles_{RangeWithHoles: &pb.U64Segment_RangeWithHoles{
			Start: 10, End: 16, Holes: u16s(10, 1, 4)}}}}, []uint64{10, 12, 13, 15}},
		{"bitmap, least significant bit first", []*pb.U64Segment{{Segment: &pb.U64Segment_RangeWithBitmap_{RangeWithBitmap: &pb.U64Segment_RangeWithBitmap{
			Start: 3, End: 13, Bitmap: []byte{0b0100_0101, 0b10}}}}}, []uint64{3, 5, 9, 12}},
		{"sorted u32", []*pb.U64Segment{{Segment: &pb.U64Segment_SortedArray{SortedArray: u32s(1<<33, 0, 7, 70000)}}}, []uint64{1 << 33, 1<<33 + 7, 1<<33 + 70000}},
		{"unsorted u64", []*pb.U64Segment{{Segment: &pb.U64Segment_Array{Array: u64s(9, 2, 1<<40)}}}, []uint64{9, 2, 1 << 40}},
		{"mixed", []*pb.U64Segment{rng(0, 2), {Segment: &pb.U64Segment_Array{Array: u16s(100, 3, 1, 2)}}, rng(2, 3)}, []uint64{0, 1, 103, 101, 102, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, err := DecodeRowIDSequence(encodeSeq(t, tc.segs...), uint64(len(tc.want)))
			if err != nil {
				t.Fatal(err)
			}
			if got := walkAll(seq); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRowIDSequenceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  []byte
		rows uint64
		msg  string
	}{
		{"not protobuf", []byte{0xff, 0xff}, 1, "row id sequence"},
		{"too few", encodeSeq(t, rng(0, 3)), 4, "3 ids for 4 rows"},
		{"too many", encodeSeq(t, rng(0, 1<<40)), 4, "more than the fragment"},
		{"backwards range", encodeSeq(t, rng(5, 3)), 0, "ends before it starts"},
		{"hole outside", encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_RangeWithHoles_{RangeWithHoles: &pb.U64Segment_RangeWithHoles{
			Start: 0, End: 4, Holes: u16s(0, 7)}}}), 3, "not sorted inside"},
		{"unsorted holes", encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_RangeWithHoles_{RangeWithHoles: &pb.U64Segment_RangeWithHoles{
			Start: 0, End: 4, Holes: u16s(0, 2, 1)}}}), 2, "not sorted inside"},
		{"short bitmap", encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_RangeWithBitmap_{RangeWithBitmap: &pb.U64Segment_RangeWithBitmap{
			Start: 0, End: 20, Bitmap: []byte{1}}}}), 1, "bitmap of 1 bytes"},
		{"odd u16 bytes", encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_Array{Array: &pb.EncodedU64Array{Array: &pb.EncodedU64Array_U16Array_{
			U16Array: &pb.EncodedU64Array_U16Array{Offsets: []byte{1, 2, 3}}}}}}), 1, "u16 array of 3 bytes"},
		{"unsorted sorted array", encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_SortedArray{SortedArray: u64s(3, 2)}}), 2, "not sorted"},
		{"no encoding", encodeSeq(t, &pb.U64Segment{}), 0, "without a known encoding"},
		{"huge fragment", nil, 1 << 40, "more than a fragment holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRowIDSequence(tc.raw, tc.rows)
			if !errors.Is(err, errkind.Corrupt) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want Corrupt %q", err, tc.msg)
			}
		})
	}
}

// TestLiveRowIDs: inline and external sequences, deletion bitmaps, and the
// fragments asked for only.
func TestLiveRowIDs(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://liverowids")
	ext := encodeSeq(t, &pb.U64Segment{Segment: &pb.U64Segment_Array{Array: u32s(1000, 5, 3, 4)}})
	if err := storage.Put(ctx, st, "_rowids/f2.bin", append([]byte("junk"), ext...)); err != nil {
		t.Fatal(err)
	}
	del := roaring.BitmapOf(1, 2)
	delBytes, _ := del.ToBytes()
	df := &pb.DeletionFile{FileType: pb.DeletionFile_BITMAP, ReadVersion: 4, Id: 9, NumDeletedRows: 2}
	if err := storage.Put(ctx, st, DeletionFileName(1, df), delBytes); err != nil {
		t.Fatal(err)
	}
	snap := &Snapshot{Manifest: &pb.Manifest{ReaderFeatureFlags: FlagStableRowIDs, Fragments: []*pb.DataFragment{
		{Id: 0, PhysicalRows: 3, RowIdSequence: &pb.DataFragment_InlineRowIds{InlineRowIds: encodeSeq(t, rng(0, 3))}},
		{Id: 1, PhysicalRows: 4, DeletionFile: df, RowIdSequence: &pb.DataFragment_InlineRowIds{InlineRowIds: encodeSeq(t, rng(10, 14))}},
		{Id: 2, PhysicalRows: 3, RowIdSequence: &pb.DataFragment_ExternalRowIds{ExternalRowIds: &pb.ExternalFile{
			Path: "_rowids/f2.bin", Offset: 4, Size: uint64(len(ext))}}},
	}}}
	if !snap.HasStableRowIDs() {
		t.Fatal("flag not seen")
	}
	live, err := snap.LiveRowIDs(ctx, st, []uint32{1, 2, 7})
	if err != nil {
		t.Fatal(err)
	}
	if got := live.ToArray(); !slices.Equal(got, []uint64{10, 13, 1003, 1004, 1005}) {
		t.Fatalf("live row ids %v", got)
	}
	// A deletion file that disagrees with the manifest, and an external
	// range past the end of its file, are corrupt.
	df.NumDeletedRows = 3
	if _, err := snap.LiveRowIDs(ctx, st, []uint32{1}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("got %v", err)
	}
	snap.Manifest.Fragments[2].GetExternalRowIds().Size = 1000
	if _, err := snap.LiveRowIDs(ctx, st, []uint32{2}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("got %v", err)
	}
}

func FuzzDecodeRowIDSequence(f *testing.F) {
	f.Add(encodeSeq(f, rng(0, 3)), uint64(3))
	f.Add(encodeSeq(f, &pb.U64Segment{Segment: &pb.U64Segment_RangeWithBitmap_{RangeWithBitmap: &pb.U64Segment_RangeWithBitmap{
		Start: 3, End: 13, Bitmap: []byte{0b0100_0101, 0b10}}}}), uint64(4))
	f.Add(encodeSeq(f, &pb.U64Segment{Segment: &pb.U64Segment_RangeWithHoles_{RangeWithHoles: &pb.U64Segment_RangeWithHoles{
		Start: 10, End: 16, Holes: u16s(10, 1, 4)}}}), uint64(4))
	f.Fuzz(func(t *testing.T, b []byte, rows uint64) {
		seq, err := DecodeRowIDSequence(b, rows%(1<<20))
		if err != nil {
			return
		}
		n := uint64(0)
		WalkRowIDs(seq, func(r RowIDRun) { n += r.N })
		if n != rows%(1<<20) {
			t.Fatalf("walked %d ids of %d rows", n, rows%(1<<20))
		}
	})
}
