package bitmap

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Schema metadata of a segment. Part of the format.
const (
	// statsKey holds {"num_bitmaps":N}, N the file's rows.
	statsKey = "lance:index_stats"
	// labelListNullsKey (LABEL_LIST only) names the global buffer holding
	// the row map of the rows whose list is null.
	labelListNullsKey = "lance:label_list_nulls"
)

// Segment is an opened BITMAP or LABEL_LIST segment.
type Segment struct {
	Meta     *pb.IndexMetadata
	KeyType  lancefile.DataType
	Keys     uint64
	Version  lancefile.Version
	Metadata map[string][]byte
	// Nulls is the row map of LABEL_LIST's null lists (nil when the file
	// has none).
	Nulls    []RawEntry
	hasNulls bool
	// order, when set, lists the file's rows in key order: pylance 2.0.1
	// (and releases of its time) wrote keys in hash order, not ascending.
	order []uint32
	// whole holds the keys and bitmaps columns of such a file once read
	// whole (at most reorderBytes of file), to be taken in key order.
	whole  [2]*lancefile.Array
	fields [2]*lancefile.Field // keys, bitmaps
	r      *lancefile.Reader
	obj    storage.Object
}

// Close releases the segment's file.
func (s *Segment) Close() {
	s.whole = [2]*lancefile.Array{}
	if s.obj != nil {
		s.obj.Close()
		s.obj = nil
	}
}

// Open opens a segment and checks its shape: errkind.Unsupported for a key
// type merges do not order (or a page layout the file reader refuses when
// read), errkind.Corrupt for a file that
// contradicts itself.
func Open(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	s, err := open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	if !lancefile.Orderable(s.KeyType.Kind) && !lancefile.Wide(s.KeyType) {
		s.Close()
		return nil, fmt.Errorf("%w: bitmap segment %s: keys of type %s (merges handle bools, numbers, decimals, strings and binary)", errkind.Unsupported, table.IndexUUID(im), s.KeyType)
	}
	if err := s.findOrder(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// narrowAscending reports whether a window of narrow keys (sk their sort
// keys) goes on ascending from prev (when after is set: a window before
// it was read), nulls first and each key once; prev becomes the window's
// last key (its number and validity only).
func narrowAscending(a *lancefile.Array, sk []uint64, after bool, prev *key) bool {
	pv, pk := prev.valid, prev.k
	for i, k := range sk {
		if a.IsValid(i) {
			if (after || i > 0) && pv && k <= pk {
				return false
			}
			pv, pk = true, k
			continue
		}
		if after || i > 0 { // a null after a key, or a second null
			return false
		}
		pv, pk = false, 0
	}
	prev.valid, prev.k = pv, pk
	return true
}

// findOrder reads the keys (the small column) and, when they do not
// ascend, sorts the rows by key into s.order. Keys listed twice are
// corruption either way.
func (s *Segment) findOrder(ctx context.Context) error {
	width, wide := 0, lancefile.Wide(s.KeyType)
	if s.KeyType.Kind != lancefile.KindBinary {
		width = s.KeyType.ValueBits() / 8
	}
	keyAt := func(a *lancefile.Array, sort []uint64, i int) key { return keyOf(a, sort, i, width, wide) }
	var keys []*lancefile.Array
	var prev key
	var prevBuf []byte // prev's bytes: a window's are replaced by the next
	var sk []uint64
	sorted := true
	for lo := uint64(0); lo < s.Keys; lo += windowRows {
		a, err := s.r.Read(ctx, keysColumn, lo, min(lo+windowRows, s.Keys))
		if err != nil {
			return fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(s.Meta), err)
		}
		keys = append(keys, a)
		if !sorted {
			continue // the keys are read whole, to be sorted
		}
		if width > 0 && !wide {
			// Narrow keys compare as numbers: a loop over them, not a key
			// built and compared per row (every Open reads every key: 10M
			// keys of 201 segments took a plan 0.7 s so).
			sk = lancefile.AppendSortKeys(s.KeyType.Kind, a.Values, a.Len, sk[:0])
			sorted = narrowAscending(a, sk, lo > 0, &prev)
			continue
		}
		for i := range a.Len {
			k := keyAt(a, nil, i)
			if lo+uint64(i) > 0 && compareKeys(&prev, &k, s.KeyType, wide) >= 0 {
				sorted = false
			}
			prevBuf = append(prevBuf[:0], k.b...)
			prev, prev.b = k, prevBuf
		}
	}
	if sorted {
		return nil
	}
	if s.Keys > math.MaxUint32 {
		return fmt.Errorf("%w: bitmap segment %s: %d keys out of order", errkind.Unsupported, table.IndexUUID(s.Meta), s.Keys)
	}
	all, err := lancefile.Concat(s.KeyType, keys)
	if err != nil {
		return err
	}
	sk = nil
	if width > 0 && !wide {
		sk = lancefile.AppendSortKeys(s.KeyType.Kind, all.Values, all.Len, nil)
	}
	if s.r.Size() <= reorderBytes {
		s.whole[0] = all // readRows takes the keys from here
	}
	s.order = make([]uint32, all.Len)
	for i := range s.order {
		s.order[i] = uint32(i)
	}
	slices.SortFunc(s.order, func(x, y uint32) int {
		a, b := keyAt(all, sk, int(x)), keyAt(all, sk, int(y))
		return compareKeys(&a, &b, s.KeyType, wide)
	})
	for i := 1; i < len(s.order); i++ {
		a, b := keyAt(all, sk, int(s.order[i-1])), keyAt(all, sk, int(s.order[i]))
		if compareKeys(&a, &b, s.KeyType, wide) == 0 {
			return fmt.Errorf("%w: bitmap segment %s: rows %d and %d hold the same key", errkind.Corrupt, table.IndexUUID(s.Meta), s.order[i-1], s.order[i])
		}
	}
	return nil
}

// reorderBytes bounds the file a merge reads whole to take its rows in
// key order; a larger file out of key order is read a row at a time. A
// variable for the tests.
var reorderBytes int64 = 256 << 20

// readRows reads rows [lo, hi) of column col in key order: the file's own
// rows, or (s.order set) the rows order lists there: taken from the
// columns read whole when the file is at most reorderBytes, else each
// read alone (about 20 µs a row).
func (s *Segment) readRows(ctx context.Context, col string, lo, hi uint64) (*lancefile.Array, error) {
	if s.order == nil {
		return s.r.Read(ctx, col, lo, hi)
	}
	c := 0
	if col == bitmapsColumn {
		c = 1
	}
	if s.whole[c] == nil && s.r.Size() <= reorderBytes {
		a, err := s.r.ReadAll(ctx, col)
		if err != nil {
			return nil, err
		}
		if a.Len != int(s.Keys) {
			return nil, fmt.Errorf("%w: column %s holds %d of %d rows", errkind.Corrupt, col, a.Len, s.Keys)
		}
		s.whole[c] = a
	}
	parts := make([]*lancefile.Array, 0, hi-lo)
	for p := lo; p < hi; p++ {
		row := int(s.order[p])
		if w := s.whole[c]; w != nil {
			parts = append(parts, w.Slice(row, row+1))
			continue
		}
		a, err := s.r.Read(ctx, col, uint64(row), uint64(row)+1)
		if err != nil {
			return nil, err
		}
		parts = append(parts, a)
	}
	f, _ := s.r.Field(col)
	return lancefile.Concat(f.Type, parts)
}

// open opens a segment of any key type (a listing counts what merges
// cannot order).
func open(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	u := table.IndexUUID(im)
	name := table.IndexDir(im) + FileName
	obj, err := st.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bitmap segment %s: %w", u, err)
	}
	s := &Segment{Meta: im, obj: obj}
	if s.r, err = lancefile.Open(ctx, obj, name, lancefile.Options{}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bitmap segment %s: %w", u, err)
	}
	kf, ok1 := s.r.Field(keysColumn)
	bf, ok2 := s.r.Field(bitmapsColumn)
	if !ok1 || !ok2 || bf.Type.Kind != lancefile.KindBinary {
		s.Close()
		return nil, fmt.Errorf("%w: bitmap segment %s: columns %q and binary %q expected", errkind.Unsupported, u, keysColumn, bitmapsColumn)
	}
	s.fields = [2]*lancefile.Field{kf, bf}
	s.KeyType, s.Keys, s.Version, s.Metadata = kf.Type, s.r.NumRows(), s.r.Version(), s.r.Metadata()
	if v, ok := s.r.MetadataString(labelListNullsKey); ok {
		g, err := strconv.Atoi(v)
		if err != nil || g < 1 || g >= s.r.NumGlobalBuffers() {
			s.Close()
			return nil, fmt.Errorf("%w: bitmap segment %s: %s names global buffer %q of %d", errkind.Corrupt, u, labelListNullsKey, v, s.r.NumGlobalBuffers())
		}
		b, err := s.r.GlobalBuffer(ctx, g)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("bitmap segment %s: %w", u, err)
		}
		if s.Nulls, err = SplitRowMap(b); err != nil {
			s.Close()
			return nil, fmt.Errorf("bitmap segment %s: null lists: %w", u, err)
		}
		s.hasNulls = true
	}
	return s, nil
}

// cursor streams one input's keys and row maps in windows.
type cursor struct {
	seg   *Segment
	order int
	next  uint64
	keys  *lancefile.Array
	maps  *lancefile.Array
	sort  []uint64 // the window's sort keys (narrow keys: not lancefile.Wide)
	i, n  int
	width int  // bytes of a fixed-width key, 0 for a variable-width one
	wide  bool // keys ordered by lancefile.CompareWide
	cur   key
	last  []byte // the previous window's last key (see advance)
}

// key is one key and its order: nulls first, then by value (numbers by
// lancefile.SortKey, wide keys by lancefile.CompareWide).
type key struct {
	valid bool
	k     uint64 // a narrow key's SortKey
	b     []byte // the key's bytes (fixed-width value or binary)
}

// keyOf is row i of keys (a window of keys of width bytes each, 0 for
// variable-width ones; sort: the narrow keys' SortKeys).
func keyOf(keys *lancefile.Array, sort []uint64, i, width int, wide bool) key {
	k := key{valid: keys.IsValid(i)}
	switch {
	case !k.valid:
	case width == 0:
		k.b = keys.Values[keys.Offsets[i]:keys.Offsets[i+1]]
	case wide:
		k.b = keys.Values[i*width : (i+1)*width]
	default:
		k.k, k.b = sort[i], keys.Values[i*width:(i+1)*width]
	}
	return k
}

// compareKeys orders two keys of type t (wide: lancefile.Wide(t), which
// the caller knows once for all its keys).
func compareKeys(a, b *key, t lancefile.DataType, wide bool) int {
	switch {
	case a.valid != b.valid:
		if !a.valid {
			return -1
		}
		return 1
	case !a.valid:
		return 0
	case wide:
		return lancefile.CompareWide(t, a.b, b.b)
	}
	return cmp.Compare(a.k, b.k)
}

// newCursor is a cursor over s's keys, input order of a merge.
func newCursor(s *Segment, order int) *cursor {
	c := &cursor{seg: s, order: order, wide: lancefile.Wide(s.KeyType)}
	if s.KeyType.Kind != lancefile.KindBinary {
		c.width = s.KeyType.ValueBits() / 8
	}
	return c
}

func (c *cursor) fill(ctx context.Context) (bool, error) {
	if c.next >= c.seg.Keys {
		return false, nil
	}
	end := min(c.next+windowRows, c.seg.Keys)
	var err error
	if c.keys, err = c.seg.readRows(ctx, keysColumn, c.next, end); err != nil {
		return false, fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(c.seg.Meta), err)
	}
	if c.maps, err = c.seg.readRows(ctx, bitmapsColumn, c.next, end); err != nil {
		return false, fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(c.seg.Meta), err)
	}
	if c.keys.Len != int(end-c.next) || c.maps.Len != c.keys.Len {
		return false, fmt.Errorf("%w: bitmap segment %s: a window of %d keys read back as %d keys and %d bitmaps", errkind.Corrupt,
			table.IndexUUID(c.seg.Meta), end-c.next, c.keys.Len, c.maps.Len)
	}
	c.i, c.n, c.next = 0, c.keys.Len, end
	if !lancefile.Wide(c.seg.KeyType) {
		c.sort = lancefile.AppendSortKeys(c.seg.KeyType.Kind, c.keys.Values, c.n, c.sort[:0])
	}
	return true, nil
}

// load reads the current key, which must follow the previous one.
func (c *cursor) load(prev *key, first bool) error {
	k := keyOf(c.keys, c.sort, c.i, c.width, c.wide)
	if !first && compareKeys(prev, &k, c.seg.KeyType, c.wide) >= 0 {
		return fmt.Errorf("%w: bitmap segment %s: key %d is not after the one before it (keys must ascend, null first, each once)",
			errkind.Corrupt, table.IndexUUID(c.seg.Meta), c.pos())
	}
	c.cur = k
	return nil
}

// pos is the current key's row in the file.
func (c *cursor) pos() uint64 { return c.next - uint64(c.n) + uint64(c.i) }

// rowMap is the current key's serialized row map.
func (c *cursor) rowMap() ([]byte, error) {
	if !c.maps.IsValid(c.i) {
		return nil, fmt.Errorf("%w: bitmap segment %s: key %d has a null bitmap", errkind.Corrupt, table.IndexUUID(c.seg.Meta), c.pos())
	}
	return c.maps.Values[c.maps.Offsets[c.i]:c.maps.Offsets[c.i+1]], nil
}

// advance moves to the next key; false when the input is done.
func (c *cursor) advance(ctx context.Context) (bool, error) {
	prev := c.cur
	if c.i++; c.i == c.n {
		// The window is replaced: keep the last key's bytes for the order
		// check (a copy per key was a tenth of a million-key merge).
		c.last = append(c.last[:0], prev.b...)
		prev.b = c.last
		ok, err := c.fill(ctx)
		if !ok || err != nil {
			return false, err
		}
	}
	return true, c.load(&prev, false)
}

// MergeOptions tune Merge.
type MergeOptions struct {
	// IndexUUID names the output (required).
	IndexUUID uuid.UUID
	// Keep, when set, has one entry per input (nil: all its rows stay)
	// saying which of its row ids stay: the rows it still owns at the
	// dataset version. Per input, because BITMAP segments of a dataset
	// with stable row ids hold stable ids, and an updated row keeps its id
	// in a newer fragment that only a newer input covers. Other rows are
	// dropped, and keys left without rows with them.
	Keep []func(rowID uint64) bool
	// Remap, when set, gives a kept row's id in the output for the rows
	// of the fragments Moves names (rows of fragments a compaction
	// rewrote move to their new addresses); the rows of other fragments
	// stay where they are, their row maps copied.
	Remap func(rowID uint64) uint64
	Moves func(frag uint32) bool
}

// Result is what Merge wrote.
type Result struct {
	Files       []*pb.IndexFile
	KeysRead    uint64
	KeysWritten uint64
}

// Merge merges BITMAP (or LABEL_LIST) segments of one index into one new
// segment under _indices/<uuid>/ (written, not committed): a k-way merge
// of the inputs' sorted keys, each key's row maps joined fragment by
// fragment (unioned should two inputs hold rows of one), the null lists of
// LABEL_LIST joined likewise. Memory is
// bounded by one window of keys per input and one output window.
func Merge(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, opts MergeOptions) (*Result, error) {
	if len(metas) == 0 {
		return nil, fmt.Errorf("%w: at least one bitmap segment is required", errkind.InvalidInput)
	}
	var segs []*Segment
	defer func() {
		for _, s := range segs {
			s.Close()
		}
	}()
	for _, im := range metas {
		s, err := Open(ctx, st, im)
		if err != nil {
			return nil, err
		}
		segs = append(segs, s)
		if f := segs[0]; s.KeyType != f.KeyType {
			return nil, fmt.Errorf("%w: bitmap segments %s (%s keys) and %s (%s) cannot merge", errkind.InvalidInput,
				table.IndexUUID(f.Meta), f.KeyType, table.IndexUUID(im), s.KeyType)
		}
	}
	first := segs[0]
	keyType, wide := first.KeyType, lancefile.Wide(first.KeyType)
	h := keyHeap{t: keyType, wide: wide}
	for i, s := range segs {
		c := newCursor(s, i)
		ok, err := c.fill(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := c.load(nil, true); err != nil {
				return nil, err
			}
			h.e = append(h.e, h.entry(c))
		}
	}
	h.init()
	name := table.IndicesDir + opts.IndexUUID.String() + "/" + FileName
	w, err := newKeyWriter(ctx, st, name, first)
	if err != nil {
		return nil, err
	}
	defer w.abort()
	if opts.Keep != nil && len(opts.Keep) != len(segs) {
		return nil, fmt.Errorf("%w: %d keep filters for %d inputs", errkind.InvalidInput, len(opts.Keep), len(segs))
	}
	keep := func(i int) func(uint64) bool {
		if opts.Keep == nil {
			return nil
		}
		return opts.Keep[i]
	}
	res := &Result{}
	// reused for every key (a million keys allocated each of them per key)
	var scratch, keyBuf, rowMap []byte
	var maps []keyMap
	var inputs []int
	var group, joined []RawEntry
	for len(h.e) > 0 {
		cur := h.e[0].c.cur
		keyBuf = append(keyBuf[:0], cur.b...) // the cursor's window moves on
		cur.b = keyBuf
		scratch, maps, inputs = scratch[:0], maps[:0], inputs[:0]
		for len(h.e) > 0 && compareKeys(&h.e[0].c.cur, &cur, keyType, wide) == 0 {
			c := h.e[0].c
			m, err := c.rowMap()
			if err != nil {
				return nil, err
			}
			if c.i+1 == c.n {
				// advance replaces the window, whose buffer goes back to
				// the pool: this one is copied; the others are read where
				// they are (copying every row map was a tenth of the merge)
				maps = append(maps, keyMap{lo: len(scratch), hi: len(scratch) + len(m)})
				scratch = append(scratch, m...)
			} else {
				maps = append(maps, keyMap{m: m})
			}
			inputs = append(inputs, c.order)
			res.KeysRead++
			ok, err := c.advance(ctx)
			if err != nil {
				return nil, err
			}
			if ok {
				h.e[0] = h.entry(c)
			} else {
				h.e[0] = h.e[len(h.e)-1]
				h.e = h.e[:len(h.e)-1]
			}
			h.down(0)
		}
		// Each input's rows are filtered by its own keep, then the
		// inputs' entries joined.
		group = group[:0]
		for j, km := range maps {
			start := len(group)
			m := km.m
			if m == nil {
				m = scratch[km.lo:km.hi]
			}
			var err error
			if group, err = AppendRowMapEntries(group, m); err != nil {
				return nil, fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(segs[inputs[j]].Meta), err)
			}
			if k := keep(inputs[j]); k != nil {
				es, err := joinEntries(nil, group[start:], k)
				if err != nil {
					return nil, err
				}
				group = append(group[:start], es...)
			}
			if opts.Remap != nil {
				es, err := remapEntries(group[start:], opts.Moves, opts.Remap)
				if err != nil {
					return nil, err
				}
				group = append(group[:start], es...)
			}
		}
		var err error
		if joined, err = joinEntries(joined[:0], group, nil); err != nil {
			return nil, err
		}
		if len(joined) > 0 {
			rowMap = AppendRowMap(rowMap[:0], joined)
			if err := w.add(cur, rowMap); err != nil {
				return nil, err
			}
		}
		if res.KeysRead%windowRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	// LABEL_LIST segments of releases before the map of null lists (2.0.1)
	// merge with later ones into a segment that has one, holding the null
	// lists the later inputs know: what pylance 14.0.2's own merge writes.
	if slices.ContainsFunc(segs, func(s *Segment) bool { return s.hasNulls }) {
		var all []RawEntry
		for i, s := range segs {
			es := s.Nulls
			if k := keep(i); k != nil {
				var err error
				if es, err = joinEntries(nil, es, k); err != nil {
					return nil, err
				}
			}
			if opts.Remap != nil {
				var err error
				if es, err = remapEntries(es, opts.Moves, opts.Remap); err != nil {
					return nil, err
				}
			}
			all = append(all, es...)
		}
		joined, err := joinEntries(nil, all, nil)
		if err != nil {
			return nil, err
		}
		g, err := w.w.AddGlobalBuffer(AppendRowMap(nil, joined))
		if err != nil {
			return nil, err
		}
		w.w.SetMetadata(labelListNullsKey, []byte(strconv.Itoa(g)))
	}
	files, err := w.finish()
	if err != nil {
		return nil, err
	}
	res.Files, res.KeysWritten = files, w.keys
	return res, nil
}

// keyMap is one input's row map of the key being merged: m, in the
// input's window, or scratch[lo:hi], a copy (nil m).
type keyMap struct {
	m      []byte
	lo, hi int
}

// keyHeap orders a merge's cursors by their current key, then by input.
// Each entry holds its cursor's key as a number (a narrow key's sort key,
// a wide key's prefix), so that most comparisons read the heap's own
// array: comparing through the cursors, with a call per comparison, was
// a fifth of a 201-input, million-key merge.
type keyHeap struct {
	e    []heapEntry
	t    lancefile.DataType
	wide bool
}

type heapEntry struct {
	k     uint64 // narrow: the key's sort key; wide: lancefile.PrefixKey
	valid bool
	c     *cursor
}

func (h *keyHeap) entry(c *cursor) heapEntry {
	e := heapEntry{k: c.cur.k, valid: c.cur.valid, c: c}
	if h.wide && e.valid {
		e.k = lancefile.PrefixKey(h.t, c.cur.b)
	}
	return e
}

// less orders nulls first, then by key, then by input.
func (h *keyHeap) less(a, b *heapEntry) bool {
	if a.valid == b.valid && a.k != b.k {
		return a.k < b.k
	}
	return h.tie(a, b)
}

// tie is less for a null and a value, or two entries of one number: wide
// keys by their bytes, then by input (kept out of less, so that less is
// inlined).
func (h *keyHeap) tie(a, b *heapEntry) bool {
	if a.valid != b.valid {
		return !a.valid
	}
	if h.wide && a.valid {
		if c := lancefile.CompareWide(h.t, a.c.cur.b, b.c.cur.b); c != 0 {
			return c < 0
		}
	}
	return a.c.order < b.c.order
}

func (h *keyHeap) init() {
	for i := len(h.e)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *keyHeap) down(i int) {
	e := h.e
	for {
		l := 2*i + 1
		if l >= len(e) {
			return
		}
		j := l
		if r := l + 1; r < len(e) && h.less(&e[r], &e[l]) {
			j = r
		}
		if !h.less(&e[j], &e[i]) {
			return
		}
		e[i], e[j] = e[j], e[i]
		i = j
	}
}

// joinEntries joins the row-map entries of one key (from inputs over
// disjoint rows) into one row map, appended to dst (which must not share
// es's array): fragments ascending, entries of one fragment unioned, rows
// keep refuses dropped (nil: all stay), emptied fragments left out. An
// entry is copied as it is unless it must be unioned or filtered. es is
// sorted in place.
func joinEntries(dst, es []RawEntry, keep func(uint64) bool) ([]RawEntry, error) {
	slices.SortStableFunc(es, func(a, b RawEntry) int { return cmp.Compare(a.Frag, b.Frag) })
	out := dst
	for lo := 0; lo < len(es); {
		hi := lo + 1
		for hi < len(es) && es[hi].Frag == es[lo].Frag {
			hi++
		}
		run := es[lo:hi]
		lo = hi
		if len(run) == 1 && keep == nil {
			out = append(out, run[0])
			continue
		}
		frag := run[0].Frag
		u := roaring.New()
		for _, e := range run {
			b, err := e.decode()
			if err != nil {
				return nil, err
			}
			u.Or(b)
		}
		if keep != nil {
			u = filterRows(u, frag, keep)
		}
		if u.IsEmpty() {
			continue
		}
		b, err := u.ToBytes()
		if err != nil {
			return nil, err
		}
		out = append(out, RawEntry{frag, b})
	}
	return out, nil
}

// decode reads an entry's rows for a merge (a whole-fragment entry is
// not merged).
func (e RawEntry) decode() (*roaring.Bitmap, error) {
	if len(e.Bits) == 0 {
		return nil, fmt.Errorf("%w: a row map entry for all of fragment %d (whole-fragment entries are not merged)", errkind.Unsupported, e.Frag)
	}
	b := roaring.New()
	if err := b.UnmarshalBinary(e.Bits); err != nil {
		return nil, fmt.Errorf("%w: row map entry of fragment %d: %v", errkind.Corrupt, e.Frag, err)
	}
	return b, nil
}

// remapEntries returns es with the entries of the fragments moves names
// replaced by entries of where remap puts their rows (a fragment's rows
// may land in several fragments, and several fragments' rows in one: the
// caller joins entries of one fragment). Other entries are kept as they
// are. es is not modified.
func remapEntries(es []RawEntry, moves func(uint32) bool, remap func(uint64) uint64) ([]RawEntry, error) {
	if !slices.ContainsFunc(es, func(e RawEntry) bool { return moves(e.Frag) }) {
		return es, nil
	}
	out := make([]RawEntry, 0, len(es))
	moved := map[uint32]*roaring.Bitmap{}
	for _, e := range es {
		if !moves(e.Frag) {
			out = append(out, e)
			continue
		}
		b, err := e.decode()
		if err != nil {
			return nil, err
		}
		hi := uint64(e.Frag) << 32
		for it := b.Iterator(); it.HasNext(); {
			n := remap(hi | uint64(it.Next()))
			to := moved[uint32(n>>32)]
			if to == nil {
				to = roaring.New()
				moved[uint32(n>>32)] = to
			}
			to.Add(uint32(n))
		}
	}
	for f, b := range moved {
		bits, err := b.ToBytes()
		if err != nil {
			return nil, err
		}
		out = append(out, RawEntry{f, bits})
	}
	return out, nil
}

// filterRows returns the rows of fragment frag's offsets bm that keep
// accepts.
func filterRows(bm *roaring.Bitmap, frag uint32, keep func(uint64) bool) *roaring.Bitmap {
	out := roaring.New()
	it := bm.ManyIterator()
	buf := make([]uint32, 4096)
	kept := make([]uint32, 0, len(buf))
	hi := uint64(frag) << 32
	for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
		kept = kept[:0]
		for _, v := range buf[:n] {
			if keep(hi | uint64(v)) {
				kept = append(kept, v)
			}
		}
		out.AddMany(kept)
	}
	return out
}

// keyWriter writes bitmap_page_lookup.lance a window of keys at a time.
type keyWriter struct {
	sw      storage.Writer
	counted *storage.CountingWriter
	w       *lancefile.Writer
	keyType lancefile.DataType
	mapType lancefile.DataType
	metas   map[string][]byte
	keys    uint64
	// the window being filled
	n        int
	vals     []byte
	offs     []int64
	validity []byte
	anyNull  bool
	maps     []byte
	mapOffs  []int64
}

func newKeyWriter(ctx context.Context, st storage.Store, name string, first *Segment) (*keyWriter, error) {
	return createKeyWriter(ctx, st, name, first.fields[0], first.fields[1], first.Version, first.Metadata)
}

// createKeyWriter starts a file of keys and their row maps (the fields'
// types and nullability as given) in file format v, whose schema metadata
// will be metas' (but the null lists' buffer) and the key count.
func createKeyWriter(ctx context.Context, st storage.Store, name string, keyField, mapField *lancefile.Field, v lancefile.Version, metas map[string][]byte) (*keyWriter, error) {
	sw, err := st.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	kw := &keyWriter{sw: sw, counted: &storage.CountingWriter{W: sw}, keyType: keyField.Type, mapType: mapField.Type, metas: metas}
	fields := []*lancefile.Field{
		lancefile.NewField(keysColumn, keyField.Type, keyField.Nullable),
		lancefile.NewField(bitmapsColumn, mapField.Type, mapField.Nullable),
	}
	if kw.w, err = lancefile.NewWriter(kw.counted, fields, lancefile.WriterOptions{Version: v}); err != nil {
		sw.Abort()
		return nil, err
	}
	kw.reset()
	return kw, nil
}

// reset starts a new window in new buffers: the file writer keeps the
// arrays it is given until it writes their page.
func (kw *keyWriter) reset() {
	kw.n, kw.anyNull = 0, false
	// The written window's buffers went to the file writer: new ones, sized
	// for what the last window held (grown by appends, they were copied
	// log2 times per window).
	kw.vals, kw.maps = make([]byte, 0, len(kw.vals)), make([]byte, 0, len(kw.maps))
	kw.offs, kw.mapOffs = make([]int64, 1, windowRows+1), make([]int64, 1, windowRows+1)
	kw.validity = make([]byte, (windowRows+7)/8)
}

func (kw *keyWriter) add(k key, rowMap []byte) error {
	if k.valid {
		kw.validity[kw.n/8] |= 1 << (kw.n % 8)
		kw.vals = append(kw.vals, k.b...)
	} else {
		kw.anyNull = true
		if kw.keyType.Kind != lancefile.KindBinary {
			kw.vals = append(kw.vals, make([]byte, kw.keyType.ValueBits()/8)...)
		}
	}
	kw.offs = append(kw.offs, int64(len(kw.vals)))
	kw.maps = append(kw.maps, rowMap...)
	kw.mapOffs = append(kw.mapOffs, int64(len(kw.maps)))
	kw.n++
	kw.keys++
	if kw.n == windowRows {
		return kw.flush()
	}
	return nil
}

func (kw *keyWriter) flush() error {
	if kw.n == 0 {
		return nil
	}
	keys := &lancefile.Array{Type: kw.keyType, Len: kw.n, Values: kw.vals}
	if kw.keyType.Kind == lancefile.KindBinary {
		keys.Offsets = kw.offs
	}
	if kw.anyNull {
		keys.Validity = kw.validity[:(kw.n+7)/8]
	}
	maps := &lancefile.Array{Type: kw.mapType, Len: kw.n, Values: kw.maps, Offsets: kw.mapOffs}
	if err := kw.w.Write([]*lancefile.Array{keys, maps}); err != nil {
		return err
	}
	kw.reset()
	return nil
}

// finish writes the last window and the metadata and publishes the file.
func (kw *keyWriter) finish() ([]*pb.IndexFile, error) {
	if err := kw.flush(); err != nil {
		return nil, err
	}
	for k, v := range kw.metas {
		if k != labelListNullsKey {
			kw.w.SetMetadata(k, v)
		}
	}
	kw.w.SetMetadata(statsKey, []byte(fmt.Sprintf(`{"num_bitmaps":%d}`, kw.keys)))
	if err := kw.w.Finish(); err != nil {
		return nil, err
	}
	if err := kw.sw.Finish(); err != nil {
		return nil, err
	}
	return []*pb.IndexFile{{Path: FileName, SizeBytes: uint64(kw.counted.N)}}, nil
}

func (kw *keyWriter) abort() { kw.sw.Abort() }
