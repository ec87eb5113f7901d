package lancefile

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

func TestDecodeRLE(t *testing.T) {
	// expand is the plain reading of runs, to compare with
	expand := func(vals, runs []byte, w int) []byte {
		var out []byte
		for i, l := range runs {
			for range int(l) {
				out = append(out, vals[i*w:(i+1)*w]...)
			}
		}
		return out
	}
	long := make([]byte, 40)
	for i := range long {
		long[i] = 255
	}
	for _, tc := range []struct {
		name string
		w    int
		vals []byte
		runs []byte
		n    int
		bad  bool
	}{
		{name: "short runs", w: 2, vals: []byte{1, 0, 2, 0, 3, 0}, runs: []byte{1, 2, 3}, n: 6},
		{name: "empty runs between", w: 2, vals: []byte{1, 0, 2, 0, 3, 0}, runs: []byte{0, 5, 0}, n: 5},
		{name: "long runs", w: 1, vals: bytes.Repeat([]byte{7}, 40), runs: long, n: 40 * 255},
		{name: "one of each length", w: 4, vals: bytes.Repeat([]byte{1, 2, 3, 4}, 255), runs: func() []byte {
			r := make([]byte, 255)
			for i := range r {
				r[i] = byte(i + 1)
			}
			return r
		}(), n: 255 * 256 / 2},
		{name: "runs past n", w: 2, vals: []byte{1, 0, 2, 0}, runs: []byte{3, 3}, n: 5, bad: true},
		{name: "runs short of n", w: 2, vals: []byte{1, 0, 2, 0}, runs: []byte{1, 1}, n: 3, bad: true},
		{name: "too few value bytes", w: 2, vals: []byte{1, 0}, runs: []byte{1, 1}, n: 2, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &enc21.Rle{Values: flat21(tc.w * 8), RunLengths: flat21(8)}
			got, err := decodeRLE(e, tc.vals, tc.runs, tc.n, tc.w*8, nil)
			if tc.bad {
				if !errors.Is(err, errkind.Corrupt) {
					t.Fatalf("err %v, want Corrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := expand(tc.vals, tc.runs, tc.w); !bytes.Equal(got.values, want) {
				t.Fatalf("decoded %d bytes, want %d (equal: %v)", len(got.values), len(want), bytes.Equal(got.values, want))
			}
		})
	}
}
