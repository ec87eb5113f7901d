package segment

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

const (
	testParts = 5
	testDim   = 8
	testCode  = 4 // PQ code bytes per row
)

func centroids() *ivf.Tensor {
	b := make([]byte, 4*testParts*testDim)
	for i := 0; i < testParts*testDim; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
	}
	return &ivf.Tensor{DType: pb.Tensor_FLOAT32, Shape: []uint32{testParts, testDim}, Data: b}
}

// fakeSegment writes a PQ segment covering fragment frag: rows of each
// partition get codes derived from their row id, stored transposed (the
// query layout) when transposed is set.
func fakeSegment(t *testing.T, st storage.Store, frag uint32, lengths []uint32, transposed bool) *pb.IndexMetadata {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	dir := table.IndicesDir + id.String() + "/"
	var rowids, codes []byte
	row := uint64(0)
	for _, n := range lengths {
		part := make([]byte, 0, int(n)*testCode)
		for i := 0; i < int(n); i++ {
			rid := uint64(frag)<<32 | row
			rowids = binary.LittleEndian.AppendUint64(rowids, rid)
			for c := 0; c < testCode; c++ {
				part = append(part, byte(rid*7+uint64(c)*13))
			}
			row++
		}
		if transposed {
			laid := make([]byte, len(part))
			ivf.TransposePQ(laid, part, int(n), testCode)
			part = laid
		}
		codes = append(codes, part...)
	}
	nrows := int(row)
	codebook := &ivf.Tensor{DType: pb.Tensor_FLOAT32, Shape: []uint32{256, testDim}, Data: make([]byte, 4*256*testDim)}
	sw, _ := st.Create(ctx, dir+ivf.AuxiliaryFileName)
	w, err := lancefile.NewWriter(sw, []*lancefile.Field{
		lancefile.NewField("_rowid", lancefile.Primitive(lancefile.KindUint64), true),
		lancefile.NewField("__pq_code", lancefile.FixedSizeList(lancefile.KindUint8, testCode), true),
	}, lancefile.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ivfBytes, _ := (&ivf.Model{Lengths: lengths}).Encode()
	w.AddGlobalBuffer(ivfBytes)
	cb, _ := ivf.EncodeTensor(codebook)
	w.AddGlobalBuffer(cb)
	if err := w.Write([]*lancefile.Array{
		{Type: lancefile.Primitive(lancefile.KindUint64), Len: nrows, Values: rowids},
		{Type: lancefile.FixedSizeList(lancefile.KindUint8, testCode), Len: nrows, Values: codes},
	}); err != nil {
		t.Fatal(err)
	}
	q, _ := json.Marshal(map[string]any{"codebook_position": 2, "nbits": 8, "num_sub_vectors": testCode, "dimension": testDim,
		"codebook_tensor": []int{}, "transposed": transposed})
	sm, _ := json.Marshal([]string{string(q)})
	w.SetMetadata(ivf.KeyDistanceType, []byte("l2"))
	w.SetMetadata(ivf.KeyIVF, []byte("1"))
	w.SetMetadata(ivf.KeyStorageMetadata, sm)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	sw.Finish()

	sw, _ = st.Create(ctx, dir+ivf.IndexFileName)
	w, _ = lancefile.NewWriter(sw, []*lancefile.Field{lancefile.NewField("__flat_marker", lancefile.Primitive(lancefile.KindUint64), false)}, lancefile.WriterOptions{})
	ivfBytes, _ = (&ivf.Model{Lengths: make([]uint32, testParts), Centroids: centroids()}).Encode()
	w.AddGlobalBuffer(ivfBytes)
	w.SetMetadata(ivf.KeyIndex, []byte(`{"type":"IVF_PQ","distance_type":"l2"}`))
	w.SetMetadata(ivf.KeyIVF, []byte("1"))
	w.SetMetadata(ivf.KeyFlat, []byte(`["","","","",""]`))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	sw.Finish()

	bm, _ := table.EncodeFragmentBitmap([]uint32{frag})
	iv := int32(1)
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Fields: []int32{1}, Name: "vec_idx", DatasetVersion: 1,
		FragmentBitmap: bm, IndexVersion: &iv, IndexDetails: &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails"}}
}

// testSnapshot is a dataset version with fragments 0-9 (1000 rows each, no
// deletions).
func testSnapshot() *table.Snapshot {
	m := &pb.Manifest{Version: 3}
	for f := uint64(0); f < 10; f++ {
		m.Fragments = append(m.Fragments, &pb.DataFragment{Id: f, PhysicalRows: 1000})
	}
	return &table.Snapshot{Ref: table.VersionRef{Version: 3}, Manifest: m}
}

// rowMajor reads a segment's partitions back as row id -> (partition, codes).
func rowMajor(t *testing.T, st storage.Store, im *pb.IndexMetadata) map[uint64]string {
	t.Helper()
	f, err := ivf.OpenFiles(context.Background(), st, table.IndexDir(im), lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[uint64]string{}
	for p, n := range f.IVF.Lengths {
		off := f.IVF.Offsets[p]
		ids, _ := f.Aux.Read(context.Background(), "_rowid", off, off+uint64(n))
		codes, _ := f.Aux.Read(context.Background(), "__pq_code", off, off+uint64(n))
		plain := codes.Values
		if f.Quant.Transposed != nil && *f.Quant.Transposed {
			plain = make([]byte, len(codes.Values))
			ivf.UntransposePQ(plain, codes.Values, int(n), testCode)
		}
		for i := 0; i < int(n); i++ {
			out[binary.LittleEndian.Uint64(ids.Values[8*i:])] = fmt.Sprintf("p%d:%x", p, plain[i*testCode:(i+1)*testCode])
		}
	}
	return out
}

func TestMergeChainsAndWindows(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://merge")
	r := rand.New(rand.NewPCG(1, 1))
	var segs []*pb.IndexMetadata
	want := map[uint64]string{}
	for frag := uint32(0); frag < 6; frag++ {
		lengths := make([]uint32, testParts)
		for p := range lengths {
			lengths[p] = uint32(r.IntN(70)) // includes empty partitions, odd sizes
		}
		s := fakeSegment(t, st, frag, lengths, frag%2 == 0) // mixed layouts
		segs = append(segs, s)
		for k, v := range rowMajor(t, st, s) {
			want[k] = v
		}
	}
	for _, tc := range []struct{ window, ahead int }{{1, 1}, {50, 1}, {1 << 20, 1}, {1, 3}, {50, 3}, {50, 8}} {
		window := tc.window
		opts := MergeOptions{WindowRows: window, Parallelism: 2, ReadAhead: tc.ahead}
		m1, err := Merge(ctx, st, testSnapshot(), segs[:3], opts)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{m1, segs[3]}, opts)
		if err != nil {
			t.Fatal(err)
		}
		m3, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{m2, segs[4], segs[5]}, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := rowMajor(t, st, m3)
		if len(got) != len(want) {
			t.Fatalf("window %d: %d rows, want %d", window, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("window %d: row %x is %s, want %s", window, k, got[k], v)
			}
		}
		ids, _, _ := table.DecodeFragmentBitmap(m3.GetFragmentBitmap())
		if fmt.Sprint(ids) != "[0 1 2 3 4 5]" || len(m3.GetFiles()) != 2 || m3.GetCreatedAt() == 0 {
			t.Fatalf("metadata %v %v", ids, m3)
		}
	}
}

// Inputs whose files share one layout merge whatever their index versions
// (pylance 6 to 8 records an IVF_RQ base as 2 and its deltas as 1), and the
// output takes the lowest, as those releases' own merge writes.
func TestMergeMixedIndexVersions(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://versions")
	tests := []struct {
		versions []int32
		want     int32
	}{
		{[]int32{2, 1, 1}, 1},
		{[]int32{1, 2}, 1},
		{[]int32{0, 1}, 0},
		{[]int32{2, 2}, 2},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.versions), func(t *testing.T) {
			var metas []*pb.IndexMetadata
			for i, v := range tc.versions {
				im := fakeSegment(t, st, uint32(i), []uint32{2, 2, 2, 2, 2}, true)
				im.IndexVersion = &v
				metas = append(metas, im)
			}
			m, err := Merge(ctx, st, testSnapshot(), metas, MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if m.GetIndexVersion() != tc.want {
				t.Fatalf("index version %d, want %d", m.GetIndexVersion(), tc.want)
			}
		})
	}
}

func TestMergeFiltersUncoveredRows(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://filter")
	a := fakeSegment(t, st, 0, []uint32{10, 10, 10, 10, 10}, true)
	b := fakeSegment(t, st, 1, []uint32{5, 5, 5, 5, 5}, true)
	// b's coverage was pruned: it no longer covers fragment 1.
	b.FragmentBitmap, _ = table.EncodeFragmentBitmap([]uint32{7})
	m, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{a, b}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := rowMajor(t, st, m)
	if len(got) != 50 {
		t.Fatalf("%d rows, want fragment 0's 50", len(got))
	}
}

// TestMergeDropsStaleRows: rows deleted at the merge's version (both
// deletion file kinds) and rows of fragments the dataset no longer has are
// dropped; a single input with such rows is rewritten, one without is
// returned as it is.
func TestMergeDropsStaleRows(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://stale")
	a := fakeSegment(t, st, 0, []uint32{10, 10, 10, 10, 10}, true) // 50 rows, fragment 0
	b := fakeSegment(t, st, 1, []uint32{5, 5, 5, 5, 5}, false)     // 25 rows, fragment 1
	c := fakeSegment(t, st, 2, []uint32{4, 4, 4, 4, 4}, true)      // 20 rows, fragment 2
	snap := testSnapshot()
	// Fragment 0: offsets 0-4 deleted (Arrow file); fragment 1: 3 and 7
	// (roaring bitmap); fragment 2 is gone.
	frags := snap.Manifest.Fragments
	frags[0].DeletionFile = &pb.DeletionFile{FileType: pb.DeletionFile_ARROW_ARRAY, ReadVersion: 2, Id: 1, NumDeletedRows: 5}
	writeArrowDeletions(t, st, table.DeletionFileName(0, frags[0].DeletionFile), []uint32{0, 1, 2, 3, 4})
	frags[1].DeletionFile = &pb.DeletionFile{FileType: pb.DeletionFile_BITMAP, ReadVersion: 2, Id: 2, NumDeletedRows: 2}
	bm := roaring.BitmapOf(3, 7)
	var buf bytes.Buffer
	if _, err := bm.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := storage.Put(ctx, st, table.DeletionFileName(1, frags[1].DeletionFile), buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	snap.Manifest.Fragments = append(frags[:2:2], frags[3:]...)
	for _, tc := range []struct {
		name   string
		in     []*pb.IndexMetadata
		rows   int
		stale  []uint64
		reused bool
	}{
		{"all three", []*pb.IndexMetadata{a, b, c}, 45 + 23, []uint64{45, 23, 20}, false},
		{"deleted rows alone", []*pb.IndexMetadata{a}, 45, nil, false},
		{"removed fragment alone", []*pb.IndexMetadata{c}, 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Merge(ctx, st, snap, tc.in, MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if table.IndexUUID(m) == table.IndexUUID(tc.in[0]) {
				t.Fatal("the input came back unchanged")
			}
			got := rowMajor(t, st, m)
			if len(got) != tc.rows {
				t.Fatalf("%d rows, want %d", len(got), tc.rows)
			}
			for id := range got {
				f, off := id>>32, id&0xffffffff
				if f == 2 || f == 0 && off < 5 || f == 1 && (off == 3 || off == 7) {
					t.Fatalf("stale row %d/%d kept", f, off)
				}
			}
		})
	}
	// The planner's estimate from the manifest: fragment 0 has 1000
	// physical rows, so a 50-row segment over it is not stale by the
	// manifest's count; a segment of a removed fragment is all stale.
	if got := StaleRows(snap, c, 20); got != 20 {
		t.Fatalf("StaleRows of a removed fragment's segment = %d, want 20", got)
	}
	if got := StaleRows(snap, a, 1000); got != 5 {
		t.Fatalf("StaleRows = %d, want the 5 deleted rows", got)
	}
	// Without stale rows, a single input is returned as it is.
	d := fakeSegment(t, st, 3, []uint32{1, 1, 1, 1, 1}, true)
	m, err := Merge(ctx, st, snap, []*pb.IndexMetadata{d}, MergeOptions{})
	if err != nil || m != d {
		t.Fatalf("single clean input: %v %v", m, err)
	}
}

func writeArrowDeletions(t *testing.T, st storage.Store, name string, offsets []uint32) {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{{Name: "row_id", Type: arrow.PrimitiveTypes.Uint32}}, nil)
	b := array.NewUint32Builder(memory.DefaultAllocator)
	b.AppendValues(offsets, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(offsets)))
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := storage.Put(context.Background(), st, name, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// cancelOnCreate cancels a context as soon as an output object is
// created, so a merge is cancelled with its output open.
type cancelOnCreate struct {
	storage.Store
	cancel context.CancelFunc
}

func (c cancelOnCreate) Create(ctx context.Context, name string) (storage.Writer, error) {
	w, err := c.Store.Create(ctx, name)
	c.cancel()
	return w, err
}

func TestMergeCancelRemovesOutput(t *testing.T) {
	mem := storage.NewMem("memory://cancel")
	a := fakeSegment(t, mem, 0, []uint32{100, 100, 100, 100, 100}, true)
	b := fakeSegment(t, mem, 1, []uint32{100, 100, 100, 100, 100}, false)
	before, _ := mem.List(context.Background(), table.IndicesDir)
	for _, ahead := range []int{1, 3} { // windows read ahead: every reader is waited for
		ctx, cancel := context.WithCancel(context.Background())
		st := cancelOnCreate{mem, cancel}
		_, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{a, b}, MergeOptions{WindowRows: 1, ReadAhead: ahead})
		if !errors.Is(err, context.Canceled) || errkind.Tag(err) != "cancelled" {
			t.Fatalf("read ahead %d: got %v", ahead, err)
		}
		after, _ := mem.List(context.Background(), table.IndicesDir)
		if len(after) != len(before) {
			t.Fatalf("read ahead %d: a cancelled merge left %d files", ahead, len(after)-len(before))
		}
	}
}

func TestMergeRefusals(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://refuse")
	a := fakeSegment(t, st, 0, []uint32{3, 3, 3, 3, 3}, true)
	b := fakeSegment(t, st, 1, []uint32{3, 3, 3, 3, 3}, true)
	overlap := fakeSegment(t, st, 0, []uint32{1, 1, 1, 1, 1}, true)
	future := fakeSegment(t, st, 2, []uint32{1, 1, 1, 1, 1}, true)
	future.DatasetVersion = 9
	stable := testSnapshot()
	stable.Manifest.ReaderFeatureFlags = table.FlagStableRowIDs
	stable.Manifest.Fragments = []*pb.DataFragment{{Id: 0, PhysicalRows: 15}, {Id: 1, PhysicalRows: 15}}
	for _, tc := range []struct {
		name string
		in   []*pb.IndexMetadata
		snap *table.Snapshot
		kind error
		msg  string
	}{
		{"empty", nil, testSnapshot(), errkind.InvalidInput, "at least one"},
		{"overlap", []*pb.IndexMetadata{a, overlap}, testSnapshot(), errkind.InvalidInput, "both cover fragment 0"},
		{"future", []*pb.IndexMetadata{a, future}, testSnapshot(), errkind.InvalidInput, "dataset version 9"},
		{"stable row ids without a sequence", []*pb.IndexMetadata{a, b}, stable, errkind.Corrupt, "no row id sequence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := st.List(ctx, table.IndicesDir)
			_, err := Merge(ctx, st, tc.snap, tc.in, MergeOptions{})
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v", err)
			}
			after, _ := st.List(ctx, table.IndicesDir)
			if !bytes.Equal([]byte(fmt.Sprint(before)), []byte(fmt.Sprint(after))) {
				t.Fatal("a refused merge wrote files")
			}
		})
	}
}

// TestMergeRQKeepsAlignedBlocks checks the block-copy path of mergeRQ
// against the plain definition: unpack every part, concatenate, pack once.
func TestMergeRQKeepsAlignedBlocks(t *testing.T) {
	const width = 16
	tests := []struct {
		name string
		lens []int
		laid []bool
	}{
		{"one packed part, full blocks", []int{64}, []bool{true}},
		{"packed base then row-major deltas", []int{96, 10, 7}, []bool{true, false, false}},
		{"packed base with a tail, then packed", []int{70, 33}, []bool{true, true}},
		{"row-major then packed, aligned", []int{32, 64, 5}, []bool{false, true, true}},
		{"row-major then packed, unaligned", []int{5, 64}, []bool{false, true}},
		{"one row-major row, then packed", []int{1, 64}, []bool{false, true}},
		{"33 row-major rows, then packed", []int{33, 32}, []bool{false, true}},
		{"only tails", []int{3, 4, 31}, []bool{true, true, true}},
		{"many", []int{200, 1, 31, 32, 33, 64, 17}, []bool{true, true, false, true, true, false, true}},
	}
	rng := rand.New(rand.NewPCG(7, 9))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []*lancefile.Array
			var all []byte
			n := 0
			for i, l := range tt.lens {
				rows := make([]byte, l*width)
				for j := range rows {
					rows[j] = byte(rng.Uint32())
				}
				all = append(all, rows...)
				vals := rows
				if tt.laid[i] {
					vals = make([]byte, len(rows))
					ivf.PackRQ(vals, rows, l, width)
				}
				parts = append(parts, &lancefile.Array{Len: l, Values: vals})
				n += l
			}
			want := make([]byte, n*width)
			ivf.PackRQ(want, all, n, width)
			got := make([]byte, n*width)
			mg := &merger{}
			mg.mergeRQ(got, parts, tt.laid, width)
			if !bytes.Equal(got, want) {
				t.Fatalf("mergeRQ differs from pack(concat(unpack(parts)))")
			}
			// And the result unpacks to the rows in order.
			back := make([]byte, n*width)
			ivf.UnpackRQ(back, got, n, width)
			if !bytes.Equal(back, all) {
				t.Fatalf("rows out of order")
			}
		})
	}
}
