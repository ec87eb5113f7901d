package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// MergeOptions tune Merge. The zero value means defaults.
type MergeOptions struct {
	// IndexUUID names the output segment; a new random uuid when "".
	IndexUUID string `json:"index_uuid"`
	// WindowRows bounds the rows (over all inputs) of a window: partitions
	// are read in windows of about this many rows, and ReadAhead + 1
	// windows are in memory at once (read ahead while one is merged and
	// written). Default 131072 (for 16-byte PQ codes and row ids, about
	// 3 MiB read per window, plus the same again for the merged partition).
	WindowRows int `json:"window_rows"`
	// ReadAhead is how many windows are read while one is merged. Default:
	// 1 on stores that ask for few requests in flight (a local disk), 3 on
	// object stores, where every window's reads wait at least one round
	// trip (S3 through a 20 ms proxy, 168 MiB: 91 MB/s with 1, 108–116
	// with 3; bench/results/scale-s3-20261201-024631.md).
	ReadAhead int `json:"read_ahead"`
	// Parallelism bounds the reads in flight (a window's columns of every
	// input, each one ranged read or a few), and the HNSW partition graphs
	// built concurrently (at most one per core). Default: what the store
	// asks for (storage.Concurrency): 4 on a local disk, 64 on an object
	// store, whose requests each wait a round trip.
	Parallelism int `json:"parallelism"`
	// StrictSQ refuses IVF_SQ inputs whose bounds differ. By default (false)
	// they are merged (each create_index_uncommitted segment trains its own
	// bounds): codes are decoded with their input's bounds and re-encoded
	// with the union of all bounds, and Progress notes it. Lance instead
	// reads every input with the first input's bounds, which silently
	// distorts distances.
	StrictSQ bool `json:"strict_sq"`
	// Layouts, for repairs (verify.Repair), gives by input uuid how many
	// times the code layout (PQ transposition, RQ packing) was really
	// applied to that input's stored codes, whatever its metadata says: 2
	// for codes laid out twice (the chained-merge damage), 0 or 1 for a
	// flag that lies. Those codes are brought back to row-major order
	// with that count. A single input named here is rewritten even when
	// it has no stale rows.
	Layouts map[string]int `json:"-"`
	// HNSWGraph chooses how IVF_HNSW_* partition graphs are made: "reuse"
	// (the default) starts from the graph of the input with the most rows
	// in the partition and inserts the others' rows; "rebuild" builds
	// every graph from nothing, as Lance's merger does.
	HNSWGraph string `json:"hnsw_graph"`
	// MemoryBytes, for INVERTED merges, bounds the stored posting lists
	// held at once (fts.MergeOptions.MemoryBytes; default
	// fts.DefaultMemoryBytes).
	MemoryBytes int64 `json:"memory_bytes"`
	// TempDir holds an INVERTED merge's spill file (os.TempDir() when "").
	TempDir string `json:"temp_dir"`
	// Progress receives counters as the merge goes (optional).
	Progress *Progress `json:"-"`
}

// defaultParallelism is MergeOptions.Parallelism on stores that do not
// ask for more.
const defaultParallelism = 4

// remoteReadAhead is MergeOptions.ReadAhead on stores that ask for more
// requests in flight than defaultParallelism (object stores); maxReadAhead
// bounds any setting (windows in memory: ReadAhead + 1).
const (
	remoteReadAhead = 3
	maxReadAhead    = 8
)

func (o MergeOptions) withDefaults() MergeOptions {
	if o.WindowRows <= 0 {
		o.WindowRows = 1 << 17
	}
	if o.Parallelism <= 0 {
		o.Parallelism = defaultParallelism
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = 1
	}
	o.ReadAhead = min(o.ReadAhead, maxReadAhead)
	if o.Progress == nil {
		o.Progress = &Progress{}
	}
	if o.HNSWGraph == "" {
		o.HNSWGraph = HNSWReuse
	}
	return o
}

// Merge merges segments of one vector index into one new, uncommitted
// segment under _indices/<uuid>/ and returns its IndexMetadata.
//
// Each input's codes are brought back to row-major order with that input's
// own layout flag (PQ transposed, RQ packed) and partition lengths, rows of
// fragments an input no longer covers are dropped (as Lance does: a row is
// kept when its fragment is in the input's bitmap), and the query layout is
// applied once to each merged partition, so merged segments can be merged
// again to any depth. Rows deleted at snap (deletion files) and rows of
// fragments snap no longer has are dropped too, so a merge reclaims what a
// segment's StaleRows counts. A single input is rewritten when it has such
// rows, else returned unchanged.
//
// snap is the dataset version the merge works against. On any error,
// cancellation included, the partial output is removed.
func Merge(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	if opts.Parallelism <= 0 {
		opts.Parallelism = storage.Concurrency(st, defaultParallelism)
	}
	if opts.ReadAhead <= 0 && opts.Parallelism > defaultParallelism {
		opts.ReadAhead = remoteReadAhead
	}
	opts = opts.withDefaults()
	prog := opts.Progress
	prog.SetStage("validate")
	metas = movedView(ctx, st, snap, metas)
	if len(metas) > 0 {
		switch OtherType(metas[0]) {
		case "BTREE":
			return mergeBTree(ctx, st, snap, metas, opts)
		case "ZONEMAP", "BLOOMFILTER":
			return mergeZoneMap(ctx, st, snap, metas, opts)
		case "BITMAP", "LABEL_LIST":
			return mergeBitmap(ctx, st, snap, metas, opts)
		case "NGRAM":
			return mergeNgram(ctx, st, snap, metas, opts)
		case "INVERTED":
			return mergeFTS(ctx, st, snap, metas, opts)
		}
	}
	for _, im := range metas {
		if err := RequireVector(im); err != nil {
			return nil, err
		}
	}
	if err := checkEntries(ctx, st, metas, snap); err != nil {
		return nil, err
	}
	srcs, err := openSources(ctx, st, snap, metas)
	if err != nil {
		return nil, err
	}
	defer closeSources(srcs)
	if snap.HasStableRowIDs() {
		// Index row ids are stable row ids: an input owns the rows still
		// live in the fragments it covers (an update moves a row, with its
		// id, to a new fragment; a delete marks it in a deletion file).
		for _, s := range srcs {
			if s.owned, err = snap.LiveRowIDs(ctx, st, s.frags); err != nil {
				return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
			}
		}
	}
	m, err := sharedModel(srcs, !opts.StrictSQ)
	if err != nil {
		return nil, err
	}
	if m.requantize {
		prog.Note(sqNote(srcs, m))
	}
	stale, err := liveFilter(ctx, st, snap, srcs)
	if err != nil {
		return nil, err
	}
	// (A graph names its vertices by position, not row id: moving the
	// row ids does not touch it.)
	guard := newRowRemap(ctx, st, snap)
	for _, s := range srcs {
		s.remap = guard
	}
	// A lone input whose rows may need moving is rewritten, not returned.
	stale = stale || guard.movedTest() != nil
	for _, s := range srcs {
		s.depth = -1
		if d, ok := opts.Layouts[s.uuid]; ok {
			if d < 0 || d > maxLayoutDepth {
				return nil, fmt.Errorf("%w: segment %s: layout applied %d times (0 to %d)", errkind.InvalidInput, s.uuid, d, maxLayoutDepth)
			}
			s.depth = d
		}
	}
	if len(srcs) == 1 && !stale && len(opts.Layouts) == 0 {
		prog.SetStage("done")
		return metas[0], nil
	}
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	out, err := (&merger{st: st, snap: snap, srcs: srcs, m: m, opts: opts, dir: dir}).run(ctx)
	if gerr := guard.err(); gerr != nil {
		err = gerr // what the merge then failed on, if it failed
	}
	if err != nil {
		removeOutput(ctx, st, dir, ivf.AuxiliaryFileName, ivf.IndexFileName)
		return nil, err
	}
	return buildMetadata(id, metas, out)
}

type mergeOutput struct {
	auxBytes, indexBytes int64
}

type merger struct {
	st   storage.Store
	snap *table.Snapshot
	srcs []*source
	m    *model
	opts MergeOptions
	dir  string
	// scratch holds a partition's row-major RQ codes before packing, and
	// codes a merged partition's code column; both are reused across
	// partitions (grown, never shrunk): the writer copies what it keeps.
	scratch, codes []byte
	// readBufs are the window read buffers, per input and column, in
	// ReadAhead + 1 sets: one for the window being merged, one for each
	// window read ahead. A set is reused ReadAhead + 1 windows later.
	readBufs [][][]byte
	// hn writes index.idx of IVF_HNSW_* merges, graph by graph (nil for
	// the other types).
	hn *hnswMerge
	// Scratch of mergeWindow, reused partition after partition: the
	// pieces' Arrays, the pieces per column, an input's columns, layouts.
	arena         []lancefile.Array
	partsScratch  [][]*lancefile.Array
	colScratch    []*lancefile.Array
	layoutScratch []bool
}

func (mg *merger) run(ctx context.Context) (mergeOutput, error) {
	var out mergeOutput
	prog := mg.opts.Progress
	prog.SetStage("merge")
	prog.PartitionsTotal.Store(int64(mg.m.nparts))
	if mg.m.typ.HNSW() {
		prog.SetStage("build_graph")
		var err error
		if mg.hn, err = newHNSWMerge(ctx, mg); err != nil {
			return out, fmt.Errorf("write %s: %w", ivf.IndexFileName, err)
		}
		defer mg.hn.abort()
	}
	size, err := mg.writeAux(ctx)
	if err != nil {
		return out, fmt.Errorf("write %s: %w", ivf.AuxiliaryFileName, err)
	}
	out.auxBytes = size
	prog.SetStage("write_index")
	if mg.hn != nil {
		out.indexBytes, err = mg.hn.finish()
	} else {
		out.indexBytes, err = mg.writeIndex(ctx)
	}
	if err != nil {
		return out, fmt.Errorf("write %s: %w", ivf.IndexFileName, err)
	}
	prog.BytesWritten.Add(out.indexBytes)
	prog.SetStage("done")
	return out, nil
}

// window is a run of partitions read together.
type window struct{ first, last int } // partitions [first, last)

func (mg *merger) windows() []window {
	var ws []window
	for p := 0; p < mg.m.nparts; {
		q, rows := p, 0
		for q < mg.m.nparts {
			n := 0
			for _, s := range mg.srcs {
				n += int(s.files.IVF.Lengths[q])
			}
			if q > p && rows+n > mg.opts.WindowRows {
				break
			}
			rows += n
			q++
		}
		ws = append(ws, window{p, q})
		p = q
	}
	return ws
}

// auxPageBytes is the page size of a merged auxiliary file. Small pages
// keep the writer's buffer small: in a fresh process every byte of it is
// memory the kernel must fault in before the first page is written, and a
// 1 MiB buffer refilled page after page stays in the cache (measured on
// the default preset of bench_optimize's IVF_PQ and IVF_RQ deltas, cold
// merges: 10-18% faster than 8 MiB pages, a third fewer page faults).
const auxPageBytes = 1 << 20

func (mg *merger) writeAux(ctx context.Context) (int64, error) {
	m := mg.m
	sw, err := mg.st.Create(ctx, mg.dir+ivf.AuxiliaryFileName)
	if err != nil {
		return 0, err
	}
	defer sw.Abort()
	counted := &countingWriter{w: sw, prog: mg.opts.Progress}
	var fields []*lancefile.Field
	for _, f := range m.fields {
		fields = append(fields, lancefile.NewField(f.Name, f.Type, f.Nullable))
	}
	inRows := 0 // at most what the output holds (stale rows are dropped)
	for _, s := range mg.srcs {
		inRows += int(s.files.Aux.NumRows())
	}
	w, err := lancefile.NewWriter(counted, fields, lancefile.WriterOptions{Version: m.version, ExpectedRows: inRows, MaxPageBytes: auxPageBytes})
	if err != nil {
		return 0, err
	}
	quant := cloneRaw(m.quant.Raw)
	switch m.typ.Quantizer() {
	case "pq":
		cb, err := ivf.EncodeTensor(m.codebook)
		if err != nil {
			return 0, err
		}
		quant["transposed"] = json.RawMessage("true")
		if mg.inlineCodebook() {
			// Lance before 0.28 reads the codebook only from the metadata
			// (a global-buffer codebook fails its queries with "only accept
			// 2-D tensor shape"): keep it where the inputs keep it. Lance
			// serialises the bytes as a JSON array of numbers.
			quant["codebook_position"] = json.RawMessage("0")
			quant["codebook_tensor"] = jsonByteArray(cb)
			break
		}
		pos, err := w.AddGlobalBuffer(cb)
		if err != nil {
			return 0, err
		}
		quant["codebook_position"] = json.RawMessage(strconv.Itoa(pos))
		quant["codebook_tensor"] = json.RawMessage("[]")
	case "rq":
		if m.rotation != nil {
			rb, err := ivf.EncodeTensor(m.rotation)
			if err != nil {
				return 0, err
			}
			pos, err := w.AddGlobalBuffer(rb)
			if err != nil {
				return 0, err
			}
			quant["rotate_mat_position"] = json.RawMessage(strconv.Itoa(pos))
		}
		quant["packed"] = json.RawMessage("true")
	case "sq":
		if m.requantize {
			b, err := json.Marshal(map[string]float64{"start": m.sqLo, "end": m.sqHi})
			if err != nil {
				return 0, err
			}
			quant["bounds"] = b
		}
	}

	lengths := make([]uint32, m.nparts)
	var covered []uint32
	for _, s := range mg.srcs {
		s.rows = fragRows{}
		covered = append(covered, s.frags...)
	}
	if err := mg.mergeWindows(ctx, w, lengths); err != nil {
		return 0, err
	}
	// Every input holds rows of each fragment it claims (or the data shows
	// it has none to hold): verified, and recorded for the commit.
	for _, s := range mg.srcs {
		if err := checkCoverage(ctx, mg.st, mg.snap, s.uuid, s.meta.GetFields()[0], s.frags, s.rows); err != nil {
			return 0, err
		}
	}
	verified, err := encodeVerified(covered)
	if err != nil {
		return 0, err
	}
	w.SetMetadata(VerifiedKey, verified)

	ivfBytes, err := (&ivf.Model{Lengths: lengths, Centroids: m.centroids}).Encode()
	if err != nil {
		return 0, err
	}
	pos, err := w.AddGlobalBuffer(ivfBytes)
	if err != nil {
		return 0, err
	}
	quantJSON, err := json.Marshal(quant)
	if err != nil {
		return 0, err
	}
	storageMeta, _ := json.Marshal([]string{string(quantJSON)})
	indexMeta, _ := json.Marshal(ivf.IndexMeta{Type: m.typ, DistanceType: m.distance})
	w.SetMetadata(ivf.KeyDistanceType, []byte(m.distance))
	w.SetMetadata(ivf.KeyIVF, []byte(strconv.Itoa(pos)))
	w.SetMetadata(ivf.KeyStorageMetadata, storageMeta)
	w.SetMetadata(ivf.KeyIndex, indexMeta)
	if key := quantizerKeyOf(m.typ); key != "" {
		w.SetMetadata(key, quantJSON)
	}
	if err := w.Finish(); err != nil {
		return 0, err
	}
	if err := sw.Finish(); err != nil {
		return 0, err
	}
	return counted.n, nil
}

func quantizerKeyOf(t ivf.IndexType) string {
	switch t.Quantizer() {
	case "pq":
		return ivf.KeyPQ
	case "sq":
		return ivf.KeySQ
	case "rq":
		return ivf.KeyRQ
	}
	return ""
}

func cloneRaw(in map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// shardWindow holds one input's rows for a window of partitions.
type shardWindow struct {
	cols  []*lancefile.Array // per auxiliary column
	start uint64             // first row of the window in the input
}

// mergeWindows streams the windows through two stages: while one window's
// partitions are merged and written (one goroutine: the writer is
// sequential), the next ReadAhead windows are read and decoded. At most
// ReadAhead + 1 windows are in memory at once.
func (mg *merger) mergeWindows(ctx context.Context, w *lancefile.Writer, lengths []uint32) error {
	type read struct {
		shards []shardWindow
		err    error
	}
	wins := mg.windows()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer mg.releaseBuffers() // after every reader is done (see below)
	sets := mg.opts.ReadAhead + 1
	mg.readBufs = make([][][]byte, sets)
	done := make([]chan read, len(wins)) // window i's read, when started
	readAhead := func(i int) {
		done[i] = make(chan read, 1)
		go func() {
			var r read
			defer func() {
				if p := recover(); p != nil {
					r = read{err: fmt.Errorf("lance-segmerge kernel panic reading a window: %v\n%s", p, debug.Stack())}
				}
				done[i] <- r
			}()
			r.shards, r.err = mg.readWindow(ctx, wins[i], i%sets)
		}()
	}
	// Wait for every read started and not received: none may outlive the
	// merge (the buffers go back to the pool).
	received := 0
	drain := func() {
		cancel()
		for j := received; j < len(wins) && done[j] != nil; j++ {
			<-done[j]
		}
	}
	for i := 0; i < min(sets-1, len(wins)); i++ {
		readAhead(i)
	}
	for i, win := range wins {
		r := <-done[i]
		received = i + 1
		if r.err != nil {
			drain()
			return r.err
		}
		if err := ctx.Err(); err != nil {
			drain()
			return err
		}
		if next := i + sets - 1; next < len(wins) {
			// Window i-1's buffer set is free: it was written (and the
			// writer copies what it keeps) before this iteration.
			readAhead(next)
		}
		if err := mg.mergeWindow(ctx, w, win, r.shards, lengths); err != nil {
			drain()
			return err
		}
	}
	return nil
}

// readWindow reads and decodes every input's rows of a window: each
// input's columns are read concurrently (Parallelism reads in flight), one
// ranged read per column and page (the window's partitions are contiguous
// in every input: neighbouring partitions are read together), skipping
// inputs with no rows in the window.
func (mg *merger) readWindow(ctx context.Context, win window, set int) ([]shardWindow, error) {
	m := mg.m
	shards := make([]shardWindow, len(mg.srcs))
	nf := len(m.fields)
	if mg.readBufs[set] == nil {
		mg.readBufs[set] = make([][]byte, len(mg.srcs)*nf)
	}
	bufs := mg.readBufs[set]
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(mg.opts.Parallelism)
	for i, s := range mg.srcs {
		iv := s.files.IVF
		start := iv.Offsets[win.first]
		end := iv.Offsets[win.last-1] + uint64(iv.Lengths[win.last-1])
		shards[i] = shardWindow{start: start, cols: make([]*lancefile.Array, nf)}
		if start == end {
			for c, f := range m.fields { // nothing to read: no partition of the window has rows here
				shards[i].cols[c] = &lancefile.Array{Type: f.Type, Values: []byte{}}
			}
			continue
		}
		mg.opts.Progress.RowsRead.Add(int64(end - start))
		for c, f := range m.fields {
			goSafe(g, func() error {
				var dst []byte
				if f.Type.ValueBits() > 0 { // fixed width (nulls fall back to a fresh buffer)
					need := s.files.Aux.IntoCap(f.Type, int(end-start))
					if cap(bufs[i*nf+c]) < need {
						bufpool.Default.Put(bufs[i*nf+c])
						bufs[i*nf+c] = bufpool.Default.Get(need)
					}
					dst = bufs[i*nf+c]
				}
				a, err := s.files.Aux.ReadInto(gctx, f.Name, start, end, dst)
				if err != nil {
					return fmt.Errorf("segment %s: %w", s.uuid, err)
				}
				shards[i].cols[c] = a
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return shards, nil
}

// releaseBuffers hands the read buffers back to the pool; nothing may use
// the windows read into them afterwards.
func (mg *merger) releaseBuffers() {
	for s := range mg.readBufs {
		for _, b := range mg.readBufs[s] {
			bufpool.Default.Put(b)
		}
		mg.readBufs[s] = nil
	}
}

// mergeWindow merges a window's partitions, read by readWindow, and writes
// them.
func (mg *merger) mergeWindow(ctx context.Context, w *lancefile.Writer, win window, shards []shardWindow, lengths []uint32) error {
	m := mg.m
	codeCol, rowidCol := -1, -1
	for i, f := range m.fields {
		switch f.Name {
		case m.codeColumn:
			codeCol = i
		case "_rowid":
			rowidCol = i
		}
	}
	if rowidCol < 0 {
		return fmt.Errorf("%w: auxiliary file has no _rowid column", errkind.Corrupt)
	}
	// Per-partition scratch, reused: a partition of a 2048-partition merge
	// over a thousand inputs is mostly small pieces, and allocating a slice
	// header per piece and column was a fifth of the merge's time. The
	// writer copies what it keeps (WriteChunked), so the pieces can be
	// reused once a partition is written; HNSW merges keep their pieces.
	parts := mg.partsScratch[:0]
	for range m.fields {
		parts = append(parts, nil)
	}
	defer func() { mg.partsScratch = parts }()
	layouts := mg.layoutScratch[:0]
	defer func() { mg.layoutScratch = layouts }()
	for p := win.first; p < win.last; p++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		for c := range parts {
			parts[c] = parts[c][:0]
		}
		layouts = layouts[:0] // per part: code column still in its input's query layout
		var pieces []hnswPiece
		arena := mg.arena[:0]
		if need := len(mg.srcs) * len(m.fields); cap(arena) < need || mg.hn != nil {
			arena = make([]lancefile.Array, 0, need)
		}
		for i, s := range mg.srcs {
			iv := s.files.IVF
			lo := int(iv.Offsets[p] - shards[i].start)
			n := int(iv.Lengths[p])
			if n == 0 {
				continue
			}
			cols := mg.colScratch[:0]
			for _, a := range shards[i].cols {
				arena = arena[:len(arena)+1]
				a.SliceInto(&arena[len(arena)-1], lo, lo+n)
				cols = append(cols, &arena[len(arena)-1])
			}
			mg.colScratch = cols
			laid := codeCol >= 0 && mg.inQueryLayout(s)
			rowMajor := false
			if codeCol >= 0 && s.depth >= 0 && m.typ.Quantizer() != "sq" {
				// A repair: the layout really applied, not the flag.
				cols[codeCol] = undoLayout(m.typ.Quantizer(), cols[codeCol], s.depth)
				laid, rowMajor = false, true
			}
			keep := keptRows(cols[rowidCol], s)
			if keep != nil {
				// Rows are dropped: undo the layout first, then take rows.
				if codeCol >= 0 && !rowMajor {
					cols[codeCol] = mg.toRowMajor(s, cols[codeCol])
				}
				for c := range cols {
					cols[c] = takeRows(cols[c], keep)
				}
				laid = false
			} else if codeCol >= 0 && m.typ.Quantizer() == "sq" {
				cols[codeCol] = mg.toRowMajor(s, cols[codeCol])
			}
			if cols[rowidCol].Len == 0 {
				continue
			}
			for c := range cols {
				parts[c] = append(parts[c], cols[c])
			}
			layouts = append(layouts, laid)
			if mg.hn != nil {
				pieces = append(pieces, hnswPiece{src: i, rows: n, keep: keep})
			}
		}
		if mg.hn == nil {
			mg.arena = arena
		}
		if len(parts[0]) == 0 {
			mg.opts.Progress.PartitionsDone.Add(1)
			continue
		}
		// Columns other than the codes go to the writer as the inputs'
		// pieces, without being concatenated.
		n := 0
		for _, a := range parts[rowidCol] {
			n += a.Len
		}
		if mg.hn != nil {
			if err := mg.hn.add(ctx, p, parts, layouts, pieces); err != nil {
				return err
			}
		}
		if codeCol >= 0 && m.typ.Quantizer() != "sq" {
			// SQ pieces are row-major already (re-quantized where needed):
			// they go to the writer as they are, like the other columns.
			parts[codeCol] = append(parts[codeCol][:0], mg.mergeCodes(parts[codeCol], layouts))
		}
		if err := w.WriteChunked(parts); err != nil {
			return err
		}
		lengths[p] = uint32(n)
		mg.opts.Progress.RowsWritten.Add(int64(n))
		mg.opts.Progress.PartitionsDone.Add(1)
	}
	if mg.hn != nil {
		return mg.hn.drain(false)
	}
	return nil
}

// inQueryLayout reports whether an input stores its codes in the search
// layout (PQ transposed, RQ packed).
func (mg *merger) inQueryLayout(s *source) bool {
	q := s.files.Quant
	switch mg.m.typ.Quantizer() {
	case "pq":
		return q.Transposed != nil && *q.Transposed
	case "rq":
		return q.Packed != nil && *q.Packed
	}
	return false
}

// mergeCodes builds a merged partition's code column in the query layout
// from the inputs' parts (laid[i]: part i is still in its input's query
// layout, else row-major). Each part is read once: PQ parts go straight to
// their place in the transposed output; RQ parts are brought to row-major
// order (unpacked) and the whole partition packed once.
func (mg *merger) mergeCodes(parts []*lancefile.Array, laid []bool) *lancefile.Array {
	t := parts[0].Type
	width := t.ValueBits() / 8
	n := 0
	for _, p := range parts {
		n += p.Len
	}
	mg.codes = slices.Grow(mg.codes[:0], n*width)
	out := mg.codes[:n*width]
	switch mg.m.typ.Quantizer() {
	case "pq":
		pq := make([]ivf.PQPart, len(parts))
		for i, p := range parts {
			pq[i] = ivf.PQPart{Codes: p.Values, N: p.Len, Transposed: laid[i]}
		}
		ivf.MergeTransposedPQ(out, pq, width)
	case "rq":
		mg.mergeRQ(out, parts, laid, width)
	default: // SQ: already re-quantized where needed
		off := 0
		for _, p := range parts {
			off += copy(out[off:], p.Values)
		}
	}
	return &lancefile.Array{Type: t, Len: n, Values: out}
}

// mergeRQ packs a merged partition's RQ codes into out. A packed part that
// lands on a block boundary keeps its full 32-row blocks as they are (a
// block's bytes depend only on its own rows), so the large base segment of
// an optimize is copied rather than unpacked and packed again; every other
// row goes through row-major scratch and is packed once.
func (mg *merger) mergeRQ(out []byte, parts []*lancefile.Array, laid []bool, width int) {
	const block = ivf.RQBlockRows
	n := 0
	for _, p := range parts {
		n += p.Len
	}
	rows := slices.Grow(mg.scratch[:0], n*width)[:0]
	start := 0 // first output row of the rows pending in scratch (block-aligned)
	flush := func() {
		pending := len(rows) / width
		ivf.PackRQ(out[start*width:(start+pending)*width], rows, pending, width)
		start += pending
		rows = rows[:0]
	}
	for i, p := range parts {
		if laid[i] && (len(rows)/width)%block == 0 {
			flush()
			full := p.Len / block * block
			copy(out[start*width:], p.Values[:full*width])
			start += full
			if tail := p.Len - full; tail > 0 {
				rows = rows[:tail*width]
				ivf.UnpackRQTail(rows, p.Values, p.Len, width)
			}
			continue
		}
		k := len(rows)
		rows = rows[:k+len(p.Values)]
		if laid[i] {
			ivf.UnpackRQ(rows[k:], p.Values, p.Len, width)
		} else {
			copy(rows[k:], p.Values)
		}
	}
	flush()
	mg.scratch = rows
}

// toRowMajor undoes an input's code layout for one of its partitions (the
// whole partition: the layouts are defined over all of its rows).
func (mg *merger) toRowMajor(s *source, a *lancefile.Array) *lancefile.Array {
	q := s.files.Quant
	width := a.Type.ValueBits() / 8
	switch mg.m.typ.Quantizer() {
	case "pq":
		if q.Transposed == nil || !*q.Transposed {
			return a
		}
		out := make([]byte, len(a.Values))
		ivf.UntransposePQ(out, a.Values, a.Len, width)
		return &lancefile.Array{Type: a.Type, Len: a.Len, Values: out, Validity: a.Validity}
	case "rq":
		if q.Packed == nil || !*q.Packed {
			return a
		}
		out := make([]byte, len(a.Values))
		ivf.UnpackRQ(out, a.Values, a.Len, width)
		return &lancefile.Array{Type: a.Type, Len: a.Len, Values: out, Validity: a.Validity}
	case "sq":
		lo, hi := q.SQBounds.Start, q.SQBounds.End
		if !mg.m.requantize || closeEnough(lo, mg.m.sqLo) && closeEnough(hi, mg.m.sqHi) {
			return a
		}
		out := make([]byte, len(a.Values))
		ivf.RequantizeSQ(out, a.Values, lo, hi, mg.m.sqLo, mg.m.sqHi)
		return &lancefile.Array{Type: a.Type, Len: a.Len, Values: out, Validity: a.Validity}
	}
	return a
}

// maxLayoutDepth bounds MergeOptions.Layouts.
const maxLayoutDepth = 4

// undoLayout brings one partition's codes (quantizer "pq" or "rq"), laid
// out depth times, back to row-major order.
func undoLayout(quant string, a *lancefile.Array, depth int) *lancefile.Array {
	width := a.Type.ValueBits() / 8
	vals := a.Values
	for i := 0; i < depth; i++ {
		next := make([]byte, len(vals))
		if quant == "pq" {
			ivf.UntransposePQ(next, vals, a.Len, width)
		} else {
			ivf.UnpackRQ(next, vals, a.Len, width)
		}
		vals = next
	}
	return &lancefile.Array{Type: a.Type, Len: a.Len, Values: vals, Validity: a.Validity}
}

// keptRows returns the rows (of a row id column) the input still owns, or
// nil when it owns all of them, as Lance's merger decides:
//   - row addresses: the row's fragment (row id >> 32) is one the input
//     covers and the dataset still has (fragments a commit pruned from the
//     input's coverage after an update or compaction are dropped, as
//     Lance's merger drops them; so are fragments since removed from the
//     dataset), and its offset (row id & 0xffffffff) is not deleted; the
//     kept rows are added to s.rows, per fragment, for the coverage check;
//   - stable row ids: the id is live (not deleted) in a fragment the input
//     covers (rows updated into other fragments, or deleted, are dropped).
func keptRows(ids *lancefile.Array, s *source) []int {
	if s.owned != nil {
		var keep []int
		for i := 0; i < ids.Len; i++ {
			if !s.owned.Contains(binary.LittleEndian.Uint64(ids.Values[8*i:])) {
				if keep == nil {
					keep = make([]int, 0, ids.Len)
					for k := 0; k < i; k++ {
						keep = append(keep, k)
					}
				}
				continue
			}
			if keep != nil {
				keep = append(keep, i)
			}
		}
		return keep
	}
	var keep []int        // nil while every row so far is kept
	drop := func(i int) { // row i is the first dropped: keep the ones before it
		if keep == nil {
			keep = make([]int, 0, ids.Len)
			for k := 0; k < i; k++ {
				keep = append(keep, k)
			}
		}
	}
	// Rows of one fragment come in runs: look each fragment up once per
	// run; only fragments with deletions need a look at every row.
	for i := 0; i < ids.Len; {
		f := rowIDFragment(ids.Values, i)
		j := i + 1
		for j < ids.Len && rowIDFragment(ids.Values, j) == f {
			j++
		}
		switch del := s.deleted[f]; {
		case s.remap.moved(f):
			for k := i; k < j; k++ {
				if !s.moveRow(ids.Values[8*k:]) {
					drop(k)
				} else if keep != nil {
					keep = append(keep, k)
				}
			}
		case !s.fragSet[f]:
			s.remap.gone(uint64(f) << 32)
			drop(i)
		case del == nil:
			s.rows[f] += uint64(j - i)
			for k := i; keep != nil && k < j; k++ {
				keep = append(keep, k)
			}
		default:
			for k := i; k < j; k++ {
				if del.Contains(uint32(binary.LittleEndian.Uint64(ids.Values[8*k:]))) {
					drop(k)
					continue
				}
				s.rows[f]++
				if keep != nil {
					keep = append(keep, k)
				}
			}
		}
		i = j
	}
	return keep
}

// moveRow rewrites the row id at id (8 bytes, little endian), of a
// fragment a compaction rewrote, to the row's new address, and reports
// whether the row stays: the compaction kept it, its new fragment is one
// the input covers, and it is not deleted there. A kept row is counted
// for the coverage check under its new fragment.
func (s *source) moveRow(id []byte) bool {
	n, ok := s.remap.m.Remap(binary.LittleEndian.Uint64(id))
	f := uint32(n >> 32)
	if !ok || !s.fragSet[f] || s.deleted[f] != nil && s.deleted[f].Contains(uint32(n)) {
		return false
	}
	binary.LittleEndian.PutUint64(id, n)
	s.rows[f]++
	return true
}

// liveFilter restricts every source's fragments to those snap still has
// and loads the deletion files of the rest, so that keptRows drops stale
// rows. It reports whether any source covers a removed fragment or one
// with deletions.
func liveFilter(ctx context.Context, st storage.Store, snap *table.Snapshot, srcs []*source) (bool, error) {
	byID := make(map[uint64]*pb.DataFragment, len(snap.Manifest.GetFragments()))
	for _, f := range snap.Manifest.GetFragments() {
		byID[f.GetId()] = f
	}
	stale := false
	for _, s := range srcs {
		s.deleted = map[uint32]*roaring.Bitmap{}
		for _, id := range s.frags {
			f := byID[uint64(id)]
			if f == nil {
				delete(s.fragSet, id)
				stale = true
				continue
			}
			d, err := snap.DeletedRows(ctx, st, f)
			if err != nil {
				return false, fmt.Errorf("segment %s: %w", s.uuid, err)
			}
			if d != nil && !d.IsEmpty() {
				s.deleted[id] = d
				stale = true
			}
		}
	}
	return stale, nil
}

func takeRows(a *lancefile.Array, rows []int) *lancefile.Array {
	w := a.Type.ValueBits() / 8
	out := &lancefile.Array{Type: a.Type, Len: len(rows), Values: make([]byte, 0, len(rows)*w)}
	var validity []byte
	for k, i := range rows {
		out.Values = append(out.Values, a.Values[i*w:(i+1)*w]...)
		if a.Validity != nil {
			if validity == nil {
				validity = make([]byte, (len(rows)+7)/8)
			}
			if a.IsValid(i) {
				validity[k/8] |= 1 << (k % 8)
			}
		}
	}
	out.Validity = validity
	return out
}

// writeIndex writes the merged segment's index.idx.
func (mg *merger) writeIndex(ctx context.Context) (int64, error) {
	m := mg.m
	return writeFlatIndex(ctx, mg.st, mg.dir, m.version, m.typ, m.distance, m.centroids, m.nparts)
}

// writeFlatIndex writes index.idx for a FLAT sub-index, as Lance's builder
// does: a zero-row __flat_marker column, the IVF centroids (row counts all
// zero: the rows live in auxiliary.idx) and one "" sub-index entry per
// partition. Merges and builds share it.
func writeFlatIndex(ctx context.Context, st storage.Store, dir string, version lancefile.Version, typ ivf.IndexType, distance string, centroids *ivf.Tensor, nparts int) (int64, error) {
	sw, err := st.Create(ctx, dir+ivf.IndexFileName)
	if err != nil {
		return 0, err
	}
	defer sw.Abort()
	counted := &countingWriter{w: sw}
	w, err := lancefile.NewWriter(counted, []*lancefile.Field{lancefile.NewField("__flat_marker", lancefile.Primitive(lancefile.KindUint64), false)},
		lancefile.WriterOptions{Version: version})
	if err != nil {
		return 0, err
	}
	ivfBytes, err := (&ivf.Model{Lengths: make([]uint32, nparts), Centroids: centroids}).Encode()
	if err != nil {
		return 0, err
	}
	pos, err := w.AddGlobalBuffer(ivfBytes)
	if err != nil {
		return 0, err
	}
	flat := make([]string, nparts)
	flatJSON, _ := json.Marshal(flat)
	indexMeta, _ := json.Marshal(ivf.IndexMeta{Type: typ, DistanceType: distance})
	w.SetMetadata(ivf.KeyIndex, indexMeta)
	w.SetMetadata(ivf.KeyIVF, []byte(strconv.Itoa(pos)))
	w.SetMetadata(ivf.KeyFlat, flatJSON)
	if err := w.Finish(); err != nil {
		return 0, err
	}
	if err := sw.Finish(); err != nil {
		return 0, err
	}
	return counted.n, nil
}

type countingWriter struct {
	w    interface{ Write([]byte) (int, error) }
	n    int64
	prog *Progress
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.prog != nil {
		c.prog.BytesWritten.Add(int64(n))
	}
	return n, err
}

// buildMetadata is the IndexMetadata of a merged vector segment (see
// mergedEntry) with its two files.
func buildMetadata(id uuid.UUID, metas []*pb.IndexMetadata, out mergeOutput) (*pb.IndexMetadata, error) {
	return mergedEntry(id, metas, []*pb.IndexFile{
		{Path: ivf.AuxiliaryFileName, SizeBytes: uint64(out.auxBytes)},
		{Path: ivf.IndexFileName, SizeBytes: uint64(out.indexBytes)},
	})
}

// mergedEntry is the IndexMetadata of a segment merged from metas, of any
// index type: the union of the inputs' coverage, their smallest dataset
// version, the first input's details, the inputs' lowest index version,
// and the files just written.
//
// Index versions may differ between inputs whose files have one layout
// (the columns and quantizer metadata are compared before): pylance 6 to
// 8 writes an IVF_RQ base as version 2 and its optimize deltas, and its
// own merge of them, as version 1, in the same files.
func mergedEntry(id uuid.UUID, metas []*pb.IndexMetadata, files []*pb.IndexFile) (*pb.IndexMetadata, error) {
	first := metas[0]
	bm, dv, err := table.MergedCoverage(metas)
	if err != nil {
		return nil, err
	}
	now := uint64(time.Now().UnixMilli())
	iv := first.GetIndexVersion()
	for _, m := range metas[1:] {
		iv = min(iv, m.GetIndexVersion())
	}
	return &pb.IndexMetadata{
		Uuid:           &pb.UUID{Uuid: id[:]},
		Fields:         first.GetFields(),
		Name:           first.GetName(),
		DatasetVersion: dv,
		FragmentBitmap: bm,
		IndexDetails:   cloneAny(first.GetIndexDetails()),
		IndexVersion:   &iv,
		CreatedAt:      &now,
		Files:          files,
	}, nil
}

func cloneAny(a *anypb.Any) *anypb.Any {
	if a == nil {
		return nil
	}
	return proto.Clone(a).(*anypb.Any)
}

// goSafe runs f in the group, turning a panic into an error: a panic in a
// goroutine cannot be recovered by the binding and would abort the
// interpreter.
func goSafe(g *errgroup.Group, f func() error) {
	g.Go(func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("lance-segmerge kernel panic in a worker goroutine: %v\n%s", r, debug.Stack())
			}
		}()
		return f()
	})
}

// outputDir is the uuid and directory of a new segment: under indexUUID when given
// (a caller that names its outputs, e.g. to clean them up after a
// failure), else a fresh uuid. Files already there are a Conflict: two
// tasks never write one segment.
func outputDir(ctx context.Context, st storage.Store, indexUUID string) (uuid.UUID, string, error) {
	id := uuid.New()
	if indexUUID != "" {
		var err error
		if id, err = uuid.Parse(indexUUID); err != nil {
			return id, "", fmt.Errorf("%w: index_uuid %q: %w", errkind.InvalidInput, indexUUID, err)
		}
	}
	dir := table.IndicesDir + id.String() + "/"
	if existing, err := st.List(ctx, dir); err != nil {
		return id, "", err
	} else if len(existing) > 0 {
		return id, "", fmt.Errorf("%w: output segment %s already has files under %s", errkind.Conflict, id, dir)
	}
	return id, dir, nil
}

// inlineCodebook reports whether any input keeps its PQ codebook inline in
// the metadata (the layout of Lance before 0.28), whose readers know no
// other place for it.
func (mg *merger) inlineCodebook() bool {
	for _, s := range mg.srcs {
		if s.files.Quant.CodebookPosition <= 0 {
			return true
		}
	}
	return false
}

// jsonByteArray renders b as a JSON array of numbers (serde's encoding of
// a byte vector), not the base64 string encoding/json would choose.
func jsonByteArray(b []byte) json.RawMessage {
	out := make([]byte, 0, 2+4*len(b))
	out = append(out, '[')
	for i, c := range b {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(c), 10)
	}
	return append(out, ']')
}
