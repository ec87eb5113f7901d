package fts

import (
	"encoding/binary"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// FTS format 1 (see Format1), read into and written from the format 2
// representation the merge works on.

// tailsFromFixed32 rewrites each token's last, partial posting block from
// fixed32_v1 (raw u32 documents, then frequencies) to varint_delta_v1.
func (v *Invert) tailsFromFixed32() error {
	po := v.Postings
	it := po.Items
	out := &lancefile.Array{Type: it.Type, Offsets: make([]int64, 1, len(it.Offsets)), Values: make([]byte, 0, len(it.Values))}
	le := binary.LittleEndian
	for t := 0; t < po.Len; t++ {
		lo, hi := po.Offsets[t], po.Offsets[t+1]
		k := int(v.Length[t] % BlockSize)
		for i := lo; i < hi; i++ {
			b := it.Values[it.Offsets[i]:it.Offsets[i+1]]
			if i < hi-1 || k == 0 {
				out.Values = append(out.Values, b...)
			} else {
				if len(b) != 4+8*k {
					return fmt.Errorf("%w: token %d: a fixed32 tail block of %d bytes for %d documents", errkind.Corrupt, t, len(b), k)
				}
				out.Values = append(out.Values, b[:4]...)
				var prev uint32
				for j := 0; j < k; j++ {
					d := le.Uint32(b[4+4*j:])
					if j > 0 && d <= prev {
						return fmt.Errorf("%w: token %d: tail documents %d, %d do not ascend", errkind.Corrupt, t, prev, d)
					}
					out.Values = binary.AppendUvarint(out.Values, uint64(d-prev))
					prev = d
				}
				for j := 0; j < k; j++ {
					out.Values = binary.AppendUvarint(out.Values, uint64(le.Uint32(b[4+4*(k+j):])))
				}
			}
			out.Offsets = append(out.Offsets, int64(len(out.Values)))
			out.Len++
		}
	}
	po.Items = out
	return nil
}

// appendTailFixed32 appends a partial block's documents and frequencies
// as fixed32_v1 does.
func appendTailFixed32(buf []byte, docs, freqs []uint32) []byte {
	for _, d := range docs {
		buf = binary.LittleEndian.AppendUint32(buf, d)
	}
	for _, f := range freqs {
		buf = binary.LittleEndian.AppendUint32(buf, f)
	}
	return buf
}

// positionsFromFormat1 turns rows of a format 1 _position column (per
// token, per document, its binaries) into the shared-stream layout: per
// token one stream of runs of 128 documents' position deltas, and each
// run's start.
func positionsFromFormat1(col *lancefile.Array, lengths []uint32) (stream, starts *lancefile.Array, err error) {
	if col.Len != len(lengths) || col.Items == nil || col.Items.Items == nil || col.Items.Items.Type.Kind != lancefile.KindBinary {
		return nil, nil, fmt.Errorf("%w: column %s is %s of %d rows, not list<list<binary>> of %d", errkind.Corrupt, position1Column, col.Type, col.Len, len(lengths))
	}
	docs, bins := col.Items, col.Items.Items
	stream = &lancefile.Array{Type: largeBinary, Offsets: []int64{0}, Values: []byte{}}
	starts = emptyList(u32)
	var abs, deltas []uint32
	for t := 0; t < col.Len; t++ {
		lo, hi := col.Offsets[t], col.Offsets[t+1]
		if hi-lo != int64(lengths[t]) {
			return nil, nil, fmt.Errorf("%w: token %d: positions of %d documents, its posting list holds %d", errkind.Corrupt, t, hi-lo, lengths[t])
		}
		base := len(stream.Values)
		for d := lo; d < hi; d++ {
			if (d-lo)%BlockSize == 0 {
				if d > lo {
					stream.Values = appendPositionRun(stream.Values, deltas)
					deltas = deltas[:0]
				}
				starts.Items.Values = binary.LittleEndian.AppendUint32(starts.Items.Values, uint32(len(stream.Values)-base))
				starts.Items.Len++
			}
			if abs, err = decodePositions1(bins, docs.Offsets[d], docs.Offsets[d+1], abs[:0]); err != nil {
				return nil, nil, fmt.Errorf("token %d: %w", t, err)
			}
			var prev uint32
			for i, p := range abs {
				if i > 0 && p < prev {
					return nil, nil, fmt.Errorf("%w: token %d: positions %d, %d do not ascend", errkind.Corrupt, t, prev, p)
				}
				deltas = append(deltas, p-prev)
				prev = p
			}
		}
		if hi > lo {
			stream.Values = appendPositionRun(stream.Values, deltas)
			deltas = deltas[:0]
		}
		stream.Offsets = append(stream.Offsets, int64(len(stream.Values)))
		stream.Len++
		starts.Offsets = append(starts.Offsets, int64(starts.Items.Len))
		starts.Len++
	}
	return stream, starts, nil
}

// decodePositions1 appends one document's positions, stored as binaries
// [lo, hi) of bins: a u32 count, each group of 128 as u32 first | u8
// width | deltas packed 4x, then the rest as raw u32s.
func decodePositions1(bins *lancefile.Array, lo, hi int64, dst []uint32) ([]uint32, error) {
	bin := func(i int64) []byte { return bins.Values[bins.Offsets[i]:bins.Offsets[i+1]] }
	if hi <= lo || len(bin(lo)) != 4 {
		return nil, fmt.Errorf("%w: fts format 1 positions without their count", errkind.Corrupt)
	}
	n := binary.LittleEndian.Uint32(bin(lo))
	full, rem := int64(n/BlockSize), int(n%BlockSize)
	want := 1 + full
	if rem > 0 {
		want++
	}
	if hi-lo != want {
		return nil, fmt.Errorf("%w: fts format 1 positions: %d of them in %d binaries", errkind.Corrupt, n, hi-lo)
	}
	var vals [BlockSize]uint32
	for c := int64(0); c < full; c++ {
		b := bin(lo + 1 + c)
		if len(b) < 5 || len(b) != 5+packedLen(int(b[4])) {
			return nil, fmt.Errorf("%w: fts format 1 positions: a group of %d bytes", errkind.Corrupt, len(b))
		}
		if err := unpack4x(&vals, b[5:], int(b[4])); err != nil {
			return nil, err
		}
		x := binary.LittleEndian.Uint32(b)
		for i, d := range vals {
			if i > 0 {
				x += d
			}
			dst = append(dst, x)
		}
	}
	if rem > 0 {
		b := bin(hi - 1)
		if len(b) != 4*rem {
			return nil, fmt.Errorf("%w: fts format 1 positions: %d left in %d bytes", errkind.Corrupt, rem, len(b))
		}
		for i := 0; i < rem; i++ {
			dst = append(dst, binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return dst, nil
}

// appendPositions1 appends one document's positions, given as deltas
// within the document (the first absolute), as format 1 binaries to
// bins, and returns bins.
func appendPositions1(bins *lancefile.Array, deltas []uint32, abs []uint32) ([]uint32, *lancefile.Array) {
	abs = abs[:0]
	var x uint32
	for _, d := range deltas {
		x += d
		abs = append(abs, x)
	}
	add := func(b []byte) {
		bins.Values = append(bins.Values, b...)
		bins.Offsets = append(bins.Offsets, int64(len(bins.Values)))
		bins.Len++
	}
	add(binary.LittleEndian.AppendUint32(nil, uint32(len(abs))))
	var vals [BlockSize]uint32
	k := 0
	for ; k+BlockSize <= len(abs); k += BlockSize {
		vals[0] = 0
		for i := 1; i < BlockSize; i++ {
			vals[i] = abs[k+i] - abs[k+i-1]
		}
		w := widthOf(&vals)
		b := binary.LittleEndian.AppendUint32(make([]byte, 0, 5+packedLen(w)), abs[k])
		add(pack4x(append(b, byte(w)), &vals, w))
	}
	if k < len(abs) {
		b := make([]byte, 0, 4*(len(abs)-k))
		for _, p := range abs[k:] {
			b = binary.LittleEndian.AppendUint32(b, p)
		}
		add(b)
	}
	return abs, bins
}
