package bitmap

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// rowMap serializes entries the way the format says (fragment id, length,
// portable roaring bytes; nil rows: a whole-fragment entry).
func rowMap(t *testing.T, frags []uint32, rows [][]uint32) []byte {
	t.Helper()
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(frags)))
	for i, f := range frags {
		out = binary.LittleEndian.AppendUint32(out, f)
		if rows[i] == nil {
			out = binary.LittleEndian.AppendUint32(out, 0)
			continue
		}
		b, err := roaring.BitmapOf(rows[i]...).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

func TestDecodeRowMap(t *testing.T) {
	good := rowMap(t, []uint32{0, 2}, [][]uint32{{3, 5}, {7}})
	es, err := DecodeRowMap(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Frag != 0 || es[1].Frag != 2 || es[0].Rows.GetCardinality() != 2 || !es[1].Rows.Contains(7) {
		t.Fatalf("decoded %+v", es)
	}
	full, err := DecodeRowMap(rowMap(t, []uint32{4}, [][]uint32{nil}))
	if err != nil || len(full) != 1 || !full[0].Full || full[0].Rows != nil {
		t.Fatalf("whole-fragment entry: %+v, %v", full, err)
	}
	if es, err := DecodeRowMap([]byte{0, 0, 0, 0}); err != nil || len(es) != 0 {
		t.Fatalf("empty map: %+v, %v", es, err)
	}
	badRoaring := rowMap(t, []uint32{1}, [][]uint32{{1}})
	badRoaring[12] ^= 0xff // the roaring cookie
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", []byte{1, 0}},
		{"count above the bytes", []byte{0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0}},
		{"truncated entry", good[:len(good)-3]},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
		{"fragments out of order", rowMap(t, []uint32{2, 2}, [][]uint32{{1}, {2}})},
		{"length past the end", append(binary.LittleEndian.AppendUint32([]byte{1, 0, 0, 0, 0, 0, 0, 0}, 0)[:8], 0xff, 0xff, 0, 0)},
		{"bad roaring", badRoaring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeRowMap(tc.b); !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("got %v, want Corrupt", err)
			}
		})
	}
}

func TestSplitRowMapRoundTrip(t *testing.T) {
	es := []RawEntry{{0, []byte{1, 2, 3}}, {7, []byte{}}, {9, []byte{4}}}
	b := AppendRowMap(nil, es)
	got, err := SplitRowMap(b)
	if err != nil || len(got) != len(es) {
		t.Fatalf("split: %v, %d entries", err, len(got))
	}
	for i := range es {
		if got[i].Frag != es[i].Frag || string(got[i].Bits) != string(es[i].Bits) {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], es[i])
		}
	}
	if string(AppendRowMap(nil, got)) != string(b) {
		t.Error("AppendRowMap(SplitRowMap(b)) != b")
	}
}

func TestJoinEntries(t *testing.T) {
	raw := func(frag uint32, rows ...uint32) RawEntry {
		b, err := roaring.BitmapOf(rows...).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		return RawEntry{frag, b}
	}
	dropOdd := func(id uint64) bool { return id%2 == 0 }
	for _, tc := range []struct {
		name    string
		in      []RawEntry
		keep    func(uint64) bool
		want    map[uint32][]uint32 // fragment -> rows, in fragment order
		order   []uint32
		wantErr error
	}{
		{name: "disjoint fragments sorted", in: []RawEntry{raw(3, 1), raw(1, 4, 5)}, order: []uint32{1, 3},
			want: map[uint32][]uint32{1: {4, 5}, 3: {1}}},
		{name: "one fragment from two inputs unioned", in: []RawEntry{raw(0, 1, 9), raw(0, 2)}, order: []uint32{0},
			want: map[uint32][]uint32{0: {1, 2, 9}}},
		{name: "rows filtered, emptied fragment dropped", in: []RawEntry{raw(0, 1, 2, 3), raw(1, 5)}, keep: dropOdd, order: []uint32{0},
			want: map[uint32][]uint32{0: {2}}},
		{name: "whole fragment kept as is", in: []RawEntry{{Frag: 4}}, order: []uint32{4}, want: map[uint32][]uint32{4: nil}},
		{name: "whole fragment cannot be filtered", in: []RawEntry{{Frag: 4}}, keep: dropOdd, wantErr: errkind.Unsupported},
		{name: "bad bitmap", in: []RawEntry{{Frag: 0, Bits: []byte{1, 2, 3}}, {Frag: 0, Bits: []byte{9}}}, wantErr: errkind.Corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := joinEntries(nil, tc.in, tc.keep)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != len(tc.order) {
				t.Fatalf("%d entries, want %d", len(out), len(tc.order))
			}
			for i, e := range out {
				if e.Frag != tc.order[i] {
					t.Fatalf("entry %d of fragment %d, want %d", i, e.Frag, tc.order[i])
				}
				want := tc.want[e.Frag]
				if want == nil {
					if len(e.Bits) != 0 {
						t.Fatalf("fragment %d: want a whole-fragment entry", e.Frag)
					}
					continue
				}
				got := roaring.New()
				if err := got.UnmarshalBinary(e.Bits); err != nil {
					t.Fatal(err)
				}
				if !got.Equals(roaring.BitmapOf(want...)) {
					t.Fatalf("fragment %d: rows %v, want %v", e.Frag, got.ToArray(), want)
				}
			}
		})
	}
}

// TestSortByFrag: a key's entries, in runs ascending by fragment (one run
// per input), come out ascending, each entry once, whatever the runs: in
// order, interleaved, sharing fragments, more than maxRuns (sorted in
// full), and the scratch left holding no entry.
func TestSortByFrag(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name       string
		runs, per  int
		frags      uint32 // fragments drawn from [0, frags)
		contiguous bool   // run r holds fragments of its own range
	}{
		{"empty", 0, 0, 1, false},
		{"one run", 1, 30, 100, false},
		{"runs in order", 4, 25, 0, true},
		{"four interleaved runs", 4, 25, 1000, false},
		{"runs sharing fragments", 3, 20, 8, false},
		{"as many runs as merged", maxRuns, 10, 500, false},
		{"more runs than merged", maxRuns + 5, 6, 500, false},
		{"single entries", 40, 1, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var es []RawEntry
			for r := range tc.runs {
				run := make([]uint32, tc.per)
				for i := range run {
					if tc.contiguous {
						run[i] = uint32(r*tc.per + i)
					} else {
						run[i] = rng.Uint32N(tc.frags)
					}
				}
				slices.Sort(run)
				for i, f := range run {
					es = append(es, RawEntry{Frag: f, Bits: []byte{byte(r), byte(i)}})
				}
			}
			want := slices.Clone(es)
			scratch := make([]RawEntry, 0, len(es)+3)
			sortByFrag(es, scratch)
			if !slices.IsSortedFunc(es, byFrag) {
				t.Fatalf("not sorted: %v", es)
			}
			key := func(e RawEntry) [3]uint32 { return [3]uint32{e.Frag, uint32(e.Bits[0]), uint32(e.Bits[1])} }
			got, exp := make([][3]uint32, len(es)), make([][3]uint32, len(want))
			for i := range es {
				got[i], exp[i] = key(es[i]), key(want[i])
			}
			cmp3 := func(a, b [3]uint32) int { return slices.Compare(a[:], b[:]) }
			slices.SortFunc(got, cmp3)
			slices.SortFunc(exp, cmp3)
			if !slices.Equal(got, exp) {
				t.Fatalf("entries lost or repeated")
			}
			for _, e := range scratch[:cap(scratch)] {
				if e.Bits != nil {
					t.Fatalf("the scratch still holds an entry of fragment %d", e.Frag)
				}
			}
		})
	}
}

// BenchmarkSortByFrag sorts a key's entries as a merge of four inputs
// over interleaved fragments finds them: four runs of 25.
func BenchmarkSortByFrag(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	var es []RawEntry
	for range 4 {
		run := make([]uint32, 25)
		for i := range run {
			run[i] = rng.Uint32N(1000)
		}
		slices.Sort(run)
		for _, f := range run {
			es = append(es, RawEntry{Frag: f})
		}
	}
	work, scratch := make([]RawEntry, len(es)), make([]RawEntry, 0, len(es))
	for b.Loop() {
		copy(work, es)
		sortByFrag(work, scratch)
	}
}

// roaringCardinality reads the cardinality of a portable roaring bitmap
// from its header: array, bitmap and run containers, with and without
// the run cookie, the empty bitmap; a truncated header is Corrupt.
func TestRoaringCardinalityFromTheHeader(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := map[string]*roaring.Bitmap{"empty": roaring.New()}
	sparse, dense, runs := roaring.New(), roaring.New(), roaring.New()
	for range 3000 {
		sparse.Add(r.Uint32())
	}
	for range 200_000 {
		dense.Add(r.Uint32N(1 << 19)) // bitmap containers
	}
	runs.AddRange(10, 100_000)
	runs.AddRange(1<<20, 1<<20+70_000)
	runs.Add(1 << 30)
	runs.RunOptimize()
	cases["sparse"], cases["dense"], cases["runs"] = sparse, dense, runs
	for name, bm := range cases {
		b, err := bm.ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		got, err := roaringCardinality(b)
		if err != nil || got != bm.GetCardinality() {
			t.Fatalf("%s: %d, %v; want %d", name, got, err, bm.GetCardinality())
		}
		if len(b) > 8 {
			if _, err := roaringCardinality(b[:7]); !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("%s, truncated: %v, want Corrupt", name, err)
			}
		}
	}
	if _, err := roaringCardinality([]byte{1, 2, 3, 4, 5, 6, 7, 8}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("a bad cookie: %v, want Corrupt", err)
	}
	// containers out of key order: swap the sparse bitmap's first two
	// header entries (no-run cookie: the header starts at byte 8)
	b, err := sparse.ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	var e [4]byte
	copy(e[:], b[8:12])
	copy(b[8:12], b[12:16])
	copy(b[12:16], e[:])
	if _, err := roaringCardinality(b); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("containers out of order: %v, want Corrupt", err)
	}
}

// countRowMap, the check of a row map whose bitmaps are not decoded,
// counts its rows from their headers and finds what it can see without
// them: fragments out of order or not covered, whole-fragment entries,
// malformed headers and entries.
func TestCountRowMapWithoutDecoding(t *testing.T) {
	bad := binary.LittleEndian.AppendUint32(nil, 1)
	bad = binary.LittleEndian.AppendUint32(bad, 0)
	bad = binary.LittleEndian.AppendUint32(bad, 8)
	bad = append(bad, 1, 2, 3, 4, 5, 6, 7, 8) // an unknown cookie
	cases := []struct {
		name     string
		b        []byte
		rows     uint64
		problems []string // each problem's check
	}{
		{"good", rowMap(t, []uint32{0, 2}, [][]uint32{{1, 2, 3}, {70000, 1 << 20}}), 5, nil},
		{"fragments out of order", rowMap(t, []uint32{2, 0}, [][]uint32{{1}, {2}}), 2, []string{"structure"}},
		{"fragment not covered", rowMap(t, []uint32{0, 9}, [][]uint32{{1}, {2}}), 2, []string{"row_ids"}},
		{"whole fragment", rowMap(t, []uint32{1}, [][]uint32{nil}), 0, []string{"structure"}},
		{"bad header", bad, 0, []string{"structure"}},
		{"truncated", rowMap(t, []uint32{0}, [][]uint32{{1, 2}})[:10], 0, []string{"structure"}},
	}
	for _, c := range cases {
		var got []string
		rows, _ := countRowMap(7, c.b, func(f uint32) bool { return f < 3 }, func(check, format string, args ...any) {
			got = append(got, check)
		}, nil)
		if rows != c.rows || !slices.Equal(got, c.problems) {
			t.Errorf("%s: %d rows, problems %v; want %d, %v", c.name, rows, got, c.rows, c.problems)
		}
	}
}
