package ivf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func f32Tensor(rows, cols int, vals ...float32) *Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return &Tensor{DType: pb.Tensor_FLOAT32, Shape: []uint32{uint32(rows), uint32(cols)}, Data: b}
}

func TestModelRoundTrip(t *testing.T) {
	loss := 1.5
	for _, tc := range []struct {
		name string
		m    *Model
	}{
		{"no centroids", &Model{Lengths: []uint32{3, 0, 5}}},
		{"centroids", &Model{Centroids: f32Tensor(2, 2, 1, 2, 3, 4), Lengths: []uint32{7, 1}, Loss: &loss}},
		{"empty", &Model{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeModel(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Lengths) != len(tc.m.Lengths) || got.TotalRows() != tc.m.TotalRows() {
				t.Fatalf("lengths %v", got.Lengths)
			}
			var sum uint64
			for i, n := range got.Lengths {
				if got.Offsets[i] != sum {
					t.Fatalf("offset %d = %d, want %d", i, got.Offsets[i], sum)
				}
				sum += uint64(n)
			}
			if (got.Loss == nil) != (tc.m.Loss == nil) {
				t.Fatal("loss presence changed")
			}
			if tc.m.Centroids != nil {
				v, ok := got.Centroids.Float64s()
				if !ok || len(v) != 4 || v[3] != 4 || got.NumPartitions() != 2 {
					t.Fatalf("centroids %v", v)
				}
			}
		})
	}
}

func TestDecodeModelCorrupt(t *testing.T) {
	bad := func(m *pb.Ivf) []byte {
		out, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}},
		{"offsets vs lengths", bad(&pb.Ivf{Offsets: []uint64{0, 1}, Lengths: []uint32{1}})},
		{"tensor size", bad(&pb.Ivf{Lengths: []uint32{1}, CentroidsTensor: &pb.Tensor{DataType: pb.Tensor_FLOAT32, Shape: []uint32{1, 4}, Data: []byte{1}}})},
		{"tensor 1-D", bad(&pb.Ivf{CentroidsTensor: &pb.Tensor{DataType: pb.Tensor_UINT8, Shape: []uint32{1}, Data: []byte{1}}})},
		{"centroids vs lengths", bad(&pb.Ivf{Lengths: []uint32{1, 2, 3}, CentroidsTensor: &pb.Tensor{DataType: pb.Tensor_UINT8, Shape: []uint32{2, 1}, Data: []byte{1, 2}}})},
		{"huge shape", bad(&pb.Ivf{CentroidsTensor: &pb.Tensor{DataType: pb.Tensor_FLOAT32, Shape: []uint32{1 << 31, 1 << 31}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeModel(tc.b); !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestParseQuantizerMeta(t *testing.T) {
	q, err := ParseQuantizerMeta(`{"rotate_mat_position":null,"fast_rotation_signs":[1,2],"rotation_type":"fast","code_dim":32,"num_bits":4,"packed":true,"query_estimator":"raw_query"}`)
	if err != nil || q.CodeDim != 32 || q.NumBits != 4 || q.Packed == nil || !*q.Packed || q.RotateMatPosition != nil || len(q.Raw) != 7 {
		t.Fatalf("rq: %+v %v", q, err)
	}
	q, err = ParseQuantizerMeta(`{"codebook_position":2,"nbits":8,"num_sub_vectors":8,"dimension":32,"codebook_tensor":[],"transposed":false}`)
	if err != nil || q.Transposed == nil || *q.Transposed || q.NumSubVectors != 8 || q.RotationType != "matrix" || q.QueryEstimator != "residual_query" {
		t.Fatalf("pq: %+v %v", q, err)
	}
	// pylance 0.23 spells the PQ bit width num_bits.
	q, err = ParseQuantizerMeta(`{"codebook_position":0,"num_bits":8,"num_sub_vectors":4,"dimension":32,"codebook_tensor":[],"transposed":true}`)
	if err != nil || q.NBits != 8 || q.NumSubVectors != 4 {
		t.Fatalf("pq 0.23: %+v %v", q, err)
	}
	q, err = ParseQuantizerMeta(`{"dim":32,"num_bits":8,"bounds":{"start":-1.5,"end":2}}`)
	if err != nil || q.SQBounds == nil || q.SQBounds.Start != -1.5 || q.SQBounds.End != 2 {
		t.Fatalf("sq: %+v %v", q, err)
	}
	for _, bad := range []string{"", "[]", `{"dim":"x"}`, `{"num_bits":1.5}`} {
		if _, err := ParseQuantizerMeta(bad); !errors.Is(err, errkind.Corrupt) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	if _, err := parseStorageMetadata(`[]`); !errors.Is(err, errkind.Corrupt) {
		t.Fatal("empty storage_metadata accepted")
	}
	if s, err := parseStorageMetadata(`["{\"dim\":4}"]`); err != nil || s != `{"dim":4}` {
		t.Fatalf("%q %v", s, err)
	}
}

func TestOpenFilesFixture(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "lance-compat", "v0.27.1", "pq_in_schema")
	st := storage.NewLocal(root, root)
	f, err := OpenFiles(context.Background(), st, "_indices/14a2a13d-1c6f-400c-b59c-8e2d10b9b68b/", lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != IVFPQ || f.Distance != "l2" || f.NumPartitions() != 1 || f.IVF.TotalRows() != 512 {
		t.Fatalf("%v %v %d %d", f.Type, f.Distance, f.NumPartitions(), f.IVF.TotalRows())
	}
	// Lance 0.27 kept the codebook inline in the JSON (codebook_position 0).
	if f.Quant.CodebookPosition != 0 || len(f.Quant.Raw["codebook_tensor"]) < 100 || f.Centroids() == nil {
		t.Fatalf("quantizer %+v", f.Quant)
	}
	if _, err := OpenFiles(context.Background(), st, "_indices/nope/", lancefile.Options{}); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("missing segment: %v", err)
	}
}

// writeRQSegment writes a two-file IVF_RQ segment of one partition and
// rows rows as pylance 0.39 to 2.x does: a rotation matrix at global buffer
// 2 of auxiliary.idx and quantizer metadata without code_dim,
// rotation_type or fast_rotation_signs.
func writeRQSegment(t *testing.T, st storage.Store, dir string, dim, rows int, matrix *Tensor) {
	t.Helper()
	ctx := context.Background()
	write := func(name string, fields []*lancefile.Field, cols []*lancefile.Array, bufs [][]byte, meta map[string]string) {
		sw, err := st.Create(ctx, dir+name)
		if err != nil {
			t.Fatal(err)
		}
		w, err := lancefile.NewWriter(sw, fields, lancefile.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bufs {
			if _, err := w.AddGlobalBuffer(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Write(cols); err != nil {
			t.Fatal(err)
		}
		for k, v := range meta {
			w.SetMetadata(k, []byte(v))
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := sw.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	rowids := make([]byte, 0, 8*rows)
	for r := 0; r < rows; r++ {
		rowids = binary.LittleEndian.AppendUint64(rowids, uint64(r))
	}
	codes := lancefile.FixedSizeList(lancefile.KindUint8, dim/8)
	f32 := lancefile.Primitive(lancefile.KindFloat32)
	u64 := lancefile.Primitive(lancefile.KindUint64)
	lengths, _ := (&Model{Lengths: []uint32{uint32(rows)}}).Encode()
	mat, err := EncodeTensor(matrix)
	if err != nil {
		t.Fatal(err)
	}
	write(AuxiliaryFileName,
		[]*lancefile.Field{lancefile.NewField("_rowid", u64, true), lancefile.NewField("_rabit_codes", codes, true),
			lancefile.NewField("__add_factors", f32, true), lancefile.NewField("__scale_factors", f32, true)},
		[]*lancefile.Array{{Type: u64, Len: rows, Values: rowids}, {Type: codes, Len: rows, Values: make([]byte, rows*dim/8)},
			{Type: f32, Len: rows, Values: make([]byte, 4*rows)}, {Type: f32, Len: rows, Values: make([]byte, 4*rows)}},
		[][]byte{lengths, mat},
		map[string]string{KeyDistanceType: "l2", KeyIVF: "1", KeyStorageMetadata: `["{\"rotate_mat_position\":2,\"num_bits\":1,\"packed\":true}"]`})
	centroids, _ := (&Model{Lengths: []uint32{0}, Centroids: f32Tensor(1, dim, make([]float32, dim)...)}).Encode()
	write(IndexFileName, []*lancefile.Field{lancefile.NewField("__flat_marker", u64, false)},
		[]*lancefile.Array{{Type: u64, Len: 0}}, [][]byte{centroids},
		map[string]string{KeyIndex: `{"type":"IVF_RQ","distance_type":"l2"}`, KeyIVF: "1"})
}

// An IVF_RQ segment with the matrix rotation gives its matrix back (it was
// read and dropped once: merges then wrote a rotate_mat_position past the
// output's buffers), and the keys such segments lack take Lance's defaults.
func TestRQMatrixRotation(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://rq-matrix")
	const dim = 16
	vals := make([]float32, dim*dim)
	for i := range vals {
		vals[i] = float32(i%7) - 3
	}
	writeRQSegment(t, st, "_indices/rq/", dim, 40, f32Tensor(dim, dim, vals...))
	f, err := OpenFiles(ctx, st, "_indices/rq/", lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != IVFRQ || f.Quant.RotationType != "matrix" || f.Quant.QueryEstimator != "residual_query" || f.Quant.CodeDim != 0 {
		t.Fatalf("%s %+v", f.Type, f.Quant)
	}
	cb, rot, err := f.QuantizerBuffers(ctx)
	if err != nil || cb != nil || rot == nil {
		t.Fatalf("codebook %v rotation %v: %v", cb, rot, err)
	}
	got, ok := rot.Float32s()
	if !ok || rot.Rows() != dim || !slices.Equal(got, vals) {
		t.Fatalf("rotation %v rows %d", rot.Shape, rot.Rows())
	}
}

// A segment with only index.idx is the single-file layout of pylance 0.23
// and earlier when that file's footer says format 0.x (Unsupported, named),
// and a segment missing its auxiliary file otherwise (NotFound).
func TestOpenFilesSingleFile(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://single-file")
	tail := func(major, minor uint16, magic string) []byte {
		b := make([]byte, 64, 72)
		b = binary.LittleEndian.AppendUint16(b, major)
		b = binary.LittleEndian.AppendUint16(b, minor)
		return append(b, magic...)
	}
	tests := []struct {
		name  string
		index []byte
		want  error
		words []string
	}{
		{"format 0.1", tail(0, 1, "LANC"), errkind.Unsupported, []string{"single-file", "0.23", "replace=True"}},
		{"format 0.2", tail(0, 2, "LANC"), errkind.Unsupported, []string{"single-file"}},
		{"format 2.0 without auxiliary.idx", tail(0, 3, "LANC"), errkind.NotFound, []string{AuxiliaryFileName}},
		{"not a Lance file", tail(0, 1, "XXXX"), errkind.NotFound, nil},
		{"shorter than a tail", []byte("LANC"), errkind.NotFound, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := fmt.Sprintf("_indices/%d/", i)
			if err := storage.Put(ctx, st, dir+IndexFileName, tc.index); err != nil {
				t.Fatal(err)
			}
			_, err := OpenFiles(ctx, st, dir, lancefile.Options{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// TestParseQuantizerMetaShared: the deltas of one index carry the same
// quantizer text, parsed once and shared; other texts get their own; the
// cache stays bounded; a text that does not parse is never cached.
func TestParseQuantizerMetaShared(t *testing.T) {
	text := func(i int) string { return fmt.Sprintf(`{"dim":%d,"num_bits":8,"bounds":{"start":-1,"end":1}}`, i+1) }
	a, err := ParseQuantizerMeta(text(0))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ParseQuantizerMeta(text(0))
	c, _ := ParseQuantizerMeta(text(1))
	if a != b || a == c || a.Dim != 1 || c.Dim != 2 {
		t.Fatalf("shared %v, distinct %v, dims %d %d", a == b, a != c, a.Dim, c.Dim)
	}
	for i := range 3 * quantCacheMax {
		if q, err := ParseQuantizerMeta(text(i)); err != nil || q.Dim != i+1 {
			t.Fatalf("text %d: %v %v", i, q, err)
		}
		if n := len(parsedQuant.m); n > quantCacheMax {
			t.Fatalf("%d texts cached, bound %d", n, quantCacheMax)
		}
	}
	for range 2 {
		if _, err := ParseQuantizerMeta(`{"dim":`); err == nil {
			t.Fatal("truncated JSON parsed")
		}
	}
	if parsedQuant.get(`{"dim":`) != nil {
		t.Fatal("a failed parse was cached")
	}
}

// TestDecodeModelInPlace: the in-place decode gives what protobuf gives,
// for models written in either field order, with the centroids message
// twice (protobuf merges them), truncated or garbled; and its centroids
// are the input's bytes, not a copy.
func TestDecodeModelInPlace(t *testing.T) {
	loss := 0.25
	tensor := &pb.Tensor{DataType: pb.Tensor_FLOAT32, Shape: []uint32{3, 2}, Data: f32Tensor(3, 2, 1, 2, 3, 4, 5, 6).Data}
	full := &pb.Ivf{Lengths: []uint32{4, 0, 9}, Offsets: []uint64{0, 4, 4}, CentroidsTensor: tensor, Loss: &loss}
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tensorFirst := append(protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), enc(tensor)), enc(&pb.Ivf{Lengths: full.Lengths, Loss: &loss})...)
	twice := append(enc(full), enc(&pb.Ivf{CentroidsTensor: &pb.Tensor{Shape: []uint32{3, 2}}})...)
	dataTwice := append(enc(&pb.Ivf{Lengths: full.Lengths}), protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType),
		append(enc(tensor), protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), tensor.Data)...))...)
	cases := map[string][]byte{
		"full":         enc(full),
		"tensor first": tensorFirst,
		"no centroids": enc(&pb.Ivf{Lengths: []uint32{1, 2}}),
		"empty":        {},
		"tensor twice": twice,
		"data twice":   dataTwice,
		"empty tensor": enc(&pb.Ivf{Lengths: []uint32{1}, CentroidsTensor: &pb.Tensor{}}),
		"bad tensor":   enc(&pb.Ivf{Lengths: []uint32{1}, CentroidsTensor: &pb.Tensor{DataType: pb.Tensor_FLOAT32, Shape: []uint32{1, 4}, Data: []byte{1}}}),
		"garbage":      {0xff, 0xff, 0xff},
		"wrong type 4": protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 7),
	}
	full2 := enc(full)
	for cut := 1; cut < len(full2); cut += 7 {
		cases[fmt.Sprintf("truncated at %d", cut)] = full2[:cut]
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			want, werr := DecodeModel(b)
			got, gerr := decodeModelInPlace(slices.Clone(b))
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("protobuf: %v, in place: %v", werr, gerr)
			}
			if werr != nil {
				if !errors.Is(gerr, errkind.Corrupt) {
					t.Fatalf("in place: %v", gerr)
				}
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("in place %+v, protobuf %+v", got, want)
			}
		})
	}
	b := enc(full)
	m, err := decodeModelInPlace(b)
	if err != nil {
		t.Fatal(err)
	}
	if p := unsafe.SliceData(m.Centroids.Data); uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(&b[0])) || uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b)) {
		t.Fatal("centroids were copied")
	}
}
