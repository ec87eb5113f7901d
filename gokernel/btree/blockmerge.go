package btree

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/radix"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// The merge of fixed-width keys works on blocks rather than a row at a
// time: every input holds a window of (key, row id) pairs, the bound is
// the smallest last key of the inputs that have more rows to read, and
// every held pair up to the bound precedes every pair not read yet, so
// they are gathered, radix-sorted and written as one block. The input
// that set the bound is drained and reads its next window. A heap merge
// pays about 2·log2(inputs) scattered comparisons per row; the block
// merge pays a binary search per input and block, and a few sequential
// passes per row.

// fixedKey maps the fixed-width values of kind k to uint64s in the order
// lancefile.SortKey gives them (integers by value, floats in total order)
// from which putFixed recovers each value's bytes exactly.
func fixedKeys(k lancefile.Kind, b []byte, n int, out []uint64) []uint64 {
	le := binary.LittleEndian
	switch k {
	case lancefile.KindFloat32:
		for i := range n {
			out = append(out, uint64(totalOrder32(le.Uint32(b[i*4:]))))
		}
		return out
	case lancefile.KindBool, lancefile.KindFloat16, lancefile.KindInt8, lancefile.KindInt16, lancefile.KindInt32, lancefile.KindInt64,
		lancefile.KindUint8, lancefile.KindUint16, lancefile.KindUint32, lancefile.KindUint64, lancefile.KindFloat64:
		return lancefile.AppendSortKeys(k, b, n, out)
	}
	panic(fmt.Sprintf("btree: fixedKeys of %v", k))
}

func totalOrder32(bits uint32) uint32 {
	if bits>>31 == 1 {
		return ^bits
	}
	return bits | 1<<31
}

// putFixed appends the value of kind k whose fixedKeys key is key.
func putFixed(k lancefile.Kind, key uint64, dst []byte) []byte {
	le := binary.LittleEndian
	switch k {
	case lancefile.KindBool:
		return append(dst, byte(key))
	case lancefile.KindInt8:
		return append(dst, byte(key^1<<63))
	case lancefile.KindInt16:
		return le.AppendUint16(dst, uint16(key^1<<63))
	case lancefile.KindInt32:
		return le.AppendUint32(dst, uint32(key^1<<63))
	case lancefile.KindInt64:
		return le.AppendUint64(dst, key^1<<63)
	case lancefile.KindUint8:
		return append(dst, byte(key))
	case lancefile.KindUint16:
		return le.AppendUint16(dst, uint16(key))
	case lancefile.KindUint32:
		return le.AppendUint32(dst, uint32(key))
	case lancefile.KindUint64:
		return le.AppendUint64(dst, key)
	case lancefile.KindFloat16:
		return le.AppendUint16(dst, lancefile.FromTotalOrder16(uint16(key)))
	case lancefile.KindFloat32:
		u := uint32(key)
		if u>>31 == 1 {
			u &^= 1 << 31
		} else {
			u = ^u
		}
		return le.AppendUint32(dst, u)
	default: // KindFloat64
		if key>>63 == 1 {
			return le.AppendUint64(dst, key&^(1<<63))
		}
		return le.AppendUint64(dst, ^key)
	}
}

// window is one decoded window of an input: the row ids of its leading
// null rows and the (key, row id) pairs of its values.
type window struct {
	nulls, keys, ids []uint64
	last             bool // the input's last window
	err              error
}

// source is one input of a block merge. A goroutine decodes its windows
// ahead of the merge (two windows per input: one merged while the next is
// decoded, so decoding and merging share the cores); keys and ids are the
// pending pairs of the window being merged.
type source struct {
	seg        *Segment
	rows       int // a window's rows
	full, free chan *window
	cur        *window
	peeked     *window // the next window, taken from full ahead of take
	keys, ids  []uint64
	ended      bool // the last window was taken
	// the decoder's state
	next    uint64
	seen    bool // a value was read: a null may no longer come
	lastKey uint64
}

func newSource(seg *Segment, rows int) *source {
	s := &source{seg: seg, rows: rows, full: make(chan *window, 1), free: make(chan *window, 2), ended: seg.Rows == 0}
	for range 2 {
		// sized once: a window grown by appends copies itself log2(rows) times
		n := int(min(uint64(rows), seg.Rows))
		s.free <- &window{keys: make([]uint64, 0, n), ids: make([]uint64, 0, n)}
	}
	return s
}

// decodeAll decodes every window, in order, until the input ends, an
// error (sent with its window) or ctx is done.
func (s *source) decodeAll(ctx context.Context) {
	for s.next < s.seg.Rows {
		var w *window
		select {
		case w = <-s.free:
		case <-ctx.Done():
			return
		}
		w.nulls, w.keys, w.ids = w.nulls[:0], w.keys[:0], w.ids[:0]
		w.err = s.decodeSafe(ctx, w)
		w.last = w.err != nil || s.next >= s.seg.Rows
		select {
		case s.full <- w:
		case <-ctx.Done():
			return
		}
		if w.err != nil {
			return
		}
	}
}

// decodeSafe is decode, a panic turned into an error: a panic in a
// goroutine cannot be recovered by the binding and would end the
// interpreter.
func (s *source) decodeSafe(ctx context.Context, w *window) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("btree segment %s: decoding a window: %v", table.IndexUUID(s.seg.Meta), r)
		}
	}()
	return s.decode(ctx, w)
}

// decode reads the next window into w. Nulls come first: a null after a
// value, or keys out of order, are corruption (the block merge's bound
// relies on each input's order).
func (s *source) decode(ctx context.Context, w *window) error {
	end := min(s.next+uint64(s.rows), s.seg.Rows)
	n := int(end - s.next)
	// The decoded bytes are copied into w below: decode them into pooled
	// buffers, which the decoders hand on to one another while they are
	// still in cache (a buffer per input, two thousand of them in a
	// thousand-input merge, was written cold at every window).
	buf := bufpool.Default.Get(s.seg.data.IntoCap(s.seg.KeyType, n))
	defer bufpool.Default.Put(buf)
	vals, err := s.seg.data.ReadInto(ctx, valuesColumn, s.next, end, buf)
	if err != nil {
		return err
	}
	idBuf := bufpool.Default.Get(s.seg.data.IntoCap(lancefile.Primitive(lancefile.KindUint64), n))
	defer bufpool.Default.Put(idBuf)
	ids, err := s.seg.data.ReadInto(ctx, s.seg.idsCol, s.next, end, idBuf)
	if err != nil {
		return err
	}
	u := table.IndexUUID(s.seg.Meta)
	if vals.Len != n || ids.Len != n {
		return fmt.Errorf("%w: btree segment %s: a window of %d rows read back as %d values and %d ids", errkind.Corrupt, u, n, vals.Len, ids.Len)
	}
	first := 0
	if vals.Validity != nil {
		for first < n && !vals.IsValid(first) {
			if s.seen {
				return fmt.Errorf("%w: btree segment %s: a null key after a value at row %d", errkind.Corrupt, u, s.next+uint64(first))
			}
			w.nulls = append(w.nulls, binary.LittleEndian.Uint64(ids.Values[first*8:]))
			first++
		}
		for i := first; i < n; i++ {
			if !vals.IsValid(i) {
				return fmt.Errorf("%w: btree segment %s: a null key after a value at row %d", errkind.Corrupt, u, s.next+uint64(i))
			}
		}
	}
	width := s.seg.KeyType.ValueBits() / 8
	w.keys = fixedKeys(s.seg.KeyType.Kind, vals.Values[first*width:], n-first, w.keys)
	for i := first; i < n; i++ {
		w.ids = append(w.ids, binary.LittleEndian.Uint64(ids.Values[i*8:]))
	}
	prev := s.lastKey
	for i, k := range w.keys {
		if (s.seen || i > 0) && k < prev {
			return fmt.Errorf("%w: btree segment %s: keys out of order at row %d", errkind.Corrupt, u, s.next+uint64(first+i))
		}
		prev = k
	}
	if len(w.keys) > 0 {
		s.seen, s.lastKey = true, prev
	}
	s.next = end
	return nil
}

// take hands the merged window back to the decoder and takes the next
// one (the peeked one, if any), whose null rows go to nulls.
func (s *source) take(ctx context.Context, nulls func(id uint64) error) error {
	if s.cur != nil {
		s.free <- s.cur // never blocks: the merge and the decoder hold two windows between them
		s.cur = nil
	}
	w := s.peeked
	s.peeked = nil
	if w == nil {
		select {
		case w = <-s.full:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if w.err != nil {
		return w.err
	}
	s.cur, s.keys, s.ids, s.ended = w, w.keys, w.ids, w.last
	for _, id := range w.nulls {
		if err := nulls(id); err != nil {
			return err
		}
	}
	return nil
}

// peek waits for the window after the current one and keeps it for take.
func (s *source) peek(ctx context.Context) (*window, error) {
	if s.peeked == nil {
		select {
		case s.peeked = <-s.full:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.peeked, s.peeked.err
}

// mergeFixed merges segments of fixed-width keys into w by blocks, each
// input decoded ahead by a goroutine of its own.
func mergeFixed(ctx context.Context, segs []*Segment, sink *pageSink, rows, blockRows int) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // the decoders read the segments' files, closed after Merge
	}()
	srcs := make([]*source, len(segs))
	for i, seg := range segs {
		src := newSource(seg, rows)
		srcs[i] = src
		if !src.ended {
			wg.Add(1)
			go func() {
				defer wg.Done()
				src.decodeAll(ctx)
			}()
		}
	}
	return blockMerge(ctx, srcs, sink, max(1, blockRows/max(rows, 1)))
}

// blockSink takes a block merge's output: first every null row's id, then
// blocks of sorted pairs, packed (see blockSorter.order) or as keys and
// ids.
type blockSink interface {
	null(id uint64) error
	packed(sorted []uint64, ib int, lo uint64, ids []uint64) error
	pairs(keys, ids []uint64) error
}

// pageSink writes a merge's rows into pages, dropping the row ids keep
// refuses and writing the others as remap gives them (nil: as they are).
type pageSink struct {
	ctx   context.Context
	w     *pageWriter
	kind  lancefile.Kind
	keep  func(uint64) bool
	remap func(uint64) uint64
	res   *Result
}

func (p *pageSink) null(id uint64) error {
	p.res.RowsRead++
	if p.keep == nil || p.keep(id) {
		if p.remap != nil {
			id = p.remap(id)
		}
		return p.w.add(p.ctx, true, nil, id)
	}
	return nil
}

func (p *pageSink) packed(sorted []uint64, ib int, lo uint64, ids []uint64) error {
	p.res.RowsRead += uint64(len(sorted))
	return p.w.addPacked(p.kind, sorted, ib, lo, ids, p.keep, p.remap)
}

func (p *pageSink) pairs(keys, ids []uint64) error {
	p.res.RowsRead += uint64(len(keys))
	return p.w.addKeys(p.kind, keys, ids, p.keep, p.remap)
}

// blockRows is about the rows of a block. Its bound is the last key of
// the k-th input to run out (k = blockRows / a window's rows), not of the
// first: with a thousand inputs of 1,024-row windows a block bounded by
// the first holds about one row of each input, and visiting every input
// per block cost more than sorting every row (the Go merge of
// bench_btree's 1,001 segments, 100M rows: 12.4 s so; 8.6-9.4 s when
// groups of 64 inputs were merged first and every row sorted twice;
// 5.8-6.7 s in one level bounded so).
const blockRows = 1 << 16

// blockMerge merges the sources into sink by blocks, each bounded by the
// last key of the k-th input to run out.
func blockMerge(ctx context.Context, srcs []*source, sink blockSink, k int) error {
	// Every input's nulls precede every value: take each input's windows
	// up to its first value before merging values.
	for _, s := range srcs {
		for len(s.keys) == 0 && !s.ended {
			if err := s.take(ctx, sink.null); err != nil {
				return err
			}
		}
	}
	var blockKeys, blockIDs, lasts []uint64
	var sorter blockSorter
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		lasts = lasts[:0]
		for _, s := range srcs {
			if len(s.keys) == 0 && !s.ended {
				if err := s.take(ctx, sink.null); err != nil {
					return err
				}
			}
			if !s.ended && len(s.keys) > 0 {
				lasts = append(lasts, s.keys[len(s.keys)-1])
			}
		}
		open := len(lasts) > 0
		bound := uint64(math.MaxUint64)
		if open {
			slices.Sort(lasts)
			bound = lasts[min(k, len(lasts))-1]
			// An input drained up to the bound goes on into its next
			// window in this block. Unless that window is its last, what
			// the input has not read is at least that window's last key,
			// so the bound falls to it: every row not gathered stays at or
			// above the bound, and no input needs a third window.
			for _, s := range srcs {
				if s.ended || len(s.keys) == 0 || s.keys[len(s.keys)-1] > bound {
					continue
				}
				next, err := s.peek(ctx)
				if err != nil {
					return err
				}
				if !next.last && len(next.keys) > 0 {
					bound = min(bound, next.keys[len(next.keys)-1])
				}
			}
		}
		blockKeys, blockIDs = blockKeys[:0], blockIDs[:0]
		lo, hi := uint64(math.MaxUint64), uint64(0) // of the gathered keys: each run is sorted
		for _, s := range srcs {
			for {
				n := len(s.keys)
				if open {
					n = upTo(s.keys, bound)
				}
				if n > 0 {
					lo, hi = min(lo, s.keys[0]), max(hi, s.keys[n-1])
				}
				blockKeys = append(blockKeys, s.keys[:n]...)
				blockIDs = append(blockIDs, s.ids[:n]...)
				s.keys, s.ids = s.keys[n:], s.ids[n:]
				if len(s.keys) > 0 || s.ended || s.peeked == nil {
					break
				}
				if err := s.take(ctx, sink.null); err != nil {
					return err
				}
			}
		}
		if len(blockKeys) == 0 {
			if !open {
				return nil
			}
			continue
		}
		if sorted, ib, ok := sorter.Order(blockKeys, lo, hi); ok {
			// handed on as the packed words: no gathered copy
			if err := sink.packed(sorted, ib, lo, blockIDs); err != nil {
				return err
			}
			continue
		}
		// order refused the span: sort the pairs, the block's bounds known
		if err := sink.pairs(sorter.sortWide(blockKeys, blockIDs, lo, hi)); err != nil {
			return err
		}
	}
}

// upTo is the number of leading keys at most bound (keys ascending). It
// gallops from the front: with many inputs a block takes a few rows of
// each, and a binary search over a whole window per input and block was
// a quarter of a 1,000-input merge.
func upTo(keys []uint64, bound uint64) int {
	if len(keys) == 0 || keys[0] > bound {
		return 0
	}
	lo, hi := 0, 1 // keys[lo] <= bound
	for hi < len(keys) && keys[hi] <= bound {
		lo, hi = hi, 2*hi
	}
	hi = min(hi, len(keys))
	for lo+1 < hi { // keys[lo] <= bound, and keys[hi] > bound or hi is the end
		m := int(uint(lo+hi) >> 1)
		if keys[m] <= bound {
			lo = m
		} else {
			hi = m
		}
	}
	return hi
}

// blockSorter sorts a block's (key, row id) pairs by key, stably
// (radix.Sorter; when the span of the block's keys and a row index do not
// fit one word, sortWide).
type blockSorter struct {
	radix.Sorter
	a, b   []uint64 // sortWide's
	ka, ia []uint64
}

const digitBits = 11

func (bs *blockSorter) sort(keys, ids []uint64) ([]uint64, []uint64) {
	n := len(keys)
	if n < 2 {
		return keys, ids
	}
	grow := func(s []uint64) []uint64 { return grown(s, n) }
	lo, hi := slices.Min(keys), slices.Max(keys)
	if sorted, ib, ok := bs.Order(keys, lo, hi); ok {
		bs.ka, bs.ia = grow(bs.ka), grow(bs.ia)
		mask := uint64(1)<<ib - 1
		for i, p := range sorted {
			bs.ka[i], bs.ia[i] = p>>ib+lo, ids[p&mask]
		}
		return bs.ka, bs.ia
	}
	return bs.sortWide(keys, ids, lo, hi)
}

// grown is s at length n, reallocated when its capacity is short.
func grown(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, n)
	}
	return s[:n]
}

// sortWide is sort for a block whose span (keys within [lo, hi]) and row
// index do not fit one word: the pairs are sorted, offsets above lo.
func (bs *blockSorter) sortWide(keys, ids []uint64, lo, hi uint64) ([]uint64, []uint64) {
	n := len(keys)
	grow := func(s []uint64) []uint64 { return grown(s, n) }
	kb := bits.Len64(hi - lo)
	bs.a, bs.b, bs.ka, bs.ia = grow(bs.a), grow(bs.b), grow(bs.ka), grow(bs.ia)
	src, srcIDs, dst, dstIDs := bs.a, bs.ka, bs.b, bs.ia
	for i, k := range keys {
		src[i], srcIDs[i] = k-lo, ids[i]
	}
	var count [1 << digitBits]int
	for shift := 0; shift < kb; shift += digitBits {
		clear(count[:])
		for _, k := range src {
			count[(k>>shift)&(1<<digitBits-1)]++
		}
		pos := 0
		for d := range count {
			pos, count[d] = pos+count[d], pos
		}
		for i, k := range src {
			d := (k >> shift) & (1<<digitBits - 1)
			dst[count[d]], dstIDs[count[d]] = k, srcIDs[i]
			count[d]++
		}
		src, dst, srcIDs, dstIDs = dst, src, dstIDs, srcIDs
	}
	for i := range src {
		src[i] += lo
	}
	return src, srcIDs
}
