package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// FastLanes bit packing, as Lance uses it for inline (mini-block) and
// out-of-line (rep/def level) bitpacking. 1024 values of T bits (T ∈ {8, 16,
// 32, 64}) are packed into 1024·W/T words of T bits, W = bit width (0..T).
// The 1024 values are spread over LANES = 1024/T lanes; each lane holds T
// values as a little-endian bit stream of W-bit fields, and word j of lane l
// is word LANES·j + l. Value order follows the FastLanes transpose:
//
//	index(row, lane) = flOrder[row/8]·16 + (row%8)·128 + lane,  row ∈ [0, T)
//
// Part of the file format; never change.
var flOrder = [8]int{0, 4, 2, 6, 1, 5, 3, 7}

const flValues = 1024

func readWord(b []byte, i, bytesPerWord int) uint64 {
	switch bytesPerWord {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	default:
		return binary.LittleEndian.Uint64(b[8*i:])
	}
}

func writeWord(b []byte, i, bytesPerWord int, v uint64) {
	switch bytesPerWord {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

func packedBytes(t, w int) int { return flValues * w / 8 }

// unpackFastLanes unpacks 1024 T-bit values of width w from src (exactly
// 1024·w/8 bytes) into dst (1024 values of T/8 bytes each, little-endian).
func unpackFastLanes(dst, src []byte, t, w int) error {
	if t != 8 && t != 16 && t != 32 && t != 64 {
		return fmt.Errorf("%w: bitpacking of %d-bit values", errkind.Corrupt, t)
	}
	if w < 0 || w > t {
		return fmt.Errorf("%w: bit width %d for %d-bit values", errkind.Corrupt, w, t)
	}
	bw := t / 8
	if len(src) != packedBytes(t, w) || len(dst) != flValues*bw {
		return fmt.Errorf("%w: bitpacked group of %d bytes for width %d/%d", errkind.Corrupt, len(src), w, t)
	}
	if w == 0 {
		clear(dst)
		return nil
	}
	lanes := flValues / t
	mask := uint64(1)<<w - 1
	if w == 64 {
		mask = ^uint64(0)
	}
	if t == 64 {
		unpack64(dst, src, w, mask)
		return nil
	}
	for lane := 0; lane < lanes; lane++ {
		for row := 0; row < t; row++ {
			pos := row * w
			j, s := pos/t, pos%t
			v := readWord(src, lanes*j+lane, bw) >> s
			if s+w > t {
				v |= readWord(src, lanes*(j+1)+lane, bw) << (t - s)
			}
			writeWord(dst, flOrder[row/8]*16+(row%8)*128+lane, bw, v&mask)
		}
	}
	return nil
}

// unpack64 is unpackFastLanes for 64-bit values (row ids), without the
// per-value width dispatch.
func unpack64(dst, src []byte, w int, mask uint64) {
	const lanes = flValues / 64
	_ = dst[8*flValues-1]
	le := binary.LittleEndian
	// Row by row: a row's 16 lanes share their word and shift, and are
	// contiguous in both src and dst (array pointers: one bounds check
	// per row, not one per lane).
	for row := 0; row < 64; row++ {
		pos := row * w
		j, s := pos>>6, uint(pos&63)
		in := (*[8 * lanes]byte)(src[8*lanes*j:])
		out := (*[8 * lanes]byte)(dst[8*(flOrder[row>>3]*16+(row&7)*128):])
		if int(s)+w > 64 {
			next := (*[8 * lanes]byte)(src[8*lanes*(j+1):])
			for lane := 0; lane < lanes; lane++ {
				v := le.Uint64(in[8*lane:])>>s | le.Uint64(next[8*lane:])<<(64-s)
				le.PutUint64(out[8*lane:], v&mask)
			}
			continue
		}
		for lane := 0; lane < lanes; lane++ {
			le.PutUint64(out[8*lane:], le.Uint64(in[8*lane:])>>s&mask)
		}
	}
}

// packFastLanes is the inverse of unpackFastLanes: src holds 1024 T-bit
// values; every value must fit in w bits.
func packFastLanes(src []byte, t, w int) []byte {
	return packFastLanesInto(make([]byte, packedBytes(t, w)), src, t, w)
}

// packFastLanesInto packs into dst (packedBytes(t, w) zeroed bytes).
func packFastLanesInto(dst, src []byte, t, w int) []byte {
	bw := t / 8
	if w == 0 {
		return dst
	}
	lanes := flValues / t
	if t == 64 {
		pack64(dst, src, w)
		return dst
	}
	for lane := 0; lane < lanes; lane++ {
		for row := 0; row < t; row++ {
			v := readWord(src, flOrder[row/8]*16+(row%8)*128+lane, bw)
			pos := row * w
			j, s := pos/t, pos%t
			i := lanes*j + lane
			writeWord(dst, i, bw, readWord(dst, i, bw)|v<<s)
			if s+w > t {
				i2 := lanes*(j+1) + lane
				writeWord(dst, i2, bw, readWord(dst, i2, bw)|v>>(t-s))
			}
		}
	}
	return dst
}

// pack64 is packFastLanesInto for 64-bit values.
func pack64(dst, src []byte, w int) {
	const lanes = flValues / 64
	_ = src[8*flValues-1]
	// Row by row, as unpack64: OR each row's 16 lanes into the words they
	// share (dst is zeroed).
	for row := 0; row < 64; row++ {
		pos := row * w
		j, s := pos>>6, uint(pos&63)
		in := src[8*(flOrder[row>>3]*16+(row&7)*128):][:8*lanes]
		out := dst[8*lanes*j:][:8*lanes]
		for lane := 0; lane < lanes; lane++ {
			v := binary.LittleEndian.Uint64(in[8*lane:])
			binary.LittleEndian.PutUint64(out[8*lane:], binary.LittleEndian.Uint64(out[8*lane:])|v<<s)
		}
		if int(s)+w > 64 {
			next := dst[8*lanes*(j+1):][:8*lanes]
			for lane := 0; lane < lanes; lane++ {
				v := binary.LittleEndian.Uint64(in[8*lane:])
				binary.LittleEndian.PutUint64(next[8*lane:], binary.LittleEndian.Uint64(next[8*lane:])|v>>(64-s))
			}
		}
	}
}

// bitWidth is the number of bits needed for the largest of the T-bit values
// in src.
func bitWidth(src []byte, t int) int {
	bw := t / 8
	var or uint64
	if bw == 8 {
		for i := 0; i+8 <= len(src); i += 8 {
			or |= binary.LittleEndian.Uint64(src[i:])
		}
	} else {
		for i := 0; i < len(src)/bw; i++ {
			or |= readWord(src, i, bw)
		}
	}
	w := 0
	for or != 0 {
		w++
		or >>= 1
	}
	return w
}

// decodeInlineBitpacked decodes one mini-block chunk buffer of inline
// bitpacking: [W as a T-bit word][1024·W/T packed words], holding up to 1024
// values of which n are real. It appends n values to dst.
func decodeInlineBitpacked(dst, buf []byte, t, n int) ([]byte, error) {
	bw := t / 8
	if n > flValues || len(buf) < bw {
		return nil, fmt.Errorf("%w: inline bitpacked chunk of %d bytes for %d values", errkind.Corrupt, len(buf), n)
	}
	w := int(readWord(buf, 0, bw))
	if w > t {
		return nil, fmt.Errorf("%w: inline bitpacked width %d > %d", errkind.Corrupt, w, t)
	}
	packed := buf[bw:]
	if len(packed) < packedBytes(t, w) {
		return nil, fmt.Errorf("%w: inline bitpacked chunk has %d bytes, width %d needs %d", errkind.Corrupt, len(packed), w, packedBytes(t, w))
	}
	if n == flValues {
		// Unpack straight into dst.
		base := len(dst)
		dst = slices.Grow(dst, flValues*bw)[:base+flValues*bw]
		return dst, unpackFastLanes(dst[base:], packed[:packedBytes(t, w)], t, w)
	}
	out := make([]byte, flValues*bw)
	if err := unpackFastLanes(out, packed[:packedBytes(t, w)], t, w); err != nil {
		return nil, err
	}
	return append(dst, out[:n*bw]...), nil
}

// decodeOutOfLineBitpacked decodes a block of n T-bit values bitpacked with
// one width w for the whole block and no header: full groups of 1024 are
// FastLanes-packed; a final partial group is either packed as a full group
// (zero-padded) or stored raw, which the block length tells apart.
func decodeOutOfLineBitpacked(buf []byte, t, w, n int) ([]byte, error) {
	bw := t / 8
	if w < 0 || w > t {
		return nil, fmt.Errorf("%w: out-of-line bit width %d for %d-bit values", errkind.Corrupt, w, t)
	}
	full, rest := n/flValues, n%flValues
	groupBytes := packedBytes(t, w)
	out := make([]byte, 0, n*bw)
	tmp := make([]byte, flValues*bw)
	need := full * groupBytes
	if len(buf) < need {
		return nil, fmt.Errorf("%w: out-of-line bitpacked block of %d bytes for %d values of width %d", errkind.Corrupt, len(buf), n, w)
	}
	for g := 0; g < full; g++ {
		if err := unpackFastLanes(tmp, buf[g*groupBytes:(g+1)*groupBytes], t, w); err != nil {
			return nil, err
		}
		out = append(out, tmp...)
	}
	tail := buf[need:]
	switch {
	case rest == 0 && len(tail) == 0:
	case len(tail) == rest*bw:
		out = append(out, tail...) // raw trailing values
	case len(tail) == groupBytes && rest > 0:
		if err := unpackFastLanes(tmp, tail, t, w); err != nil {
			return nil, err
		}
		out = append(out, tmp[:rest*bw]...)
	default:
		return nil, fmt.Errorf("%w: out-of-line bitpacked block: %d trailing bytes for %d values of width %d", errkind.Corrupt, len(tail), rest, w)
	}
	return out, nil
}
