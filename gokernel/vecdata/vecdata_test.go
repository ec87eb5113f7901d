package vecdata

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
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
		kind error
	}{
		{"arrow uint32 zstd", arrowOffsets(t, arrow.PrimitiveTypes.Uint32, []int64{3, 9, 4}, true), false, []uint32{3, 4, 9}, nil},
		{"arrow uint32 plain", arrowOffsets(t, arrow.PrimitiveTypes.Uint32, []int64{0}, false), false, []uint32{0}, nil},
		{"arrow int32", arrowOffsets(t, arrow.PrimitiveTypes.Int32, []int64{2, 7}, false), false, []uint32{2, 7}, nil},
		{"arrow negative", arrowOffsets(t, arrow.PrimitiveTypes.Int32, []int64{-1}, false), false, nil, errkind.Corrupt},
		{"arrow int64", arrowOffsets(t, arrow.PrimitiveTypes.Int64, []int64{1}, false), false, nil, errkind.Corrupt},
		{"arrow garbage", []byte("ARROW1 not really"), false, nil, errkind.Corrupt},
		{"bitmap", bmBytes, true, []uint32{1, 5, 70000}, nil},
		{"bitmap trailing", append(slices.Clone(bmBytes), 0), true, nil, errkind.Corrupt},
		{"bitmap garbage", []byte{1, 2, 3}, true, nil, errkind.Corrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got *roaring.Bitmap
			var err error
			if tc.bin {
				got, err = decodeBitmap(tc.data)
			} else {
				got, err = decodeArrowOffsets(tc.data)
			}
			if tc.kind != nil {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("err = %v, want %v", err, tc.kind)
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

func TestDeletionPath(t *testing.T) {
	df := &pb.DeletionFile{FileType: pb.DeletionFile_BITMAP, ReadVersion: 3, Id: 18446744073709551615}
	if got := DeletionPath(12, df); got != "_deletions/12-3-18446744073709551615.bin" {
		t.Fatal(got)
	}
	df.FileType = pb.DeletionFile_ARROW_ARRAY
	if got := DeletionPath(0, df); got != "_deletions/0-3-18446744073709551615.arrow" {
		t.Fatal(got)
	}
}

func TestFloyd(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, k uint64 }{{10, 0}, {10, 3}, {10, 10}, {10, 20}, {1 << 40, 1000}} {
		got := floyd(rng, tc.n, tc.k)
		if want := min(tc.n, tc.k); uint64(len(got)) != want {
			t.Fatalf("n=%d k=%d: %d values", tc.n, tc.k, len(got))
		}
		seen := map[uint64]bool{}
		for _, v := range got {
			if v >= tc.n || seen[v] {
				t.Fatalf("n=%d k=%d: bad or repeated value %d", tc.n, tc.k, v)
			}
			seen[v] = true
		}
	}
}

func TestAppendValid(t *testing.T) {
	const dim = 2
	vals := []float32{1, 2, float32(math.NaN()), 0, 3, 4, 5, 6, float32(math.Inf(-1)), 1, 7, 8}
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		bits := math.Float32bits(v)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	a := &lancefile.Array{Type: lancefile.FixedSizeList(lancefile.KindFloat32, dim), Len: 6, Values: raw,
		Validity: []byte{0b111011}} // row 2 null
	r := &Reader{col: &Column{Dim: dim, Elem: lancefile.KindFloat32}}
	b := &Batch{}
	r.appendValid(b, a, 3, 10, roaring.BitmapOf(15)) // row 5 (offset 15) deleted
	wantIDs := []uint64{3<<32 | 10, 3<<32 | 13}
	if !slices.Equal(b.RowIDs, wantIDs) || !slices.Equal(b.Vectors, []float32{1, 2, 5, 6}) || b.Skipped != 3 {
		t.Fatalf("got %v %v skipped %d", b.RowIDs, b.Vectors, b.Skipped)
	}
}
