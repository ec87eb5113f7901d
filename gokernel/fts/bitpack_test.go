package fts

import (
	"math/rand/v2"
	"testing"
)

func TestPack4xRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for w := 0; w <= 32; w++ {
		var in, out [BlockSize]uint32
		for i := range in {
			if w > 0 {
				in[i] = uint32(rng.Uint64() & (1<<w - 1))
			}
		}
		if got := widthOf(&in); got > w {
			t.Fatalf("width %d: widthOf %d", w, got)
		}
		b := pack4x(nil, &in, w)
		if len(b) != packedLen(w) {
			t.Fatalf("width %d: %d bytes", w, len(b))
		}
		if err := unpack4x(&out, b, w); err != nil {
			t.Fatal(err)
		}
		if in != out {
			t.Fatalf("width %d: round trip differs", w)
		}
	}
	var out [BlockSize]uint32
	if err := unpack4x(&out, make([]byte, 15), 1); err == nil {
		t.Fatal("short input accepted")
	}
}

// Lane layout: value i is in lane i%4, so at width 1 the value 1 at index
// 5 (lane 1, position 1) sets bit 1 of the second u32.
func TestPack4xLayout(t *testing.T) {
	var in [BlockSize]uint32
	in[5] = 1
	b := pack4x(nil, &in, 1)
	for i, x := range b {
		want := byte(0)
		if i == 4 {
			want = 2
		}
		if x != want {
			t.Fatalf("byte %d = %#x, want %#x", i, x, want)
		}
	}
}
