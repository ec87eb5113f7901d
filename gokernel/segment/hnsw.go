package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/hnsw"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// IVF_HNSW_* merges. The storage (auxiliary.idx) merges exactly as for
// IVF_FLAT/SQ/PQ; each merged partition then gets a graph in index.idx,
// built while the next partitions merge: by default from the largest
// input's graph of that partition (renumbered, dropped rows removed, the
// other inputs' rows inserted), or from nothing (HNSWGraph "rebuild").

// Graph modes of MergeOptions.HNSWGraph.
const (
	HNSWReuse   = "reuse"
	HNSWRebuild = "rebuild"
)

// reuseMaxDropped is the largest share of an input graph's nodes that may
// have been dropped for the graph to be reused: past it, repairing the
// lists costs about what building them does.
const reuseMaxDropped = 0.5

// hnswModel is what the HNSW inputs of a merge share.
type hnswModel struct {
	params hnsw.Params
	// metas[i][p] is input i's graph metadata of partition p (nil: none).
	metas [][]*hnsw.Metadata
	pq    *hnsw.PQModel
	// vecCol is the auxiliary column the graph's distances are computed
	// on (flat vectors or codes).
	vecCol string
	// foreign[i]: input i's graphs were built with other parameters than
	// the output's and are not reused.
	foreign []bool
}

// sharedHNSW reads every input's graph metadata and picks the output's
// HNSW parameters (see below for inputs that differ). Partitions of one
// input that disagree, or graph metadata that does not match the files,
// are Corrupt.
func sharedHNSW(srcs []*source, m *model) (*hnswModel, error) {
	hm := &hnswModel{metas: make([][]*hnsw.Metadata, len(srcs))}
	owner := -1
	inputParams := make([]*hnsw.Params, len(srcs))
	for i, s := range srcs {
		f := s.files
		raw, ok := f.Index.MetadataString(ivf.KeyHNSW)
		if !ok {
			return nil, fmt.Errorf("%w: segment %s: %s has no %q metadata", errkind.Corrupt, s.uuid, ivf.IndexFileName, ivf.KeyHNSW)
		}
		metas, err := hnsw.ParseList(raw)
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
		}
		if len(metas) < m.nparts || len(f.IndexIVF.Lengths) != m.nparts {
			return nil, fmt.Errorf("%w: segment %s: %d graph entries and %d graph row ranges for %d partitions",
				errkind.Corrupt, s.uuid, len(metas), len(f.IndexIVF.Lengths), m.nparts)
		}
		var params *hnsw.Params
		for p := 0; p < m.nparts; p++ {
			gm := metas[p]
			rows := int(f.IndexIVF.Lengths[p])
			if gm == nil {
				if rows != 0 {
					return nil, fmt.Errorf("%w: segment %s: partition %d has %d graph rows and no graph metadata", errkind.Corrupt, s.uuid, p, rows)
				}
				continue
			}
			if fits, _ := gm.FitRows(rows); !fits {
				return nil, fmt.Errorf("%w: segment %s: partition %d: the graph's level offsets count %d rows, index.idx holds %d",
					errkind.Corrupt, s.uuid, p, gm.Rows(), rows)
			}
			if gm.Nodes() > int(f.IVF.Lengths[p]) {
				return nil, fmt.Errorf("%w: segment %s: partition %d: a graph of %d nodes over %d storage rows",
					errkind.Corrupt, s.uuid, p, gm.Nodes(), f.IVF.Lengths[p])
			}
			switch {
			case params == nil:
				params = &gm.Params
			case !params.Equal(gm.Params):
				return nil, fmt.Errorf("%w: segment %s: partition %d has HNSW parameters %s, an earlier partition %s",
					errkind.Corrupt, s.uuid, p, gm.Params, params)
			}
		}
		hm.metas[i] = metas[:m.nparts]
		if params != nil {
			inputParams[i] = params
			if owner < 0 || f.Aux.NumRows() > srcs[owner].files.Aux.NumRows() {
				owner = i
			}
		}
	}
	// Inputs may disagree on the HNSW parameters: pylance releases before
	// 0.31 build every optimize delta with the default m=20 whatever the
	// base was built with, and pylance's own merge accepts them. The
	// output takes the parameters of the input with the most rows; graphs
	// built with others are not reused (their rows are inserted afresh).
	hm.params = hnsw.DefaultParams()
	hm.foreign = make([]bool, len(srcs))
	if owner >= 0 {
		hm.params = *inputParams[owner]
		for i, p := range inputParams {
			hm.foreign[i] = p != nil && !p.Equal(hm.params)
		}
	}
	switch m.typ.Quantizer() {
	case "flat":
		hm.vecCol = "flat"
		f, ok := findField(m.fields, "flat")
		if !ok {
			return nil, fmt.Errorf("%w: segment %s: auxiliary.idx has no flat column", errkind.Corrupt, srcs[0].uuid)
		}
		if f.Type.Kind != lancefile.KindFixedSizeList || f.Type.Elem != lancefile.KindFloat32 {
			return nil, fmt.Errorf("%w: segment %s: IVF_HNSW_FLAT over %s vectors (float32 only)", errkind.Unsupported, srcs[0].uuid, f.Type)
		}
	case "sq":
		hm.vecCol = "__sq_code"
		if m.quant.NumBits != 8 {
			return nil, fmt.Errorf("%w: segment %s: %d-bit SQ (8 only)", errkind.Unsupported, srcs[0].uuid, m.quant.NumBits)
		}
	case "pq":
		hm.vecCol = "__pq_code"
		cb, ok := m.codebook.Float64s()
		if !ok {
			return nil, fmt.Errorf("%w: segment %s: PQ codebook of %s", errkind.Unsupported, srcs[0].uuid, m.codebook.DType)
		}
		values := make([]float32, len(cb))
		for i, v := range cb {
			values[i] = float32(v)
		}
		q := m.quant
		var err error
		if hm.pq, err = hnsw.NewPQModel(values, q.NumSubVectors, q.NBits, q.Dimension, m.distance); err != nil {
			return nil, fmt.Errorf("segment %s: %w", srcs[0].uuid, err)
		}
	default:
		return nil, fmt.Errorf("%w: %s", errkind.Unsupported, m.typ)
	}
	if m.distance != "l2" && m.distance != "cosine" && m.distance != "dot" {
		return nil, fmt.Errorf("%w: segment %s: %s with distance %q", errkind.Unsupported, srcs[0].uuid, m.typ, m.distance)
	}
	return hm, nil
}

func findField(fields []*lancefile.Field, name string) (*lancefile.Field, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	return nil, false
}

// hnswPiece is one input's rows of a merged partition: rows of its
// partition, keep the ones that survived (nil: all), in the merged
// partition from row start on.
type hnswPiece struct {
	src   int
	rows  int
	keep  []int
	start int
	kept  int
}

// graphJob builds one partition's graph.
type graphJob struct {
	p      int
	vecs   []byte // the partition's merged vectors or codes, row-major
	pieces []hnswPiece
	rows   int
	cols   []*lancefile.Array
	meta   *hnsw.Metadata
	// done is closed when the build ends; err is its error (else cols and
	// meta are set).
	done chan struct{}
	err  error
}

// hnswMerge writes index.idx while the storage merges: the graphs of a
// window's partitions build on a bounded pool, and are written in
// partition order once the window is merged.
type hnswMerge struct {
	mg      *merger
	hm      *hnswModel
	sw      storage.Writer
	counted *countingWriter
	w       *lancefile.Writer
	lengths []uint32
	metas   []*hnsw.Metadata
	jobs    []*graphJob // started, not written yet, in partition order
	pending int         // their rows
	// g runs the window's builds; cancel stops them (abort).
	g      *errgroup.Group
	gctx   context.Context
	cancel context.CancelFunc
	// wins are the merge's windows; graphs[i] caches input i's graph rows
	// of one window (lists are decoded a page at a time: reading them
	// partition by partition would decode each page again and again).
	wins   []window
	graphs []graphRows
}

// graphRows holds an input's index.idx rows [start, end) of one window.
type graphRows struct {
	mu         sync.Mutex
	start, end uint64
	withDist   bool
	cols       [3]*lancefile.Array
}

func newHNSWMerge(ctx context.Context, mg *merger) (*hnswMerge, error) {
	mode := mg.opts.HNSWGraph
	if mode != HNSWReuse && mode != HNSWRebuild {
		return nil, fmt.Errorf("%w: hnsw_graph %q (%q or %q)", errkind.InvalidInput, mode, HNSWReuse, HNSWRebuild)
	}
	sw, err := mg.st.Create(ctx, mg.dir+ivf.IndexFileName)
	if err != nil {
		return nil, err
	}
	h := &hnswMerge{mg: mg, hm: mg.m.hnsw, sw: sw, lengths: make([]uint32, mg.m.nparts), metas: make([]*hnsw.Metadata, mg.m.nparts),
		wins: mg.windows(), graphs: make([]graphRows, len(mg.srcs))}
	h.counted = &countingWriter{w: sw}
	// The builds outlive a window (and the merge's window loop): they run
	// under the merge's context, stopped by abort.
	gctx, cancel := context.WithCancel(ctx)
	h.g, h.gctx = errgroup.WithContext(gctx)
	h.cancel = cancel
	// CPU-bound: more builds than processors only hold more memory.
	h.g.SetLimit(max(1, min(mg.opts.Parallelism, runtime.GOMAXPROCS(0))))
	if h.w, err = lancefile.NewWriter(h.counted, hnsw.Fields(), lancefile.WriterOptions{Version: mg.m.version}); err != nil {
		sw.Abort()
		return nil, err
	}
	return h, nil
}

// abort stops the builds still running, waits for them (none outlives
// the merge) and drops index.idx unless finish published it.
func (h *hnswMerge) abort() {
	if h.g != nil {
		h.cancel()
		_ = h.g.Wait()
		h.g = nil
	}
	h.sw.Abort()
}

// add takes a merged partition's pieces (parts: per auxiliary column, one
// array per input; laid: the piece's codes are in its input's query
// layout) and starts building its graph. The vectors are copied: parts
// alias read buffers and the merger's scratch.
func (h *hnswMerge) add(ctx context.Context, p int, parts [][]*lancefile.Array, laid []bool, pieces []hnswPiece) error {
	mg := h.mg
	col := -1
	for i, f := range mg.m.fields {
		if f.Name == h.hm.vecCol {
			col = i
		}
	}
	job := &graphJob{p: p, pieces: pieces}
	size := 0
	for _, a := range parts[col] {
		size += len(a.Values)
	}
	job.vecs = make([]byte, 0, size)
	start := 0
	for k, a := range parts[col] {
		if mg.m.typ.Quantizer() == "pq" && laid[k] {
			w := a.Type.ValueBits() / 8
			n := len(job.vecs)
			job.vecs = job.vecs[:n+len(a.Values)]
			ivf.UntransposePQ(job.vecs[n:], a.Values, a.Len, w)
		} else {
			job.vecs = append(job.vecs, a.Values...)
		}
		job.pieces[k].start, job.pieces[k].kept = start, a.Len
		start += a.Len
	}
	job.rows = start
	job.done = make(chan struct{})
	h.jobs = append(h.jobs, job)
	h.pending += job.rows
	// Go blocks while every build slot is busy: the merge runs ahead of the
	// builds by at most the pending bound below.
	goSafe(h.g, func() (err error) {
		defer func() {
			if job.cols == nil && err == nil {
				err = fmt.Errorf("partition %d: graph build did not finish", job.p)
			}
			job.err = err
			close(job.done)
		}()
		return h.build(h.gctx, job)
	})
	return h.drain(false)
}

// drain writes, in partition order, the graphs that are built. Graphs
// build across windows (a window's last partitions need not finish before
// the next window's start), but the rows of graphs not written yet are
// bounded by the window: past it, drain waits for the oldest. With all,
// it waits for every graph.
func (h *hnswMerge) drain(all bool) error {
	for len(h.jobs) > 0 {
		job := h.jobs[0]
		select {
		case <-job.done:
		default:
			if !all && h.pending <= h.mg.opts.WindowRows {
				return nil
			}
			<-job.done
		}
		if job.err != nil {
			return job.err
		}
		if err := h.write(job); err != nil {
			return err
		}
		h.pending -= job.rows
		h.jobs = h.jobs[1:]
	}
	return nil
}

func (h *hnswMerge) write(job *graphJob) error {
	if err := h.w.Write(job.cols); err != nil {
		return err
	}
	h.lengths[job.p] = uint32(job.meta.Rows())
	h.metas[job.p] = job.meta
	job.cols = nil
	return nil
}

// build builds one partition's graph on its merged storage.
func (h *hnswMerge) build(ctx context.Context, job *graphJob) error {
	mg := h.mg
	space, err := h.space(job.vecs)
	if err != nil {
		return fmt.Errorf("partition %d: %w", job.p, err)
	}
	prog := mg.opts.Progress
	opts := hnsw.Options{Seed: uint64(job.p) + 1, OnInserted: func(n int) { prog.GraphRowsInserted.Add(int64(n)) }}
	var g *hnsw.Graph
	var st hnsw.Stats
	if old, piece := h.reusable(job); mg.opts.HNSWGraph == HNSWReuse && old != nil {
		var graph *hnsw.Graph
		if graph, err = h.readGraph(ctx, piece.src, job.p, old); err == nil {
			g, st, err = hnsw.Reuse(ctx, space, graph, piece.newIDs(graph.N), h.distancesValid(piece.src), opts)
		}
	} else {
		g, st, err = hnsw.Build(ctx, space, h.hm.params, opts)
	}
	if err != nil {
		return fmt.Errorf("partition %d: %w", job.p, err)
	}
	prog.GraphRowsReused.Add(int64(st.Reused))
	prog.GraphDistances.Add(st.Distances)
	job.cols, job.meta = g.Encode()
	job.vecs = nil
	return nil
}

// reusable picks the input whose graph of the partition is reused: the one
// with the most surviving rows, provided it has a graph and at most
// reuseMaxDropped of its nodes were dropped.
func (h *hnswMerge) reusable(job *graphJob) (*hnsw.Metadata, *hnswPiece) {
	var best *hnswPiece
	var meta *hnsw.Metadata
	for k := range job.pieces {
		pc := &job.pieces[k]
		gm := h.hm.metas[pc.src][job.p]
		if gm == nil || h.hm.foreign[pc.src] || gm.Nodes() == 0 || (best != nil && pc.kept <= best.kept) {
			continue
		}
		dropped := gm.Nodes() - pc.keptOf(gm.Nodes())
		if float64(dropped) > reuseMaxDropped*float64(gm.Nodes()) {
			continue
		}
		best, meta = pc, gm
	}
	return meta, best
}

// keptOf counts the piece's surviving rows among its first n.
func (pc *hnswPiece) keptOf(n int) int {
	if pc.keep == nil {
		return min(n, pc.rows)
	}
	return sort.SearchInts(pc.keep, n)
}

// newIDs maps the piece's first n input rows (graph nodes) to rows of the
// merged partition, -1 for dropped rows.
func (pc *hnswPiece) newIDs(n int) []int32 {
	out := make([]int32, n)
	if pc.keep == nil {
		for k := range out {
			out[k] = int32(pc.start + k)
		}
		return out
	}
	for k := range out {
		out[k] = -1
	}
	for j, k := range pc.keep {
		if k >= n {
			break
		}
		out[k] = int32(pc.start + j)
	}
	return out
}

// distancesValid reports whether input i's stored edge distances hold on
// the merged storage: its vectors or codes are unchanged (SQ inputs that
// are re-quantized are not).
func (h *hnswMerge) distancesValid(i int) bool {
	m := h.mg.m
	if m.typ.Quantizer() != "sq" || !m.requantize {
		return true
	}
	b := h.mg.srcs[i].files.Quant.SQBounds
	return closeEnough(b.Start, m.sqLo) && closeEnough(b.End, m.sqHi)
}

// readGraph reads and decodes input i's graph of partition p. The rows of
// input i's graphs of the whole window holding p are read once and kept
// until a partition of another window needs them.
func (h *hnswMerge) readGraph(ctx context.Context, i, p int, meta *hnsw.Metadata) (*hnsw.Graph, error) {
	s := h.mg.srcs[i]
	f := s.files
	start := f.IndexIVF.Offsets[p]
	end := start + uint64(f.IndexIVF.Lengths[p])
	withDist := h.distancesValid(i)
	gr := &h.graphs[i]
	gr.mu.Lock()
	if gr.cols[0] == nil || start < gr.start || end > gr.end || withDist != gr.withDist {
		lo, hi := start, end
		if w := h.windowOf(p); w != nil {
			lo = f.IndexIVF.Offsets[w.first]
			hi = f.IndexIVF.Offsets[w.last-1] + uint64(f.IndexIVF.Lengths[w.last-1])
		}
		names := []string{hnsw.ColVectorID, hnsw.ColNeighbors, hnsw.ColDistance}
		if !withDist {
			names = names[:2]
		}
		var cols [3]*lancefile.Array
		for c, name := range names {
			a, err := f.Index.Read(ctx, name, lo, hi)
			if err != nil {
				gr.mu.Unlock()
				return nil, fmt.Errorf("segment %s: graph of partition %d: %w", s.uuid, p, err)
			}
			cols[c] = a
		}
		gr.start, gr.end, gr.withDist, gr.cols = lo, hi, withDist, cols
	}
	var cols [3]*lancefile.Array
	for c, a := range gr.cols {
		if a != nil {
			cols[c] = a.Slice(int(start-gr.start), int(end-gr.start))
		}
	}
	gr.mu.Unlock()
	g, err := hnsw.Decode(meta, cols[0], cols[1], cols[2], int(f.IVF.Lengths[p]))
	if err != nil {
		return nil, fmt.Errorf("segment %s: graph of partition %d: %w", s.uuid, p, err)
	}
	return g, nil
}

// windowOf returns the merge window holding partition p.
func (h *hnswMerge) windowOf(p int) *window {
	k := sort.Search(len(h.wins), func(k int) bool { return h.wins[k].last > p })
	if k < len(h.wins) && h.wins[k].first <= p {
		return &h.wins[k]
	}
	return nil
}

// space makes the distance space of a partition's merged vectors.
func (h *hnswMerge) space(vecs []byte) (*hnsw.Space, error) {
	m := h.mg.m
	switch m.typ.Quantizer() {
	case "flat":
		v := make([]float32, len(vecs)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(vecs[4*i:]))
		}
		return hnsw.NewFlat(v, m.quantDim(), m.distance)
	case "sq":
		return hnsw.NewSQ(vecs, m.quant.Dim, m.sqLo, m.sqHi, m.distance)
	}
	return h.hm.pq.Space(vecs)
}

// quantDim is the vector dimension of a FLAT model (its flat column).
func (m *model) quantDim() int {
	if f, ok := findField(m.fields, "flat"); ok {
		return f.Type.Dim
	}
	return m.quant.Dim
}

// finish waits for the last graphs, writes index.idx's IVF (centroids,
// graph rows per partition) and metadata, and closes the file.
func (h *hnswMerge) finish() (int64, error) {
	m := h.mg.m
	if err := h.drain(true); err != nil {
		return 0, err
	}
	err := h.g.Wait()
	h.cancel()
	if err != nil {
		return 0, err
	}
	ivfBytes, err := (&ivf.Model{Lengths: h.lengths, Centroids: m.centroids}).Encode()
	if err != nil {
		return 0, err
	}
	pos, err := h.w.AddGlobalBuffer(ivfBytes)
	if err != nil {
		return 0, err
	}
	list, err := hnsw.MarshalList(h.metas)
	if err != nil {
		return 0, err
	}
	indexMeta, _ := json.Marshal(ivf.IndexMeta{Type: m.typ, DistanceType: m.distance})
	h.w.SetMetadata(ivf.KeyIndex, indexMeta)
	h.w.SetMetadata(ivf.KeyIVF, []byte(strconv.Itoa(pos)))
	h.w.SetMetadata(ivf.KeyHNSW, list)
	if err := h.w.Finish(); err != nil {
		return 0, err
	}
	if err := h.sw.Finish(); err != nil {
		return 0, err
	}
	return h.counted.n, nil
}

// hnswStats fills the HNSW fields of a segment's statistics from its
// index.idx metadata.
func hnswStats(f *ivf.Files, s *Stats) error {
	raw, ok := f.Index.MetadataString(ivf.KeyHNSW)
	if !ok {
		return fmt.Errorf("%w: %s has no %q metadata", errkind.Corrupt, ivf.IndexFileName, ivf.KeyHNSW)
	}
	metas, err := hnsw.ParseList(raw)
	if err != nil {
		return err
	}
	s.PartitionGraphRows = f.IndexIVF.Lengths
	if s.PartitionGraphRows == nil {
		s.PartitionGraphRows = []uint32{}
	}
	for _, gm := range metas {
		if gm == nil {
			continue
		}
		if s.HNSWM == 0 {
			s.HNSWM, s.HNSWEfConstruction, s.HNSWMaxLevel = gm.Params.M, gm.Params.EfConstruction, gm.Params.MaxLevel
		}
		s.HNSWLevels = max(s.HNSWLevels, gm.Levels())
	}
	return nil
}
