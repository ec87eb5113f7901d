package fts

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Posting is one token's posting list: document ids ascending, each with
// the token's frequency in it.
type Posting struct {
	Docs  []uint32
	Freqs []uint32
}

// Len is the number of documents.
func (p *Posting) Len() int { return len(p.Docs) }

// DecodePosting decodes a token's blocks (length documents in all): every
// block but the last holds BlockSize documents as
//
//	f32 block score | u32 first doc | u8 width, doc deltas packed 4x |
//	u8 width, frequencies packed 4x
//
// (the first delta is 0), and the last one, when length is not a multiple
// of BlockSize, holds the rest as
//
//	f32 block score | varint doc deltas (the first absolute) | varint frequencies.
func DecodePosting(blocks [][]byte, length int, dst *Posting) error {
	full := length / BlockSize
	tail := length % BlockSize
	want := full
	if tail > 0 {
		want++
	}
	if len(blocks) != want {
		return fmt.Errorf("%w: fts posting of %d documents in %d blocks", errkind.Corrupt, length, len(blocks))
	}
	dst.Docs, dst.Freqs = dst.Docs[:0], dst.Freqs[:0]
	var vals [BlockSize]uint32
	for bi := 0; bi < full; bi++ {
		b := blocks[bi]
		if len(b) < 10 {
			return fmt.Errorf("%w: fts posting block of %d bytes", errkind.Corrupt, len(b))
		}
		first := binary.LittleEndian.Uint32(b[4:])
		b = b[8:]
		w := int(b[0])
		if err := unpack4x(&vals, b[1:], w); err != nil {
			return err
		}
		b = b[1+packedLen(w):]
		doc := first
		for i, d := range vals {
			if i > 0 {
				doc += d
			}
			dst.Docs = append(dst.Docs, doc)
		}
		if len(b) < 1 {
			return fmt.Errorf("%w: fts posting block without frequencies", errkind.Corrupt)
		}
		w = int(b[0])
		if err := unpack4x(&vals, b[1:], w); err != nil {
			return err
		}
		if len(b) != 1+packedLen(w) {
			return fmt.Errorf("%w: fts posting block: %d bytes past its frequencies", errkind.Corrupt, len(b)-1-packedLen(w))
		}
		dst.Freqs = append(dst.Freqs, vals[:]...)
	}
	if tail > 0 {
		b := blocks[full]
		if len(b) < 4 {
			return fmt.Errorf("%w: fts posting tail block of %d bytes", errkind.Corrupt, len(b))
		}
		b = b[4:]
		var doc uint32
		for i := 0; i < tail; i++ {
			v, n := uvarint(b)
			if n <= 0 || v > math.MaxUint32 {
				return fmt.Errorf("%w: fts posting tail: bad varint", errkind.Corrupt)
			}
			b = b[n:]
			if i == 0 {
				doc = uint32(v)
			} else {
				doc += uint32(v)
			}
			dst.Docs = append(dst.Docs, doc)
		}
		for i := 0; i < tail; i++ {
			v, n := uvarint(b)
			if n <= 0 || v > math.MaxUint32 {
				return fmt.Errorf("%w: fts posting tail: bad varint", errkind.Corrupt)
			}
			b = b[n:]
			dst.Freqs = append(dst.Freqs, uint32(v))
		}
		if len(b) != 0 {
			return fmt.Errorf("%w: fts posting tail: %d bytes left over", errkind.Corrupt, len(b))
		}
	}
	for i := 1; i < len(dst.Docs); i++ {
		if dst.Docs[i] <= dst.Docs[i-1] {
			return fmt.Errorf("%w: fts posting: documents not ascending at %d", errkind.Corrupt, i)
		}
	}
	return nil
}

// uvarint is binary.Uvarint with a fast path for one-byte values, most
// of a short list's deltas and frequencies.
func uvarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return binary.Uvarint(b)
}
