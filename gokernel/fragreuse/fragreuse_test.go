package fragreuse

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// digest encodes a FragmentDigest.
func digest(id, physical, deleted uint64) []byte {
	var b []byte
	b = protowire.AppendTag(b, digestID, protowire.VarintType)
	b = protowire.AppendVarint(b, id)
	b = protowire.AppendTag(b, digestPhysical, protowire.VarintType)
	b = protowire.AppendVarint(b, physical)
	b = protowire.AppendTag(b, digestDeleted, protowire.VarintType)
	return protowire.AppendVarint(b, deleted)
}

// frag is a fragment of a test compaction: its id and rows (old
// fragments: physical rows, and which offsets were deleted).
type frag struct {
	id, rows uint64
	deleted  []uint32
}

// group encodes a Group rewriting old into fragments of the given sizes,
// carrying over every row of old but the deleted ones, and returns the
// addresses in carried-over order.
func group(t *testing.T, old []frag, newFrags []frag) ([]byte, []uint64) {
	t.Helper()
	kept := roaring64.New()
	var order []uint64
	for _, f := range old {
		for off := range f.rows {
			if !slices.Contains(f.deleted, uint32(off)) {
				kept.Add(f.id<<32 | off)
			}
		}
	}
	order = kept.ToArray()
	var changed bytes.Buffer
	if _, err := kept.WriteTo(&changed); err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = protowire.AppendTag(b, groupChanged, protowire.BytesType)
	b = protowire.AppendBytes(b, changed.Bytes())
	for _, f := range old {
		b = protowire.AppendTag(b, groupOld, protowire.BytesType)
		b = protowire.AppendBytes(b, digest(f.id, f.rows, uint64(len(f.deleted))))
	}
	for _, f := range newFrags {
		b = protowire.AppendTag(b, groupNew, protowire.BytesType)
		b = protowire.AppendBytes(b, digest(f.id, f.rows, 0))
	}
	return b, order
}

func version(dv uint64, groups ...[]byte) []byte {
	var b []byte
	b = protowire.AppendTag(b, versionDatasetVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, dv)
	for _, g := range groups {
		b = protowire.AppendTag(b, versionGroups, protowire.BytesType)
		b = protowire.AppendBytes(b, g)
	}
	return b
}

func content(versions ...[]byte) []byte {
	var b []byte
	for _, v := range versions {
		b = protowire.AppendTag(b, inlineVersions, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	return b
}

// TestRemap: two compactions. The first rewrites fragments 0 and 1 (rows
// 2 and 5 of fragment 0 deleted) into 5 and 6, and fragment 2 alone into
// 7; the second rewrites 6 and 3 into 8. Every carried-over row lands on
// the new fragments' rows in address order; deleted rows map to nothing,
// through both versions; fragment 4, never compacted, keeps its rows.
func TestRemap(t *testing.T) {
	g1, order1 := group(t, []frag{{id: 0, rows: 10, deleted: []uint32{2, 5}}, {id: 1, rows: 4}}, []frag{{id: 5, rows: 7}, {id: 6, rows: 5}})
	g2, order2 := group(t, []frag{{id: 2, rows: 3}}, []frag{{id: 7, rows: 3}})
	g3, order3 := group(t, []frag{{id: 3, rows: 2}, {id: 6, rows: 5, deleted: []uint32{0}}}, []frag{{id: 8, rows: 6}})
	m, err := Parse(content(version(4, g1, g2), version(9, g3)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Versions) != 2 || m.Versions[0].DatasetVersion != 4 || m.Versions[1].DatasetVersion != 9 {
		t.Fatalf("versions: %+v", m.Versions)
	}
	// the second compaction, alone: its carried-over rows in order
	for i, a := range order3 {
		want := uint64(8)<<32 | uint64(i)
		if got, ok := m.Versions[1].byOld[uint32(a>>32)].remap(a); !ok || got != want {
			t.Errorf("second compaction: %#x -> %#x %v, want %#x", a, got, ok, want)
		}
	}
	// the first, through both: fragment 6's row 0 was deleted in between
	at8 := map[uint64]uint64{}
	for i, a := range order3 {
		at8[a] = uint64(8)<<32 | uint64(i)
	}
	for i, a := range order1 {
		mid := uint64(5)<<32 | uint64(i)
		if i >= 7 {
			mid = uint64(6)<<32 | uint64(i-7)
		}
		want, live := mid, true
		if mid>>32 == 6 {
			want, live = at8[mid]
		}
		got, ok := m.Remap(a)
		if ok != live || (ok && got != want) {
			t.Errorf("%#x -> %#x %v, want %#x %v", a, got, ok, want, live)
		}
	}
	for i, a := range order2 {
		if got, ok := m.Remap(a); !ok || got != uint64(7)<<32|uint64(i) {
			t.Errorf("%#x -> %#x %v", a, got, ok)
		}
	}
	for _, a := range []uint64{2, 5} { // deleted before the first compaction
		if got, ok := m.Remap(a); ok {
			t.Errorf("deleted row %d -> %#x", a, got)
		}
	}
	if got, ok := m.Remap(4<<32 | 17); !ok || got != 4<<32|17 {
		t.Errorf("fragment 4 was not compacted: -> %#x %v", got, ok)
	}
	for f, want := range map[uint32]bool{0: true, 1: true, 2: true, 3: true, 4: false, 5: false, 6: true, 8: false} {
		if m.Compacted(f) != want {
			t.Errorf("Compacted(%d) = %v", f, !want)
		}
	}
	for f, want := range map[uint32]bool{0: false, 3: false, 4: false, 5: true, 6: true, 7: true, 8: true, 9: false} {
		if m.Written(f) != want {
			t.Errorf("Written(%d) = %v", f, !want)
		}
	}
	for _, tc := range []struct {
		old      []uint32
		want     []uint32
		complete bool
	}{
		{[]uint32{0, 1, 2, 3, 4}, []uint32{4, 5, 7, 8}, true},
		{[]uint32{0, 1}, []uint32{5, 8}, false}, // 6 went on with 3, not given
		{[]uint32{0}, []uint32{5, 8}, false},    // 1 went with 0; 6 on into 8
		{[]uint32{4}, []uint32{4}, true},
	} {
		got, complete := m.NewFragments(tc.old)
		if !slices.Equal(got, tc.want) || complete != tc.complete {
			t.Errorf("NewFragments(%v) = %v %v, want %v %v", tc.old, got, complete, tc.want, tc.complete)
		}
	}
	if got := m.Rewritten(); !slices.Equal(got, []uint32{0, 1, 2, 3, 6}) {
		t.Errorf("Rewritten() = %v", got)
	}
	var nilMap *Map
	if got, ok := nilMap.Remap(9); !ok || got != 9 || nilMap.Compacted(0) || nilMap.Written(0) {
		t.Error("a nil map is not the identity")
	}
}

// TestSplitDetails: the details message holds its content inline or
// names a file; a message with neither is corrupt.
func TestSplitDetails(t *testing.T) {
	body := content(version(3))
	var d []byte
	d = protowire.AppendTag(d, detailsInline, protowire.BytesType)
	d = protowire.AppendBytes(d, body)
	inline, ext, err := splitDetails(d)
	if err != nil || ext != nil || !bytes.Equal(inline, body) {
		t.Fatalf("inline: %x %v %v", inline, ext, err)
	}
	var e []byte
	e = protowire.AppendTag(e, externalPath, protowire.BytesType)
	e = protowire.AppendString(e, "details.binpb")
	e = protowire.AppendTag(e, externalOffset, protowire.VarintType)
	e = protowire.AppendVarint(e, 16)
	e = protowire.AppendTag(e, externalSize, protowire.VarintType)
	e = protowire.AppendVarint(e, 900)
	d = protowire.AppendTag(nil, detailsExternal, protowire.BytesType)
	d = protowire.AppendBytes(d, e)
	_, ext, err = splitDetails(d)
	if err != nil || ext == nil || *ext != (external{"details.binpb", 16, 900}) {
		t.Fatalf("external: %+v %v", ext, err)
	}
	if _, _, err := splitDetails(nil); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("empty details: %v", err)
	}
}

// TestParseRefusesInconsistentMaps: content that contradicts itself is
// errkind.Corrupt, never a panic or a wrong map.
func TestParseRefusesInconsistentMaps(t *testing.T) {
	good, _ := group(t, []frag{{id: 0, rows: 4}}, []frag{{id: 1, rows: 4}})
	short, _ := group(t, []frag{{id: 0, rows: 4}}, []frag{{id: 1, rows: 3}})
	other, _ := group(t, []frag{{id: 2, rows: 4}}, []frag{{id: 1, rows: 4}})
	changedOf := func(b []byte) []byte {
		var out []byte
		eachField(b, "", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num == groupChanged {
				out = v
			}
			return nil
		})
		return out
	}
	withChanged := func(b, changed []byte) []byte {
		var out []byte
		out = protowire.AppendTag(out, groupChanged, protowire.BytesType)
		out = protowire.AppendBytes(out, changed)
		eachField(b, "", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != groupChanged {
				out = protowire.AppendTag(out, num, protowire.BytesType)
				out = protowire.AppendBytes(out, v)
			}
			return nil
		})
		return out
	}
	beyond, _ := group(t, []frag{{id: 0, rows: 6}}, []frag{{id: 1, rows: 6}})
	beyond = withChanged(good, changedOf(beyond)) // rows 4 and 5 of a 4-row fragment
	hugeCount := append([]byte{}, changedOf(good)...)
	hugeCount[7] = 0x7f
	for name, body := range map[string][]byte{
		"too few new rows":          content(version(1, short)),
		"a map of another fragment": content(version(1, withChanged(other, changedOf(good)))), // fragment 0's rows in a group of fragment 2
		"rows beyond the fragment":  content(version(1, beyond)),
		"a count past the bytes":    content(version(1, withChanged(good, hugeCount))),
		"a truncated map":           content(version(1, withChanged(good, changedOf(good)[:12]))),
		"a truncated message":       content(version(1, good))[:9],
		"twice in one compaction":   content(version(1, good, good)),
	} {
		if _, err := Parse(body); !errors.Is(err, errkind.Corrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if m, err := Parse(content(version(1, good))); err != nil || !m.Compacted(0) {
		t.Fatalf("the good map: %v", err)
	}
}

// TestParsedMapsAreShared: a map read again from the same content is the
// same map; other content is read afresh, and the oldest of more than
// parsedHeld contents is dropped.
func TestParsedMapsAreShared(t *testing.T) {
	parseCached := func(b []byte) (*Map, error) { return cached(string(b), func() ([]byte, error) { return b, nil }) }
	var contents [][]byte
	for i := range parsedHeld + 1 {
		g, _ := group(t, []frag{{id: uint64(i), rows: 3}}, []frag{{id: uint64(100 + i), rows: 3}})
		contents = append(contents, content(version(uint64(i), g)))
	}
	first, err := parseCached(contents[0])
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := parseCached(bytes.Clone(contents[0])); again != first {
		t.Error("the same content was parsed again")
	}
	for _, c := range contents[1:] {
		m, err := parseCached(c)
		if err != nil || m == first {
			t.Fatalf("other content: %v", err)
		}
	}
	if again, _ := parseCached(contents[0]); again == first || !again.Compacted(0) {
		t.Error("the oldest content was not dropped, or was read back wrong")
	}
}
