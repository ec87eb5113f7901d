package lancefile

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func randomValues(r *rand.Rand, n, t, w int) []byte {
	bw := t / 8
	b := make([]byte, n*bw)
	for i := 0; i < n; i++ {
		var v uint64
		if w > 0 {
			v = r.Uint64()
			if w < 64 {
				v &= 1<<w - 1
			}
		}
		writeWord(b, i, bw, v)
	}
	return b
}

func TestFastLanesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{8, 16, 32, 64} {
		for w := 0; w <= bits; w++ {
			src := randomValues(r, flValues, bits, w)
			packed := packFastLanes(src, bits, w)
			if len(packed) != flValues*w/8 {
				t.Fatalf("T=%d W=%d: %d packed bytes", bits, w, len(packed))
			}
			got := make([]byte, len(src))
			if err := unpackFastLanes(got, packed, bits, w); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("T=%d W=%d: round trip differs", bits, w)
			}
			if w > 0 && bitWidth(src, bits) > w {
				t.Fatalf("bitWidth")
			}
		}
	}
}

// The layout itself, checked by hand on a known case: T=32, W=10 and values
// 0..1023, as in a Lance mini-block chunk of UInt32 0..1023. Value 1 (row 0
// of lane 1) must sit in the low bits of word 1.
func TestFastLanesLayout(t *testing.T) {
	src := make([]byte, 4*flValues)
	for i := 0; i < flValues; i++ {
		binary.LittleEndian.PutUint32(src[4*i:], uint32(i))
	}
	packed := packFastLanes(src, 32, 10)
	if w1 := binary.LittleEndian.Uint32(packed[4:]); w1&0x3ff != 1 {
		t.Fatalf("word 1 = %#x, want value 1 in its low 10 bits", w1)
	}
	// Row 1 of lane 0 is input index flOrder[0]*16 + 1*128 = 128, at bits 10..19 of word 0.
	if w0 := binary.LittleEndian.Uint32(packed); (w0>>10)&0x3ff != 128 {
		t.Fatalf("word 0 = %#x, want 128 at bit 10", w0)
	}
}

func TestOutOfLineBitpacked(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 5, 1023, 1024, 1025, 3000} {
		for _, w := range []int{0, 1, 3, 16} {
			src := randomValues(r, n, 16, w)
			// Full groups packed; the tail raw or packed.
			var enc []byte
			full := n / flValues
			for g := 0; g < full; g++ {
				enc = append(enc, packFastLanes(src[g*2048:(g+1)*2048], 16, w)...)
			}
			for _, rawTail := range []bool{true, false} {
				e := bytes.Clone(enc)
				tail := src[full*2048:]
				if rawTail {
					e = append(e, tail...)
				} else if len(tail) > 0 {
					padded := make([]byte, 2048)
					copy(padded, tail)
					e = append(e, packFastLanes(padded, 16, w)...)
				}
				got, err := decodeOutOfLineBitpacked(e, 16, w, n)
				if err != nil {
					// A raw tail and a packed tail can be the same length only
					// when that is ambiguous; Lance never writes that case.
					t.Fatalf("n=%d w=%d raw=%v: %v", n, w, rawTail, err)
				}
				if !bytes.Equal(got, src) {
					t.Fatalf("n=%d w=%d raw=%v: differs", n, w, rawTail)
				}
			}
		}
	}
}

// BenchmarkUnpack64 unpacks groups of 1024 row ids of 40 bits (a merged
// BTREE segment's ids column).
func BenchmarkUnpack64(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := randomValues(r, flValues, 64, 40)
	packed := packFastLanes(src, 64, 40)
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for range b.N {
		if err := unpackFastLanes(dst, packed, 64, 40); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPack64 packs groups of 1024 row ids of 40 bits.
func BenchmarkPack64(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := randomValues(r, flValues, 64, 40)
	dst := make([]byte, packedBytes(64, 40))
	b.SetBytes(int64(len(src)))
	for range b.N {
		clear(dst)
		packFastLanesInto(dst, src, 64, 40)
	}
}

// pack64 and unpack64 walk the groups row by row; the layout they must
// give is the lane-by-lane reading of FastLanes (the generic path's).
func TestPack64MatchesTheLaneLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const lanes = flValues / 64
	for w := 1; w <= 64; w++ {
		src := randomValues(r, flValues, 64, w)
		want := make([]byte, packedBytes(64, w))
		for lane := 0; lane < lanes; lane++ {
			for row := 0; row < 64; row++ {
				v := binary.LittleEndian.Uint64(src[8*(flOrder[row/8]*16+(row%8)*128+lane):])
				pos := row * w
				j, s := pos/64, pos%64
				i := 8 * (lanes*j + lane)
				binary.LittleEndian.PutUint64(want[i:], binary.LittleEndian.Uint64(want[i:])|v<<s)
				if s+w > 64 {
					i = 8 * (lanes*(j+1) + lane)
					binary.LittleEndian.PutUint64(want[i:], binary.LittleEndian.Uint64(want[i:])|v>>(64-s))
				}
			}
		}
		if got := packFastLanes(src, 64, w); !bytes.Equal(got, want) {
			t.Fatalf("W=%d: pack64 differs from the lane layout", w)
		}
	}
}
