package fts

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// BlockSize is the number of documents in a full posting block (the
// segment's posting_block_size; 128 is the only size written and read).
const BlockSize = 128

// packedLen is the byte length of 128 values packed at width w.
func packedLen(w int) int { return 16 * w }

// unpack4x decodes 128 values packed at width w in the BitPacker4x layout:
// value i is the (i/4)-th value of lane i%4; each lane's 32 values are
// packed LSB first into w 32-bit words, and word k of lane j is the
// (4k+j)-th little-endian u32 of src.
func unpack4x(dst *[BlockSize]uint32, src []byte, w int) error {
	if w > 32 || len(src) < packedLen(w) {
		return fmt.Errorf("%w: fts: packed block of width %d in %d bytes", errkind.Corrupt, w, len(src))
	}
	if w == 0 {
		*dst = [BlockSize]uint32{}
		return nil
	}
	mask := uint64(1)<<w - 1
	for lane := 0; lane < 4; lane++ {
		for k := 0; k < 32; k++ {
			bit := k * w
			word := bit / 32
			off := bit % 32
			v := uint64(binary.LittleEndian.Uint32(src[(4*word+lane)*4:]))
			if off+w > 32 {
				v |= uint64(binary.LittleEndian.Uint32(src[(4*(word+1)+lane)*4:])) << 32
			}
			dst[4*k+lane] = uint32(v >> off & mask)
		}
	}
	return nil
}

// pack4x appends the 128 values of src packed at width w (every value
// must fit in w bits) in the layout unpack4x reads.
func pack4x(out []byte, src *[BlockSize]uint32, w int) []byte {
	start := len(out)
	out = slices.Grow(out, packedLen(w))[:start+packedLen(w)]
	dst := out[start:]
	clear(dst)
	if w == 0 {
		return out
	}
	for lane := 0; lane < 4; lane++ {
		for k := 0; k < 32; k++ {
			bit := k * w
			word := bit / 32
			off := bit % 32
			v := uint64(src[4*k+lane]) << off
			p := (4*word + lane) * 4
			binary.LittleEndian.PutUint32(dst[p:], binary.LittleEndian.Uint32(dst[p:])|uint32(v))
			if off+w > 32 {
				p = (4*(word+1) + lane) * 4
				binary.LittleEndian.PutUint32(dst[p:], binary.LittleEndian.Uint32(dst[p:])|uint32(v>>32))
			}
		}
	}
	return out
}

// widthOf is the bit width of the largest of the 128 values.
func widthOf(src *[BlockSize]uint32) int {
	var or uint32
	for _, v := range src {
		or |= v
	}
	return bits.Len32(or)
}
