package lancefile

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// Variable-width (binary, string) pages of files 2.1 and 2.2, in the two
// forms pylance 14.0.2 writes without compression (python/tests/
// test_lancefile.py checks both against LanceFileWriter's output):
//
//   - mini-block, value compression Variable{offsets: Flat{32|64}}: each
//     chunk's single value buffer is n+1 offsets, relative to the buffer's
//     start (so the first is the offsets' own size), then the bytes;
//   - full-zip with bits_per_offset: each item is its control word (when
//     the page has rep/def levels), then, for a valid item only, a length
//     of bits_per_offset bits and the bytes. Page buffer 1 is the
//     repetition index: n+1 byte positions of the items, in words of 1, 2, 4 or 8
//     bytes (pylance 14.0.2 wrote 2 for a 45 KiB page, 4 for 2 MiB), which
//     lets a range of rows be read without the rest of the page.
//
// Either form may hold FSST codes instead of the bytes (fsst.go). A
// mini-block page of few distinct values may instead hold dictionary
// indices (flat, bitpacked or run-length encoded) into a dictionary in
// page buffer 2, LZ4-compressed by pylance 14.0.2: the offsets' width in
// bits and the position of the bytes (u32 each, or u64 each for 64-bit
// offsets), n+1 offsets from that position, then the bytes. Other compressed
// forms are refused as errkind.Unsupported. Lists of binary values are read
// from mini-block and full-zip pages (readVarFullZipList).

func (r *Reader) readVariable21(ctx context.Context, pg *pageIO, layout *enc21.PageLayout, t, item DataType, a, b int) (*Array, error) {
	switch l := layout.GetLayout().(type) {
	case *enc21.PageLayout_MiniBlockLayout:
		return r.readVarMiniBlock(ctx, pg, l.MiniBlockLayout, t, item, a, b)
	case *enc21.PageLayout_FullZipLayout:
		if isList(t) {
			return r.readVarFullZipList(ctx, pg, l.FullZipLayout, t, item, a, b)
		}
		return r.readVarFullZip(ctx, pg, l.FullZipLayout, t, a, b)
	case *enc21.PageLayout_AllNullLayout:
		rd, err := parseLayers(l.AllNullLayout.GetLayers())
		if err != nil {
			return nil, err
		}
		if rd.hasList && l.AllNullLayout.InlineValue == nil {
			// Lists without items (null or empty; pylance writes null
			// lists so for the bounds of a ZONEMAP of a list column): the
			// levels decoded as for fixed-width items, of which there are none.
			out, err := r.readConstant(ctx, pg, l.AllNullLayout, t, Primitive(KindUint8), a, b)
			if err != nil {
				return nil, err
			}
			if out.Items == nil || out.Items.Len != 0 {
				return nil, fmt.Errorf("%w: constant %s page of items", errkind.Unsupported, t)
			}
			out.Items = emptyArray(item, DataType{})
			return out, nil
		}
		if rd.hasList || l.AllNullLayout.InlineValue != nil || l.AllNullLayout.GetDefCompression() != nil {
			return nil, fmt.Errorf("%w: constant %s page other than all-null", errkind.Unsupported, t)
		}
		if !rd.itemNullable {
			return r.readVarConstant(ctx, pg, t, b-a)
		}
		n := b - a
		return &Array{Type: t, Len: n, Offsets: make([]int64, n+1), Values: []byte{}, Validity: make([]byte, (n+7)/8)}, nil
	case nil:
		return nil, fmt.Errorf("%w: page layout missing", errkind.Corrupt)
	default:
		return nil, fmt.Errorf("%w: page layout %T for %s", errkind.Unsupported, l, t)
	}
}

// readVarConstant reads n rows of a page whose every row holds one value
// (pylance 14.0.2 writes such a page, without levels or an inline value,
// when all its values are equal): page buffer 0 is a u32 count of buffers
// (2), their u32 sizes, then the two buffers: the value's two offsets
// (u32, or u64 for the large types) and its bytes.
func (r *Reader) readVarConstant(ctx context.Context, pg *pageIO, t DataType, n int) (*Array, error) {
	if pg.numBuffers() < 1 {
		return nil, fmt.Errorf("%w: constant %s page without a value buffer", errkind.Corrupt, t)
	}
	raw, err := pg.whole(ctx, 0)
	if err != nil {
		return nil, err
	}
	if len(raw) < 12 || binary.LittleEndian.Uint32(raw) != 2 {
		return nil, fmt.Errorf("%w: constant %s value buffer of %d bytes (not two buffers)", errkind.Unsupported, t, len(raw))
	}
	offSize, valSize := uint64(binary.LittleEndian.Uint32(raw[4:])), uint64(binary.LittleEndian.Uint32(raw[8:]))
	if 12+offSize+valSize != uint64(len(raw)) || (offSize != 8 && offSize != 16) {
		return nil, fmt.Errorf("%w: constant %s value: buffers of %d and %d bytes in %d", errkind.Corrupt, t, offSize, valSize, len(raw))
	}
	w := int(offSize / 2)
	offs, val := raw[12:12+offSize], raw[12+offSize:]
	lo, hi := readWordN(offs, 0, w), readWordN(offs, 1, w)
	if lo > hi || hi > uint64(len(val)) {
		return nil, fmt.Errorf("%w: constant %s value at [%d,%d) of %d bytes", errkind.Corrupt, t, lo, hi, len(val))
	}
	v := val[lo:hi]
	if uint64(n)*uint64(len(v)) > maxConstantBytes {
		return nil, fmt.Errorf("%w: %d rows of a %d-byte constant", errkind.Unsupported, n, len(v))
	}
	vb := newVarBuilder(t, n)
	for range n {
		vb.add(v, true)
	}
	return vb.finish(), nil
}

// maxConstantBytes bounds what a constant page expands to in memory.
const maxConstantBytes = 1 << 30

// offsetBits is the width of the offsets of an uncompressed Variable
// encoding, or 0 when e is some other encoding.
func offsetBits(e *enc21.CompressiveEncoding) int {
	v, ok := e.GetCompression().(*enc21.CompressiveEncoding_Variable)
	if !ok || v.Variable.GetValues() != nil {
		return 0
	}
	f, ok := v.Variable.GetOffsets().GetCompression().(*enc21.CompressiveEncoding_Flat)
	if !ok || f.Flat.GetData() != nil {
		return 0
	}
	if w := int(f.Flat.GetBitsPerValue()); w == 32 || w == 64 {
		return w
	}
	return 0
}

// readWordN reads little-endian word i of the given width (1, 2, 4 or 8
// bytes).
func readWordN(b []byte, i, width int) uint64 {
	switch width {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[i*2:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return binary.LittleEndian.Uint64(b[i*8:])
}

// varBuilder accumulates rows of a binary array.
type varBuilder struct {
	out   *Array
	nulls bool
}

func newVarBuilder(t DataType, n int) *varBuilder {
	return &varBuilder{out: &Array{Type: t, Offsets: make([]int64, 1, n+1), Validity: make([]byte, (n+7)/8)}}
}

// grow makes room for one more validity bit (n, the rows expected, may
// be an estimate).
func (vb *varBuilder) grow() {
	if o := vb.out; o.Len/8 >= len(o.Validity) {
		o.Validity = append(o.Validity, 0)
	}
}

func (vb *varBuilder) add(v []byte, valid bool) {
	vb.grow()
	o := vb.out
	if valid {
		o.Values = append(o.Values, v...)
		o.Validity[o.Len/8] |= 1 << (o.Len % 8)
	} else {
		vb.nulls = true
	}
	o.Offsets = append(o.Offsets, int64(len(o.Values)))
	o.Len++
}

// addCodes adds a valid row whose bytes are FSST codes, or the bytes
// themselves when fs is nil.
func (vb *varBuilder) addCodes(fs *fsstTable, v []byte) error {
	if fs == nil {
		vb.add(v, true)
		return nil
	}
	vb.grow()
	o := vb.out
	var err error
	if o.Values, err = fs.appendDecoded(o.Values, v); err != nil {
		return err
	}
	o.Validity[o.Len/8] |= 1 << (o.Len % 8)
	o.Offsets = append(o.Offsets, int64(len(o.Values)))
	o.Len++
	return nil
}

func (vb *varBuilder) finish() *Array {
	if !vb.nulls {
		vb.out.Validity = nil
	}
	if vb.out.Values == nil {
		vb.out.Values = []byte{}
	}
	return vb.out
}

func (r *Reader) readVarMiniBlock(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout, t, item DataType, a, b int) (*Array, error) {
	rd, err := parseLayers(l.GetLayers())
	if err != nil {
		return nil, err
	}
	if rd.hasList != isList(t) {
		return nil, fmt.Errorf("%w: page layers %v for a %s column", errkind.Corrupt, l.GetLayers(), t)
	}
	lt := leafType(t, item)
	mb := miniBlock{l: l, large: l.GetHasLargeChunk(), hasRep: l.GetRepCompression() != nil,
		hasDef: l.GetDefCompression() != nil, nbuf: int(l.GetNumBuffers()), variable: true}
	var fs *fsstTable
	var dict *Array
	width := 0
	if l.GetDictionary() != nil {
		if dict, err = r.varDictionary(ctx, pg, l, lt); err != nil {
			return nil, err
		}
		if mb.dictBits, err = dictIndexBits(l.GetValueCompression()); err != nil {
			return nil, err
		}
	} else {
		var vc *enc21.CompressiveEncoding
		if fs, vc, err = fsstValues(l.GetValueCompression()); err != nil {
			return nil, err
		}
		if width = offsetBits(vc) / 8; width == 0 || mb.nbuf != 1 {
			return nil, fmt.Errorf("%w: %s mini-block page of value compression %v", errkind.Unsupported, lt, l.GetValueCompression())
		}
	}
	if mb.nbuf <= 0 || mb.nbuf > 16 {
		return nil, fmt.Errorf("%w: %d value buffers per chunk", errkind.Corrupt, mb.nbuf)
	}
	vs := varSlots{fs: fs, dict: dict, width: width, dictBits: mb.dictBits}
	if rd.hasList {
		if !mb.hasRep {
			return nil, fmt.Errorf("%w: list page without repetition levels", errkind.Corrupt)
		}
		return r.readVarListMiniBlock(ctx, pg, l, t, item, rd, &mb, vs, a, b)
	}
	if mb.hasRep {
		return nil, fmt.Errorf("%w: repetition levels in a %s page without lists", errkind.Corrupt, t)
	}
	ct, err := r.chunkTableOf(ctx, pg, l)
	if err != nil {
		return nil, err
	}
	first, last := 0, len(ct.offsets)
	for first < last && ct.first[first]+ct.values[first] <= a {
		first++
	}
	for last > first && ct.first[last-1] >= b {
		last--
	}
	vb := newVarBuilder(t, b-a)
	if first == last {
		if a != b {
			return nil, fmt.Errorf("%w: no chunk holds rows [%d,%d)", errkind.Corrupt, a, b)
		}
		return vb.finish(), nil
	}
	spanLen := ct.offsets[last-1] + ct.sizes[last-1] - ct.offsets[first]
	// Values are copied out of the chunks: their bytes go back to the pool.
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
		n := ct.values[c]
		_, def, cv, err := mb.decodeChunk(span[off:off+ct.sizes[c]], n, nil)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c, err)
		}
		if def != nil && len(def) != n {
			return nil, fmt.Errorf("%w: chunk %d: %d definition levels for %d values", errkind.Corrupt, c, len(def), n)
		}
		if err := vs.check(cv.values, n); err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c, err)
		}
		for i := max(a-ct.first[c], 0); i < min(n, b-ct.first[c]); i++ {
			if def != nil && !rd.itemValid(def[i]) {
				vb.add(nil, false)
			} else if err := vs.add(vb, cv.values, n, i); err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
		}
	}
	if vb.out.Len != b-a {
		return nil, fmt.Errorf("%w: chunks gave %d of rows [%d,%d)", errkind.Corrupt, vb.out.Len, a, b)
	}
	return vb.finish(), nil
}

// varSlots reads the value slots of one chunk of a variable-width
// mini-block page: bytes behind offsets (FSST codes when fs is set), or
// dictionary indices.
type varSlots struct {
	fs       *fsstTable
	dict     *Array
	width    int // bytes per offset (no dictionary)
	dictBits int // bits per dictionary index
}

// check verifies that buf holds n slots' offsets or indices.
func (vs varSlots) check(buf []byte, n int) error {
	if vs.dict != nil {
		if len(buf) < n*vs.dictBits/8 {
			return fmt.Errorf("%w: %d bytes of dictionary indices for %d values", errkind.Corrupt, len(buf), n)
		}
		return nil
	}
	if (n+1)*vs.width > len(buf) {
		return fmt.Errorf("%w: %d offsets in a %d-byte buffer", errkind.Corrupt, n+1, len(buf))
	}
	return nil
}

// add appends slot j of the n slots in buf (checked) to vb.
func (vs varSlots) add(vb *varBuilder, buf []byte, n, j int) error {
	if vs.dict != nil {
		k := readWord(buf, j, vs.dictBits/8)
		if k >= uint64(vs.dict.Len) {
			return fmt.Errorf("%w: dictionary index %d of %d", errkind.Corrupt, k, vs.dict.Len)
		}
		vb.add(vs.dict.Values[vs.dict.Offsets[k]:vs.dict.Offsets[k+1]], true)
		return nil
	}
	lo, hi := readWordN(buf, j, vs.width), readWordN(buf, j+1, vs.width)
	if hi < lo || hi > uint64(len(buf)) || lo < uint64((n+1)*vs.width) {
		return fmt.Errorf("%w: value %d at [%d,%d) of a %d-byte buffer", errkind.Corrupt, j, lo, hi, len(buf))
	}
	return vb.addCodes(vs.fs, buf[lo:hi])
}

// readVarListMiniBlock reads rows [a, b) of a mini-block page of lists of
// variable-width items. The chunks hold the items' value slots (null
// items have one, null and empty lists none), the levels say which rows
// they belong to; as for fixed-width lists, the whole page is decoded.
func (r *Reader) readVarListMiniBlock(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout, t, item DataType, rd repdef, mb *miniBlock, vs varSlots, a, b int) (*Array, error) {
	ct, err := r.chunkTableOf(ctx, pg, l)
	if err != nil {
		return nil, err
	}
	lv := newLevelsOut(rd)
	items := newVarBuilder(item, int(l.GetNumItems()))
	if n := len(ct.offsets); n > 0 {
		spanLen := ct.offsets[n-1] + ct.sizes[n-1]
		span, err := pg.readInto(ctx, 1, 0, spanLen, bufpool.Default.Get(spanLen)[:spanLen])
		if err != nil {
			return nil, err
		}
		defer bufpool.Default.Put(span)
		for c := range n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			nv := ct.values[c]
			rep, def, cv, err := mb.decodeChunk(span[ct.offsets[c]:ct.offsets[c]+ct.sizes[c]], nv, nil)
			if err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
			nLevels := max(len(rep), len(def))
			if err := lv.add(rep, def, nLevels); err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
			if err := vs.check(cv.values, nv); err != nil {
				return nil, fmt.Errorf("chunk %d: %w", c, err)
			}
			j := 0
			for i := range nLevels {
				var d uint16
				if def != nil {
					d = def[i]
				}
				if !rd.visible(d) {
					continue
				}
				if j == nv {
					return nil, fmt.Errorf("%w: chunk %d: levels name more than its %d values", errkind.Corrupt, c, nv)
				}
				if rd.itemValid(d) {
					if err := vs.add(items, cv.values, nv, j); err != nil {
						return nil, fmt.Errorf("chunk %d: %w", c, err)
					}
				} else {
					items.add(nil, false)
				}
				j++
			}
			if j != nv {
				return nil, fmt.Errorf("%w: chunk %d: levels name %d of its %d values", errkind.Corrupt, c, j, nv)
			}
		}
	}
	lv.finish()
	if b > lv.rows || lv.items != items.out.Len {
		return nil, fmt.Errorf("%w: page levels give %d rows and %d items, want %d rows and %d items", errkind.Corrupt, lv.rows, lv.items, b, items.out.Len)
	}
	arr := &Array{Type: t, Len: lv.rows, Offsets: lv.offsets, Validity: lv.validity, Items: items.finish()}
	if a == 0 && b == arr.Len {
		return arr, nil
	}
	return arr.Slice(a, b), nil
}

// varDictionary decodes the dictionary of a variable-width mini-block
// page (page buffer 2).
func (r *Reader) varDictionary(ctx context.Context, pg *pageIO, l *enc21.MiniBlockLayout, t DataType) (*Array, error) {
	if pg.numBuffers() < 3 {
		return nil, fmt.Errorf("%w: dictionary page with %d buffers", errkind.Corrupt, pg.numBuffers())
	}
	nd := int(l.GetNumDictionaryItems())
	if nd < 0 || nd > pg.bufferSize(2) {
		return nil, fmt.Errorf("%w: %d dictionary items in %d bytes", errkind.Corrupt, nd, pg.bufferSize(2))
	}
	raw, err := pg.whole(ctx, 2)
	if err != nil {
		return nil, err
	}
	e := l.GetDictionary()
	if g, ok := e.GetCompression().(*enc21.CompressiveEncoding_General); ok {
		if raw, err = decompress(g.General.GetCompression().GetScheme(), raw); err != nil {
			return nil, fmt.Errorf("dictionary: %w", err)
		}
		e = g.General.GetValues()
	}
	if offsetBits(e) == 0 {
		return nil, fmt.Errorf("%w: %s dictionary encoded as %v", errkind.Unsupported, t, l.GetDictionary())
	}
	// The block: the offsets' width in bits and the position of the bytes
	// (u32 each for 32-bit offsets, u64 each for 64-bit ones), the n+1
	// offsets (from the bytes' start), the bytes.
	if len(raw) < 8 {
		return nil, fmt.Errorf("%w: dictionary block of %d bytes", errkind.Corrupt, len(raw))
	}
	var bits, start, head uint64
	switch binary.LittleEndian.Uint32(raw) {
	case 32:
		bits, start, head = 32, uint64(binary.LittleEndian.Uint32(raw[4:])), 8
	case 64:
		if len(raw) < 16 {
			return nil, fmt.Errorf("%w: dictionary block of %d bytes", errkind.Corrupt, len(raw))
		}
		bits, start, head = 64, binary.LittleEndian.Uint64(raw[8:]), 16
	default:
		// Lance's writers before 2.1 was stable stored a u8 width then the count.
		return nil, fmt.Errorf("%w: dictionary block header %x", errkind.Unsupported, raw[:8])
	}
	width := int(bits / 8)
	if start < head || start > uint64(len(raw)) || uint64(nd+1)*uint64(width) > start-head {
		return nil, fmt.Errorf("%w: %d dictionary offsets before byte %d of a %d-byte block", errkind.Corrupt, nd+1, start, len(raw))
	}
	offs, data := raw[head:start], raw[start:]
	vb := newVarBuilder(t, nd)
	prev := readWordN(offs, 0, width)
	for i := 0; i < nd; i++ {
		next := readWordN(offs, i+1, width)
		if next < prev || next > uint64(len(data)) {
			return nil, fmt.Errorf("%w: dictionary value %d at [%d,%d) of %d bytes", errkind.Corrupt, i, prev, next, len(data))
		}
		vb.add(data[prev:next], true)
		prev = next
	}
	return vb.finish(), nil
}

// varFullZip checks a full-zip page of variable-width values (lists of
// them when list) and returns its layers, the width of its lengths and
// its FSST table (nil: plain bytes).
func varFullZip(l *enc21.FullZipLayout, t DataType, list bool) (repdef, int, *fsstTable, error) {
	rd, err := parseLayers(l.GetLayers())
	if err != nil {
		return rd, 0, nil, err
	}
	bpo, ok := l.GetDetails().(*enc21.FullZipLayout_BitsPerOffset)
	lenBytes := 0
	if ok {
		lenBytes = int(bpo.BitsPerOffset) / 8
	}
	fs, vc, err := fsstValues(l.GetValueCompression())
	if err != nil {
		return rd, 0, nil, err
	}
	if rd.hasList != list || (l.GetBitsRep() != 0) != list || !ok || (lenBytes != 4 && lenBytes != 8) || offsetBits(vc) == 0 {
		return rd, 0, nil, fmt.Errorf("%w: %s full-zip page (lists %v, value compression %v, details %v)",
			errkind.Unsupported, t, rd.hasList, l.GetValueCompression(), l.GetDetails())
	}
	return rd, lenBytes, fs, nil
}

// fullZipValue reads the value at data[pos:]: its length (lenBytes wide),
// then its bytes; it returns them and the position after.
func fullZipValue(data []byte, pos, lenBytes int) ([]byte, int, error) {
	if pos+lenBytes > len(data) {
		return nil, 0, fmt.Errorf("%w: full-zip length truncated", errkind.Corrupt)
	}
	n := readWordN(data[pos:], 0, lenBytes)
	pos += lenBytes
	if n > uint64(len(data)-pos) {
		return nil, 0, fmt.Errorf("%w: full-zip value of %d bytes with %d left", errkind.Corrupt, n, len(data)-pos)
	}
	return data[pos : pos+int(n)], pos + int(n), nil
}

// fullZipSpan reads the items of rows [a, b) of a full-zip page: its
// repetition index (page buffer 1) holds the byte position of each row's
// first item, then the end.
//
// pooled takes the span's buffer from bufpool.Default, for a caller that
// copies what it keeps and puts the buffer back (a BITMAP merge reads a
// window of row maps per input this way, each window's span a fresh
// allocation before).
func fullZipSpan(ctx context.Context, pg *pageIO, t DataType, a, b int, pooled bool) ([]byte, error) {
	rows := int(pg.page.GetLength())
	if pg.numBuffers() < 2 {
		return nil, fmt.Errorf("%w: %s full-zip page without a repetition index", errkind.Unsupported, t)
	}
	idxSize := pg.bufferSize(1)
	if rows < 0 || idxSize%(rows+1) != 0 {
		return nil, fmt.Errorf("%w: repetition index of %d bytes for %d rows", errkind.Corrupt, idxSize, rows)
	}
	iw := idxSize / (rows + 1)
	if iw != 1 && iw != 2 && iw != 4 && iw != 8 {
		return nil, fmt.Errorf("%w: repetition index of %d bytes for %d rows", errkind.Corrupt, idxSize, rows)
	}
	lo, err := pg.read(ctx, 1, a*iw, iw)
	if err != nil {
		return nil, err
	}
	hi, err := pg.read(ctx, 1, b*iw, iw)
	if err != nil {
		return nil, err
	}
	start, end := readWordN(lo, 0, iw), readWordN(hi, 0, iw)
	if end < start || end > uint64(pg.bufferSize(0)) {
		return nil, fmt.Errorf("%w: rows [%d,%d) at bytes [%d,%d) of a %d-byte page", errkind.Corrupt, a, b, start, end, pg.bufferSize(0))
	}
	n := int(end - start)
	if !pooled || int64(n) > pg.r.opts.MaxPageBytes {
		return pg.read(ctx, 0, int(start), n) // which refuses a span above the limit
	}
	buf := bufpool.Default.Get(n)[:n]
	span, err := pg.readInto(ctx, 0, int(start), n, buf)
	if err != nil {
		bufpool.Default.Put(buf)
		return nil, err
	}
	return span, nil
}

func (r *Reader) readVarFullZip(ctx context.Context, pg *pageIO, l *enc21.FullZipLayout, t DataType, a, b int) (*Array, error) {
	rd, lenBytes, fs, err := varFullZip(l, t, false)
	if err != nil {
		return nil, err
	}
	ctrl := controlWordBytes(l) // definition levels only: bits_rep is 0
	data, err := fullZipSpan(ctx, pg, t, a, b, true)
	if err != nil {
		return nil, err
	}
	defer bufpool.Default.Put(data) // every row's bytes are copied out
	vb := newVarBuilder(t, b-a)
	// the rows' bytes are at most the span's (less control words and
	// lengths; FSST codes may decode longer): growing them by appends was
	// three quarters of reading a BITMAP segment's million small row maps
	if cap(pg.into) >= len(data) {
		vb.out.Values = pg.into[:0] // ReadInto's
	} else {
		vb.out.Values = make([]byte, 0, len(data))
	}
	for pos := 0; vb.out.Len < b-a; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if pos+ctrl > len(data) {
			return nil, fmt.Errorf("%w: full-zip item truncated", errkind.Corrupt)
		}
		var def uint64
		if ctrl > 0 {
			def = readWordN(data[pos:], 0, ctrl)
		}
		pos += ctrl
		if def > uint64(rd.nullLevels) {
			return nil, fmt.Errorf("%w: full-zip item with definition level %d in a page without lists", errkind.Corrupt, def)
		}
		if !rd.itemValid(uint16(def)) {
			vb.add(nil, false)
			continue
		}
		v, next, err := fullZipValue(data, pos, lenBytes)
		if err != nil {
			return nil, err
		}
		if err := vb.addCodes(fs, v); err != nil {
			return nil, fmt.Errorf("row %d: %w", a+vb.out.Len, err)
		}
		pos = next
	}
	return vb.finish(), nil
}

// readVarFullZipList reads rows [a, b) of a full-zip page of lists of
// binary values (pylance 14.0.2 writes the posting blocks of a full-text
// index so): items back to back, each a control word (repetition level
// above the definition bits) and, for a visible valid item, its length
// and bytes; the repetition index gives each row's first byte.
func (r *Reader) readVarFullZipList(ctx context.Context, pg *pageIO, l *enc21.FullZipLayout, t, item DataType, a, b int) (*Array, error) {
	rd, lenBytes, fs, err := varFullZip(l, t, true)
	if err != nil {
		return nil, err
	}
	ctrl := controlWordBytes(l)
	data, err := fullZipSpan(ctx, pg, t, a, b, false)
	if err != nil {
		return nil, err
	}
	defMask := uint32(1)<<l.GetBitsDef() - 1
	lv := newLevelsOut(rd)
	// Sized for the span: the page's items if it is read whole, else a
	// guess that grows.
	est := int(l.GetNumItems())
	if a != 0 || b != int(pg.page.GetLength()) {
		est = min(est, (b-a)*2)
	}
	items := newVarBuilder(item, est)
	items.out.Values = make([]byte, 0, len(data))
	var rep, def [1]uint16
	for pos := 0; pos < len(data); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if pos+ctrl > len(data) {
			return nil, fmt.Errorf("%w: full-zip item truncated", errkind.Corrupt)
		}
		w := uint32(readWordN(data[pos:], 0, ctrl))
		pos += ctrl
		rep[0], def[0] = uint16(w>>l.GetBitsDef()), uint16(w&defMask)
		if err := lv.add(rep[:], def[:], 1); err != nil {
			return nil, err
		}
		if !rd.visible(def[0]) {
			continue
		}
		if !rd.itemValid(def[0]) {
			items.add(nil, false)
			continue
		}
		v, next, err := fullZipValue(data, pos, lenBytes)
		if err != nil {
			return nil, err
		}
		if err := items.addCodes(fs, v); err != nil {
			return nil, err
		}
		pos = next
	}
	lv.finish()
	if lv.rows != b-a || lv.items != items.out.Len {
		return nil, fmt.Errorf("%w: rows [%d,%d) of a full-zip page hold %d rows and %d items (%d read)", errkind.Corrupt, a, b, lv.rows, lv.items, items.out.Len)
	}
	return &Array{Type: t, Len: lv.rows, Offsets: lv.offsets, Validity: lv.validity, Items: items.finish()}, nil
}

// binaryListPage21 writes rows of lists of binary values as one full-zip
// page, as pylance 14.0.2 writes the posting blocks of a full-text index:
// items back to back, each a one-byte control word (the repetition level:
// 1 on a list's first item), a length (u32, or u64 for the large types)
// and the bytes; then the repetition index, the byte position of each
// row's first item and the page's end. Lists must be valid and not empty,
// and their items valid: the layers are all-valid.
func (c *colWriter) binaryListPage21(a *Array, firstRow uint64) error {
	it := a.Items
	if a.Validity != nil && a.NullCount() > 0 || it.Validity != nil && it.NullCount() > 0 {
		return fmt.Errorf("%w: lancefile: writing null lists of binary or null items", errkind.Unsupported)
	}
	lo, hi := a.Offsets[0], a.Offsets[a.Len]
	lenBytes := lengthBytes(it.Type)
	pg, err := newFullZipPage(a.Len, it.Offsets[hi]-it.Offsets[lo]+(hi-lo)*int64(1+lenBytes), lenBytes)
	if err != nil {
		return err
	}
	for i := 0; i < a.Len; i++ {
		if a.Offsets[i+1] == a.Offsets[i] {
			return fmt.Errorf("%w: lancefile: writing an empty list of binary (row %d)", errkind.Unsupported, i)
		}
		pg.row()
		for j := a.Offsets[i]; j < a.Offsets[i+1]; j++ {
			rep := byte(0)
			if j == a.Offsets[i] {
				rep = 1
			}
			pg.data = append(pg.data, rep)
			pg.value(it.Values[it.Offsets[j]:it.Offsets[j+1]])
		}
	}
	n := uint32(hi - lo)
	l := variableFullZip(lenBytes)
	l.BitsRep, l.NumItems, l.NumVisibleItems = 1, n, n
	l.Layers = []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM, enc21.RepDefLayer_REPDEF_ALL_VALID_LIST}
	defer pg.put()
	return c.page(0, typeURLPageLayout, pageLayout(l), pg.finish(), a.Len, firstRow)
}

// lengthBytes is the width of a full-zip value's length: u64 for the large
// binary types (pylance reads those only with 64-bit offsets), else u32.
func lengthBytes(t DataType) int {
	if strings.HasPrefix(t.Logical, "large_") {
		return 8
	}
	return 4
}

// variableFullZip is the layout of a full-zip page of variable-width
// values whose lengths take lenBytes.
func variableFullZip(lenBytes int) *enc21.FullZipLayout {
	return &enc21.FullZipLayout{
		ValueCompression: &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_Variable{
			Variable: &enc21.Variable{Offsets: flat21(8 * lenBytes)}}},
		Details: &enc21.FullZipLayout_BitsPerOffset{BitsPerOffset: uint32(8 * lenBytes)},
	}
}

// fullZipPage accumulates a full-zip page of variable-width values: the
// items (page buffer 0) and the repetition index (buffer 1), the byte
// position of each row's first item and then the end, in words as wide as
// the page needs.
type fullZipPage struct {
	data, index []byte
	narrow      bool
	lenBytes    int
}

func newFullZipPage(rows int, size int64, lenBytes int) (*fullZipPage, error) {
	if size >= 1<<32 || rows >= 1<<31 {
		return nil, fmt.Errorf("%w: lancefile: a full-zip page of %d bytes", errkind.Unsupported, size)
	}
	// Pooled, and handed back once the page is written (put): a merge
	// writes page after page of the same size, and fresh buffers were a
	// third of a BITMAP merge's allocations, each byte faulted in.
	p := &fullZipPage{data: bufpool.Default.Get(int(size)), narrow: size < 1<<16, lenBytes: lenBytes}
	w := 4
	if p.narrow {
		w = 2
	}
	p.index = bufpool.Default.Get((rows + 1) * w)
	return p, nil
}

// put hands the page's buffers back to the pool: call it once the page is
// written.
func (p *fullZipPage) put() {
	bufpool.Default.Put(p.data)
	bufpool.Default.Put(p.index)
	p.data, p.index = nil, nil
}

// row marks the start of a row.
func (p *fullZipPage) row() {
	if p.narrow {
		p.index = binary.LittleEndian.AppendUint16(p.index, uint16(len(p.data)))
	} else {
		p.index = binary.LittleEndian.AppendUint32(p.index, uint32(len(p.data)))
	}
}

// value appends a value: its length, then its bytes.
func (p *fullZipPage) value(v []byte) {
	if p.lenBytes == 8 {
		p.data = binary.LittleEndian.AppendUint64(p.data, uint64(len(v)))
	} else {
		p.data = binary.LittleEndian.AppendUint32(p.data, uint32(len(v)))
	}
	p.data = append(p.data, v...)
}

// finish ends the index and returns the page's buffers.
func (p *fullZipPage) finish() [][]byte {
	p.row()
	return [][]byte{p.data, p.index}
}

// binaryPage21 writes a binary column's rows as one full-zip page (the
// form pylance 14.0.2 writes for values that do not compress): items back
// to back, each a definition byte when the page has nulls, then for a
// valid row a length and the bytes (see fullZipPage).
func (c *colWriter) binaryPage21(a *Array, firstRow uint64) error {
	nulls := a.Validity != nil && a.NullCount() > 0
	layers := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM}
	ctrl := 0
	if nulls {
		layers[0], ctrl = enc21.RepDefLayer_REPDEF_NULLABLE_ITEM, 1
	}
	lenBytes := lengthBytes(a.Type)
	pg, err := newFullZipPage(a.Len, int64(len(a.Values))+int64(a.Len)*int64(lenBytes+ctrl), lenBytes)
	if err != nil {
		return err
	}
	for i := 0; i < a.Len; i++ {
		pg.row()
		valid := a.IsValid(i)
		if nulls {
			d := byte(0)
			if !valid {
				d = 1
			}
			pg.data = append(pg.data, d)
		}
		if valid {
			pg.value(a.Values[a.Offsets[i]:a.Offsets[i+1]])
		}
	}
	l := variableFullZip(lenBytes)
	l.BitsDef, l.NumItems, l.NumVisibleItems, l.Layers = uint32(ctrl), uint32(a.Len), uint32(a.Len), layers
	defer pg.put()
	return c.page(0, typeURLPageLayout, pageLayout(l), pg.finish(), a.Len, firstRow)
}
