package table

import (
	"bytes"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

func arrowOffsets(t *testing.T, typ arrow.DataType, vals []int64, compress bool) []byte {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "row_id", Type: typ}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, v := range vals {
		switch fb := b.Field(0).(type) {
		case *array.Uint32Builder:
			fb.Append(uint32(v))
		case *array.Int32Builder:
			fb.Append(int32(v))
		case *array.Int64Builder:
			fb.Append(v)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	opts := []ipc.Option{ipc.WithSchema(schema)}
	if compress {
		opts = append(opts, ipc.WithZstd())
	}
	w, err := ipc.NewFileWriter(&buf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeDeletions(t *testing.T) {
	bm := roaring.BitmapOf(1, 5, 70000)
	bmBytes, _ := bm.ToBytes()
	cases := []struct {
		name string
		data []byte
		bin  bool
		want []uint32
		bad  bool
	}{
		{"arrow uint32 zstd", arrowOffsets(t, arrow.PrimitiveTypes.Uint32, []int64{3, 9, 4}, true), false, []uint32{3, 4, 9}, false},
		{"arrow uint32 plain", arrowOffsets(t, arrow.PrimitiveTypes.Uint32, []int64{0}, false), false, []uint32{0}, false},
		{"arrow int32", arrowOffsets(t, arrow.PrimitiveTypes.Int32, []int64{2, 7}, false), false, []uint32{2, 7}, false},
		{"arrow negative", arrowOffsets(t, arrow.PrimitiveTypes.Int32, []int64{-1}, false), false, nil, true},
		{"arrow int64", arrowOffsets(t, arrow.PrimitiveTypes.Int64, []int64{1}, false), false, nil, true},
		{"arrow garbage", []byte("ARROW1 not really"), false, nil, true},
		{"bitmap", bmBytes, true, []uint32{1, 5, 70000}, false},
		{"bitmap trailing", append(slices.Clone(bmBytes), 0), true, nil, true},
		{"bitmap garbage", []byte{1, 2, 3}, true, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *roaring.Bitmap
			var err error
			if tc.bin {
				got, err = decodeDeletionBitmap(tc.data)
			} else {
				got, err = decodeDeletionArrow(tc.data)
			}
			if tc.bad {
				if err == nil {
					t.Fatalf("decoded %v, want an error", got.ToArray())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.ToArray(), tc.want) {
				t.Fatalf("got %v, want %v", got.ToArray(), tc.want)
			}
		})
	}
}

func TestDeletionFileName(t *testing.T) {
	df := &pb.DeletionFile{FileType: pb.DeletionFile_BITMAP, ReadVersion: 3, Id: 18446744073709551615}
	if got := DeletionFileName(12, df); got != "_deletions/12-3-18446744073709551615.bin" {
		t.Fatal(got)
	}
	df.FileType = pb.DeletionFile_ARROW_ARRAY
	if got := DeletionFileName(0, df); got != "_deletions/0-3-18446744073709551615.arrow" {
		t.Fatal(got)
	}
}
