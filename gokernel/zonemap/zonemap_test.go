package zonemap

import (
	"bytes"
	"testing"
)

func TestNullMapRoundTripAndBounds(t *testing.T) {
	es := []nullEntry{{0, []byte{1, 2, 3}}, {7, nil}, {9, []byte{4}}}
	b := serializeNulls(es)
	got, err := parseNulls(b)
	if err != nil || len(got) != len(es) {
		t.Fatalf("parse: %v, %d entries", err, len(got))
	}
	for i := range es {
		if got[i].frag != es[i].frag || !bytes.Equal(got[i].bits, es[i].bits) {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], es[i])
		}
	}
	if !bytes.Equal(serializeNulls(got), b) {
		t.Error("serialize(parse(b)) != b")
	}
	for name, bad := range map[string][]byte{
		"short":         {1, 0},
		"count too big": {255, 255, 255, 255},
		"entry cut":     b[:len(b)-1],
		"length lies":   append(append([]byte{1, 0, 0, 0, 0, 0, 0, 0}, 200, 0, 0, 0), 1, 2),
		"trailing":      append(append([]byte(nil), b...), 0),
	} {
		if _, err := parseNulls(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
