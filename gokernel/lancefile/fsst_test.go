package lancefile

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// fsstTableBytes builds a symbol table the way the format lays it out.
func fsstTableBytes(on bool, syms ...string) []byte {
	h := uint64(fsstMagic)<<32 | uint64(len(syms))
	if on {
		h |= 1 << 24
	}
	b := binary.LittleEndian.AppendUint64(nil, h)
	for _, s := range syms {
		var w [8]byte
		copy(w[:], s)
		b = append(b, w[:]...)
	}
	for _, s := range syms {
		b = append(b, byte(len(s)))
	}
	return append(b, make([]byte, 2312-len(b))...)
}

func TestFsstDecode(t *testing.T) {
	table := fsstTableBytes(true, "ab", "c", "longest!")
	for _, tc := range []struct {
		name  string
		table []byte
		codes []byte
		want  string
		err   error
	}{
		{"symbols", table, []byte{0, 1, 2, 0}, "abclongest!ab", nil},
		{"escape", table, []byte{255, 'x', 0, 255, 255}, "xab\xff", nil},
		{"empty", table, nil, "", nil},
		{"switched off", fsstTableBytes(false), []byte("raw\xff"), "raw\xff", nil},
		{"trailing escape", table, []byte{0, 255}, "", errkind.Corrupt},
		{"code past the table", table, []byte{3}, "", errkind.Corrupt},
		{"no magic", append([]byte{0, 0, 0, 1, 0, 0, 0, 0}, table[8:]...), nil, "", errkind.Corrupt},
		{"short table", table[:20], nil, "", errkind.Corrupt},
		{"header only", table[:7], nil, "", errkind.Corrupt},
		{"symbol of length 0", func() []byte { b := append([]byte(nil), table...); b[8+3*8] = 0; return b }(), nil, "", errkind.Corrupt},
		{"symbol of length 9", func() []byte { b := append([]byte(nil), table...); b[8+3*8+1] = 9; return b }(), nil, "", errkind.Corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft, err := parseFsstTable(tc.table)
			var got []byte
			if err == nil {
				got, err = ft.appendDecoded([]byte{}, tc.codes)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
