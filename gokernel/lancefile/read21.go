package lancefile

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// File versions 2.1 and 2.2: each page has a structural layout (mini-block,
// full-zip or constant) over compressive encodings; lists and nulls are
// repetition and definition levels.

func (r *Reader) readPage21(ctx context.Context, pg *pageIO, t, item DataType, a, b int) (*Array, error) {
	layout, err := r.pageLayout(pg)
	if err != nil {
		return nil, err
	}
	if t.Kind == KindBinary || isList(t) && item.Kind == KindBinary {
		return r.readVariable21(ctx, pg, layout, t, item, a, b)
	}
	switch l := layout.GetLayout().(type) {
	case *enc21.PageLayout_MiniBlockLayout:
		return r.readMiniBlock(ctx, pg, l.MiniBlockLayout, t, item, a, b)
	case *enc21.PageLayout_FullZipLayout:
		return r.readFullZip(ctx, pg, l.FullZipLayout, t, item, a, b)
	case *enc21.PageLayout_AllNullLayout:
		return r.readConstant(ctx, pg, l.AllNullLayout, t, item, a, b)
	case nil:
		return nil, fmt.Errorf("%w: page layout missing", errkind.Corrupt)
	default:
		return nil, fmt.Errorf("%w: page layout %T", errkind.Unsupported, l)
	}
}

// pageLayout is the decoded layout of a 2.1+ page, decoded once per page:
// a merge reads a page a window at a time, and decoding the layout again
// for every window was 6% of a thousand-input BTREE merge. Callers
// only read it.
func (r *Reader) pageLayout(pg *pageIO) (*enc21.PageLayout, error) {
	return cachedPage(&r.chunks, &r.chunks.layouts, chunkKey{pg.col, pg.idx}, func() (*enc21.PageLayout, error) {
		l := &enc21.PageLayout{}
		if err := decodeAny(pg.page, "lance.encodings21.PageLayout", l); err != nil {
			return nil, err
		}
		return l, nil
	})
}

// cachedPage is the entry of m (a cache of c) for key, made by build on
// first use. Two readers racing may both build it; either result is kept.
func cachedPage[V any](c *chunkCache, m *map[chunkKey]V, key chunkKey, build func() (V, error)) (V, error) {
	c.mu.Lock()
	v, ok := (*m)[key]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if *m == nil {
		*m = map[chunkKey]V{}
	}
	(*m)[key] = v
	c.mu.Unlock()
	return v, nil
}

// leafType is the type of the values stored at the leaf: the item of a
// list, else the column type.
func leafType(t, item DataType) DataType {
	if isList(t) {
		return item
	}
	return t
}

// rows turns decoded levels and leaf values into an Array of rows, then
// keeps rows [a, b).
func assemble(t, item DataType, lv *levelsOut, values []byte, itemValidity []byte, a, b int) (*Array, error) {
	lt := leafType(t, item)
	vb := lt.ValueBits() / 8
	if len(values) != lv.items*vb {
		return nil, fmt.Errorf("%w: %d value bytes for %d items of %s", errkind.Corrupt, len(values), lv.items, lt)
	}
	if b > lv.rows {
		return nil, fmt.Errorf("%w: page levels give %d rows, want %d", errkind.Corrupt, lv.rows, b)
	}
	var arr *Array
	if isList(t) {
		itemArr := &Array{Type: item, Len: lv.items, Values: values, Validity: lv.itemNull, ItemValidity: itemValidity}
		arr = &Array{Type: t, Len: lv.rows, Offsets: lv.offsets, Validity: lv.validity, Items: itemArr}
	} else {
		arr = &Array{Type: t, Len: lv.rows, Values: values, Validity: lv.validity, ItemValidity: itemValidity}
	}
	if a == 0 && b == arr.Len {
		return arr, nil
	}
	return arr.Slice(a, b), nil
}

// ---- mini-block -------------------------------------------------------

func (r *Reader) chunkTableOf(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout) (*chunkTable, error) {
	return cachedPage(&r.chunks, &r.chunks.m, chunkKey{pg.col, pg.idx}, func() (*chunkTable, error) { return readChunkTable(ctx, pg, l) })
}

// readChunkTable decodes a mini-block page's chunk metadata.
func readChunkTable(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout) (*chunkTable, error) {
	meta, err := pg.whole(ctx, 0)
	if err != nil {
		return nil, err
	}
	wordBytes := 2
	if l.GetHasLargeChunk() {
		wordBytes = 4
	}
	if len(meta)%wordBytes != 0 {
		return nil, fmt.Errorf("%w: chunk metadata of %d bytes", errkind.Corrupt, len(meta))
	}
	n := len(meta) / wordBytes
	ct := &chunkTable{offsets: make([]int, n), sizes: make([]int, n), values: make([]int, n), first: make([]int, n)}
	off, vals := 0, 0
	total := int(l.GetNumItems())
	for i := 0; i < n; i++ {
		var w uint64
		if wordBytes == 2 {
			w = uint64(binary.LittleEndian.Uint16(meta[2*i:]))
		} else {
			w = uint64(binary.LittleEndian.Uint32(meta[4*i:]))
		}
		size := int((w>>4)+1) * 8
		cnt := 1 << (w & 0xf)
		if i == n-1 {
			cnt = total - vals
		}
		if cnt < 0 || cnt > maxChunkValuesRead || vals+cnt > total {
			return nil, fmt.Errorf("%w: chunk %d claims %d values, page has %d", errkind.Corrupt, i, cnt, total)
		}
		ct.offsets[i], ct.sizes[i], ct.values[i], ct.first[i] = off, size, cnt, vals
		off += size
		vals += cnt
	}
	if vals != total && !(n == 0 && total == 0) {
		return nil, fmt.Errorf("%w: chunks hold %d values, page says %d", errkind.Corrupt, vals, total)
	}
	if pg.numBuffers() < 2 || off != pg.bufferSize(1) {
		return nil, fmt.Errorf("%w: chunks span %d bytes, data buffer has %d", errkind.Corrupt, off, pg.bufferSize(min(1, pg.numBuffers()-1)))
	}
	return ct, nil
}

// maxChunkValuesRead bounds the values of one mini-block chunk. Lance writes
// at most 4096 (its reader accepts 32768); anything far above is damage.
const maxChunkValuesRead = 1 << 16

// maxLevels bounds the levels of a constant page.
const maxLevels = 1 << 26

type miniBlock struct {
	l         *enc21.MiniBlockLayout
	large     bool
	hasRep    bool
	hasDef    bool
	nbuf      int
	valueBits int
	dict      []byte // decoded dictionary, or nil
	dictBits  int    // width of one dictionary index
	variable  bool   // variable-width values: decodeChunk returns the raw buffer
	// levels, when set, is where a chunk's levels are decoded, chunk after
	// chunk (each chunk's are consumed before the next is decoded)
	levels *levelScratch
}

// levelScratch is the memory a chunk's levels are decoded into, taken from
// levelScratches for one page read: a BTREE merge reads a page a window of
// one or two chunks at a time, and fresh levels per chunk were half of what
// a thousand-input merge allocated.
type levelScratch struct {
	bytes []byte
	// the levels of each kind (repLevels, defLevels)
	levels [2][]uint16
}

var levelScratches = sync.Pool{New: func() any { return &levelScratch{} }}

// The kinds of a chunk's levels, indexing levelScratch.levels.
const (
	repLevels = iota
	defLevels
)

// decodeLevels decodes a chunk's block of n levels of a kind, in the
// scratch memory when mb has it.
func (mb *miniBlock) decodeLevels(e *enc21.CompressiveEncoding, raw []byte, n, kind int) ([]uint16, error) {
	sc := mb.levels
	if sc == nil {
		lv, err := decodeBlock(e, raw, n, 16)
		return levels16(lv), err
	}
	lv, err := decodeBlockInto(e, raw, n, 16, sc.bytes)
	if err != nil {
		return nil, err
	}
	// Only an expanded (RLE) block is kept for the next: other forms may
	// be views of the chunk, which must not be written.
	if e.GetRle() != nil && cap(lv) > cap(sc.bytes) {
		sc.bytes = lv[:0]
	}
	sc.levels[kind] = levels16Into(sc.levels[kind], lv)
	return sc.levels[kind], nil
}

func (r *Reader) readMiniBlock(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout, t, item DataType, a, b int) (*Array, error) {
	rd, err := parseLayers(l.GetLayers())
	if err != nil {
		return nil, err
	}
	if rd.hasList != isList(t) {
		return nil, fmt.Errorf("%w: page layers %v for a %s column", errkind.Corrupt, l.GetLayers(), t)
	}
	lt := leafType(t, item)
	mb := miniBlock{
		l: l, large: l.GetHasLargeChunk(),
		hasRep: l.GetRepCompression() != nil, hasDef: l.GetDefCompression() != nil,
		nbuf: int(l.GetNumBuffers()), valueBits: lt.ValueBits(),
	}
	if rd.hasList && !mb.hasRep {
		return nil, fmt.Errorf("%w: list page without repetition levels", errkind.Corrupt)
	}
	if mb.hasRep || mb.hasDef {
		mb.levels = levelScratches.Get().(*levelScratch)
		defer levelScratches.Put(mb.levels)
	}
	if mb.nbuf <= 0 || mb.nbuf > 16 {
		return nil, fmt.Errorf("%w: %d value buffers per chunk", errkind.Corrupt, mb.nbuf)
	}
	if l.GetDictionary() != nil {
		if pg.numBuffers() < 3 {
			return nil, fmt.Errorf("%w: dictionary page with %d buffers", errkind.Corrupt, pg.numBuffers())
		}
		raw, err := pg.whole(ctx, 2)
		if err != nil {
			return nil, err
		}
		nd := int(l.GetNumDictionaryItems())
		if nd < 0 || nd > 1<<28 {
			return nil, fmt.Errorf("%w: %d dictionary items", errkind.Corrupt, nd)
		}
		if mb.dict, err = decodeBlock(l.GetDictionary(), raw, nd, mb.valueBits); err != nil {
			return nil, fmt.Errorf("dictionary: %w", err)
		}
		if mb.dictBits, err = dictIndexBits(l.GetValueCompression()); err != nil {
			return nil, err
		}
	}
	ct, err := r.chunkTableOf(ctx, pg, l)
	if err != nil {
		return nil, err
	}

	// Without lists every level is a row and every row a value: decode only
	// the chunks that hold rows [a, b). Lists decode the whole page.
	// The chunks' ends ascend (a page of a hundred thousand rows has a
	// hundred chunks; a merge reads it a window at a time): search them.
	first, last := 0, len(ct.offsets)
	if !rd.hasList {
		first = sort.Search(last, func(i int) bool { return ct.first[i]+ct.values[i] > a })
		last = max(first, sort.Search(last, func(i int) bool { return ct.first[i] >= b }))
	}
	rowBase := 0
	if first < len(ct.first) {
		rowBase = ct.first[first]
	}
	lv := newLevelsOut(rd)
	var values, itemValidity []byte
	if first < last {
		total := ct.first[last-1] + ct.values[last-1] - ct.first[first]
		if pg.into != nil && !rd.hasList && l.GetDictionary() == nil {
			values = pg.into
		} else {
			values = make([]byte, 0, total*mb.valueBits/8)
		}
		// The chunks' bytes are only decoded from, never kept: read them into
		// a pooled buffer.
		spanLen := ct.offsets[last-1] + ct.sizes[last-1] - ct.offsets[first]
		span, err := pg.readInto(ctx, 1, ct.offsets[first], spanLen, bufpool.Default.Get(spanLen)[:spanLen])
		if err != nil {
			return nil, err
		}
		defer bufpool.Default.Put(span)
		for c := first; c < last; c++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			off := ct.offsets[c] - ct.offsets[first]
			rep, def, cv, err := mb.decodeChunk(span[off:off+ct.sizes[c]], ct.values[c], values)
			if err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
			nLevels := ct.values[c]
			if mb.hasRep || mb.hasDef {
				nLevels = max(len(rep), len(def))
			}
			if err := lv.add(rep, def, nLevels); err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
			if cv.itemValidity != nil || itemValidity != nil {
				dim := max(leafType(t, item).Dim, 1)
				itemValidity = appendBits(itemValidity, len(values)*8/mb.valueBits*dim, cv.itemValidity, ct.values[c]*dim)
			}
			values = cv.values
		}
	}
	lv.finish()
	if !rd.hasList && lv.items != len(values)*8/max(mb.valueBits, 1) {
		return nil, fmt.Errorf("%w: %d levels for %d values", errkind.Corrupt, lv.items, len(values)*8/mb.valueBits)
	}
	if !rd.hasList {
		return assemble(t, item, lv, values, itemValidity, a-rowBase, b-rowBase)
	}
	return assemble(t, item, lv, values, itemValidity, a, b)
}

// decodeChunk parses one chunk:
//
//	u16 num_levels | u16 rep_size? | u16 def_size? | value buffer sizes
//	(u16 each in 2.1, u32 in 2.2) | pad 0xFE to 8 | rep, pad | def, pad |
//	value buffers, each padded to 8
//
// The chunk's values are appended to dst; cv.values is the extended slice.
func (mb *miniBlock) decodeChunk(chunk []byte, nValues int, dst []byte) (rep, def []uint16, cv chunkValues, err error) {
	pos := 0
	u16 := func() (int, error) {
		if pos+2 > len(chunk) {
			return 0, fmt.Errorf("%w: chunk header truncated", errkind.Corrupt)
		}
		v := int(binary.LittleEndian.Uint16(chunk[pos:]))
		pos += 2
		return v, nil
	}
	numLevels, err := u16()
	if err != nil {
		return nil, nil, cv, err
	}
	repSize, defSize := 0, 0
	if mb.hasRep {
		if repSize, err = u16(); err != nil {
			return nil, nil, cv, err
		}
	}
	if mb.hasDef {
		if defSize, err = u16(); err != nil {
			return nil, nil, cv, err
		}
	}
	sizes := make([]int, mb.nbuf)
	for i := range sizes {
		if mb.large {
			if pos+4 > len(chunk) {
				return nil, nil, cv, fmt.Errorf("%w: chunk header truncated", errkind.Corrupt)
			}
			sizes[i] = int(binary.LittleEndian.Uint32(chunk[pos:]))
			pos += 4
		} else if sizes[i], err = u16(); err != nil {
			return nil, nil, cv, err
		}
	}
	take := func(n int) ([]byte, error) {
		pos = (pos + 7) &^ 7
		if n < 0 || pos+n > len(chunk) {
			return nil, fmt.Errorf("%w: chunk buffer of %d bytes at %d overruns the %d-byte chunk", errkind.Corrupt, n, pos, len(chunk))
		}
		b := chunk[pos : pos+n]
		pos += n
		return b, nil
	}
	if mb.hasRep {
		raw, err := take(repSize)
		if err != nil {
			return nil, nil, cv, err
		}
		if rep, err = mb.decodeLevels(mb.l.GetRepCompression(), raw, numLevels, repLevels); err != nil {
			return nil, nil, cv, fmt.Errorf("repetition levels: %w", err)
		}
	}
	if mb.hasDef {
		raw, err := take(defSize)
		if err != nil {
			return nil, nil, cv, err
		}
		if def, err = mb.decodeLevels(mb.l.GetDefCompression(), raw, numLevels, defLevels); err != nil {
			return nil, nil, cv, fmt.Errorf("definition levels: %w", err)
		}
	}
	bufs := make([][]byte, mb.nbuf)
	for i, n := range sizes {
		if bufs[i], err = take(n); err != nil {
			return nil, nil, cv, err
		}
	}
	if mb.variable {
		if mb.dictBits > 0 {
			idx, err := decodeMiniBlockValues(mb.l.GetValueCompression(), bufs, nValues, mb.dictBits, nil)
			if err != nil {
				return nil, nil, cv, fmt.Errorf("dictionary indices: %w", err)
			}
			return rep, def, idx, nil
		}
		return rep, def, chunkValues{values: bufs[0]}, nil
	}
	if mb.dict != nil {
		idx, err := decodeMiniBlockValues(mb.l.GetValueCompression(), bufs, nValues, mb.dictBits, nil)
		if err != nil {
			return nil, nil, cv, fmt.Errorf("dictionary indices: %w", err)
		}
		vb := mb.valueBits / 8
		nd := len(mb.dict) / vb
		for i := 0; i < nValues; i++ {
			k := int(readWord(idx.values, i, mb.dictBits/8))
			if k >= nd {
				return nil, nil, cv, fmt.Errorf("%w: dictionary index %d of %d", errkind.Corrupt, k, nd)
			}
			dst = append(dst, mb.dict[k*vb:(k+1)*vb]...)
		}
		return rep, def, chunkValues{values: dst}, nil
	}
	cv, err = decodeMiniBlockValues(mb.l.GetValueCompression(), bufs, nValues, mb.valueBits, dst)
	return rep, def, cv, err
}

// dictIndexBits is the width of the dictionary indices a value
// compression holds.
func dictIndexBits(e *enc21.CompressiveEncoding) (int, error) {
	var bits int
	switch c := e.GetCompression().(type) {
	case *enc21.CompressiveEncoding_InlineBitpacking:
		bits = int(c.InlineBitpacking.GetUncompressedBitsPerValue())
	case *enc21.CompressiveEncoding_Flat:
		bits = int(c.Flat.GetBitsPerValue())
	case *enc21.CompressiveEncoding_Rle:
		bits = int(c.Rle.GetValues().GetFlat().GetBitsPerValue())
	default:
		return 0, fmt.Errorf("%w: dictionary indices encoded as %T", errkind.Unsupported, c)
	}
	if bits != 8 && bits != 16 && bits != 32 && bits != 64 {
		return 0, fmt.Errorf("%w: dictionary indices of %d bits", errkind.Unsupported, bits)
	}
	return bits, nil
}

// ---- full-zip ---------------------------------------------------------

func (r *Reader) readFullZip(ctx context.Context, pg *pageIO, l *enc21.FullZipLayout, t, item DataType, a, b int) (*Array, error) {
	rd, err := parseLayers(l.GetLayers())
	if err != nil {
		return nil, err
	}
	if rd.hasList != isList(t) {
		return nil, fmt.Errorf("%w: page layers %v for a %s column", errkind.Corrupt, l.GetLayers(), t)
	}
	if _, ok := l.GetDetails().(*enc21.FullZipLayout_BitsPerOffset); ok {
		return nil, fmt.Errorf("%w: variable-width full-zip values", errkind.Unsupported)
	}
	lt := leafType(t, item)
	vbits := fixedWidthBits(l.GetValueCompression())
	if vbits != lt.ValueBits() || vbits%8 != 0 {
		return nil, fmt.Errorf("%w: full-zip values of %d bits (%v) for %s", errkind.Unsupported, vbits, l.GetValueCompression(), lt)
	}
	vw := vbits / 8
	ctrl := controlWordBytes(l)
	defMask := uint32(1)<<l.GetBitsDef() - 1
	parse := func(data []byte) (*levelsOut, []byte, error) {
		lv := newLevelsOut(rd)
		values := make([]byte, 0, len(data))
		var rep, def [1]uint16
		for pos := 0; pos < len(data); {
			var w uint32
			if pos+ctrl > len(data) {
				return nil, nil, fmt.Errorf("%w: full-zip item truncated", errkind.Corrupt)
			}
			switch ctrl {
			case 1:
				w = uint32(data[pos])
			case 2:
				w = uint32(binary.LittleEndian.Uint16(data[pos:]))
			case 4:
				w = binary.LittleEndian.Uint32(data[pos:])
			}
			pos += ctrl
			rep[0], def[0] = uint16(w>>l.GetBitsDef()), uint16(w&defMask)
			repArg := rep[:]
			if !rd.hasList {
				repArg = nil
			}
			if err := lv.add(repArg, def[:], 1); err != nil {
				return nil, nil, err
			}
			if rd.visible(def[0]) {
				if pos+vw > len(data) {
					return nil, nil, fmt.Errorf("%w: full-zip value truncated", errkind.Corrupt)
				}
				values = append(values, data[pos:pos+vw]...)
				pos += vw
			}
		}
		lv.finish()
		return lv, values, nil
	}
	if !rd.hasList {
		stride := ctrl + vw
		data, err := pg.read(ctx, 0, a*stride, (b-a)*stride)
		if err != nil {
			return nil, err
		}
		if ctrl == 0 {
			return &Array{Type: t, Len: b - a, Values: data}, nil
		}
		lv, values, err := parse(data)
		if err != nil {
			return nil, err
		}
		return assemble(t, item, lv, values, nil, 0, b-a)
	}
	data, err := pg.whole(ctx, 0)
	if err != nil {
		return nil, err
	}
	lv, values, err := parse(data)
	if err != nil {
		return nil, err
	}
	return assemble(t, item, lv, values, nil, a, b)
}

// controlWordBytes is the width of a full-zip item's control word, which
// holds its repetition and definition levels: none, 1, 2 or 4 bytes.
func controlWordBytes(l *enc21.FullZipLayout) int {
	switch bits := l.GetBitsRep() + l.GetBitsDef(); {
	case bits == 0:
		return 0
	case bits <= 8:
		return 1
	case bits <= 16:
		return 2
	}
	return 4
}

// ---- constant / all-null ----------------------------------------------

func (r *Reader) readConstant(ctx context.Context, pg *pageIO, l *enc21.ConstantLayout, t, item DataType, a, b int) (*Array, error) {
	rd, err := parseLayers(l.GetLayers())
	if err != nil {
		return nil, err
	}
	if rd.hasList != isList(t) {
		return nil, fmt.Errorf("%w: page layers %v for a %s column", errkind.Corrupt, l.GetLayers(), t)
	}
	lt := leafType(t, item)
	vw := lt.ValueBits() / 8
	inline := l.GetInlineValue()
	if l.InlineValue != nil && len(inline) != vw {
		return nil, fmt.Errorf("%w: constant value of %d bytes for %s", errkind.Unsupported, len(inline), lt)
	}
	if l.InlineValue == nil && !rd.itemNullable && !rd.hasList {
		return nil, fmt.Errorf("%w: constant page without an inline value (value-buffer form)", errkind.Unsupported)
	}
	levels := func(i int, enc *enc21.CompressiveEncoding, n uint64) ([]uint16, error) {
		if i >= pg.numBuffers() {
			return nil, nil
		}
		raw, err := pg.whole(ctx, i)
		if err != nil || len(raw) == 0 {
			return nil, err
		}
		if enc == nil {
			if len(raw)%2 != 0 {
				return nil, fmt.Errorf("%w: raw levels of %d bytes", errkind.Corrupt, len(raw))
			}
			return levels16(raw), nil
		}
		if n > maxLevels {
			return nil, fmt.Errorf("%w: %d levels in a constant page", errkind.Corrupt, n)
		}
		out, err := decodeBlock(enc, raw, int(n), 16)
		return levels16(out), err
	}
	rep, err := levels(0, l.GetRepCompression(), l.GetNumRepValues())
	if err != nil {
		return nil, fmt.Errorf("repetition levels: %w", err)
	}
	def, err := levels(1, l.GetDefCompression(), l.GetNumDefValues())
	if err != nil {
		return nil, fmt.Errorf("definition levels: %w", err)
	}
	rows := int(pg.page.GetLength())
	if uint64(rows)*uint64(max(vw, 1)) > uint64(r.opts.MaxReadBytes) || rows < 0 {
		return nil, fmt.Errorf("%w: constant page of %d rows", errkind.Corrupt, rows)
	}
	n := rows
	if rep != nil || def != nil {
		n = max(len(rep), len(def))
		if rep != nil && def != nil && len(rep) != len(def) {
			return nil, fmt.Errorf("%w: %d repetition and %d definition levels", errkind.Corrupt, len(rep), len(def))
		}
	}
	lv := newLevelsOut(rd)
	if rd.hasList && rep == nil {
		return nil, fmt.Errorf("%w: constant list page without repetition levels", errkind.Corrupt)
	}
	if !rd.hasList && def == nil && l.InlineValue == nil {
		// Simple all-null page: every row null.
		def = make([]uint16, n)
		for i := range def {
			def[i] = 1
		}
	}
	if err := lv.add(rep, def, n); err != nil {
		return nil, err
	}
	lv.finish()
	values := make([]byte, lv.items*vw)
	if inline != nil {
		for i := 0; i < lv.items; i++ {
			copy(values[i*vw:], inline)
		}
	}
	return assemble(t, item, lv, values, nil, a, b)
}
