package bitmap

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/radix"
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
	s, err := openMergeable(ctx, st, im)
	if err != nil {
		return nil, err
	}
	if err := s.findOrder(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// openMergeable opens a segment whose key type merges know (nothing of
// its keys read).
func openMergeable(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	s, err := open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	if !lancefile.Orderable(s.KeyType.Kind) && !lancefile.Wide(s.KeyType) {
		s.Close()
		return nil, fmt.Errorf("%w: bitmap segment %s: keys of type %s (merges handle bools, numbers, decimals, strings and binary)", errkind.Unsupported, table.IndexUUID(im), s.KeyType)
	}
	return s, nil
}

// KeyType is the key type of a segment, from its file's schema (a plan
// checks that its inputs share it; their keys are read by the merge),
// errkind.Unsupported for one merges do not handle.
func KeyType(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (lancefile.DataType, error) {
	s, err := openMergeable(ctx, st, im)
	if err != nil {
		return lancefile.DataType{}, err
	}
	defer s.Close()
	return s.KeyType, nil
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
	return s.readRowsInto(ctx, col, lo, hi, nil)
}

// readRowsInto is readRows, decoding into dst's memory where the file
// reader can (lancefile.Reader.ReadInto).
func (s *Segment) readRowsInto(ctx context.Context, col string, lo, hi uint64, dst []byte) (*lancefile.Array, error) {
	if s.order == nil {
		return s.r.ReadInto(ctx, col, lo, hi, dst)
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

// cursor streams one input's keys and row maps in windows, which a
// goroutine of its own decodes one ahead of the merge (ahead; see run).
type cursor struct {
	seg   *Segment
	order int
	keys  *lancefile.Array
	maps  *lancefile.Array
	sort  []uint64 // the window's sort keys (narrow keys: not lancefile.Wide)
	i, n  int
	base  uint64 // the window's first key in the file
	width int    // bytes of a fixed-width key, 0 for a variable-width one
	wide  bool   // keys ordered by lancefile.CompareWide
	cur   key
	last  []byte // the previous window's last key (see advance)
	ahead chan *window
	ended bool // the last window was taken
	taken bool // cur is the last key a block took (mergeByBlocks), not the next one
}

// window is a window of an input's keys as its decoder read them.
type window struct {
	keys, maps *lancefile.Array
	sort       []uint64
	start      uint64
	err        error
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

// run decodes the input's windows on a goroutine until the input ends
// (the channel is closed), a window fails (sent with its error) or stop
// is called, which waits for the goroutine (the segment's file must stay
// open until then). Two windows live at most (the one merged, and the
// next, decoded and waiting to be taken), three sort key buffers: the
// decoder writes the next window's while the merge reads one's. slots,
// when set, bounds the windows decoded at once across a merge's inputs
// (each holds read buffers).
func (c *cursor) run(ctx context.Context, slots chan struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	c.ahead = make(chan *window)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Three windows' buffers in turn: when the decoder reads window
		// i+3, the merge holds window i+2 and has let go of i+1 and i
		// (the channel is unbuffered), whose row maps a block may still
		// name until it is emitted, but not past window i+2's arrival.
		var sorts [3][]uint64
		var maps [3][]byte
		for next, i := uint64(0), 0; next < c.seg.Keys; i++ {
			if slots != nil {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
			w := c.read(ctx, next, sorts[i%3][:0], maps[i%3])
			if slots != nil {
				<-slots
			}
			if w.sort != nil {
				sorts[i%3] = w.sort
			}
			if w.maps != nil {
				maps[i%3] = w.maps.Values
			}
			select {
			case c.ahead <- w:
			case <-ctx.Done():
				return // fill returns ctx's error: the channel stays open
			}
			if w.err != nil {
				return
			}
			next = w.start + uint64(w.keys.Len)
		}
		close(c.ahead)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// read decodes the window of keys from next (a panic is an error: a
// goroutine's panic would end the interpreter).
func (c *cursor) read(ctx context.Context, next uint64, sort []uint64, maps []byte) (w *window) {
	w = &window{start: next}
	defer func() {
		if r := recover(); r != nil {
			w.err = fmt.Errorf("bitmap segment %s: reading keys from %d: %v", table.IndexUUID(c.seg.Meta), next, r)
		}
	}()
	end := min(next+windowRows, c.seg.Keys)
	var err error
	if w.keys, err = c.seg.readRows(ctx, keysColumn, next, end); err != nil {
		w.err = fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(c.seg.Meta), err)
		return w
	}
	if w.maps, err = c.seg.readRowsInto(ctx, bitmapsColumn, next, end, maps); err != nil {
		w.err = fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(c.seg.Meta), err)
		return w
	}
	if w.keys.Len != int(end-next) || w.maps.Len != w.keys.Len {
		w.err = fmt.Errorf("%w: bitmap segment %s: a window of %d keys read back as %d keys and %d bitmaps", errkind.Corrupt,
			table.IndexUUID(c.seg.Meta), end-next, w.keys.Len, w.maps.Len)
		return w
	}
	if !lancefile.Wide(c.seg.KeyType) {
		w.sort = lancefile.AppendSortKeys(c.seg.KeyType.Kind, w.keys.Values, w.keys.Len, sort)
	}
	return w
}

// fill takes the next window from the decoder; false when the input is
// done.
func (c *cursor) fill(ctx context.Context) (bool, error) {
	if c.ended {
		return false, nil
	}
	var w *window
	select {
	case w = <-c.ahead:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if w == nil {
		c.ended = true
		return false, nil
	}
	if w.err != nil {
		return false, w.err
	}
	c.keys, c.maps, c.sort, c.base = w.keys, w.maps, w.sort, w.start
	c.i, c.n = 0, w.keys.Len
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
func (c *cursor) pos() uint64 { return c.base + uint64(c.i) }

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
	// opened a few at a time: an open reads every key (findOrder), and on
	// an object store each is a round trip or more
	segs := make([]*Segment, len(metas))
	defer func() {
		for _, s := range segs {
			if s != nil {
				s.Close()
			}
		}
	}()
	err := parallel.Each(len(metas), parallel.Opens, func(i int) (err error) {
		segs[i], err = Open(ctx, st, metas[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		if f := segs[0]; s.KeyType != f.KeyType {
			return nil, fmt.Errorf("%w: bitmap segments %s (%s keys) and %s (%s) cannot merge", errkind.InvalidInput,
				table.IndexUUID(f.Meta), f.KeyType, table.IndexUUID(s.Meta), s.KeyType)
		}
	}
	first := segs[0]
	var cs []*cursor
	slots := make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	for i, s := range segs {
		c := newCursor(s, i)
		defer c.run(ctx, slots)() // before the segments close (deferred first)
		ok, err := c.fill(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := c.load(nil, true); err != nil {
				return nil, err
			}
			cs = append(cs, c)
		}
	}
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
	j := &keyJoiner{segs: segs, opts: opts, keep: keep, w: w}
	if lancefile.Wide(first.KeyType) {
		err = mergeByHeap(ctx, cs, first.KeyType, j, res)
	} else {
		err = mergeByBlocks(ctx, cs, j, res)
	}
	if err != nil {
		return nil, err
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
		if err := w.flush(); err != nil {
			return nil, err
		}
		if err := w.drain(); err != nil {
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
	if !j.uncounted {
		written.Put(st.URI()+"/"+table.IndicesDir+opts.IndexUUID.String()+"/", Stats{Version: first.Version, Keys: w.keys, Rows: j.rows, Largest: j.largest})
	}
	return res, nil
}

// keyJoiner writes one key of a merge: its inputs' row maps, each
// filtered by its input's keep and moved by the remap, joined.
type keyJoiner struct {
	segs []*Segment
	opts MergeOptions
	keep func(int) func(uint64) bool
	w    *keyWriter
	// reused for every key (a million keys allocated each of them per key)
	group, joined []RawEntry
	rowMap        []byte
	// what the keys written hold (Stats), unless some key's did not count
	rows, largest uint64
	uncounted     bool
}

// emit writes key k with the row maps maps of inputs (an input's maps[i]
// is of input inputs[i]); a key left without rows is not written.
func (j *keyJoiner) emit(k key, maps [][]byte, inputs []int) error {
	j.group = j.group[:0]
	for i, m := range maps {
		start := len(j.group)
		var err error
		if j.group, err = AppendRowMapEntries(j.group, m); err != nil {
			return fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(j.segs[inputs[i]].Meta), err)
		}
		if k := j.keep(inputs[i]); k != nil {
			es, err := joinEntries(nil, j.group[start:], k)
			if err != nil {
				return err
			}
			j.group = append(j.group[:start], es...)
		}
		if j.opts.Remap != nil {
			es, err := remapEntries(j.group[start:], j.opts.Moves, j.opts.Remap)
			if err != nil {
				return err
			}
			j.group = append(j.group[:start], es...)
		}
	}
	var err error
	if j.joined, err = joinEntries(j.joined[:0], j.group, nil); err != nil {
		return err
	}
	if len(j.joined) == 0 {
		return nil
	}
	j.rowMap = AppendRowMap(j.rowMap[:0], j.joined)
	// Counted from the headers, as Describe counts them; a map that does
	// not count (a whole-fragment entry names no rows) leaves the listing
	// to read the file and say so.
	if n, err := rowMapRows(j.joined); err != nil {
		j.uncounted = true
	} else {
		j.rows, j.largest = j.rows+n, max(j.largest, n)
	}
	return j.w.add(k, j.rowMap)
}

// mergeByHeap merges cursors of wide keys (strings, binary, decimals) a
// key at a time, by a heap of the cursors' current keys.
func mergeByHeap(ctx context.Context, cs []*cursor, t lancefile.DataType, j *keyJoiner, res *Result) error {
	h := keyHeap{t: t, wide: lancefile.Wide(t)}
	for _, c := range cs {
		h.e = append(h.e, h.entry(c))
	}
	h.init()
	var scratch, keyBuf []byte
	var held []keyMap
	var maps [][]byte
	var inputs []int
	for len(h.e) > 0 {
		cur := h.e[0].c.cur
		keyBuf = append(keyBuf[:0], cur.b...) // the cursor's window moves on
		cur.b = keyBuf
		scratch, held, inputs = scratch[:0], held[:0], inputs[:0]
		for len(h.e) > 0 && compareKeys(&h.e[0].c.cur, &cur, h.t, h.wide) == 0 {
			c := h.e[0].c
			m, err := c.rowMap()
			if err != nil {
				return err
			}
			if c.i+1 == c.n {
				// advance replaces the window: this one is copied; the
				// others are read where they are (copying every row map
				// was a tenth of the merge)
				held = append(held, keyMap{lo: len(scratch), hi: len(scratch) + len(m)})
				scratch = append(scratch, m...)
			} else {
				held = append(held, keyMap{m: m})
			}
			inputs = append(inputs, c.order)
			res.KeysRead++
			ok, err := c.advance(ctx)
			if err != nil {
				return err
			}
			if ok {
				h.e[0] = h.entry(c)
			} else {
				h.e[0] = h.e[len(h.e)-1]
				h.e = h.e[:len(h.e)-1]
			}
			h.down(0)
		}
		maps = maps[:0]
		for _, km := range held {
			if km.m == nil {
				km.m = scratch[km.lo:km.hi]
			}
			maps = append(maps, km.m)
		}
		if err := j.emit(cur, maps, inputs); err != nil {
			return err
		}
		if res.KeysRead%windowRows == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// blockEntry is one input's key in a block: its row map and key bytes,
// in the input's window.
type blockEntry struct {
	m, kb []byte
	in    int
}

// mergeByBlocks merges cursors of narrow keys (numbers, dates, booleans:
// one sort key each) a block at a time. The block's bound is the smallest
// last key of the inputs' windows; every input's keys up to it are
// gathered, each input read in order, and sorted by key, stably
// (radix.Sorter: an input's keys keep the inputs' order), then each key's
// row maps are joined. A heap of the cursors took about 8 comparisons per
// key read, through the cursors' windows (201 inputs, a million keys: a
// third of the merge).
func mergeByBlocks(ctx context.Context, cs []*cursor, j *keyJoiner, res *Result) error {
	// The null key, first in every input that has it.
	var maps [][]byte
	var inputs []int
	live := make([]*cursor, 0, len(cs))
	for _, c := range cs {
		if !c.cur.valid {
			m, err := c.rowMap()
			if err != nil {
				return err
			}
			maps, inputs = append(maps, m), append(inputs, c.order)
			res.KeysRead++
			ok, err := c.advance(ctx)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		live = append(live, c)
	}
	if len(maps) > 0 {
		if err := j.emit(key{}, maps, inputs); err != nil {
			return err
		}
	}
	var sorter radix.Sorter
	var keys []uint64
	var ents []blockEntry
	for len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		bound := uint64(math.MaxUint64)
		for _, c := range live {
			bound = min(bound, c.sort[c.n-1])
		}
		keys, ents = keys[:0], ents[:0]
		next := live[:0]
		for _, c := range live {
			var err error
			if keys, ents, err = c.take(bound, keys, ents); err != nil {
				return err
			}
			if c.i == c.n {
				ok, err := c.fill(ctx)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
			}
			next = append(next, c)
		}
		live = next
		res.KeysRead += uint64(len(keys))
		if err := emitBlock(&sorter, keys, ents, j); err != nil {
			return err
		}
	}
	return nil
}

// take appends the keys of c's window up to bound, from the current one
// on, to keys (their sort keys) and ents, checking that they ascend, each
// once, after the input's null key if any (errkind.Corrupt).
func (c *cursor) take(bound uint64, keys []uint64, ents []blockEntry) ([]uint64, []blockEntry, error) {
	i := c.i
	if i == c.n || c.sort[i] > bound {
		return keys, ents, nil
	}
	// c.cur is set once, after the loop: setting it per key taken was a
	// tenth of a million-key merge
	prev, taken := c.cur.k, c.taken
	for ; i < c.n && c.sort[i] <= bound; i++ {
		k := c.sort[i]
		if !c.keys.IsValid(i) || (taken && k <= prev) {
			c.i = i
			return nil, nil, fmt.Errorf("%w: bitmap segment %s: key %d is not after the one before it (keys must ascend, null first, each once)",
				errkind.Corrupt, table.IndexUUID(c.seg.Meta), c.pos())
		}
		if !c.maps.IsValid(i) {
			c.i = i
			return nil, nil, fmt.Errorf("%w: bitmap segment %s: key %d has a null bitmap", errkind.Corrupt, table.IndexUUID(c.seg.Meta), c.pos())
		}
		keys = append(keys, k)
		ents = append(ents, blockEntry{m: c.maps.Values[c.maps.Offsets[i]:c.maps.Offsets[i+1]],
			kb: c.keys.Values[i*c.width : (i+1)*c.width], in: c.order})
		prev, taken = k, true
	}
	c.i = i
	c.cur, c.taken = key{valid: true, k: prev, b: c.keys.Values[(i-1)*c.width : i*c.width]}, true
	return keys, ents, nil
}

// emitBlock sorts a block's keys and emits each key with its inputs' row
// maps.
func emitBlock(sorter *radix.Sorter, keys []uint64, ents []blockEntry, j *keyJoiner) error {
	if len(keys) == 0 {
		return nil
	}
	lo, hi := slices.Min(keys), slices.Max(keys)
	sorted, ib, ok := sorter.Order(keys, lo, hi)
	mask := uint64(1)<<ib - 1 // a word's index in keys
	if !ok {
		// a span and index wider than a word: the indices sorted by key
		sorted, mask = make([]uint64, len(keys)), math.MaxUint64
		for i := range sorted {
			sorted[i] = uint64(i)
		}
		slices.SortStableFunc(sorted, func(a, b uint64) int { return cmp.Compare(keys[a], keys[b]) })
	}
	var maps [][]byte
	var inputs []int
	for p := 0; p < len(sorted); {
		first := sorted[p] & mask
		k := keys[first]
		maps, inputs = maps[:0], inputs[:0]
		// a key's entries are the run of words with its bits above the
		// index (packed), which spares reading keys at random
		same := func(q int) bool { return sorted[q]>>ib == sorted[p]>>ib }
		if !ok {
			same = func(q int) bool { return keys[sorted[q]] == k }
		}
		for q := p; q < len(sorted) && same(q); q++ {
			e := &ents[sorted[q]&mask]
			maps, inputs = append(maps, e.m), append(inputs, e.in)
		}
		p += len(maps)
		if err := j.emit(key{valid: true, k: k, b: ents[first].kb}, maps, inputs); err != nil {
			return err
		}
	}
	return nil
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
	sortByFrag(es, dst[len(dst):])
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

func byFrag(a, b RawEntry) int { return cmp.Compare(a.Frag, b.Frag) }

// sortByFrag sorts es by fragment, in place, with scratch's capacity as
// scratch. The entries of one fragment are unioned, so their order does
// not matter. A key's entries arrive as its inputs' maps one after
// another, each ascending by fragment: up to maxRuns such runs are merged
// (a sort of every key's entries was nearly all of a four-input merge of
// 100M rows), more are sorted.
func sortByFrag(es, scratch []RawEntry) {
	var runs [maxRuns][2]int // [next, end) of each run
	n, start := 0, 0
	for i := 1; i <= len(es); i++ {
		if i == len(es) || es[i].Frag < es[i-1].Frag {
			if n == maxRuns {
				slices.SortFunc(es, byFrag)
				return
			}
			runs[n] = [2]int{start, i}
			n, start = n+1, i
		}
	}
	if n <= 1 {
		return
	}
	// each run's next fragment, MaxUint64 once it is out
	var head [maxRuns]uint64
	for r := range n {
		head[r] = uint64(es[runs[r][0]].Frag)
	}
	scratch = scratch[:0]
	for range es {
		best := 0
		for r := 1; r < n; r++ {
			if head[r] < head[best] {
				best = r
			}
		}
		i := runs[best][0]
		scratch = append(scratch, es[i])
		if i++; i < runs[best][1] {
			head[best] = uint64(es[i].Frag)
		} else {
			head[best] = math.MaxUint64
		}
		runs[best][0] = i
	}
	copy(es, scratch)
	clear(scratch) // the scratch may be a caller's spare capacity: hold no map bytes
}

// maxRuns bounds the runs sortByFrag merges: each entry taken looks at
// every run's head.
const maxRuns = 8

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
// A goroutine of its own encodes and writes the windows filled (a merge's
// other costs run meanwhile on the other core).
type keyWriter struct {
	sw        storage.Writer
	counted   *storage.CountingWriter
	w         *lancefile.Writer
	keyType   lancefile.DataType
	mapType   lancefile.DataType
	metas     map[string][]byte
	keys      uint64
	keyWindow // the window being filled
	// the encoder: windows queued, closed by drain; windows written come
	// back on free, to be filled again
	queue  chan keyWindow
	free   chan keyWindow
	done   chan struct{}
	werr   error
	failed atomic.Bool // werr is set
}

// keyWindow is a window of keys and their row maps.
type keyWindow struct {
	n        int
	vals     []byte
	offs     []int64
	validity []byte
	anyNull  bool
	maps     []byte
	mapOffs  []int64
}

// arrays is the window as the file's two columns (sharing its buffers).
func (w *keyWindow) arrays(keyType, mapType lancefile.DataType) []*lancefile.Array {
	keys := &lancefile.Array{Type: keyType, Len: w.n, Values: w.vals}
	if keyType.Kind == lancefile.KindBinary {
		keys.Offsets = w.offs
	}
	if w.anyNull {
		keys.Validity = w.validity[:(w.n+7)/8]
	}
	return []*lancefile.Array{keys, {Type: mapType, Len: w.n, Values: w.maps, Offsets: w.mapOffs}}
}

// queuedWindows bounds the windows handed to the encoder ahead of it.
const queuedWindows = 4

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
	kw := &keyWriter{sw: sw, counted: &storage.CountingWriter{W: sw}, keyType: keyField.Type, mapType: mapField.Type, metas: metas,
		free: make(chan keyWindow, queuedWindows+2)}
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

// reset starts a new window, in the buffers of one the encoder has
// written (the file writer copies a window's rows: fresh buffers per
// window were a third of a high-cardinality merge's allocations), or in
// new ones sized for what the last window held.
func (kw *keyWriter) reset() {
	var w keyWindow
	select {
	case w = <-kw.free:
	default:
		w = keyWindow{vals: make([]byte, 0, len(kw.vals)), maps: make([]byte, 0, len(kw.maps)),
			offs: make([]int64, 1, windowRows+1), mapOffs: make([]int64, 1, windowRows+1), validity: make([]byte, (windowRows+7)/8)}
	}
	w.n, w.anyNull = 0, false
	w.vals, w.maps, w.offs, w.mapOffs = w.vals[:0], w.maps[:0], w.offs[:1], w.mapOffs[:1]
	clear(w.validity)
	kw.keyWindow = w
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
	if kw.failed.Load() {
		return kw.werr
	}
	if kw.queue == nil {
		kw.queue, kw.done = make(chan keyWindow, queuedWindows), make(chan struct{})
		go kw.encode()
	}
	kw.queue <- kw.keyWindow
	kw.reset()
	return nil
}

// encode writes the queued windows in order until the queue closes. After
// a failed write it only drains the queue, so that flush never blocks on
// it; a panic is an error (a goroutine's panic would end the interpreter).
func (kw *keyWriter) encode() {
	defer close(kw.done)
	defer func() {
		if r := recover(); r != nil {
			kw.werr = fmt.Errorf("bitmap: writing %s: %v", FileName, r)
			kw.failed.Store(true)
			for range kw.queue {
			}
		}
	}()
	for win := range kw.queue {
		if kw.werr == nil {
			a := win.arrays(kw.keyType, kw.mapType)
			if kw.werr = kw.w.WriteChunked([][]*lancefile.Array{a[:1], a[1:]}); kw.werr != nil {
				kw.failed.Store(true)
			}
		}
		select {
		case kw.free <- win:
		default: // every window made is back already
		}
	}
}

// drain waits until every window flushed is written and returns the
// encoder's error; the file writer is then the caller's again.
func (kw *keyWriter) drain() error {
	if kw.queue != nil {
		close(kw.queue)
		<-kw.done
		kw.queue = nil
	}
	return kw.werr
}

// finish writes the last window and the metadata and publishes the file.
func (kw *keyWriter) finish() ([]*pb.IndexFile, error) {
	if err := kw.flush(); err != nil {
		return nil, err
	}
	if err := kw.drain(); err != nil {
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

func (kw *keyWriter) abort() {
	_ = kw.drain()
	kw.sw.Abort()
}
