package bitmap

import (
	"encoding/binary"
	"errors"
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
