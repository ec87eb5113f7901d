package zonemap

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// f64s is a float64 column; NaN and nil (null) as given.
func f64s(vals []any) *lancefile.Array {
	a := &lancefile.Array{Type: lancefile.Primitive(lancefile.KindFloat64), Len: len(vals), Validity: make([]byte, (len(vals)+7)/8)}
	for i, v := range vals {
		x := 0.0
		if v != nil {
			x = v.(float64)
			a.Validity[i/8] |= 1 << (i % 8)
		}
		a.Values = binary.LittleEndian.AppendUint64(a.Values, math.Float64bits(x))
	}
	return a
}

func TestBuilderZonesBoundsAndNulls(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	b, err := NewBuilder(lancefile.Primitive(lancefile.KindFloat64), 3)
	if err != nil {
		t.Fatal(err)
	}
	// fragment 4: rows 0..7, row 2 deleted; fragment 9: rows 0..1, all null
	a := f64s([]any{1.5, nil, 9.0, -2.0, math.NaN(), 3.0, nil, 0.5})
	for _, off := range []uint64{0, 1, 3, 4, 5, 6, 7} {
		if err := b.Add(4, off, a, int(off)); err != nil {
			t.Fatal(err)
		}
	}
	nulls := f64s([]any{nil, nil})
	for off := range uint64(2) {
		if err := b.Add(9, off, nulls, int(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Add(9, 1, nulls, 1); err == nil {
		t.Fatal("a row added twice was taken")
	}
	id := uuid.New()
	dir := table.IndicesDir + id.String() + "/"
	if _, err := b.Write(ctx, st, dir+FileName, lancefile.V2_2); err != nil {
		t.Fatal(err)
	}
	s, err := Read(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}})
	if err != nil {
		t.Fatal(err)
	}
	f64 := func(a *lancefile.Array, z int) any {
		if !a.IsValid(z) {
			return nil
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(a.Values[z*8:]))
	}
	u32 := func(a *lancefile.Array, z int) uint32 { return binary.LittleEndian.Uint32(a.Values[z*4:]) }
	for z, want := range []struct {
		frag, start, length uint64
		min, max            any
		nulls, nans         uint32
	}{
		{4, 0, 4, -2.0, 1.5, 1, 0},       // rows 0, 1, 3: the span covers deleted row 2
		{4, 4, 3, 3.0, math.NaN(), 1, 1}, // rows 4, 5, 6: NaN is the max, left out of min
		{4, 7, 1, 0.5, 0.5, 0, 0},        // row 7
		{9, 0, 2, nil, nil, 2, 0},        // all null
	} {
		frag, start, length := s.place(z)
		mn, mx := f64(s.cols[0], z), f64(s.cols[1], z)
		nanMax := want.max != nil && math.IsNaN(want.max.(float64))
		if frag != want.frag || start != want.start || length != want.length || mn != want.min ||
			(nanMax && (mx == nil || !math.IsNaN(mx.(float64)))) || (!nanMax && mx != want.max) ||
			u32(s.cols[2], z) != want.nulls || u32(s.cols[3], z) != want.nans {
			t.Errorf("zone %d: fragment %d rows %d+%d min %v max %v nulls %d nans %d; want %+v",
				z, frag, start, length, mn, mx, u32(s.cols[2], z), u32(s.cols[3], z), want)
		}
	}
	if s.Zones != 4 || len(s.Nulls) != 2 || s.Nulls[0].Frag != 4 || s.Nulls[1].Frag != 9 {
		t.Fatalf("%d zones, null map %+v", s.Zones, s.Nulls)
	}
}

func TestCoversTellsBoundsThatDoNotHold(t *testing.T) {
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	rows := f64s([]any{1.0, 2.0, nil, 3.0})
	b, err := NewBuilder(lancefile.Primitive(lancefile.KindFloat64), 10)
	if err != nil {
		t.Fatal(err)
	}
	s := buildZones(t, st, b, 0, rows)
	all := func(int) bool { return true }
	for _, tc := range []struct {
		name string
		rows *lancefile.Array
		live func(int) bool
		want string // a part of the finding; "" when the zone holds
	}{
		{"the rows it was built from", rows, all, ""},
		{"rows deleted since", f64s([]any{1.0, 99.0, nil, 3.0}), func(i int) bool { return i != 1 }, ""},
		{"a value above max", f64s([]any{1.0, 4.5, nil, 3.0}), all, "above its max 3"},
		{"a value below min", f64s([]any{0.5, 2.0, nil, 3.0}), all, "below its min 1"},
		{"more nulls", f64s([]any{1.0, nil, nil, 3.0}), all, "2 null rows, it counts 1"},
		{"a NaN", f64s([]any{1.0, math.NaN(), nil, 3.0}), all, "NaN"},
	} {
		got, err := s.Covers(0, tc.rows, tc.live)
		if err != nil {
			t.Fatal(err)
		}
		if (tc.want == "") != (got == "") || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestBloomBytes(t *testing.T) {
	for _, tc := range []struct {
		ndv  uint64
		fpp  float64
		want int
	}{
		{8192, 0.00057, 32768}, // pylance 14.0.2's default zone
		{0, 0.01, 32},
		{10, 0.1, 32},
		{1000, 0.01, 2048},
		{1 << 40, 0.001, 128 << 20},
	} {
		if got := BloomBytes(tc.ndv, tc.fpp); got != tc.want {
			t.Errorf("BloomBytes(%d, %g) = %d, want %d", tc.ndv, tc.fpp, got, tc.want)
		}
	}
}

// TestBloomStreamedEqualsHeld builds the same BLOOMFILTER zones twice,
// once held until Write and once streamed (more zones than a streaming
// builder holds, so written in several batches), and compares what the
// files hold; a streamed build closed without Write leaves no file.
func TestBloomStreamedEqualsHeld(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	vals := make([]any, 5000)
	for i := range vals {
		if i%37 != 0 {
			vals[i] = float64(i % 701)
		}
	}
	a := f64s(vals)
	build := func(name string, stream bool) (cols []*lancefile.Array, meta map[string][]byte, nulls []byte) {
		b, err := NewBloomBuilder(a.Type, 16, DefaultProbability)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if stream {
			if err := b.StreamTo(ctx, st, name, lancefile.V2_1); err != nil {
				t.Fatal(err)
			}
		}
		for i := range a.Len {
			if err := b.Add(uint32(i/3000), uint64(i%3000), a, i); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Write(ctx, st, name, lancefile.V2_1); err != nil {
			t.Fatal(err)
		}
		obj, err := st.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		r, err := lancefile.Open(ctx, obj, name, lancefile.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range BloomFilter.columns {
			arr, err := r.Read(ctx, c, 0, r.NumRows())
			if err != nil {
				t.Fatal(err)
			}
			cols = append(cols, arr)
		}
		if nulls, err = r.GlobalBuffer(ctx, 1); err != nil {
			t.Fatal(err)
		}
		return cols, r.Metadata(), nulls
	}
	hc, hm, hn := build("held.lance", false)
	sc, sm, sn := build("streamed.lance", true)
	if hc[0].Len < 4*streamZones || hc[0].Len != sc[0].Len {
		t.Fatalf("%d zones held, %d streamed", hc[0].Len, sc[0].Len)
	}
	for i, c := range BloomFilter.columns {
		if string(hc[i].Values) != string(sc[i].Values) || !slices.Equal(hc[i].Offsets, sc[i].Offsets) {
			t.Errorf("column %s differs", c)
		}
	}
	if !maps.EqualFunc(hm, sm, bytes.Equal) || !bytes.Equal(hn, sn) || len(hn) < 8 {
		t.Errorf("metadata %v / %v, null maps of %d / %d bytes", hm, sm, len(hn), len(sn))
	}
	b, err := NewBloomBuilder(a.Type, 16, DefaultProbability)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.StreamTo(ctx, st, "aborted.lance", lancefile.V2_1); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if err := b.Add(0, uint64(i), a, i); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if _, err := st.Open(ctx, "aborted.lance"); err == nil {
		t.Fatal("a closed streamed build left its file")
	}
}

// lists64 is a list<int64> column: nil a null list, []int64{} an empty one.
func lists64(vals ...[]int64) *lancefile.Array {
	item := lancefile.Primitive(lancefile.KindInt64)
	a := lancefile.NullLists(lancefile.ListType(), item, len(vals))
	for i, v := range vals {
		if v != nil {
			a.Validity[i/8] |= 1 << (i % 8)
		}
		for _, x := range v {
			a.Items.Values = binary.LittleEndian.AppendUint64(a.Items.Values, uint64(x))
		}
		a.Items.Len += len(v)
		a.Offsets[i+1] = int64(a.Items.Len)
	}
	return a
}

// The zones of a list column hold null bounds and count the null lists
// (not the empty ones), as pylance 14.0.2 builds them; Covers checks that
// count against the rows.
func TestListZones(t *testing.T) {
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	rows := lists64([]int64{1, 2}, nil, []int64{}, nil, []int64{7})
	b, err := NewListBuilder(rows.Type, rows.Items.Type, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := buildZones(t, st, b, 2, rows)
	if s.Zones != 2 || s.cols[0].NullCount() != 2 || s.cols[1].NullCount() != 2 {
		t.Fatalf("%d zones, bounds with %d and %d nulls", s.Zones, s.cols[0].NullCount(), s.cols[1].NullCount())
	}
	for z, want := range []uint32{1, 1} { // rows 0-2 hold one null list (row 1), rows 3-4 one (row 3)
		if got := binary.LittleEndian.Uint32(s.cols[2].Values[z*4:]); got != want {
			t.Errorf("zone %d counts %d null lists, want %d", z, got, want)
		}
	}
	all := func(int) bool { return true }
	if why, err := s.Covers(0, lists64([]int64{1, 2}, nil, []int64{}), all); err != nil || why != "" {
		t.Fatalf("the rows it was built from: %q, %v", why, err)
	}
	if why, _ := s.Covers(0, lists64(nil, nil, []int64{}), all); !strings.Contains(why, "2 null rows, it counts 1") {
		t.Fatalf("a null list more: %q", why)
	}
	if _, err := NewListBuilder(rows.Type, lancefile.DataType{Kind: lancefile.KindStruct}, 3); err == nil {
		t.Fatal("a list of structs was taken")
	}
}

// buildZones adds every row of rows to b as fragment frag's, writes the
// segment (2.2) and reads it back.
func buildZones(t *testing.T, st storage.Store, b *Builder, frag uint32, rows *lancefile.Array) *Segment {
	t.Helper()
	ctx := context.Background()
	for i := range rows.Len {
		if err := b.Add(frag, uint64(i), rows, i); err != nil {
			t.Fatal(err)
		}
	}
	id := uuid.New()
	if _, err := b.Write(ctx, st, table.IndicesDir+id.String()+"/"+FileName, lancefile.V2_2); err != nil {
		t.Fatal(err)
	}
	s, err := Read(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// strs is a string column; nil is null.
func strs(vals ...any) *lancefile.Array {
	a := &lancefile.Array{Type: lancefile.DataType{Kind: lancefile.KindBinary, Logical: "string"}, Len: len(vals),
		Validity: make([]byte, (len(vals)+7)/8), Offsets: []int64{0}}
	for i, v := range vals {
		if v != nil {
			a.Values = append(a.Values, v.(string)...)
			a.Validity[i/8] |= 1 << (i % 8)
		}
		a.Offsets = append(a.Offsets, int64(len(a.Values)))
	}
	return a
}

// A dictionary column's zones have null bounds of the column's type and
// count its nulls; it is read as its values (strings here).
func TestDictZones(t *testing.T) {
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	dict := lancefile.ParseLogicalType("dict:string:int32:false")
	b, err := NewDictBuilder(dict, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := buildZones(t, st, b, 2, strs("a", nil, "b", nil, nil))
	if s.Zones != 2 || s.KeyType != dict || s.cols[0].NullCount() != 2 || s.cols[1].NullCount() != 2 || s.cols[0].Type != dict {
		t.Fatalf("%d zones of %s, bounds of %s with %d and %d nulls", s.Zones, s.KeyType, s.cols[0].Type, s.cols[0].NullCount(), s.cols[1].NullCount())
	}
	for z, want := range []uint32{1, 2} {
		if got := binary.LittleEndian.Uint32(s.cols[2].Values[z*4:]); got != want {
			t.Errorf("zone %d counts %d nulls, want %d", z, got, want)
		}
	}
	all := func(int) bool { return true }
	if why, err := s.Covers(0, strs("a", nil, "zz"), all); err != nil || why != "" {
		t.Fatalf("values under null bounds: %q, %v", why, err)
	}
	if why, _ := s.Covers(0, strs(nil, nil, "b"), all); !strings.Contains(why, "2 null rows, it counts 1") {
		t.Fatalf("a null more: %q", why)
	}
	for _, bad := range []string{"string", "dict:struct:int32:false"} {
		if _, err := NewDictBuilder(lancefile.ParseLogicalType(bad), 3); err == nil {
			t.Fatalf("%s taken as a dictionary", bad)
		}
	}
}
