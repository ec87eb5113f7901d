package lancefile

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// chunkValues is what a mini-block value decompressor produces for one
// chunk: n values of the column's width, plus the item validity of a
// FixedSizeList with nullable items.
type chunkValues struct {
	values       []byte
	itemValidity []byte
}

// valueBuffers counts the per-chunk value buffers an encoding consumes.
func valueBuffers(e *enc21.CompressiveEncoding) int {
	switch c := e.GetCompression().(type) {
	case *enc21.CompressiveEncoding_Rle:
		return 2
	case *enc21.CompressiveEncoding_FixedSizeList:
		n := valueBuffers(c.FixedSizeList.GetValues())
		if c.FixedSizeList.GetHasValidity() {
			n++
		}
		return n
	case *enc21.CompressiveEncoding_General:
		return valueBuffers(c.General.GetValues())
	}
	return 1
}

// decodeMiniBlockValues decodes n values of valueBits bits each from the
// value buffers of one chunk and appends them to dst (which may be nil);
// the result's values is the extended dst.
func decodeMiniBlockValues(e *enc21.CompressiveEncoding, bufs [][]byte, n, valueBits int, dst []byte) (chunkValues, error) {
	if len(bufs) < valueBuffers(e) {
		return chunkValues{}, fmt.Errorf("%w: chunk has %d value buffers, encoding needs %d", errkind.Corrupt, len(bufs), valueBuffers(e))
	}
	switch c := e.GetCompression().(type) {
	case *enc21.CompressiveEncoding_Flat:
		b, err := maybeDecompress(c.Flat.GetData(), bufs[0])
		if err != nil {
			return chunkValues{}, err
		}
		cv, err := flatValues(b, int(c.Flat.GetBitsPerValue()), valueBits, n)
		cv.values = append(dst, cv.values...)
		return cv, err
	case *enc21.CompressiveEncoding_InlineBitpacking:
		t := int(c.InlineBitpacking.GetUncompressedBitsPerValue())
		if t != valueBits {
			return chunkValues{}, fmt.Errorf("%w: %d-bit bitpacking for %d-bit values", errkind.Corrupt, t, valueBits)
		}
		b, err := maybeDecompress(c.InlineBitpacking.GetValues(), bufs[0])
		if err != nil {
			return chunkValues{}, err
		}
		out := dst
		for done := 0; done < n; done += flValues {
			// One mini-block chunk holds at most one 1024-value group in
			// Lance's writer, but nothing forbids several back to back.
			m := min(flValues, n-done)
			if len(b) < t/8 {
				return chunkValues{}, fmt.Errorf("%w: inline bitpacked chunk truncated", errkind.Corrupt)
			}
			w := int(readWord(b, 0, t/8))
			if w > t {
				return chunkValues{}, fmt.Errorf("%w: inline bitpacked width %d > %d", errkind.Corrupt, w, t)
			}
			group := t/8 + packedBytes(t, w)
			if len(b) < group {
				return chunkValues{}, fmt.Errorf("%w: inline bitpacked chunk truncated", errkind.Corrupt)
			}
			if out, err = decodeInlineBitpacked(out, b[:group], t, m); err != nil {
				return chunkValues{}, err
			}
			b = b[group:]
		}
		return chunkValues{values: out}, nil
	case *enc21.CompressiveEncoding_FixedSizeList:
		fsl := c.FixedSizeList
		dim := int(fsl.GetItemsPerValue())
		if dim <= 0 || valueBits%dim != 0 {
			return chunkValues{}, fmt.Errorf("%w: fixed-size list of %d items for %d-bit values", errkind.Corrupt, dim, valueBits)
		}
		var iv []byte
		if fsl.GetHasValidity() {
			iv = bufs[0]
			if len(iv) < (n*dim+7)/8 {
				return chunkValues{}, fmt.Errorf("%w: item validity of %d bytes for %d items", errkind.Corrupt, len(iv), n*dim)
			}
			bufs = bufs[1:]
		}
		inner, err := decodeMiniBlockValues(fsl.GetValues(), bufs, n*dim, valueBits/dim, dst)
		if err != nil {
			return chunkValues{}, err
		}
		inner.itemValidity = iv
		return inner, nil
	case *enc21.CompressiveEncoding_Rle:
		cv, err := decodeRLE(c.Rle, bufs[0], bufs[1], n, valueBits, nil)
		cv.values = append(dst, cv.values...)
		return cv, err
	case *enc21.CompressiveEncoding_General:
		b, err := decompress(c.General.GetCompression().GetScheme(), bufs[0])
		if err != nil {
			return chunkValues{}, err
		}
		rest := append([][]byte{b}, bufs[1:]...)
		return decodeMiniBlockValues(c.General.GetValues(), rest, n, valueBits, dst)
	case *enc21.CompressiveEncoding_ByteStreamSplit:
		inner := c.ByteStreamSplit.GetValues().GetFlat()
		if inner == nil || int(inner.GetBitsPerValue()) != valueBits || valueBits%8 != 0 {
			return chunkValues{}, fmt.Errorf("%w: byte stream split of %v", errkind.Unsupported, c.ByteStreamSplit.GetValues())
		}
		w := valueBits / 8
		if len(bufs[0]) < n*w {
			return chunkValues{}, fmt.Errorf("%w: byte stream split chunk of %d bytes for %d values", errkind.Corrupt, len(bufs[0]), n)
		}
		base := len(dst)
		out := slices.Grow(dst, n*w)[:base+n*w]
		for k := 0; k < w; k++ {
			for i := 0; i < n; i++ {
				out[base+i*w+k] = bufs[0][k*n+i]
			}
		}
		return chunkValues{values: out}, nil
	case nil:
		return chunkValues{}, fmt.Errorf("%w: missing value compression", errkind.Corrupt)
	default:
		return chunkValues{}, fmt.Errorf("%w: mini-block value compression %T", errkind.Unsupported, c)
	}
}

func maybeDecompress(bc *enc21.BufferCompression, b []byte) ([]byte, error) {
	if bc == nil {
		return b, nil
	}
	return decompress(bc.GetScheme(), b)
}

func flatValues(b []byte, bits, valueBits, n int) (chunkValues, error) {
	if bits == 1 && valueBits == 8 {
		return unpackBools(b, n)
	}
	if bits != valueBits || bits%8 != 0 {
		return chunkValues{}, fmt.Errorf("%w: flat %d-bit values for a %d-bit column", errkind.Unsupported, bits, valueBits)
	}
	if n < 0 || len(b) < n*bits/8 {
		return chunkValues{}, fmt.Errorf("%w: %d bytes of flat values, want %d", errkind.Corrupt, len(b), n*bits/8)
	}
	return chunkValues{values: b[:n*bits/8]}, nil
}

// decodeRLE expands runs: values (flat, valueBits each) and u8 run lengths.
// The values land in dst's memory when it can hold them.
func decodeRLE(r *enc21.Rle, vals, runs []byte, n, valueBits int, dst []byte) (chunkValues, error) {
	vf := r.GetValues().GetFlat()
	rf := r.GetRunLengths().GetFlat()
	if vf == nil || rf == nil || int(vf.GetBitsPerValue()) != valueBits || rf.GetBitsPerValue() != 8 || valueBits%8 != 0 {
		return chunkValues{}, fmt.Errorf("%w: RLE with values %v and run lengths %v", errkind.Unsupported, r.GetValues(), r.GetRunLengths())
	}
	w := valueBits / 8
	if n > 255*len(runs) || n < 0 {
		return chunkValues{}, fmt.Errorf("%w: %d RLE runs cannot hold %d values", errkind.Corrupt, len(runs), n)
	}
	if len(vals) < len(runs)*w {
		return chunkValues{}, fmt.Errorf("%w: RLE has %d runs and %d value bytes", errkind.Corrupt, len(runs), len(vals))
	}
	out := dst[:0]
	if cap(dst) >= n*w {
		out = dst[:n*w] // every byte is written below
	} else {
		out = make([]byte, n*w)
	}
	pos := 0
	for i, l := range runs {
		end := pos + int(l)*w
		if end > len(out) {
			return chunkValues{}, fmt.Errorf("%w: RLE runs exceed %d values", errkind.Corrupt, n)
		}
		if l == 0 {
			continue
		}
		// one copy of the value, then doubling copies: a run of 255 is 9
		// copies, not 255 appends (levels come in long runs)
		filled := pos + copy(out[pos:end], vals[i*w:(i+1)*w])
		for filled < end {
			filled += copy(out[filled:end], out[pos:filled])
		}
		pos = end
	}
	if pos != len(out) {
		return chunkValues{}, fmt.Errorf("%w: RLE runs give %d values, want %d", errkind.Corrupt, pos/w, n)
	}
	return chunkValues{values: out}, nil
}

// decodeBlock decodes a whole block (rep/def levels, a dictionary) of n
// values of valueBits bits. The result is little-endian values.
func decodeBlock(e *enc21.CompressiveEncoding, b []byte, n, valueBits int) ([]byte, error) {
	return decodeBlockInto(e, b, n, valueBits, nil)
}

// decodeBlockInto is decodeBlock, an expanded RLE block landing in dst's
// memory when it can hold it (a chunk's levels: a page of a hundred
// thousand rows has a hundred chunks).
func decodeBlockInto(e *enc21.CompressiveEncoding, b []byte, n, valueBits int, dst []byte) ([]byte, error) {
	switch c := e.GetCompression().(type) {
	case *enc21.CompressiveEncoding_Flat:
		b, err := maybeDecompress(c.Flat.GetData(), b)
		if err != nil {
			return nil, err
		}
		cv, err := flatValues(b, int(c.Flat.GetBitsPerValue()), valueBits, n)
		return cv.values, err
	case *enc21.CompressiveEncoding_OutOfLineBitpacking:
		t := int(c.OutOfLineBitpacking.GetUncompressedBitsPerValue())
		inner := c.OutOfLineBitpacking.GetValues().GetFlat()
		if t != valueBits || inner == nil {
			return nil, fmt.Errorf("%w: out-of-line bitpacking %v for %d-bit values", errkind.Unsupported, c.OutOfLineBitpacking, valueBits)
		}
		return decodeOutOfLineBitpacked(b, t, int(inner.GetBitsPerValue()), n)
	case *enc21.CompressiveEncoding_Rle:
		// Block form: [u64 LE byte size of the values part][values][u8 runs].
		if len(b) < 8 {
			return nil, fmt.Errorf("%w: RLE block of %d bytes", errkind.Corrupt, len(b))
		}
		vn := binary.LittleEndian.Uint64(b)
		if vn > uint64(len(b)-8) {
			return nil, fmt.Errorf("%w: RLE block values part of %d bytes in %d", errkind.Corrupt, vn, len(b))
		}
		cv, err := decodeRLE(c.Rle, b[8:8+vn], b[8+vn:], n, valueBits, dst)
		return cv.values, err
	case *enc21.CompressiveEncoding_General:
		d, err := decompress(c.General.GetCompression().GetScheme(), b)
		if err != nil {
			return nil, err
		}
		return decodeBlock(c.General.GetValues(), d, n, valueBits)
	case *enc21.CompressiveEncoding_InlineBitpacking:
		cv, err := decodeMiniBlockValues(e, [][]byte{b}, n, valueBits, nil)
		return cv.values, err
	case nil:
		return nil, fmt.Errorf("%w: missing block compression", errkind.Corrupt)
	default:
		return nil, fmt.Errorf("%w: block compression %T", errkind.Unsupported, c)
	}
}

func levels16(b []byte) []uint16 { return levels16Into(nil, b) }

// levels16Into is levels16 in dst's memory when it can hold them.
func levels16Into(dst []uint16, b []byte) []uint16 {
	out := dst[:0]
	if cap(dst) >= len(b)/2 {
		out = dst[:len(b)/2]
	} else {
		out = make([]uint16, len(b)/2)
	}
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

// fixedWidthBits is the width of one value of a compressive encoding used
// for fixed-width data (full-zip values), or 0 if it is not fixed-width.
func fixedWidthBits(e *enc21.CompressiveEncoding) int {
	switch c := e.GetCompression().(type) {
	case *enc21.CompressiveEncoding_Flat:
		return int(c.Flat.GetBitsPerValue())
	case *enc21.CompressiveEncoding_FixedSizeList:
		if c.FixedSizeList.GetHasValidity() {
			return 0
		}
		return int(c.FixedSizeList.GetItemsPerValue()) * fixedWidthBits(c.FixedSizeList.GetValues())
	}
	return 0
}

// unpackBools expands n bits (least significant first, Arrow's order) to a
// byte each: bools, the only 8-bit kind stored as 1-bit Flat values.
func unpackBools(b []byte, n int) (chunkValues, error) {
	if n < 0 || len(b) < (n+7)/8 {
		return chunkValues{}, fmt.Errorf("%w: %d bytes of bits for %d values", errkind.Corrupt, len(b), n)
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = b[i/8] >> (i % 8) & 1
	}
	return chunkValues{values: out}, nil
}

// packBools packs bytes (0 or not) to bits, least significant first.
func packBools(v []byte) []byte {
	out := make([]byte, (len(v)+7)/8)
	for i, x := range v {
		if x != 0 {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return out
}
