package lancefile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// binaryArray builds n random rows of up to maxLen bytes, every nullEvery-th
// row null (0: none).
func binaryArray(r *rand.Rand, n, maxLen, nullEvery int) *Array {
	a := &Array{Type: ParseLogicalType("binary"), Len: n, Offsets: []int64{0}, Values: []byte{}}
	if nullEvery > 0 {
		a.Validity = make([]byte, (n+7)/8)
	}
	for i := 0; i < n; i++ {
		if nullEvery > 0 && i%nullEvery == 0 {
			a.Offsets = append(a.Offsets, int64(len(a.Values)))
			continue
		}
		if a.Validity != nil {
			a.Validity[i/8] |= 1 << (i % 8)
		}
		for k := r.IntN(maxLen + 1); k > 0; k-- {
			a.Values = append(a.Values, byte(r.Uint32()))
		}
		a.Offsets = append(a.Offsets, int64(len(a.Values)))
	}
	return a
}

func TestBinaryRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, v := range []Version{V2_0, V2_1, V2_2} {
		for _, tc := range []struct{ n, maxLen, nullEvery, batches, pageBytes int }{
			{0, 10, 0, 1, 0}, {1, 0, 0, 1, 0}, {500, 30, 0, 1, 0}, {700, 300, 3, 4, 32 << 10}, {300, 5, 1, 2, 0},
		} {
			t.Run(fmt.Sprintf("%s/%+v", v, tc), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.n), 3))
				var buf bytes.Buffer
				w, err := NewWriter(&buf, []*Field{NewField("b", ParseLogicalType("binary"), true)}, WriterOptions{Version: v, MaxPageBytes: tc.pageBytes})
				if err != nil {
					t.Fatal(err)
				}
				var parts []*Array
				for b := 0; b < tc.batches; b++ {
					a := binaryArray(r, tc.n, tc.maxLen, tc.nullEvery)
					parts = append(parts, a)
					if err := w.Write([]*Array{a}); err != nil {
						t.Fatal(err)
					}
				}
				if err := w.Finish(); err != nil {
					t.Fatal(err)
				}
				want, err := Concat(parts[0].Type, parts)
				if err != nil {
					t.Fatal(err)
				}
				rd, err := openBytes(t, buf.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				got, err := rd.ReadAll(ctx, "b")
				if err != nil {
					t.Fatal(err)
				}
				equalRows(t, "all", want, got)
				total := want.Len
				for k := 0; k < 10 && total > 0; k++ {
					a := r.IntN(total)
					b := a + 1 + r.IntN(total-a)
					got, err := rd.Read(ctx, "b", uint64(a), uint64(b))
					if err != nil {
						t.Fatalf("[%d,%d): %v", a, b, err)
					}
					equalRows(t, fmt.Sprintf("[%d,%d)", a, b), want.Slice(a, b), got)
				}
			})
		}
	}
}

func TestWriterRejectsBadBinary(t *testing.T) {
	bin := ParseLogicalType("binary")
	for _, a := range []*Array{
		{Type: bin, Len: 2, Offsets: []int64{0, 1}, Values: []byte{1}},       // too few offsets
		{Type: bin, Len: 1, Offsets: []int64{0, 2}, Values: []byte{1}},       // past the values
		{Type: bin, Len: 2, Offsets: []int64{0, 2, 1}, Values: []byte{1, 2}}, // decreasing
		{Type: bin, Len: 1, Offsets: []int64{1, 2}, Values: []byte{1, 2}},    // not from 0
	} {
		w, err := NewWriter(&bytes.Buffer{}, []*Field{NewField("b", bin, false)}, WriterOptions{Version: V2_2})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write([]*Array{a}); !errors.Is(err, errkind.InvalidInput) {
			t.Fatalf("accepted %+v: %v", a, err)
		}
	}
}
