package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

// BuildOptions tune Build.
type BuildOptions struct {
	// Column is the vector column; IndexName the logical index. Required.
	Column    string `json:"column"`
	IndexName string `json:"name"`
	// FragmentIDs are the fragments whose rows the segment indexes.
	// Required (non-empty).
	FragmentIDs []uint64 `json:"fragment_ids"`
	// IndexUUID names the segment; a new random uuid when "".
	IndexUUID string `json:"index_uuid"`
	// WindowRows bounds the rows read and encoded at once. Default 32768.
	WindowRows int `json:"window_rows"`
	// MemoryBytes bounds the encoded rows held before they are spilled, in
	// partition order, to a temporary file. Default 64 MiB.
	MemoryBytes int `json:"memory_bytes"`
	// Workers encode a window in parallel. Default GOMAXPROCS.
	Workers int `json:"workers"`
	// TempDir holds spill files. Default os.TempDir().
	TempDir string `json:"temp_dir"`
	// Progress receives counters as the build goes (optional).
	Progress *Progress `json:"-"`
}

func (o BuildOptions) withDefaults() BuildOptions {
	if o.WindowRows <= 0 {
		o.WindowRows = vecdata.DefaultWindowRows
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = 64 << 20
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Progress == nil {
		o.Progress = &Progress{}
	}
	return o
}

// Build writes one uncommitted vector index segment over the given
// fragments with a model trained beforehand (and shared by every segment
// of the index, which keeps them mergeable), in the layout pylance's
// create_index_uncommitted writes: row-major codes (PQ transposed=false, RQ
// packed=false), the IVF (without centroids) at global buffer 1 of
// auxiliary.idx, the codebook or rotation after it, centroids in index.idx.
// It returns the segment's IndexMetadata; the manifest is not touched.
//
// A model that does not fit the column (index type, metric, dimension, or
// parameters) is refused before anything is written. Memory stays bounded
// by the window and MemoryBytes whatever the fragments' size: encoded rows
// beyond the budget go to temporary files in partition order. On any
// error, cancellation included, the partial output is removed.
func Build(ctx context.Context, st storage.Store, snap *table.Snapshot, model *encode.Model, opts BuildOptions) (*pb.IndexMetadata, error) {
	opts = opts.withDefaults()
	prog := opts.Progress
	prog.SetStage("validate")
	if opts.IndexName == "" {
		return nil, fmt.Errorf("%w: build: an index name is required", errkind.InvalidInput)
	}
	if len(opts.FragmentIDs) == 0 {
		return nil, fmt.Errorf("%w: build: no fragments to index", errkind.InvalidInput)
	}
	rd, err := vecdata.NewBuildReader(st, snap, opts.Column)
	if err != nil {
		return nil, err
	}
	if err := rd.CheckFragments(opts.FragmentIDs); err != nil {
		return nil, err
	}
	col := rd.Column()
	var enc *encode.Encoder
	switch col.Elem {
	case lancefile.KindFloat32:
		enc, err = encode.NewEncoder(model)
	case lancefile.KindFloat16:
		enc, err = encode.NewHalfEncoder(model)
	default:
		err = fmt.Errorf("%w: build: column %q: segments are built for float32 and float16 vectors only", errkind.Unsupported, col.Name)
	}
	if err != nil {
		return nil, err
	}
	if model.Dim != col.Dim {
		return nil, fmt.Errorf("%w: build: the model is for %d-d vectors, column %q holds %d-d vectors", errkind.InvalidInput, model.Dim, col.Name, col.Dim)
	}
	if err := checkExistingIndex(snap, opts, model, col); err != nil {
		return nil, err
	}
	version, err := datasetFileVersion(snap)
	if err != nil {
		return nil, err
	}
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}

	inline, err := indexKeepsCodebookInline(ctx, st, snap, opts.IndexName, model)
	if err != nil {
		return nil, err
	}
	b := &builder{st: st, rd: rd, enc: enc, opts: opts, dir: dir, version: version, inlineCodebook: inline}
	out, err := b.run(ctx)
	b.cleanupSpill()
	if err != nil {
		removeOutput(ctx, st, dir, ivf.AuxiliaryFileName, ivf.IndexFileName)
		return nil, err
	}
	return buildIndexMetadata(id, snap, opts, model, col, out)
}

// indexKeepsCodebookInline reports whether the PQ index's existing segments
// keep their codebook inline in the metadata: the readers of Lance before
// 0.28 know no other place for it (a global-buffer codebook fails their
// queries with "only accept 2-D tensor shape").
func indexKeepsCodebookInline(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName string, m *encode.Model) (bool, error) {
	if m.Type != ivf.IVFPQ {
		return false, nil
	}
	for _, im := range snap.Indices {
		if im.GetName() != indexName {
			continue
		}
		ist, err := snap.IndexStore(ctx, st, im)
		if err != nil {
			return false, err
		}
		f, err := ivf.OpenFiles(ctx, ist, table.IndexDir(im), lancefile.Options{})
		if err != nil {
			return false, fmt.Errorf("build: reading index %q's segment %s: %w", indexName, table.IndexUUID(im), err)
		}
		defer f.Close()
		return f.Quant != nil && f.Quant.CodebookPosition <= 0, nil
	}
	return false, nil
}

// checkExistingIndex refuses a build whose index name already exists on
// another column, or with another type or metric.
func checkExistingIndex(snap *table.Snapshot, opts BuildOptions, m *encode.Model, col *vecdata.Column) error {
	for _, im := range snap.Indices {
		if im.GetName() != opts.IndexName {
			continue
		}
		if f := im.GetFields(); len(f) != 1 || f[0] != col.FieldID {
			return fmt.Errorf("%w: build: index %q already exists on fields %v, not on column %q (field %d)", errkind.InvalidInput, opts.IndexName, f, col.Name, col.FieldID)
		}
		d := &pb.VectorIndexDetails{}
		if im.GetIndexDetails().GetTypeUrl() != vectorDetailsURL || proto.Unmarshal(im.GetIndexDetails().GetValue(), d) != nil {
			continue // legacyVectorDetailsURL says nothing of the metric
		}
		if got := metricName(d.GetMetricType()); got != string(m.Metric) {
			return fmt.Errorf("%w: build: index %q uses the %s metric, the model %s", errkind.InvalidInput, opts.IndexName, got, m.Metric)
		}
	}
	return nil
}

func metricName(t pb.VectorIndexDetails_MetricType) string {
	switch t {
	case pb.VectorIndexDetails_COSINE:
		return "cosine"
	case pb.VectorIndexDetails_DOT:
		return "dot"
	case pb.VectorIndexDetails_HAMMING:
		return "hamming"
	}
	return "l2"
}

// datasetFileVersion is the file format index files take: the dataset's
// data storage version (pylance writes index files in it).
func datasetFileVersion(snap *table.Snapshot) (lancefile.Version, error) {
	s := snap.Manifest.GetDataFormat().GetVersion()
	switch s {
	case "", "legacy", "0.1", "2.0":
		return lancefile.V2_0, nil
	case "stable":
		return lancefile.V2_1, nil
	case "next":
		return lancefile.V2_2, nil
	}
	v, err := lancefile.ParseVersion(s)
	if err != nil {
		return lancefile.V2_2, nil // newer than we know: write what pylance 14 writes by default
	}
	if v.Major > 2 || v.Minor > 2 {
		return lancefile.V2_2, nil
	}
	return v, nil
}

type buildOutput struct {
	auxBytes, indexBytes int64
	rows                 uint64
}

// builder holds one build's state: encoded rows bucketed by partition in
// memory, and runs spilled to a temporary file.
type builder struct {
	st      storage.Store
	rd      *vecdata.Reader
	enc     *encode.Encoder
	opts    BuildOptions
	dir     string
	version lancefile.Version
	// inlineCodebook writes the PQ codebook inside the metadata, as the
	// index's existing segments have it (Lance before 0.28).
	inlineCodebook bool

	widths   []int // _rowid, then the encoder's columns
	rowBytes int
	buckets  [][]byte // per partition: packed rows of rowBytes
	memBytes int

	spill *os.File
	runs  []spillRun
	pos   int64
}

// spillRun locates, for one spill, each partition's rows in the spill file.
type spillRun struct {
	off  []int64
	rows []int
}

func (b *builder) cleanupSpill() {
	if b.spill != nil {
		name := b.spill.Name()
		b.spill.Close()
		os.Remove(name)
		b.spill = nil
	}
}

func (b *builder) run(ctx context.Context) (buildOutput, error) {
	var out buildOutput
	prog := b.opts.Progress
	m := b.enc.Model()
	k := m.NumPartitions()
	b.widths = []int{8}
	for _, c := range b.enc.Columns() {
		b.widths = append(b.widths, c.Width())
	}
	for _, w := range b.widths {
		b.rowBytes += w
	}
	b.buckets = make([][]byte, k)

	prog.SetStage("encode")
	if err := b.encodeAll(ctx); err != nil {
		return out, err
	}
	lengths := make([]uint32, k)
	for p := range lengths {
		n := len(b.buckets[p]) / b.rowBytes
		for _, r := range b.runs {
			n += r.rows[p]
		}
		lengths[p] = uint32(n)
		out.rows += uint64(n)
	}
	prog.SetStage("write")
	prog.PartitionsTotal.Store(int64(k))
	var err error
	if out.auxBytes, err = b.writeAux(ctx, lengths); err != nil {
		return out, fmt.Errorf("write %s: %w", ivf.AuxiliaryFileName, err)
	}
	prog.SetStage("write_index")
	centroids := b.tensor(k, m.Dim, m.Centroids)
	if out.indexBytes, err = writeFlatIndex(ctx, b.st, b.dir, b.version, m.Type, string(m.Metric), centroids, k); err != nil {
		return out, fmt.Errorf("write %s: %w", ivf.IndexFileName, err)
	}
	prog.BytesWritten.Add(out.indexBytes)
	prog.SetStage("done")
	return out, nil
}

// encodeAll reads the fragments window by window, encodes each window in
// parallel and buckets its rows by partition. The next window is read
// while the current one is encoded: Scan hands each window to an encoding
// goroutine as a copy (two windows in memory at most).
func (b *builder) encodeAll(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *vecdata.Batch, 2)
	free <- &vecdata.Batch{}
	free <- &vecdata.Batch{}
	work := make(chan *vecdata.Batch, 1)
	done := make(chan error, 1)
	go func() {
		err := b.encodeWindows(ctx, work, free)
		if err != nil {
			cancel() // stops the scan, which may wait for a free buffer
			for range work {
			}
		}
		done <- err
	}()
	scanErr := b.rd.Scan(ctx, b.opts.FragmentIDs, b.opts.WindowRows, func(batch *vecdata.Batch) error {
		b.opts.Progress.RowsRead.Add(int64(batch.Len() + batch.Skipped))
		if batch.Len() == 0 {
			return nil
		}
		var w *vecdata.Batch
		select {
		case w = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.RowIDs = append(w.RowIDs[:0], batch.RowIDs...)
		w.Vectors = append(w.Vectors[:0], batch.Vectors...)
		select {
		case work <- w:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	close(work)
	encErr := <-done
	if encErr != nil {
		return encErr // the first failure (Scan then only saw the cancellation)
	}
	return scanErr
}

// encodeWindows encodes and buckets the windows of work in order, handing
// each buffer back to free.
func (b *builder) encodeWindows(ctx context.Context, work <-chan *vecdata.Batch, free chan<- *vecdata.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lance-segmerge kernel panic encoding rows: %v\n%s", r, debug.Stack())
		}
	}()
	dim := b.enc.Model().Dim
	ncols := len(b.enc.Columns())
	var parts []int32
	cols := make([][]byte, ncols)
	scratch := make([]encode.Scratch, b.opts.Workers)
	for batch := range work {
		if err := b.encodeWindow(ctx, batch, scratch, &parts, cols, dim); err != nil {
			return err
		}
		free <- batch
	}
	return nil
}

func (b *builder) encodeWindow(ctx context.Context, batch *vecdata.Batch, scratch []encode.Scratch, parts *[]int32, cols [][]byte, dim int) error {
	n := batch.Len()
	*parts = slices.Grow((*parts)[:0], n)[:n]
	for c, col := range b.enc.Columns() {
		cols[c] = slices.Grow(cols[c][:0], n*col.Width())[:n*col.Width()]
	}
	if err := b.encodeParallel(ctx, scratch, batch.Vectors, *parts, cols, n, dim); err != nil {
		return err
	}
	for i, p := range *parts {
		if p < 0 {
			continue
		}
		bk := b.buckets[p]
		bk = binary.LittleEndian.AppendUint64(bk, batch.RowIDs[i])
		for c := range cols {
			w := b.widths[c+1]
			bk = append(bk, cols[c][i*w:(i+1)*w]...)
		}
		b.buckets[p] = bk
		b.memBytes += b.rowBytes
	}
	if b.memBytes >= b.opts.MemoryBytes {
		return b.spillBuckets()
	}
	return ctx.Err()
}

// encodeParallel splits a window into one run of rows per worker.
func (b *builder) encodeParallel(ctx context.Context, scratch []encode.Scratch, vecs []float32, parts []int32, cols [][]byte, n, dim int) error {
	workers := min(len(scratch), max(1, n/256))
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min(n, (w+1)*per)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[w] = fmt.Errorf("lance-segmerge kernel panic encoding rows: %v\n%s", r, debug.Stack())
				}
			}()
			out := make([][]byte, len(cols))
			for c := range cols {
				width := b.widths[c+1]
				out[c] = cols[c][lo*width : hi*width]
			}
			b.enc.Encode(&scratch[w], vecs[lo*dim:hi*dim], parts[lo:hi], out)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// spillBuckets appends every partition's buffered rows, in partition
// order, to the spill file and empties the buckets.
func (b *builder) spillBuckets() error {
	if b.spill == nil {
		f, err := os.CreateTemp(b.opts.TempDir, "lance-segmerge-build-*.spill")
		if err != nil {
			return fmt.Errorf("%w: build: create a spill file: %w", errkind.IO, err)
		}
		b.spill = f
	}
	run := spillRun{off: make([]int64, len(b.buckets)), rows: make([]int, len(b.buckets))}
	for p, bk := range b.buckets {
		run.off[p] = b.pos
		run.rows[p] = len(bk) / b.rowBytes
		if _, err := b.spill.Write(bk); err != nil {
			return fmt.Errorf("%w: build: spill: %w", errkind.IO, err)
		}
		b.pos += int64(len(bk))
		b.buckets[p] = bk[:0]
	}
	b.runs = append(b.runs, run)
	b.memBytes = 0
	return nil
}

// writeChunkRows bounds the rows of one partition handed to the writer at
// once.
const writeChunkRows = 1 << 14

func (b *builder) writeAux(ctx context.Context, lengths []uint32) (int64, error) {
	m := b.enc.Model()
	sw, err := b.st.Create(ctx, b.dir+ivf.AuxiliaryFileName)
	if err != nil {
		return 0, err
	}
	defer sw.Abort()
	counted := &countingWriter{w: sw, prog: b.opts.Progress}
	fields := []*lancefile.Field{lancefile.NewField(encode.ColRowID, lancefile.Primitive(lancefile.KindUint64), true)}
	for _, c := range b.enc.Columns() {
		fields = append(fields, lancefile.NewField(c.Name, c.Type, c.Nullable))
	}
	w, err := lancefile.NewWriter(counted, fields, lancefile.WriterOptions{Version: b.version})
	if err != nil {
		return 0, err
	}
	// As create_index_uncommitted: the IVF first (without centroids), then
	// the codebook or rotation matrix.
	ivfBytes, err := (&ivf.Model{Lengths: lengths}).Encode()
	if err != nil {
		return 0, err
	}
	ivfPos, err := w.AddGlobalBuffer(ivfBytes)
	if err != nil {
		return 0, err
	}
	quant, err := b.quantizerJSON(w)
	if err != nil {
		return 0, err
	}

	var buf []byte
	for p := range lengths {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := b.writePartition(w, p, &buf); err != nil {
			return 0, err
		}
		b.opts.Progress.RowsWritten.Add(int64(lengths[p]))
		b.opts.Progress.PartitionsDone.Add(1)
	}

	storageMeta, _ := json.Marshal([]string{string(quant)})
	w.SetMetadata(ivf.KeyStorageMetadata, storageMeta)
	w.SetMetadata(ivf.KeyIVF, []byte(strconv.Itoa(ivfPos)))
	w.SetMetadata(ivf.KeyDistanceType, []byte(m.Metric))
	if err := w.Finish(); err != nil {
		return 0, err
	}
	if err := sw.Finish(); err != nil {
		return 0, err
	}
	return counted.n, nil
}

// writePartition streams partition p's rows (spilled runs first, in spill
// order, then the rows still in memory) to the writer in chunks.
func (b *builder) writePartition(w *lancefile.Writer, p int, buf *[]byte) error {
	emit := func(rows []byte) error {
		for len(rows) > 0 {
			n := min(len(rows)/b.rowBytes, writeChunkRows)
			if err := w.WriteChunked(b.columnsOf(rows[:n*b.rowBytes], n)); err != nil {
				return err
			}
			rows = rows[n*b.rowBytes:]
		}
		return nil
	}
	for _, r := range b.runs {
		for done := 0; done < r.rows[p]; {
			n := min(r.rows[p]-done, writeChunkRows)
			*buf = slices.Grow((*buf)[:0], n*b.rowBytes)[:n*b.rowBytes]
			if _, err := b.spill.ReadAt(*buf, r.off[p]+int64(done*b.rowBytes)); err != nil && err != io.EOF {
				return fmt.Errorf("%w: build: read spill: %w", errkind.IO, err)
			}
			if err := emit(*buf); err != nil {
				return err
			}
			done += n
		}
	}
	return emit(b.buckets[p])
}

// columnsOf splits n packed rows into one Array per column.
func (b *builder) columnsOf(rows []byte, n int) [][]*lancefile.Array {
	out := make([][]*lancefile.Array, len(b.widths))
	cols := b.enc.Columns()
	off := 0
	for c, width := range b.widths {
		vals := make([]byte, n*width)
		for i := 0; i < n; i++ {
			copy(vals[i*width:(i+1)*width], rows[i*b.rowBytes+off:])
		}
		t := lancefile.Primitive(lancefile.KindUint64)
		if c > 0 {
			t = cols[c-1].Type
		}
		out[c] = []*lancefile.Array{{Type: t, Len: n, Values: vals}}
		off += width
	}
	return out
}

// tensor is a model matrix in the column's type (Lance keeps a float16
// column's centroids and codebook in float16).
func (b *builder) tensor(rows, cols int, v []float32) *ivf.Tensor {
	if b.enc.Half() {
		return ivf.Float16Tensor(rows, cols, v)
	}
	return ivf.Float32Tensor(rows, cols, v)
}

// quantizerJSON adds the codebook or rotation buffer and returns the
// quantizer metadata, keys in pylance's order.
func (b *builder) quantizerJSON(w *lancefile.Writer) ([]byte, error) {
	m := b.enc.Model()
	type kv struct {
		k string
		v any
	}
	var fields []kv
	switch m.Type {
	case ivf.IVFFlat:
		fields = []kv{{"dim", m.Dim}}
	case ivf.IVFSQ:
		fields = []kv{{"dim", m.Dim}, {"num_bits", m.SQ.NumBits}, {"bounds", struct {
			Start float64 `json:"start"`
			End   float64 `json:"end"`
		}{m.SQ.Lo, m.SQ.Hi}}}
	case ivf.IVFPQ:
		nc := 1 << m.PQ.NumBits
		cb, err := ivf.EncodeTensor(b.tensor(nc, m.Dim, m.PQ.Codebook))
		if err != nil {
			return nil, err
		}
		if b.inlineCodebook {
			fields = []kv{{"codebook_position", 0}, {"nbits", m.PQ.NumBits}, {"num_sub_vectors", m.PQ.NumSubVectors},
				{"dimension", m.Dim}, {"codebook_tensor", jsonByteArray(cb)}, {"transposed", false}}
			break
		}
		pos, err := w.AddGlobalBuffer(cb)
		if err != nil {
			return nil, err
		}
		fields = []kv{{"codebook_position", pos}, {"nbits", m.PQ.NumBits}, {"num_sub_vectors", m.PQ.NumSubVectors},
			{"dimension", m.Dim}, {"codebook_tensor", []int{}}, {"transposed", false}}
	case ivf.IVFRQ:
		r := m.RQ
		var matPos any
		var signs any
		if r.Rotation == encode.RotationMatrix {
			mb, err := ivf.EncodeTensor(ivf.Float32Tensor(m.Dim, m.Dim, r.Matrix))
			if err != nil {
				return nil, err
			}
			pos, err := w.AddGlobalBuffer(mb)
			if err != nil {
				return nil, err
			}
			matPos = pos
		} else {
			ints := make([]int, len(r.Signs))
			for i, s := range r.Signs {
				ints[i] = int(s)
			}
			signs = ints
		}
		fields = []kv{{"rotate_mat_position", matPos}, {"fast_rotation_signs", signs}, {"rotation_type", r.Rotation},
			{"code_dim", m.Dim}, {"num_bits", r.NumBits}, {"packed", false}, {"query_estimator", r.QueryEstimator}}
	}
	out := []byte{'{'}
	for i, f := range fields {
		if i > 0 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(f.k)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		out = append(append(append(out, k...), ':'), v...)
	}
	return append(out, '}'), nil
}

// buildIndexMetadata is the built segment's manifest entry, as
// create_index_uncommitted returns it.
func buildIndexMetadata(id uuid.UUID, snap *table.Snapshot, opts BuildOptions, m *encode.Model, col *vecdata.Column, out buildOutput) (*pb.IndexMetadata, error) {
	return BuiltMetadata(id, snap, opts.IndexName, opts.FragmentIDs, m, col.FieldID, out.auxBytes, out.indexBytes)
}

// BuiltMetadata is the manifest entry of a segment Build wrote over
// fragmentIDs of snap with model m, whose files have these sizes: what a
// rerun that reuses the segment (a resumed reindex) rebuilds.
func BuiltMetadata(id uuid.UUID, snap *table.Snapshot, indexName string, fragmentIDs []uint64, m *encode.Model, fieldID int32, auxBytes, indexBytes int64) (*pb.IndexMetadata, error) {
	frags := make([]uint32, len(fragmentIDs))
	for i, f := range fragmentIDs {
		frags[i] = uint32(f)
	}
	bm, err := table.EncodeFragmentBitmap(frags)
	if err != nil {
		return nil, err
	}
	details, err := VectorDetails(m)
	if err != nil {
		return nil, err
	}
	iv := int32(1)
	if m.Type == ivf.IVFRQ {
		iv = 2
	}
	// A segment joins an index as its writer wrote it: Lance up to 0.27
	// recorded index version 0 (the same IVF_FLAT/SQ/PQ files) and up to
	// 6.x an empty /lance.table.VectorIndexDetails (8.0 writes the current
	// type); commit keeps one details type per index.
	for _, im := range snap.Indices {
		if im.GetName() != indexName {
			continue
		}
		if im.GetIndexDetails().GetTypeUrl() == legacyVectorDetailsURL {
			details = proto.Clone(im.GetIndexDetails()).(*anypb.Any)
		}
		if m.Type != ivf.IVFRQ && im.GetIndexVersion() >= 0 && im.GetIndexVersion() < iv {
			iv = im.GetIndexVersion()
		}
		break
	}
	now := uint64(time.Now().UnixMilli())
	return &pb.IndexMetadata{
		Uuid:           &pb.UUID{Uuid: id[:]},
		Fields:         []int32{fieldID},
		Name:           indexName,
		DatasetVersion: snap.Ref.Version,
		FragmentBitmap: bm,
		IndexDetails:   details,
		IndexVersion:   &iv,
		CreatedAt:      &now,
		Files: []*pb.IndexFile{
			{Path: ivf.AuxiliaryFileName, SizeBytes: uint64(auxBytes)},
			{Path: ivf.IndexFileName, SizeBytes: uint64(indexBytes)},
		},
	}, nil
}

// VectorDetails is the VectorIndexDetails of a model's segments (metric and
// quantizer parameters), packed as Lance packs index details.
func VectorDetails(m *encode.Model) (*anypb.Any, error) {
	d := &pb.VectorIndexDetails{}
	switch m.Metric {
	case encode.Cosine:
		d.MetricType = pb.VectorIndexDetails_COSINE
	case encode.Dot:
		d.MetricType = pb.VectorIndexDetails_DOT
	}
	switch m.Type {
	case ivf.IVFFlat:
		d.Compression = &pb.VectorIndexDetails_Flat_{Flat: &pb.VectorIndexDetails_Flat{}}
	case ivf.IVFSQ:
		d.Compression = &pb.VectorIndexDetails_Sq_{Sq: &pb.VectorIndexDetails_Sq{NumBits: uint32(m.SQ.NumBits)}}
	case ivf.IVFPQ:
		d.Compression = &pb.VectorIndexDetails_Pq_{Pq: &pb.VectorIndexDetails_Pq{NumBits: uint32(m.PQ.NumBits), NumSubVectors: uint32(m.PQ.NumSubVectors)}}
	case ivf.IVFRQ:
		rt := int32(0)
		if m.RQ.Rotation == encode.RotationMatrix {
			rt = 1
		}
		d.Compression = &pb.VectorIndexDetails_Rq_{Rq: &pb.VectorIndexDetails_Rq{NumBits: uint32(m.RQ.NumBits), RotationType: rt}}
	}
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: vectorDetailsURL, Value: v}, nil
}

// The index details type URLs of vector indices: what current Lance writes
// (metric and quantizer inside), and the empty message older releases
// wrote (seen in pylance 0.23.2 to 6.1.0).
const (
	vectorDetailsURL       = "/lance.index.pb.VectorIndexDetails"
	legacyVectorDetailsURL = "/lance.table.VectorIndexDetails"
)
