package btree

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

func TestSortKeyOrdersLikeTheValues(t *testing.T) {
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	for _, tc := range []struct {
		kind lancefile.Kind
		vals [][]byte // ascending
	}{
		{lancefile.KindInt64, [][]byte{le64(uint64(math.MaxUint64/2 + 1)), le64(^uint64(0)), le64(0), le64(1), le64(math.MaxInt64)}},
		{lancefile.KindInt32, [][]byte{le32(1 << 31), le32(^uint32(0)), le32(0), le32(math.MaxInt32)}},
		{lancefile.KindInt8, [][]byte{{0x80}, {0xff}, {0}, {0x7f}}},
		{lancefile.KindBool, [][]byte{{0}, {1}}},
		// half floats: -inf, -2, -0, 0, 1.5, +inf, NaN
		{lancefile.KindFloat16, [][]byte{{0x00, 0xfc}, {0x00, 0xc0}, {0x00, 0x80}, {0, 0}, {0x00, 0x3e}, {0x00, 0x7c}, {0x00, 0x7e}}},
		{lancefile.KindUint64, [][]byte{le64(0), le64(1), le64(1 << 63), le64(^uint64(0))}},
		{lancefile.KindFloat64, [][]byte{le64(math.Float64bits(math.Inf(-1))), le64(math.Float64bits(-1.5)), le64(math.Float64bits(math.Copysign(0, -1))),
			le64(math.Float64bits(0)), le64(math.Float64bits(2)), le64(math.Float64bits(math.Inf(1))), le64(math.Float64bits(math.NaN()))}},
		{lancefile.KindFloat32, [][]byte{le32(math.Float32bits(float32(math.Inf(-1)))), le32(math.Float32bits(-3)), le32(math.Float32bits(0)),
			le32(math.Float32bits(0.5)), le32(math.Float32bits(float32(math.Inf(1))))}},
	} {
		for i := 1; i < len(tc.vals); i++ {
			if a, b := lancefile.SortKey(tc.kind, tc.vals[i-1]), lancefile.SortKey(tc.kind, tc.vals[i]); a >= b {
				t.Errorf("%v: value %d (%x) does not sort before value %d (%x): keys %d, %d", tc.kind, i-1, tc.vals[i-1], i, tc.vals[i], a, b)
			}
		}
	}
}

// writeSegment writes a BTREE segment of rows (value, null, row id) with
// the package's own writer, as a merge writes one.
func writeSegment(t testing.TB, st storage.Store, rows []row, batch int, frag uint32) *pb.IndexMetadata {
	t.Helper()
	ctx := context.Background()
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].null != rows[j].null {
			return rows[i].null
		}
		return rows[i].v < rows[j].v
	})
	id := uuid.New()
	dir := table.IndicesDir + id.String() + "/"
	w, err := newPageWriter(ctx, st, dir, lancefile.Primitive(lancefile.KindInt64), batch, lancefile.V2_2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.add(ctx, r.null, binary.LittleEndian.AppendUint64(nil, uint64(r.v)), r.id); err != nil {
			t.Fatal(err)
		}
	}
	files, err := w.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bm, _ := table.EncodeFragmentBitmap([]uint32{frag})
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Name: "k_idx", Fields: []int32{0}, FragmentBitmap: bm, Files: files}
}

type row struct {
	v    int64
	null bool
	id   uint64
}

func TestMergeIsOneSortedRunThatChecksClean(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	rng := rand.New(rand.NewPCG(1, 2))
	var metas []*pb.IndexMetadata
	var all []row
	for f := uint32(0); f < 4; f++ {
		var rows []row
		for i := 0; i < 1000+int(f)*333; i++ {
			r := row{v: rng.Int64N(200) - 100, null: rng.IntN(20) == 0, id: uint64(f)<<32 | uint64(i)}
			rows = append(rows, r)
		}
		all = append(all, rows...)
		metas = append(metas, writeSegment(t, st, slices.Clone(rows), 256, f))
	}
	for _, m := range metas {
		res, err := Check(ctx, st, m, CheckOptions{})
		if err != nil || len(res.Problems) > 0 {
			t.Fatalf("input %v: %v %+v", table.IndexUUID(m), err, res)
		}
	}
	dropped := func(id uint64) bool { return id%7 == 0 }
	out := uuid.New()
	res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out.String(), Keep: func(id uint64) bool { return !dropped(id) }})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, r := range all {
		if !dropped(r.id) {
			want++
		}
	}
	if res.RowsRead != uint64(len(all)) || res.RowsWritten != uint64(want) || res.Pages != uint64((want+255)/256) {
		t.Fatalf("read %d written %d pages %d; want %d, %d, %d", res.RowsRead, res.RowsWritten, res.Pages, len(all), want, (want+255)/256)
	}
	covered := func(id uint64) bool { return id>>32 < 4 }
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
	chk, err := Check(ctx, st, merged, CheckOptions{Covered: covered})
	if err != nil {
		t.Fatal(err)
	}
	if len(chk.Problems) > 0 || chk.Rows != uint64(want) {
		t.Fatalf("merged segment: %+v", chk)
	}
	// A merged segment merges again, with an input whose keys interleave.
	out2 := uuid.New()
	again, err := Merge(ctx, st, []*pb.IndexMetadata{merged, writeSegment(t, st, []row{{v: -1000, id: 5 << 32}, {null: true, id: 5<<32 | 1}, {v: 1000, id: 5<<32 | 2}}, 256, 5)}, MergeOptions{IndexUUID: out2.String()})
	if err != nil {
		t.Fatal(err)
	}
	chk, err = Check(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out2[:]}, Files: again.Files}, CheckOptions{})
	if err != nil || len(chk.Problems) > 0 || chk.Rows != uint64(want+3) {
		t.Fatalf("merged again: %v %+v", err, chk)
	}
}

func TestCheckFindsDisorderAndDuplicates(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	id := uuid.New()
	dir := table.IndicesDir + id.String() + "/"
	w, err := newPageWriter(ctx, st, dir, lancefile.Primitive(lancefile.KindInt64), 2, lancefile.V2_2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []row{{v: 1, id: 1}, {v: 3, id: 2}, {v: 2, id: 3}, {v: 4, id: 3}} { // 3 before 2; id 3 twice
		if err := w.add(ctx, r.null, binary.LittleEndian.AppendUint64(nil, uint64(r.v)), r.id); err != nil {
			t.Fatal(err)
		}
	}
	files, err := w.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: files}, CheckOptions{Covered: func(id uint64) bool { return id != 2 }})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range res.Problems {
		kinds = append(kinds, p.Check+": "+p.Message)
	}
	if len(res.Problems) != 3 {
		t.Fatalf("problems %q, want the disorder, the duplicate and the foreign row id", kinds)
	}
}

// TestSampledCheck: the check before a commit reads a sample of pages and
// the whole page table. On a clean segment it finds nothing; it finds a
// page out of place (from the page table alone), a disorder inside a page
// it reads, and a row id repeated within the pages it reads.
func TestSampledCheck(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	write := func(vals []int64, dup bool) *pb.IndexMetadata {
		id := uuid.New()
		w, err := newPageWriter(ctx, st, table.IndicesDir+id.String()+"/", lancefile.Primitive(lancefile.KindInt64), 4, lancefile.V2_2)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			id := uint64(i)
			if dup && i == len(vals)-1 {
				id = 0 // the first row's: both in pages the sample reads
			}
			if err := w.add(ctx, false, binary.LittleEndian.AppendUint64(nil, uint64(v)), id); err != nil {
				t.Fatal(err)
			}
		}
		files, err := w.finish(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: files}
	}
	sorted := make([]int64, 40) // 10 pages of 4
	for i := range sorted {
		sorted[i] = int64(i)
	}
	pageSwapped := slices.Clone(sorted) // pages 4 and 5 swapped: each page sorted, the table not
	copy(pageSwapped[16:20], sorted[20:24])
	copy(pageSwapped[20:24], sorted[16:20])
	inPage := slices.Clone(sorted) // rows 1 and 2 of the first page swapped
	inPage[1], inPage[2] = inPage[2], inPage[1]
	for _, tc := range []struct {
		name string
		vals []int64
		dup  bool
		want string
	}{
		{"clean", sorted, false, ""},
		{"a page out of place", pageSwapped, false, "page 5 starts below the end of page 4"},
		{"a disorder in a page read", inPage, false, "row 2 is out of order"},
		{"a row id twice", sorted, true, "row id 0 (fragment 0, offset 0) appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Check(ctx, st, write(tc.vals, tc.dup), CheckOptions{Pages: 3})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			for _, p := range res.Problems {
				msgs = append(msgs, p.Message)
			}
			all := strings.Join(msgs, "; ")
			if tc.want == "" && all != "" || tc.want != "" && !strings.Contains(all, tc.want) {
				t.Fatalf("problems %q, want %q", all, tc.want)
			}
			if res.Rows != 40 || res.Pages != 10 {
				t.Fatalf("rows %d pages %d", res.Rows, res.Pages)
			}
		})
	}
}

type strRow struct {
	v    string
	null bool
	id   uint64
}

// writeStrings writes a BTREE segment of string keys, sorted first unless
// keepOrder (to build a disordered one).
func writeStrings(t *testing.T, st storage.Store, rows []strRow, batch int, keepOrder bool) *pb.IndexMetadata {
	t.Helper()
	ctx := context.Background()
	if !keepOrder {
		sort.SliceStable(rows, func(i, j int) bool {
			if rows[i].null != rows[j].null {
				return rows[i].null
			}
			return rows[i].v < rows[j].v
		})
	}
	id := uuid.New()
	w, err := newPageWriter(ctx, st, table.IndicesDir+id.String()+"/", lancefile.DataType{Kind: lancefile.KindBinary, Logical: "string"}, batch, lancefile.V2_2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.add(ctx, r.null, []byte(r.v), r.id); err != nil {
			t.Fatal(err)
		}
	}
	files, err := w.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Name: "s_idx", Files: files}
}

func TestMergeOrdersStringsByTheirBytes(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	rng := rand.New(rand.NewPCG(3, 4))
	// Keys that share 8-byte prefixes, are prefixes of each other, hold
	// zero bytes, are empty or are not ASCII: the cases where a prefix
	// key ties and the bytes decide.
	pool := []string{"", "a", "a\x00", "a\x00b", "customer-00000001", "customer-00000002", "customer-0000000", "customers", "ü", "z", "zzzzzzzzzzzzzzzzzzzzzz"}
	var metas []*pb.IndexMetadata
	var want []strRow
	for f := uint64(0); f < 3; f++ {
		var rows []strRow
		for i := 0; i < 700; i++ {
			v := pool[rng.IntN(len(pool))]
			if rng.IntN(3) == 0 {
				v += strconv.Itoa(rng.IntN(1000))
			}
			rows = append(rows, strRow{v: v, null: rng.IntN(15) == 0, id: f<<32 | uint64(i)})
		}
		want = append(want, rows...)
		metas = append(metas, writeStrings(t, st, rows, 128, false))
	}
	out := uuid.New()
	res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out.String()})
	if err != nil {
		t.Fatal(err)
	}
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
	if chk, err := Check(ctx, st, merged, CheckOptions{}); err != nil || len(chk.Problems) > 0 || chk.Rows != uint64(len(want)) {
		t.Fatalf("merged: %v %+v", err, chk)
	}
	s, err := Open(ctx, st, merged)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vals, err := s.data.Read(ctx, valuesColumn, 0, s.Rows)
	if err != nil {
		t.Fatal(err)
	}
	var got, keys []string
	for i := 0; i < vals.Len; i++ {
		if vals.IsValid(i) {
			got = append(got, string(vals.Values[vals.Offsets[i]:vals.Offsets[i+1]]))
		}
	}
	for _, r := range want {
		if !r.null {
			keys = append(keys, r.v)
		}
	}
	sort.Strings(keys)
	if !slices.Equal(got, keys) {
		t.Fatalf("merged keys are not the inputs' keys in byte order")
	}
	// Check sees strings out of order, including a tie of the first 8 bytes.
	bad := writeStrings(t, st, []strRow{{v: "customer-2", id: 1}, {v: "customer-1", id: 2}, {v: "b", id: 3}}, 2, true)
	chk, err := Check(ctx, st, bad, CheckOptions{})
	if err != nil || len(chk.Problems) != 2 {
		t.Fatalf("disordered strings: %v %+v", err, chk)
	}
}
