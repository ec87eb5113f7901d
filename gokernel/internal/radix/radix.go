// Package radix sorts the blocks of a scalar merge: 64-bit sort keys,
// stably, by a least-significant-digit radix sort over the bits in which
// a block's keys differ (their span above the smallest key), each key
// packed with its index into one word. A block of int64 keys within ±1e9
// takes two or three passes, not eight byte-wide ones.
package radix

import "math/bits"

// Sorter holds a block sort's buffers and digit counts between blocks.
// The zero value is ready.
type Sorter struct {
	a, b []uint64
	// each pass's digit counts, kept between blocks
	counts [maxPasses][1 << maxDigitBits]int
}

// maxDigitBits bounds a pass's digit: its counts (2^14 of them, 128 KiB)
// stay in the second-level cache.
const maxDigitBits = 14

// maxPasses are the passes of a 64-bit span.
const maxPasses = (64 + maxDigitBits - 1) / maxDigitBits

// Order sorts a block of keys, whose smallest is lo and largest hi,
// packed when the span of its keys and a row index fit 64 bits (ok): each
// word of sorted is a key's offset above lo, shifted left by ib bits,
// over the key's index in keys. Equal keys keep their order. The words
// stay valid until the next call. The packing counts every pass's digits
// as it goes, so a pass reads the block once (to move it), and a pass in
// which every key has the same digit is skipped.
func (s *Sorter) Order(keys []uint64, lo, hi uint64) (sorted []uint64, ib int, ok bool) {
	n := len(keys)
	if n == 0 {
		return nil, 0, true
	}
	kb := bits.Len64(hi - lo)
	ib = bits.Len(uint(n - 1))
	if kb+ib > 64 {
		return nil, 0, false
	}
	if cap(s.a) < n {
		s.a = make([]uint64, n)
	}
	if cap(s.b) < n {
		s.b = make([]uint64, n)
	}
	a, b := s.a[:n], s.b[:n]
	if kb == 0 { // one key: the block keeps its order
		for i := range a {
			a[i] = uint64(i)
		}
		return a, ib, true
	}
	// as few passes as digits of at most maxDigitBits allow: a 27-bit
	// span takes two 14-bit passes, not three of 11
	passes := (kb + maxDigitBits - 1) / maxDigitBits
	digit := (kb + passes - 1) / passes
	mask := uint64(1)<<digit - 1
	for p := range passes {
		clear(s.counts[p][:1<<digit])
	}
	switch passes {
	case 1:
		c0 := s.counts[0][:1<<digit]
		for i, k := range keys {
			d := k - lo
			a[i] = d<<ib | uint64(i)
			c0[d&mask]++
		}
	case 2:
		c0, c1 := s.counts[0][:1<<digit], s.counts[1][:1<<digit]
		for i, k := range keys {
			d := k - lo
			a[i] = d<<ib | uint64(i)
			c0[d&mask]++
			c1[(d>>digit)&mask]++
		}
	default:
		for i, k := range keys {
			d := k - lo
			a[i] = d<<ib | uint64(i)
			for p := range passes {
				s.counts[p][(d>>(p*digit))&mask]++
			}
		}
	}
	for p := range passes {
		count := s.counts[p][:1<<digit]
		shift := ib + p*digit
		if count[(a[0]>>shift)&mask] == n {
			continue // one digit throughout: the pass would keep the order
		}
		pos := 0
		for d := range count {
			pos, count[d] = pos+count[d], pos
		}
		for _, x := range a {
			d := (x >> shift) & mask
			b[count[d]] = x
			count[d]++
		}
		a, b = b, a
	}
	return a, ib, true
}
