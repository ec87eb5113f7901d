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
	keys, ids  []uint64
	ended      bool // the last window was taken
	// the decoder's state
	next       uint64
	buf, idBuf []byte
	seen       bool // a value was read: a null may no longer come
	lastKey    uint64
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
	if need := lancefile.IntoCap(s.seg.KeyType, n); cap(s.buf) < need {
		s.buf = make([]byte, need)
	}
	vals, err := s.seg.data.ReadInto(ctx, valuesColumn, s.next, end, s.buf)
	if err != nil {
		return err
	}
	if need := lancefile.IntoCap(lancefile.Primitive(lancefile.KindUint64), n); cap(s.idBuf) < need {
		s.idBuf = make([]byte, need)
	}
	ids, err := s.seg.data.ReadInto(ctx, s.seg.idsCol, s.next, end, s.idBuf)
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
// one, whose null rows go to nulls.
func (s *source) take(ctx context.Context, nulls func(id uint64) error) error {
	if s.cur != nil {
		s.free <- s.cur // never blocks: the decoder holds at most one window
		s.cur = nil
	}
	var w *window
	select {
	case w = <-s.full:
	case <-ctx.Done():
		return ctx.Err()
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

// A block merge of more than maxBlockInputs inputs runs in groups of
// groupFanIn, each on a goroutine of its own whose merged windows are the
// inputs of the top merge. The windows of a thousand inputs must be small
// to fit the budget, a block then holds about one row of each, and
// visiting every input per block costs more than sorting every row twice
// (the Go merge of bench_btree's 1,001 segments, 100M rows: 12.4 s in one
// level, 8.6-9.4 s in groups of 64; of its 201 segments, 10M rows: about
// the same either way).
const (
	maxBlockInputs = 256
	groupFanIn     = 64
)

// groupWindowRows are the rows of a group's merged window.
const groupWindowRows = 1 << 14

// mergeFixed merges segments of fixed-width keys into w by blocks.
func mergeFixed(ctx context.Context, segs []*Segment, w *pageWriter, keep func(uint64) bool, rows int, res *Result) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // the decoders read the segments' files, closed after Merge
	}()
	start := func(src *source, run func()) *source {
		if !src.ended {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run()
			}()
		}
		return src
	}
	leaves := func(segs []*Segment) []*source {
		srcs := make([]*source, len(segs))
		for i, seg := range segs {
			srcs[i] = newSource(seg, rows)
			start(srcs[i], func() { srcs[i].decodeAll(ctx) })
		}
		return srcs
	}
	var srcs []*source
	if len(segs) <= maxBlockInputs {
		srcs = leaves(segs)
	} else {
		groups := (len(segs) + groupFanIn - 1) / groupFanIn
		for g := range groups {
			children := leaves(segs[g*len(segs)/groups : (g+1)*len(segs)/groups])
			out := newGroupSource(groupWindowRows)
			srcs = append(srcs, start(out, func() { out.mergeAll(ctx, children) }))
		}
	}
	return blockMerge(ctx, srcs, &pageSink{ctx: ctx, w: w, kind: segs[0].KeyType.Kind, keep: keep, res: res})
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
// refuses.
type pageSink struct {
	ctx  context.Context
	w    *pageWriter
	kind lancefile.Kind
	keep func(uint64) bool
	res  *Result
}

func (p *pageSink) null(id uint64) error {
	p.res.RowsRead++
	if p.keep == nil || p.keep(id) {
		return p.w.add(p.ctx, true, nil, id)
	}
	return nil
}

func (p *pageSink) packed(sorted []uint64, ib int, lo uint64, ids []uint64) error {
	p.res.RowsRead += uint64(len(sorted))
	return p.w.addPacked(p.kind, sorted, ib, lo, ids, p.keep)
}

func (p *pageSink) pairs(keys, ids []uint64) error {
	p.res.RowsRead += uint64(len(keys))
	return p.w.addKeys(p.kind, keys, ids, p.keep)
}

// blockMerge merges the sources into sink by blocks.
func blockMerge(ctx context.Context, srcs []*source, sink blockSink) error {
	// Every input's nulls precede every value: take each input's windows
	// up to its first value before merging values.
	for _, s := range srcs {
		for len(s.keys) == 0 && !s.ended {
			if err := s.take(ctx, sink.null); err != nil {
				return err
			}
		}
	}
	var blockKeys, blockIDs []uint64
	var sorter blockSorter
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		bound, open := uint64(math.MaxUint64), false
		for _, s := range srcs {
			if len(s.keys) == 0 && !s.ended {
				if err := s.take(ctx, sink.null); err != nil {
					return err
				}
			}
			if !s.ended && len(s.keys) > 0 {
				bound, open = min(bound, s.keys[len(s.keys)-1]), true
			}
		}
		blockKeys, blockIDs = blockKeys[:0], blockIDs[:0]
		for _, s := range srcs {
			n := len(s.keys)
			if open {
				n = upTo(s.keys, bound)
			}
			blockKeys = append(blockKeys, s.keys[:n]...)
			blockIDs = append(blockIDs, s.ids[:n]...)
			s.keys, s.ids = s.keys[n:], s.ids[n:]
		}
		if len(blockKeys) == 0 {
			if !open {
				return nil
			}
			continue
		}
		if sorted, ib, lo, ok := sorter.order(blockKeys); ok {
			// handed on as the packed words: no gathered copy
			if err := sink.packed(sorted, ib, lo, blockIDs); err != nil {
				return err
			}
			continue
		}
		if err := sink.pairs(sorter.sort(blockKeys, blockIDs)); err != nil {
			return err
		}
	}
}

// newGroupSource is the source of a group's merged rows (see mergeAll),
// in windows of rows pairs.
func newGroupSource(rows int) *source {
	s := &source{rows: rows, full: make(chan *window, 1), free: make(chan *window, 2)}
	for range 2 {
		s.free <- &window{keys: make([]uint64, 0, rows), ids: make([]uint64, 0, rows)}
	}
	return s
}

// mergeAll block-merges children into s's windows until they end, an
// error (sent with the last window) or ctx is done.
func (s *source) mergeAll(ctx context.Context, children []*source) {
	ws := &windowSink{ctx: ctx, out: s}
	select {
	case ws.cur = <-s.free:
	case <-ctx.Done():
		return
	}
	ws.cur.nulls, ws.cur.keys, ws.cur.ids = ws.cur.nulls[:0], ws.cur.keys[:0], ws.cur.ids[:0]
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil { // a goroutine's panic would end the interpreter
				err = fmt.Errorf("btree: merging a group of %d segments: %v", len(children), r)
			}
		}()
		return blockMerge(ctx, children, ws)
	}()
	if err != nil && ctx.Err() != nil {
		return
	}
	ws.cur.err, ws.cur.last = err, true
	select {
	case s.full <- ws.cur:
	case <-ctx.Done():
	}
}

// windowSink collects a group's merged rows into its source's windows.
type windowSink struct {
	ctx    context.Context
	out    *source
	cur    *window
	valued bool // a value was handed on: a null may no longer come
}

func (ws *windowSink) null(id uint64) error {
	if ws.valued {
		return fmt.Errorf("btree: a group merge gave a null after a value")
	}
	ws.cur.nulls = append(ws.cur.nulls, id)
	return nil
}

func (ws *windowSink) packed(sorted []uint64, ib int, lo uint64, ids []uint64) error {
	ws.valued = true
	mask := uint64(1)<<ib - 1
	for len(sorted) > 0 {
		n := min(len(sorted), ws.out.rows-len(ws.cur.keys))
		for _, p := range sorted[:n] {
			ws.cur.keys = append(ws.cur.keys, p>>ib+lo)
			ws.cur.ids = append(ws.cur.ids, ids[p&mask])
		}
		sorted = sorted[n:]
		if err := ws.flushFull(); err != nil {
			return err
		}
	}
	return nil
}

func (ws *windowSink) pairs(keys, ids []uint64) error {
	ws.valued = true
	for len(keys) > 0 {
		n := min(len(keys), ws.out.rows-len(ws.cur.keys))
		ws.cur.keys, ws.cur.ids = append(ws.cur.keys, keys[:n]...), append(ws.cur.ids, ids[:n]...)
		keys, ids = keys[n:], ids[n:]
		if err := ws.flushFull(); err != nil {
			return err
		}
	}
	return nil
}

// flushFull hands a full window to the consumer and starts the next.
func (ws *windowSink) flushFull() error {
	if len(ws.cur.keys) < ws.out.rows {
		return nil
	}
	select {
	case ws.out.full <- ws.cur:
	case <-ws.ctx.Done():
		return ws.ctx.Err()
	}
	select {
	case ws.cur = <-ws.out.free:
	case <-ws.ctx.Done():
		return ws.ctx.Err()
	}
	ws.cur.nulls, ws.cur.keys, ws.cur.ids, ws.cur.err, ws.cur.last = ws.cur.nulls[:0], ws.cur.keys[:0], ws.cur.ids[:0], nil, false
	return nil
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

// blockSorter sorts a block's (key, row id) pairs by key, stably, with a
// least-significant-digit radix sort over the bits in which the block's
// keys differ (their span above the smallest key): a block of int64 keys
// within ±1e9 takes three 11-bit passes, not eight byte-wide ones. When
// the span and a row index fit 64 bits, each pair is packed into one word
// (the key's offset above the index) and the row ids gathered after.
type blockSorter struct {
	a, b   []uint64
	ka     []uint64
	ia     []uint64
	counts [1 << maxDigitBits]int // lsd's, kept: a block is often a few thousand rows
}

const digitBits = 11

// order sorts a block of keys packed, when the span of its keys and a
// row index fit 64 bits (ok): each word of sorted is a key's offset above
// lo, shifted left by ib bits, over the key's index in keys. Equal keys
// keep their order. The words stay valid until the next call.
func (bs *blockSorter) order(keys []uint64) (sorted []uint64, ib int, lo uint64, ok bool) {
	n := len(keys)
	if n == 0 {
		return nil, 0, 0, true
	}
	lo, hi := slices.Min(keys), slices.Max(keys)
	kb := bits.Len64(hi - lo)
	ib = bits.Len(uint(n - 1))
	if kb+ib > 64 {
		return nil, 0, 0, false
	}
	if cap(bs.a) < n {
		bs.a = make([]uint64, n)
	}
	if cap(bs.b) < n {
		bs.b = make([]uint64, n)
	}
	a, b := bs.a[:n], bs.b[:n]
	for i, k := range keys {
		a[i] = (k-lo)<<ib | uint64(i)
	}
	if kb == 0 {
		return a, ib, lo, true // one key: the block keeps its order
	}
	return lsd(a, b, ib, kb, &bs.counts), ib, lo, true
}

func (bs *blockSorter) sort(keys, ids []uint64) ([]uint64, []uint64) {
	n := len(keys)
	if n < 2 {
		return keys, ids
	}
	grow := func(s []uint64) []uint64 {
		if cap(s) < n {
			return make([]uint64, n)
		}
		return s[:n]
	}
	if sorted, ib, lo, ok := bs.order(keys); ok {
		bs.ka, bs.ia = grow(bs.ka), grow(bs.ia)
		mask := uint64(1)<<ib - 1
		for i, p := range sorted {
			bs.ka[i], bs.ia[i] = p>>ib+lo, ids[p&mask]
		}
		return bs.ka, bs.ia
	}
	lo := slices.Min(keys)
	kb := bits.Len64(slices.Max(keys) - lo)
	// a span too wide to pack: sort the pairs, offsets above lo
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

// maxDigitBits bounds a pass's digit: its counts (2^14 of them, 128 KiB)
// stay in the second-level cache.
const maxDigitBits = 14

// lsd sorts a by its bits [from, from+width), stably, in as few passes
// between a and b as digits of at most maxDigitBits allow (a 27-bit span
// takes two 14-bit passes, not three of 11), counting in counts; it
// returns the sorted one.
func lsd(a, b []uint64, from, width int, counts *[1 << maxDigitBits]int) []uint64 {
	passes := (width + maxDigitBits - 1) / maxDigitBits
	digit := (width + passes - 1) / passes
	mask := uint64(1)<<digit - 1
	count := counts[:1<<digit]
	for shift := from; shift < from+width; shift += digit {
		clear(count)
		for _, x := range a {
			count[(x>>shift)&mask]++
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
	return a
}
