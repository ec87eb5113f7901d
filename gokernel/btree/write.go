package btree

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// lookupRow is one page's entry of page_lookup.lance.
type lookupRow struct {
	minNull, maxNull bool
	min, max         []byte
	nulls            uint32
}

// pageWriter writes page_data.lance as rows arrive (in order) and
// page_lookup.lance at the end. Pages are encoded and written by a
// goroutine of their own, so that the caller's merge or sort runs while
// the previous pages are encoded (on two cores the merge was otherwise
// waiting on the encoder for a third of its time).
type pageWriter struct {
	st        storage.Store
	dir       string
	keyType   lancefile.DataType
	width     int
	batchSize int
	version   lancefile.Version
	sw        storage.Writer
	counted   *storage.CountingWriter
	w         *lancefile.Writer
	binary    bool
	// the page being filled
	vals     []byte
	offs     []int64 // binary keys: the n+1 offsets of vals
	validity []byte
	ids      []byte
	n        int
	nulls    uint32
	lookup   []lookupRow
	rows     uint64
	pages    uint64
	// the encoding goroutine: full pages in, werr set before done closes
	queue  chan *page
	spare  chan *page // pages written, their buffers free for reuse
	done   chan struct{}
	werr   error
	failed atomic.Bool // werr is set
	closed bool        // queue is closed
}

// queuedPages bounds the pages handed to the encoder ahead of it (a few
// pages of batch-size rows each).
const queuedPages = 8

func dataFields(t lancefile.DataType) []*lancefile.Field {
	return []*lancefile.Field{lancefile.NewField(valuesColumn, t, true), lancefile.NewField(idsColumn, lancefile.Primitive(lancefile.KindUint64), false)}
}

func newPageWriter(ctx context.Context, st storage.Store, dir string, t lancefile.DataType, batchSize int, v lancefile.Version) (*pageWriter, error) {
	pw := &pageWriter{st: st, dir: dir, keyType: t, width: t.ValueBits() / 8, binary: t.Kind == lancefile.KindBinary, batchSize: batchSize, version: v}
	sw, err := st.Create(ctx, dir+DataFile)
	if err != nil {
		return nil, err
	}
	pw.sw, pw.counted = sw, &storage.CountingWriter{W: sw}
	if pw.w, err = lancefile.NewWriter(pw.counted, dataFields(t), lancefile.WriterOptions{Version: v}); err != nil {
		sw.Abort()
		return nil, err
	}
	pw.queue, pw.spare, pw.done = make(chan *page, queuedPages), make(chan *page, queuedPages+2), make(chan struct{})
	pw.reset()
	go pw.encode()
	return pw, nil
}

// encode writes the queued pages in order until the queue closes. After
// a failed write it only drains the queue, so that a sender never blocks
// on it, and flush stops at the next page.
func (pw *pageWriter) encode() {
	defer close(pw.done)
	if pw.werr = pw.writeQueued(); pw.werr != nil {
		pw.failed.Store(true)
		for range pw.queue {
		}
	}
}

// writeQueued writes pages until the queue closes or one fails; a panic
// is an error (a goroutine's panic would end the interpreter).
func (pw *pageWriter) writeQueued() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("btree: writing %s: %v", pw.dir+DataFile, r)
		}
	}()
	for p := range pw.queue {
		// copied into the writer's page buffers, so that p's go back to
		// the merge: a fresh 64 KiB per page was most of a merge's garbage
		if err := pw.w.WriteChunked([][]*lancefile.Array{{p.vals}, {p.ids}}); err != nil {
			return err
		}
		select {
		case pw.spare <- p:
		default:
		}
	}
	return nil
}

// wait closes the queue and waits for the encoder; it returns the
// encoder's error.
func (pw *pageWriter) wait() error {
	if !pw.closed {
		pw.closed = true
		close(pw.queue)
	}
	<-pw.done
	return pw.werr
}

// reset starts a page in the buffers of a page the encoder has written,
// or in fresh ones.
func (pw *pageWriter) reset() {
	pw.n, pw.nulls = 0, 0
	select {
	case p := <-pw.spare:
		pw.vals, pw.ids, pw.validity = p.vals.Values[:0], p.ids.Values[:0], p.validity
		clear(pw.validity)
		if pw.binary {
			pw.offs = p.vals.Offsets[:1]
		}
		return
	default:
	}
	pw.vals = make([]byte, 0, pw.batchSize*pw.width)
	if pw.binary {
		pw.offs = make([]int64, 1, pw.batchSize+1)
	}
	pw.validity = make([]byte, (pw.batchSize+7)/8)
	pw.ids = make([]byte, 0, pw.batchSize*8)
}

// page is one page of rows on its way to the encoder.
type page struct {
	vals, ids *lancefile.Array
	validity  []byte // the whole validity buffer (vals may hold a prefix)
}

// add appends one row (rows arrive sorted, nulls first).
func (pw *pageWriter) add(ctx context.Context, null bool, value []byte, rowID uint64) error {
	if null {
		pw.vals = append(pw.vals, make([]byte, pw.width)...)
		pw.nulls++
	} else {
		pw.vals = append(pw.vals, value...)
		if pw.nulls > 0 { // a page without nulls writes no validity
			pw.validity[pw.n/8] |= 1 << (pw.n % 8)
		}
	}
	if pw.binary {
		pw.offs = append(pw.offs, int64(len(pw.vals)))
	}
	pw.ids = binary.LittleEndian.AppendUint64(pw.ids, rowID)
	pw.n++
	if pw.n == pw.batchSize {
		return pw.flush()
	}
	return nil
}

// addKeys appends sorted non-null rows of fixed-width keys (fixedKeys
// order) and their row ids, skipping the ids keep refuses.
func (pw *pageWriter) addKeys(kind lancefile.Kind, keys, ids []uint64, keep func(uint64) bool, remap func(uint64) uint64) error {
	for i, k := range keys {
		if id := ids[i]; keep == nil || keep(id) {
			if remap != nil {
				id = remap(id)
			}
			if err := pw.putKey(kind, k, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// addPacked is addKeys for a block sorted by blockSorter.order: each
// word of sorted is a key's offset above lo over ib bits of its index in
// ids. Integer keys of a page without nulls, all kept, are written a
// page's run at a time (the merge's thread spent a fifth of its time
// here, a call and a switch per row).
func (pw *pageWriter) addPacked(kind lancefile.Kind, sorted []uint64, ib int, lo uint64, ids []uint64, keep func(uint64) bool, remap func(uint64) uint64) error {
	mask := uint64(1)<<ib - 1
	for len(sorted) > 0 {
		n := min(len(sorted), pw.batchSize-pw.n)
		if keep != nil || remap != nil || pw.nulls > 0 || !pw.appendPacked(kind, sorted[:n], ib, lo, ids) {
			for _, p := range sorted[:n] {
				if id := ids[p&mask]; keep == nil || keep(id) {
					if remap != nil {
						id = remap(id)
					}
					if err := pw.putKey(kind, p>>ib+lo, id); err != nil {
						return err
					}
				}
			}
			sorted = sorted[n:]
			continue
		}
		sorted = sorted[n:]
		if pw.n += n; pw.n == pw.batchSize {
			if err := pw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendPacked appends the rows of sorted (at most the page's room) when
// kind is an integer kind, whose value is the key's low bits (the sign
// bit flipped for int64); it is false for other kinds.
func (pw *pageWriter) appendPacked(kind lancefile.Kind, sorted []uint64, ib int, lo uint64, ids []uint64) bool {
	le := binary.LittleEndian
	var flip uint64
	switch kind {
	case lancefile.KindInt64:
		flip = 1 << 63
	case lancefile.KindUint64, lancefile.KindInt32, lancefile.KindUint32:
	default:
		return false
	}
	mask := uint64(1)<<ib - 1
	n, vo, io := len(sorted), len(pw.vals), len(pw.ids)
	pw.vals = slices.Grow(pw.vals, n*pw.width)[:vo+n*pw.width]
	pw.ids = slices.Grow(pw.ids, n*8)[:io+n*8]
	v, d := pw.vals[vo:], pw.ids[io:]
	if pw.width == 8 {
		for i, p := range sorted {
			le.PutUint64(v[i*8:], (p>>ib+lo)^flip)
			le.PutUint64(d[i*8:], ids[p&mask])
		}
	} else {
		for i, p := range sorted {
			le.PutUint32(v[i*4:], uint32(p>>ib+lo))
			le.PutUint64(d[i*8:], ids[p&mask])
		}
	}
	return true
}

// putKey is add for a non-null fixed-width key, without a value buffer
// per row (the block merge's rows).
func (pw *pageWriter) putKey(kind lancefile.Kind, k, id uint64) error {
	pw.vals = putFixed(kind, k, pw.vals)
	if pw.nulls > 0 {
		pw.validity[pw.n/8] |= 1 << (pw.n % 8)
	}
	pw.ids = binary.LittleEndian.AppendUint64(pw.ids, id)
	if pw.n++; pw.n == pw.batchSize {
		return pw.flush()
	}
	return nil
}

func (pw *pageWriter) flush() error {
	if pw.n == 0 {
		return nil
	}
	valid := func(i int) bool { return i >= int(pw.nulls) } // nulls come first
	vals := &lancefile.Array{Type: pw.keyType, Len: pw.n, Values: pw.vals}
	if pw.binary {
		vals.Offsets = pw.offs
	}
	row := lookupRow{
		minNull: !valid(0), maxNull: !valid(pw.n - 1), nulls: pw.nulls,
		min: append([]byte(nil), valueAt(vals, 0, pw.width)...), max: append([]byte(nil), valueAt(vals, pw.n-1, pw.width)...),
	}
	if pw.nulls > 0 {
		vals.Validity = pw.validity[:(pw.n+7)/8]
	}
	ids := &lancefile.Array{Type: lancefile.Primitive(lancefile.KindUint64), Len: pw.n, Values: pw.ids}
	if pw.failed.Load() {
		return pw.wait()
	}
	pw.queue <- &page{vals: vals, ids: ids, validity: pw.validity}
	pw.lookup = append(pw.lookup, row)
	pw.rows += uint64(pw.n)
	pw.pages++
	pw.reset()
	return nil
}

// finish writes the last page and page_lookup.lance, publishes both files
// and returns their sizes (page_data first).
func (pw *pageWriter) finish(ctx context.Context) ([]*pb.IndexFile, error) {
	if err := pw.flush(); err != nil {
		return nil, err
	}
	if err := pw.wait(); err != nil {
		return nil, err
	}
	if err := pw.w.Finish(); err != nil {
		return nil, err
	}
	if err := pw.sw.Finish(); err != nil {
		return nil, err
	}
	dataBytes := pw.counted.N
	sw, err := pw.st.Create(ctx, pw.dir+LookupFile)
	if err != nil {
		return nil, err
	}
	defer sw.Abort()
	cw := &storage.CountingWriter{W: sw}
	fields := []*lancefile.Field{
		lancefile.NewField("min", pw.keyType, true), lancefile.NewField("max", pw.keyType, true),
		lancefile.NewField("null_count", lancefile.Primitive(lancefile.KindUint32), false),
		lancefile.NewField("page_idx", lancefile.Primitive(lancefile.KindUint32), false),
	}
	lw, err := lancefile.NewWriter(cw, fields, lancefile.WriterOptions{Version: pw.version})
	if err != nil {
		return nil, err
	}
	lw.SetMetadata("batch_size", []byte(strconv.Itoa(pw.batchSize)))
	lw.SetMetadata("range_partitioned", []byte("false"))
	if n := len(pw.lookup); n > 0 {
		mins, maxs := &lancefile.Array{Type: pw.keyType, Len: n}, &lancefile.Array{Type: pw.keyType, Len: n}
		nulls := &lancefile.Array{Type: lancefile.Primitive(lancefile.KindUint32), Len: n}
		idx := &lancefile.Array{Type: lancefile.Primitive(lancefile.KindUint32), Len: n}
		minValid, maxValid := make([]byte, (n+7)/8), make([]byte, (n+7)/8)
		anyMinNull, anyMaxNull := false, false
		if pw.binary {
			mins.Offsets, maxs.Offsets = make([]int64, 1, n+1), make([]int64, 1, n+1)
		}
		for i, r := range pw.lookup {
			mins.Values = append(mins.Values, r.min...)
			maxs.Values = append(maxs.Values, r.max...)
			if pw.binary {
				mins.Offsets = append(mins.Offsets, int64(len(mins.Values)))
				maxs.Offsets = append(maxs.Offsets, int64(len(maxs.Values)))
			}
			if r.minNull {
				anyMinNull = true
			} else {
				minValid[i/8] |= 1 << (i % 8)
			}
			if r.maxNull {
				anyMaxNull = true
			} else {
				maxValid[i/8] |= 1 << (i % 8)
			}
			nulls.Values = binary.LittleEndian.AppendUint32(nulls.Values, r.nulls)
			idx.Values = binary.LittleEndian.AppendUint32(idx.Values, uint32(i))
		}
		if anyMinNull {
			mins.Validity = minValid
		}
		if anyMaxNull {
			maxs.Validity = maxValid
		}
		if err := lw.Write([]*lancefile.Array{mins, maxs, nulls, idx}); err != nil {
			return nil, err
		}
	}
	if err := lw.Finish(); err != nil {
		return nil, err
	}
	if err := sw.Finish(); err != nil {
		return nil, err
	}
	return []*pb.IndexFile{{Path: DataFile, SizeBytes: uint64(dataBytes)}, {Path: LookupFile, SizeBytes: uint64(cw.N)}}, nil
}

// abort removes what was written unless finish published it (then the
// caller's cleanup removes the directory of a failed merge).
func (pw *pageWriter) abort() {
	_ = pw.wait() // the encoder writes to sw until it stops
	pw.sw.Abort()
}
