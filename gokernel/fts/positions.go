package fts

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Positions (layout shared_stream_v2, codec packed_delta_v1): a token's
// _compressed_position is one stream, a run per posting block, and
// _position_block_offset gives each run's first byte. A run holds, for
// the block's documents in order, each document's positions delta-coded
// within the document (the first absolute): Σ frequencies values, as
// groups of 128 (u8 width, packed 4x) and the rest as varints. A
// document's deltas do not depend on its block, so a merge moves them as
// they are.

// decodePositionRun appends the total deltas of a run whose documents
// have frequencies freqs.
func decodePositionRun(run []byte, freqs []uint32, dst []uint32) ([]uint32, error) {
	var total uint64
	for _, f := range freqs {
		total += uint64(f)
	}
	if total > uint64(len(run))*8+BlockSize { // a value takes at least 1 bit packed, 1 byte as varint
		return nil, fmt.Errorf("%w: fts positions: %d positions in %d bytes", errkind.Corrupt, total, len(run))
	}
	var vals [BlockSize]uint32
	for k := uint64(0); k+BlockSize <= total; k += BlockSize {
		if len(run) < 1 {
			return nil, fmt.Errorf("%w: fts positions: truncated run", errkind.Corrupt)
		}
		w := int(run[0])
		if err := unpack4x(&vals, run[1:], w); err != nil {
			return nil, err
		}
		run = run[1+packedLen(w):]
		dst = append(dst, vals[:]...)
	}
	for k := total % BlockSize; k > 0; k-- {
		v, n := uvarint(run)
		if n <= 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("%w: fts positions: bad varint", errkind.Corrupt)
		}
		run = run[n:]
		dst = append(dst, uint32(v))
	}
	if len(run) != 0 {
		return nil, fmt.Errorf("%w: fts positions: %d bytes left in a run", errkind.Corrupt, len(run))
	}
	return dst, nil
}

// appendPositionRun appends the run of deltas.
func appendPositionRun(out []byte, deltas []uint32) []byte {
	var vals [BlockSize]uint32
	k := 0
	for ; k+BlockSize <= len(deltas); k += BlockSize {
		copy(vals[:], deltas[k:k+BlockSize])
		w := widthOf(&vals)
		out = pack4x(append(out, byte(w)), &vals, w)
	}
	for ; k < len(deltas); k++ {
		out = binary.AppendUvarint(out, uint64(deltas[k]))
	}
	return out
}
