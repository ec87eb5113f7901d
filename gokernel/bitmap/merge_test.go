package bitmap

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// writeSegment writes a segment of string keys (in the order given; "" is
// the null key), each holding the rows of fragment frag that rows names.
func writeSegment(t *testing.T, st storage.Store, keys []string, frag uint32, rows func(k int) []uint32) *pb.IndexMetadata {
	t.Helper()
	ks := make([]key, len(keys))
	for i, k := range keys {
		ks[i] = key{valid: k != "", b: []byte(k)}
	}
	return writeKeys(t, st, lancefile.DataType{Kind: lancefile.KindBinary, Logical: "string"}, ks, frag, rows)
}

// writeKeys writes a segment of keys of type typ (in the order given),
// each holding the rows of fragment frag that rows names.
func writeKeys(t *testing.T, st storage.Store, typ lancefile.DataType, keys []key, frag uint32, rows func(k int) []uint32) *pb.IndexMetadata {
	t.Helper()
	id := uuid.New()
	bin := lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}
	first := &Segment{KeyType: typ, Version: lancefile.V2_2, Metadata: map[string][]byte{"lance:index_stats": []byte(`{"num_bitmaps":0}`)},
		fields: [2]*lancefile.Field{lancefile.NewField(keysColumn, typ, true), lancefile.NewField(bitmapsColumn, bin, true)}}
	w, err := newKeyWriter(context.Background(), st, table.IndicesDir+id.String()+"/"+FileName, first)
	if err != nil {
		t.Fatal(err)
	}
	defer w.abort()
	for i, k := range keys {
		b, err := roaring.BitmapOf(rows(i)...).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.add(k, AppendRowMap(nil, []RawEntry{{frag, b}})); err != nil {
			t.Fatal(err)
		}
	}
	files, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: files}
}

func TestMergeStringKeysAcrossWindows(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	// Three inputs whose keys interleave, each over more than one window.
	var metas []*pb.IndexMetadata
	for f := uint32(0); f < 3; f++ {
		keys := []string{""}
		for k := int(f); k < 3000; k += 2 {
			keys = append(keys, fmt.Sprintf("k%05d", k))
		}
		metas = append(metas, writeSegment(t, st, keys, f, func(i int) []uint32 { return []uint32{uint32(i), uint32(i + 5000)} }))
	}
	out := uuid.New()
	keep := func(id uint64) bool { return id&0xffffffff < 5000 } // drop every second row
	res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out, Keep: []func(uint64) bool{keep, keep, keep}})
	if err != nil {
		t.Fatal(err)
	}
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
	chk, err := Check(ctx, st, merged, CheckOptions{Covered: func(f uint32) bool { return f < 3 }, Unique: true})
	if err != nil {
		t.Fatal(err)
	}
	wantRows := uint64(0)
	for _, m := range metas {
		s, err := Open(ctx, st, m)
		if err != nil {
			t.Fatal(err)
		}
		wantRows += s.Keys
		s.Close()
	}
	// 3000 distinct keys plus the null key; one kept row per input key.
	if len(chk.Problems) > 0 || chk.Keys != 3001 || res.KeysWritten != 3001 || chk.Rows != wantRows || chk.NullKeyRows != 3 {
		t.Fatalf("merged: %+v, %+v (want 3001 keys, %d rows, 3 null-key rows)", chk, res, wantRows)
	}
	// A check that decodes a sample of the keys counts the same rows from
	// the bitmaps' headers.
	sampled, err := Check(ctx, st, merged, CheckOptions{Covered: func(f uint32) bool { return f < 3 }, Unique: true, SampleKeys: 100})
	if err != nil || len(sampled.Problems) > 0 || sampled.Keys != chk.Keys || sampled.Rows != chk.Rows || sampled.NullKeyRows != chk.NullKeyRows ||
		chk.Decoded != chk.Keys || sampled.Decoded > 100 || sampled.Decoded < 50 {
		t.Fatalf("sampled check: %+v, %v; want %+v", sampled, err, chk)
	}
	s, err := Open(ctx, st, merged)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.r.MetadataString(statsKey); v != `{"num_bitmaps":3001}` {
		t.Fatalf("%s = %q", statsKey, v)
	}
}

// Keys out of order are how pylance 2.0.1 wrote them (hash order): a merge
// takes them in key order and a check finds nothing wrong; a key listed
// twice is corruption.
func TestMergeAndCheckRefuseDisorder(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	rows := func(i int) []uint32 { return []uint32{uint32(i)} }
	hashed := writeSegment(t, st, []string{"a", "c", "b"}, 0, rows)
	good := writeSegment(t, st, []string{"a", "b"}, 1, rows)
	id := uuid.New()
	res, err := Merge(ctx, st, []*pb.IndexMetadata{good, hashed}, MergeOptions{IndexUUID: id})
	if err != nil || res.KeysWritten != 3 || res.KeysRead != 5 {
		t.Fatalf("merge of keys in hash order: %+v, %v", res, err)
	}
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}}
	s, err := Open(ctx, st, merged)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.r.Read(ctx, keysColumn, 0, 3)
	s.Close()
	if err != nil || string(keys.Values) != "abc" || s.order != nil {
		t.Fatalf("merged keys %q (%v), want abc in file order", keys.Values, err)
	}
	chk, err := Check(ctx, st, hashed, CheckOptions{Covered: func(f uint32) bool { return f == 0 }, Unique: true})
	if err != nil || len(chk.Problems) != 0 || chk.Keys != 3 {
		t.Fatalf("check of keys in hash order: %v %+v", err, chk)
	}
	twice := writeSegment(t, st, []string{"b", "a", "b"}, 0, rows)
	if _, err := Merge(ctx, st, []*pb.IndexMetadata{good, twice}, MergeOptions{IndexUUID: uuid.New()}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("merge of a key listed twice: %v, want Corrupt", err)
	}
	// A row under two keys of a BITMAP segment, and a fragment the segment
	// does not cover.
	dup := writeSegment(t, st, []string{"a", "b"}, 2, func(int) []uint32 { return []uint32{7} })
	chk, err = Check(ctx, st, dup, CheckOptions{Covered: func(f uint32) bool { return f == 0 }, Unique: true})
	if err != nil || len(chk.Problems) != 3 {
		t.Fatalf("check: %v %+v (want two foreign fragments and a row under two keys)", err, chk)
	}
	// Decoding only the first key still finds both keys' foreign fragment
	// (row maps name their fragments), but not the row under two keys.
	chk, err = Check(ctx, st, dup, CheckOptions{Covered: func(f uint32) bool { return f == 0 }, Unique: true, SampleKeys: 1})
	if err != nil || len(chk.Problems) != 2 || strings.Contains(fmt.Sprint(chk.Problems), "another key") {
		t.Fatalf("sampled check: %v %+v (want two foreign fragments)", err, chk)
	}
}

// A segment whose keys are out of order (3,000 keys, three windows) is
// taken in key order from its columns read whole, or, above reorderBytes,
// a row at a time: both merges write the same file.
func TestKeysOutOfOrderTakenWholeOrByRow(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%05d", i)
	}
	rand.New(rand.NewPCG(7, 8)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	hashed := writeSegment(t, st, keys, 0, func(i int) []uint32 { return []uint32{uint32(i), uint32(i + 4000)} })
	delta := writeSegment(t, st, []string{"", "k00010", "zz"}, 1, func(i int) []uint32 { return []uint32{uint32(i)} })
	var files [2][]byte
	for i, budget := range []int64{reorderBytes, 0} {
		saved := reorderBytes
		reorderBytes = budget
		id := uuid.New()
		res, err := Merge(ctx, st, []*pb.IndexMetadata{hashed, delta}, MergeOptions{IndexUUID: id})
		reorderBytes = saved
		if err != nil || res.KeysWritten != 3002 {
			t.Fatalf("budget %d: %+v, %v", budget, res, err)
		}
		if files[i], err = os.ReadFile(filepath.Join(root, table.IndicesDir, id.String(), FileName)); err != nil {
			t.Fatal(err)
		}
		chk, err := Check(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Files: res.Files}, CheckOptions{Covered: func(f uint32) bool { return f < 2 }, Unique: true})
		if err != nil || len(chk.Problems) != 0 || chk.Keys != 3002 {
			t.Fatalf("budget %d: check %v %+v", budget, err, chk)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("the merge read whole and the merge read by row wrote different files")
	}
}

// The merge's heap pops cursors in key order (nulls first; wide keys by
// their bytes where their 8-byte prefixes tie), then input order.
func TestKeyHeapPopsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	long := func() []byte { return []byte(fmt.Sprintf("customer-%06d", rng.IntN(30))) } // prefixes tie
	cases := []struct {
		name string
		t    lancefile.DataType
		key  func() key
	}{
		{"narrow", lancefile.Primitive(lancefile.KindInt64), func() key {
			if rng.IntN(10) == 0 {
				return key{}
			}
			k := uint64(rng.IntN(50))
			return key{valid: true, k: k, b: binary.LittleEndian.AppendUint64(nil, k)}
		}},
		{"wide", lancefile.DataType{Kind: lancefile.KindBinary, Logical: "string"}, func() key {
			if rng.IntN(10) == 0 {
				return key{}
			}
			return key{valid: true, b: long()}
		}},
	}
	for _, c := range cases {
		h := keyHeap{t: c.t, wide: lancefile.Wide(c.t)}
		var all []*cursor
		for i := range 300 {
			cur := &cursor{order: i, cur: c.key()}
			all = append(all, cur)
			h.e = append(h.e, h.entry(cur))
		}
		h.init()
		var got []*cursor
		for len(h.e) > 0 {
			got = append(got, h.e[0].c)
			h.e[0] = h.e[len(h.e)-1]
			h.e = h.e[:len(h.e)-1]
			h.down(0)
		}
		want := slices.Clone(all)
		slices.SortStableFunc(want, func(a, b *cursor) int { return compareKeys(&a.cur, &b.cur, c.t, h.wide) })
		if !slices.Equal(got, want) {
			t.Fatalf("%s: popped out of order", c.name)
		}
	}
}

// narrowAscending, the order check of every Open on number keys: nulls
// first and once, each key once, ascending across windows.
func TestNarrowAscending(t *testing.T) {
	type win struct {
		keys  []int64
		nulls []int // rows that are null
	}
	cases := []struct {
		name string
		wins []win
		want bool
	}{
		{"ascending", []win{{keys: []int64{-5, 0, 7}}, {keys: []int64{8, 1 << 40}}}, true},
		{"a null first", []win{{keys: []int64{0, -5, 7}, nulls: []int{0}}}, true},
		{"a null second", []win{{keys: []int64{-5, 0, 7}, nulls: []int{1}}}, false},
		{"a null first in the second window", []win{{keys: []int64{1}}, {keys: []int64{0, 2}, nulls: []int{0}}}, false},
		{"two nulls", []win{{keys: []int64{0}, nulls: []int{0}}, {keys: []int64{0, 3}, nulls: []int{0}}}, false},
		{"a key twice", []win{{keys: []int64{1, 2, 2}}}, false},
		{"a key twice across windows", []win{{keys: []int64{1, 2}}, {keys: []int64{2, 3}}}, false},
		{"descending", []win{{keys: []int64{3, -1}}}, false},
		{"signed order", []win{{keys: []int64{-1 << 62, -1, 1}}}, true},
	}
	for _, c := range cases {
		var prev key
		got := true
		for wi, w := range c.wins {
			a := &lancefile.Array{Type: lancefile.Primitive(lancefile.KindInt64), Len: len(w.keys)}
			for _, k := range w.keys {
				a.Values = binary.LittleEndian.AppendUint64(a.Values, uint64(k))
			}
			if len(w.nulls) > 0 {
				a.Validity = make([]byte, (len(w.keys)+7)/8)
				for i := range w.keys {
					if !slices.Contains(w.nulls, i) {
						a.Validity[i/8] |= 1 << (i % 8)
					}
				}
			}
			sk := lancefile.AppendSortKeys(lancefile.KindInt64, a.Values, a.Len, nil)
			if got = narrowAscending(a, sk, wi > 0, &prev); !got {
				break
			}
		}
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Number keys out of order (as releases before 2.0.1 wrote them) are
// taken in key order by a merge; a number key listed twice is corruption.
func TestNumberKeysOutOfOrder(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	i64 := lancefile.Primitive(lancefile.KindInt64)
	keys := func(vs ...int64) []key {
		out := []key{{}} // the null key first
		for _, v := range vs {
			out = append(out, key{valid: true, b: binary.LittleEndian.AppendUint64(nil, uint64(v))})
		}
		return out
	}
	rows := func(i int) []uint32 { return []uint32{uint32(i)} }
	hashed := writeKeys(t, st, i64, keys(5, -3, 9, 0), 0, rows)
	sorted := writeKeys(t, st, i64, keys(-3, 7), 1, rows)
	id := uuid.New()
	res, err := Merge(ctx, st, []*pb.IndexMetadata{sorted, hashed}, MergeOptions{IndexUUID: id})
	if err != nil || res.KeysWritten != 6 {
		t.Fatalf("merge: %+v, %v", res, err)
	}
	s, err := Open(ctx, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.r.Read(ctx, keysColumn, 0, 6)
	s.Close()
	if err != nil || s.order != nil || got.IsValid(0) {
		t.Fatalf("merged keys: %v, order %v, first valid %v", err, s.order, got.IsValid(0))
	}
	var vs []int64
	for i := 1; i < 6; i++ {
		vs = append(vs, int64(binary.LittleEndian.Uint64(got.Values[i*8:])))
	}
	if !slices.Equal(vs, []int64{-3, 0, 5, 7, 9}) {
		t.Fatalf("merged keys %v, want -3 0 5 7 9 after the null key", vs)
	}
	twice := writeKeys(t, st, i64, keys(1, 5, 5), 2, rows)
	if _, err := Merge(ctx, st, []*pb.IndexMetadata{sorted, twice}, MergeOptions{IndexUUID: uuid.New()}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("merge of a number key listed twice: %v, want Corrupt", err)
	}
}

// TestRemapEntries: the entries of moved fragments become entries of
// where their rows went (one fragment's rows may land in two, two
// fragments' rows in one); other entries are kept byte for byte; the
// joined row map holds each row once, at its new address.
func TestRemapEntries(t *testing.T) {
	entry := func(frag uint32, offs ...uint32) RawEntry {
		b, err := roaring.BitmapOf(offs...).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		return RawEntry{frag, b}
	}
	// fragments 1 and 2 were compacted: 1's rows 0-3 into 7 (rows 0-3),
	// 1's rows 4-5 into 8 (rows 0-1), 2's rows into 8 (from row 2)
	remap := func(a uint64) uint64 {
		f, o := uint32(a>>32), uint32(a)
		switch {
		case f == 1 && o < 4:
			return 7<<32 | uint64(o)
		case f == 1:
			return 8<<32 | uint64(o-4)
		case f == 2:
			return 8<<32 | uint64(o+2)
		}
		t.Fatalf("row %#x of a fragment that did not move was remapped", a)
		return a
	}
	moves := func(f uint32) bool { return f == 1 || f == 2 }
	kept := entry(3, 5, 9)
	es := []RawEntry{entry(1, 0, 2, 4, 5), kept, entry(2, 0, 1)}
	before := slices.Clone(es)
	got, err := remapEntries(es, moves, remap)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(es, before, func(a, b RawEntry) bool { return a.Frag == b.Frag && bytes.Equal(a.Bits, b.Bits) }) {
		t.Fatal("remapEntries modified its input")
	}
	joined, err := joinEntries(nil, append(got, entry(8, 7)), nil) // another input's row of fragment 8
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32][]uint32{3: {5, 9}, 7: {0, 2}, 8: {0, 1, 2, 3, 7}}
	if len(joined) != len(want) {
		t.Fatalf("%d entries, want %d", len(joined), len(want))
	}
	for _, e := range joined {
		b := roaring.New()
		if err := b.UnmarshalBinary(e.Bits); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.ToArray(), want[e.Frag]) {
			t.Errorf("fragment %d: rows %v, want %v", e.Frag, b.ToArray(), want[e.Frag])
		}
		if e.Frag == 3 && !bytes.Equal(e.Bits, kept.Bits) {
			t.Error("the entry of a fragment that did not move was rewritten")
		}
	}
	if same, err := remapEntries([]RawEntry{kept}, moves, remap); err != nil || len(same) != 1 || !bytes.Equal(same[0].Bits, kept.Bits) {
		t.Fatalf("nothing to move: %v %v", same, err)
	}
}

// TestBlockMergeMatchesAUnion merges many inputs of number keys that
// interleave across windows of different spans (one dense base, sparse
// deltas; some with the null key; one input's rows filtered): every key
// holds exactly the union of its inputs' kept rows, in key order, each
// key once, whatever the key type's order (signed, floating point).
func TestBlockMergeMatchesAUnion(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  lancefile.DataType
		enc  func(v int64) []byte
		dec  func(b []byte) float64
	}{
		{"int64", lancefile.Primitive(lancefile.KindInt64),
			func(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v*7919)) },
			func(b []byte) float64 { return float64(int64(binary.LittleEndian.Uint64(b))) }},
		{"float64", lancefile.Primitive(lancefile.KindFloat64),
			func(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(v)/3)) },
			func(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }},
		{"int32", lancefile.Primitive(lancefile.KindInt32),
			func(v int64) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(int32(v))) },
			func(b []byte) float64 { return float64(int32(binary.LittleEndian.Uint32(b))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			st := storage.NewLocal(root, root)
			rng := rand.New(rand.NewPCG(7, 9))
			want := map[string][]uint64{} // key bytes ("" null) -> row ids
			var metas []*pb.IndexMetadata
			var keeps []func(uint64) bool
			for in := range 40 {
				frag := uint32(in)
				var vals []int64
				if in == 0 {
					for v := int64(-2500); v < 2500; v++ { // the base: every key
						vals = append(vals, v)
					}
				} else {
					for range 50 + rng.IntN(1500) {
						vals = append(vals, rng.Int64N(5000)-2500)
					}
					slices.Sort(vals)
					vals = slices.Compact(vals)
				}
				var keys []key
				if in%3 == 0 {
					keys = append(keys, key{}) // the null key
				}
				for _, v := range vals {
					keys = append(keys, key{valid: true, b: tc.enc(v)})
				}
				keep := func(id uint64) bool { return in != 5 || id&1 == 0 } // input 5 loses its odd rows
				keeps = append(keeps, keep)
				rows := func(i int) []uint32 { return []uint32{uint32(2 * i), uint32(2*i + 1)} }
				for i, k := range keys {
					for _, r := range rows(i) {
						if id := uint64(frag)<<32 | uint64(r); keep(id) {
							want[string(k.b)] = append(want[string(k.b)], id)
						}
					}
				}
				metas = append(metas, writeKeys(t, st, tc.typ, keys, frag, rows))
			}
			out := uuid.New()
			res, err := Merge(ctx, st, metas, MergeOptions{IndexUUID: out, Keep: keeps})
			if err != nil {
				t.Fatal(err)
			}
			if res.KeysWritten != uint64(len(want)) {
				t.Fatalf("%d keys written, want %d", res.KeysWritten, len(want))
			}
			merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
			// what the merge counted as it wrote is what the file says
			counted, err := Described(ctx, st, merged)
			if err != nil {
				t.Fatal(err)
			}
			read, err := Describe(ctx, st, merged)
			if err != nil || *counted != *read || read.Keys != uint64(len(want)) {
				t.Fatalf("counted %+v, read %+v, %v", counted, read, err)
			}
			s, err := Open(ctx, st, merged)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			keys, err := s.r.Read(ctx, keysColumn, 0, s.Keys)
			if err != nil {
				t.Fatal(err)
			}
			maps, err := s.r.Read(ctx, bitmapsColumn, 0, s.Keys)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.typ.ValueBits() / 8
			prev := math.Inf(-1)
			for i := range int(s.Keys) {
				var kb []byte
				if keys.IsValid(i) {
					kb = keys.Values[i*w : (i+1)*w]
					if v := tc.dec(kb); v <= prev {
						t.Fatalf("key %d (%v) after %v", i, v, prev)
					} else {
						prev = v
					}
				} else if i != 0 {
					t.Fatalf("the null key at %d", i)
				}
				es, err := DecodeRowMap(maps.Values[maps.Offsets[i]:maps.Offsets[i+1]])
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for _, e := range es {
					for _, r := range e.Rows.ToArray() {
						got = append(got, uint64(e.Frag)<<32|uint64(r))
					}
				}
				if !slices.Equal(got, want[string(kb)]) {
					t.Fatalf("key %d: rows %v, want %v", i, got, want[string(kb)])
				}
			}
		})
	}
}

// failingReads is a store whose objects' reads fail once left reads are
// spent (or, with cancel set, cancel the merge's context then).
type failingReads struct {
	storage.Store
	left   *atomic.Int64
	cancel context.CancelFunc
}

var errInjected = errors.New("injected read failure")

func (f failingReads) Open(ctx context.Context, name string) (storage.Object, error) {
	o, err := f.Store.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return failingObject{o, f}, nil
}

type failingObject struct {
	storage.Object
	f failingReads
}

func (o failingObject) ReadAt(ctx context.Context, p []byte, off int64) error {
	if o.f.left.Add(-1) < 0 {
		if o.f.cancel != nil {
			o.f.cancel()
			return ctx.Err()
		}
		return errInjected
	}
	return o.Object.ReadAt(ctx, p, off)
}

// TestMergeFailsCleanlyMidway: a read that fails, or a cancellation, at
// any point of a merge of number keys (decoders ahead, the writer behind)
// is the merge's error, and every goroutine the merge started has ended
// when it returns.
func TestMergeFailsCleanlyMidway(t *testing.T) {
	root := t.TempDir()
	st := storage.NewLocal(root, root)
	i64 := lancefile.Primitive(lancefile.KindInt64)
	var metas []*pb.IndexMetadata
	for in := range 30 {
		var keys []key
		for v := range 3000 {
			keys = append(keys, key{valid: true, b: binary.LittleEndian.AppendUint64(nil, uint64(v*30+in%7))})
		}
		metas = append(metas, writeKeys(t, st, i64, keys, uint32(in), func(i int) []uint32 { return []uint32{uint32(i)} }))
	}
	var count atomic.Int64
	count.Store(1 << 40)
	if _, err := Merge(context.Background(), failingReads{Store: st, left: &count}, metas, MergeOptions{IndexUUID: uuid.New()}); err != nil {
		t.Fatal(err)
	}
	reads := 1<<40 - count.Load()
	before := runtime.NumGoroutine()
	for _, frac := range []int64{5, 30, 60, 95} {
		for _, cancels := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			var left atomic.Int64
			left.Store(reads * frac / 100)
			f := failingReads{Store: st, left: &left}
			if cancels {
				f.cancel = cancel
			}
			_, err := Merge(ctx, f, metas, MergeOptions{IndexUUID: uuid.New()})
			cancel()
			if want := error(errInjected); cancels && !errors.Is(err, context.Canceled) || !cancels && !errors.Is(err, want) {
				t.Fatalf("reads failing after %d%% (cancel %v): %v", frac, cancels, err)
			}
			if n := runtime.NumGoroutine(); n > before {
				t.Fatalf("reads failing after %d%% (cancel %v): %d goroutines after the merge, %d before", frac, cancels, n, before)
			}
		}
	}
}
