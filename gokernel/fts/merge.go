package fts

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	ordered "github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// MergeOptions tune Merge.
type MergeOptions struct {
	// IndexUUID names the output.
	IndexUUID uuid.UUID
	// Keep, when set, says for each input which of its rows stay (nil
	// entries keep every row).
	Keep []func(rowID uint64) bool
	// Remap, when set, gives a kept document's row id in the output (rows
	// of fragments a compaction rewrote move to their new addresses).
	Remap func(rowID uint64) uint64
	// MemoryBytes bounds the stored posting lists held at once (default
	// DefaultMemoryBytes): the output tokens are merged in buckets of
	// about this many bytes, spilled to a temporary file when there is
	// more than one.
	MemoryBytes int64
	// TempDir holds the spill file (os.TempDir() when "").
	TempDir string
}

// Result is what Merge wrote.
type Result struct {
	Files                   []*pb.IndexFile
	DocsRead, DocsWritten   uint64
	TokensWritten, Postings uint64
}

// part is what a merge holds of one input partition (its posting lists
// are streamed, not held).
type part struct {
	docs     *Docs
	tokens   []string
	lengths  []uint32 // documents per token id
	invBytes int64    // size of the invert file
	remap    []int32  // input doc -> output doc, -1 if dropped
	// dense: no document is dropped, input doc d is output doc base+d
	dense bool
	base  uint32
}

// load is one input partition to read.
type load struct {
	seg  *Segment
	p    uint64
	keep func(uint64) bool
}

// Names lists the files of a merged segment (one partition, 0).
func Names() []string {
	return []string{MetadataFile, TokensFile(0), DocsFile(0), InvertFile(0)}
}

// Merge merges INVERTED segments into one new segment of one partition
// under _indices/<uuid>/ (written, nothing committed), as pylance's merge
// does: documents appended in input order (dropped rows left out), token
// dictionaries unioned, each token's posting lists concatenated with
// their documents renumbered and positions carried, then blocks, block
// scores, impacts and statistics computed afresh for the merged
// partition. The inputs must have equal analyzer parameters and layout;
// this is checked before any byte is written.
//
// Memory: the posting lists of one bucket of output tokens (about
// MemoryBytes of them as stored; see spill.go), per goroutine a chunk of
// tokens' decoded lists and up to two encoded chunks waiting for the
// writer, and what grows with the inputs: per document 16 bytes, per
// input token row 8 bytes (16 until the posting lists are streamed), each
// distinct token once.
func Merge(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, opts MergeOptions) (*Result, error) {
	if len(metas) == 0 {
		return nil, fmt.Errorf("%w: at least one INVERTED segment is required", errkind.InvalidInput)
	}
	// opened a few at a time: on an object store each open is a round trip
	segs := make([]*Segment, len(metas))
	if err := ordered.Each(len(metas), ordered.Opens, func(i int) (err error) {
		segs[i], err = Open(ctx, st, metas[i])
		return err
	}); err != nil {
		return nil, err
	}
	params, err := sameLayout(segs)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	var loads []load
	deleted := roaring.New()
	for i, s := range segs {
		deleted.Or(s.Meta.Deleted)
		var keep func(uint64) bool
		if i < len(opts.Keep) {
			keep = opts.Keep[i]
		}
		for _, p := range s.Meta.Partitions {
			loads = append(loads, load{s, p, keep})
		}
	}
	// Documents, tokens and posting lengths load on several goroutines
	// (many small deltas: mostly opening files).
	parts := make([]*part, len(loads))
	err = parallel(ctx, len(loads), func(i int) error {
		l := loads[i]
		pt, err := loadHead(ctx, l.seg, l.p)
		if err != nil {
			return err
		}
		pt.remap = make([]int32, len(pt.docs.RowIDs))
		for d, id := range pt.docs.RowIDs {
			pt.remap[d] = -1
			if l.keep == nil || l.keep(id) {
				pt.remap[d] = 0 // numbered below
				if opts.Remap != nil {
					pt.docs.RowIDs[d] = opts.Remap(id)
				}
			}
		}
		parts[i] = pt
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, pt := range parts {
		res.DocsRead += uint64(len(pt.docs.RowIDs))
	}
	rowIDs, numTokens, total, err := numberDocs(parts)
	if err != nil {
		return nil, err
	}
	for _, pt := range parts {
		pt.docs = nil // remap and the output's arrays say it all
	}
	res.DocsWritten = uint64(len(rowIDs))
	var avgdl float32
	if len(rowIDs) > 0 {
		avgdl = float32(float32(total) / float32(len(rowIDs)))
	}
	u, err := unionTokens(parts)
	if err != nil {
		return nil, err
	}
	withPos, format1 := segs[0].Meta.WithPositions(), segs[0].Meta.Format1()
	budget := opts.MemoryBytes
	if budget <= 0 {
		budget = DefaultMemoryBytes
	}
	bounds, bucketOf, est, estimate := u.buckets(parts, budget)
	sp, err := newSpill(len(bounds)-1, estimate, opts.TempDir)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	if err := sp.scatter(ctx, loads, parts, u, bucketOf, withPos); err != nil {
		return nil, err
	}
	u.cOf, u.slot = nil, nil // what the scatter needed
	for _, pt := range parts {
		pt.lengths = nil
	}
	var data, buf []byte
	m := &tokenMerger{order: u.order, bounds: bounds, cost: est, withPos: withPos, format1: format1, numTokens: numTokens, avgdl: avgdl, docs: len(rowIDs),
		load: func(w int) error {
			data = nil
			b, err := sp.load(w, buf)
			data, buf = b, b[:0]
			return err
		},
		gather: func(t int, sc *scratch) error {
			srcs := u.sources[u.tokStart[t]:u.tokStart[t+1]]
			// Touch every record first: the loads are independent, so the
			// memory system fetches them together instead of one miss per
			// record in the loop below.
			var touch byte
			for _, src := range srcs {
				if int(src.loc) < len(data) {
					touch |= data[src.loc]
				}
			}
			sc.touch = touch
			for _, src := range srcs {
				rec, err := parseRecord(data[src.loc:], withPos, sc.blocks)
				if err != nil {
					return err
				}
				sc.blocks = rec.blocks
				if err := gatherOne(sc, rec, parts[src.part], withPos); err != nil {
					return err
				}
			}
			return nil
		}}
	dir := table.IndexDir(&pb.IndexMetadata{Uuid: &pb.UUID{Uuid: opts.IndexUUID[:]}})
	// The output keeps the inputs' Lance file version (pylance 14.0.2
	// writes 2.2) and analyzer, and their FTS format: pylance 14.0.2
	// merges segments of format 1 into format 1, naming it as it names
	// its own deltas of such an index.
	meta := segs[0].Meta
	meta.Params = params
	if format1 {
		meta.Keys = map[string]string{keyFormat: "1", keyBlockSize: strconv.Itoa(BlockSize), keyTailCodec: tailFixed32, keyTokenSet: meta.Keys[keyTokenSet]}
	}
	if err := writeOutput(ctx, st, dir, meta, deleted, m, rowIDs, total, res); err != nil {
		return nil, err
	}
	return res, nil
}

// writeOutput writes a segment of one partition: the documents rowIDs
// (with m.numTokens tokens each, total in all) and m's tokens, merged
// and encoded on m's goroutines, then the token map, the documents and
// metadata.lance with meta's parameters and layout. On error nothing it
// wrote is left.
func writeOutput(ctx context.Context, st storage.Store, dir string, meta Meta, deleted *roaring.Bitmap, m *tokenMerger, rowIDs []uint64, total uint64, res *Result) error {
	version := meta.Version
	iw, err := newInvertWriter(ctx, st, dir, version, m.withPos, m.format1, invertKeys(meta.Keys))
	if err != nil {
		return err
	}
	defer iw.abort()
	var outTokens []string
	err = m.run(ctx, func(c *chunk) error {
		for i := range c.tokens {
			if err := iw.add(c.enc[i], c.lens[i], c.runs[i], c.blockRuns[i], c.pos1[i]); err != nil {
				return err
			}
			res.Postings += uint64(c.lens[i])
		}
		outTokens = append(outTokens, c.tokens...)
		return nil
	})
	if err != nil {
		return err
	}
	res.TokensWritten = uint64(len(outTokens))
	invFile, err := iw.finish()
	if err != nil {
		return err
	}
	files := []*pb.IndexFile{invFile}
	written := []string{invFile.GetPath()}
	fail := func(err error) error {
		for _, n := range written {
			_ = st.Delete(context.WithoutCancel(ctx), dir+n)
		}
		return err
	}
	f, err := writeTokens(ctx, st, dir, version, outTokens)
	if err != nil {
		return fail(err)
	}
	files, written = append(files, f), append(written, f.GetPath())
	if f, err = writeDocs(ctx, st, dir, version, rowIDs, m.numTokens, total); err != nil {
		return fail(err)
	}
	files, written = append(files, f), append(written, f.GetPath())
	if f, err = writeMetadata(ctx, st, dir, meta, deleted, false); err != nil {
		return fail(err)
	}
	res.Files = append(files, f)
	return nil
}

// numberDocs numbers the documents that stay, partition after partition
// (remap: input document -> output document), and returns their row ids,
// token counts and total tokens.
func numberDocs(parts []*part) (rowIDs []uint64, numTokens []uint32, total uint64, err error) {
	n := 0
	for _, pt := range parts {
		for _, r := range pt.remap {
			if r >= 0 {
				n++
			}
		}
	}
	if n > math.MaxInt32 {
		return nil, nil, 0, fmt.Errorf("%w: fts merge: %d documents in one partition (at most 2^31)", errkind.Unsupported, n)
	}
	rowIDs, numTokens = make([]uint64, 0, n), make([]uint32, 0, n)
	for _, pt := range parts {
		pt.dense, pt.base = !slices.Contains(pt.remap, -1), uint32(len(rowIDs))
		for d, r := range pt.remap {
			if r < 0 {
				continue
			}
			pt.remap[d] = int32(len(rowIDs))
			rowIDs = append(rowIDs, pt.docs.RowIDs[d])
			numTokens = append(numTokens, pt.docs.NumTokens[d])
			total += uint64(pt.docs.NumTokens[d])
		}
	}
	return rowIDs, numTokens, total, nil
}

// tokenUnion is the output's tokens and, for each, where its posting
// lists are in the inputs.
type tokenUnion struct {
	// order is the output tokens: the first partition's in its id
	// order, then each new one.
	order []string
	// sources[tokStart[c]:tokStart[c+1]] are output token c's posting
	// lists, in partition order: laid out token by token, as the merge
	// reads them.
	tokStart []int32
	sources  []source
	// Per (partition, token id), at start[part] + id: the output token
	// (cOf) and the index in sources (slot). Needed until the scatter.
	start []int32
	cOf   []int32
	slot  []int32
}

// source is one input posting list of an output token.
type source struct {
	part int32
	loc  uint32 // the record's offset in the token's bucket
}

// unionTokens builds the union of the partitions' tokens and releases
// their own token lists.
func unionTokens(parts []*part) (*tokenUnion, error) {
	n := 0
	for _, pt := range parts {
		n += len(pt.tokens)
	}
	if n >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: fts merge: %d posting lists in all inputs (at most 2^31)", errkind.Unsupported, n)
	}
	u := &tokenUnion{cOf: make([]int32, 0, n), start: make([]int32, len(parts)+1)}
	var counts []int32
	cand := map[string]int32{}
	for pi, pt := range parts {
		u.start[pi] = int32(len(u.cOf))
		for _, tok := range pt.tokens {
			c, ok := cand[tok]
			if !ok {
				c = int32(len(u.order))
				cand[tok] = c
				u.order = append(u.order, tok)
				counts = append(counts, 0)
			}
			counts[c]++
			u.cOf = append(u.cOf, c)
		}
		pt.tokens = nil // order holds each token once
	}
	u.start[len(parts)] = int32(n)
	u.tokStart = make([]int32, len(u.order)+1)
	for c, k := range counts {
		u.tokStart[c+1] = u.tokStart[c] + k
		counts[c] = u.tokStart[c] // from here: the next free slot
	}
	u.sources, u.slot = make([]source, n), make([]int32, n)
	for pi := range parts {
		for k := u.start[pi]; k < u.start[pi+1]; k++ {
			c := u.cOf[k]
			u.sources[counts[c]].part = int32(pi)
			u.slot[k] = counts[c]
			counts[c]++
		}
	}
	return u, nil
}

// buckets cuts the output tokens into runs of about budget stored bytes,
// estimated from each input's file size shared out by documents per
// token. It returns the runs' bounds (token ids), each token's bucket,
// each token's estimated bytes and the bytes expected in all.
func (u *tokenUnion) buckets(parts []*part, budget int64) (bounds []int, bucketOf []int32, est []float32, estimate int64) {
	est = make([]float32, len(u.order))
	var total float64
	for pi, pt := range parts {
		var docs uint64
		for _, l := range pt.lengths {
			docs += uint64(l)
		}
		if docs == 0 {
			continue
		}
		per := float64(pt.invBytes) / float64(docs)
		for id, l := range pt.lengths {
			e := per*float64(l) + 16
			est[u.cOf[int(u.start[pi])+id]] += float32(e)
			total += e
		}
	}
	target := max(float64(budget), total/maxBuckets)
	bucketOf = make([]int32, len(u.order))
	bounds = []int{0}
	var acc float64
	for c, e := range est {
		if acc > 0 && acc+float64(e) > target {
			bounds, acc = append(bounds, c), 0
		}
		acc += float64(e)
		bucketOf[c] = int32(len(bounds) - 1)
	}
	bounds = append(bounds, len(u.order))
	return bounds, bucketOf, est, int64(total)
}

// tokenMerger merges each output token's posting lists, chunks of tokens
// on several goroutines, and hands the chunks to the writer in order.
type tokenMerger struct {
	order []string
	// bounds, when set, cut order into runs merged one after the other,
	// load(w) called before run w's first token.
	bounds []int
	load   func(w int) error
	// cost, when set, is each token's estimated stored bytes: a chunk
	// ends at chunkBytes of them, so that the few tokens that hold most
	// postings (Zipf) do not make chunks of hundreds of megabytes.
	cost []float32
	// gather puts token t's documents, frequencies and (withPos) position
	// deltas, in document order, in sc.merged and sc.posOut (emptied
	// before the call).
	gather    func(t int, sc *scratch) error
	withPos   bool
	format1   bool // write FTS format 1 (see Format1)
	numTokens []uint32
	avgdl     float32
	docs      int
	norms     []float32 // docNorms, set by run
}

// chunk is a run of output tokens, merged and encoded (tokens left
// without documents are left out).
type chunk struct {
	lo, hi    int
	out       chan *chunk
	tokens    []string
	enc       []encoded
	lens      []uint32
	runs      [][]byte
	blockRuns [][]uint32
	pos1      []*lancefile.Array // format 1: per token, per document, its position binaries
	err       error
}

// chunkTokens and chunkBytes bound the tokens a goroutine merges at a
// time.
const (
	chunkTokens = 512
	chunkBytes  = 2 << 20
)

// scratch is one goroutine's reused buffers.
type scratch struct {
	merged, p     Posting
	posIn, posOut []uint32
	abs           []uint32
	blocks        [][]byte
	touch         byte // see Merge's gather
}

// run merges every token, on up to GOMAXPROCS goroutines with at most two
// chunks per goroutine in flight, and calls write with each chunk in
// token order. A panic in a goroutine becomes an error (it would abort
// the interpreter).
func (m *tokenMerger) run(ctx context.Context, write func(*chunk) error) error {
	m.norms = docNorms(m.numTokens, m.avgdl)
	bounds := m.bounds
	if bounds == nil {
		bounds = []int{0, len(m.order)}
	}
	for w := 0; w+1 < len(bounds); w++ {
		if m.load != nil {
			if err := m.load(w); err != nil {
				return err
			}
		}
		if err := m.runRange(ctx, bounds[w], bounds[w+1], write); err != nil {
			return err
		}
	}
	return nil
}

// runRange merges tokens [lo, hi).
func (m *tokenMerger) runRange(ctx context.Context, lo, hi int, write func(*chunk) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := max(1, min(runtime.GOMAXPROCS(0), 8))
	jobs := make(chan *chunk)
	results := make(chan chan *chunk, 2*workers)
	go func() {
		defer close(jobs)
		defer close(results)
		for at := lo; at < hi; {
			end := min(at+chunkTokens, hi)
			if m.cost != nil {
				var b float32
				for t := at; t < end; t++ {
					if b += m.cost[t]; b >= chunkBytes {
						end = t + 1
						break
					}
				}
			}
			c := &chunk{lo: at, hi: end, out: make(chan *chunk, 1)}
			at = end
			select {
			case results <- c.out:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- c:
			case <-ctx.Done():
				c.out <- &chunk{err: ctx.Err()}
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc scratch
			for c := range jobs {
				func() {
					defer func() {
						if r := recover(); r != nil {
							c.err = fmt.Errorf("lance-segmerge kernel panic in an fts merge goroutine: %v\n%s", r, debug.Stack())
						}
						c.out <- c
					}()
					c.err = m.merge(ctx, c, &sc)
				}()
			}
		}()
	}
	defer wg.Wait()
	for out := range results {
		c := <-out
		err := c.err
		if err == nil {
			err = write(c)
		}
		if err != nil {
			cancel()
			for range results { // let the producer end; workers answer on buffered channels
			}
			return err
		}
	}
	return ctx.Err()
}

// merge merges the tokens of c: each one's posting lists from every
// partition holding it, documents renumbered (dropped ones left out) and
// positions moved, then encoded for the merged partition.
func (m *tokenMerger) merge(ctx context.Context, c *chunk, sc *scratch) error {
	var buf []byte // the chunk's blocks live here: not reused across chunks
	for t := c.lo; t < c.hi; t++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		tok := m.order[t]
		sc.merged.Docs, sc.merged.Freqs, sc.posOut = sc.merged.Docs[:0], sc.merged.Freqs[:0], sc.posOut[:0]
		if err := m.gather(t, sc); err != nil {
			return fmt.Errorf("fts merge: token %q: %w", tok, err)
		}
		n := sc.merged.Len()
		if n == 0 {
			continue // every row of the token was dropped
		}
		var e encoded
		e, buf = encodePosting(&sc.merged, m.numTokens, m.norms, idfScale(n, m.docs), m.format1, buf)
		var run []byte
		var runs []uint32
		var pos1 *lancefile.Array
		if m.withPos && m.format1 {
			pos1 = emptyList(largeBinary)
			at := 0
			for _, f := range sc.merged.Freqs {
				sc.abs, pos1.Items = appendPositions1(pos1.Items, sc.posOut[at:at+int(f)], sc.abs)
				pos1.Offsets = append(pos1.Offsets, int64(pos1.Items.Len))
				pos1.Len++
				at += int(f)
			}
		} else if m.withPos {
			at := 0
			for lo := 0; lo < n; lo += BlockSize {
				runs = append(runs, uint32(len(run)))
				k := 0
				for _, f := range sc.merged.Freqs[lo:min(lo+BlockSize, n)] {
					k += int(f)
				}
				run = appendPositionRun(run, sc.posOut[at:at+k])
				at += k
			}
			if uint64(len(run)) > math.MaxUint32 {
				return fmt.Errorf("%w: fts merge: token %q has %d bytes of positions", errkind.Unsupported, tok, len(run))
			}
		}
		c.tokens = append(c.tokens, tok)
		c.enc = append(c.enc, e)
		c.lens = append(c.lens, uint32(n))
		c.runs = append(c.runs, run)
		c.blockRuns = append(c.blockRuns, runs)
		c.pos1 = append(c.pos1, pos1)
	}
	return nil
}

// gatherOne decodes one input's posting list of a token and appends
// its documents that stay, renumbered, to sc.merged (and their position
// deltas to sc.posOut).
func gatherOne(sc *scratch, rec record, pt *part, withPos bool) error {
	if err := DecodePosting(rec.blocks, rec.length, &sc.p); err != nil {
		return err
	}
	var err error
	if withPos {
		if sc.posIn, err = decodePositionRuns(rec.stream, rec.runs, sc.p.Freqs, sc.posIn[:0]); err != nil {
			return err
		}
	}
	remap := pt.remap
	if pt.dense {
		// Nothing dropped: shift the documents, copy the rest whole.
		if n := len(sc.p.Docs); n > 0 && int(sc.p.Docs[n-1]) >= len(remap) {
			return fmt.Errorf("%w: document %d of %d", errkind.Corrupt, sc.p.Docs[n-1], len(remap))
		}
		for _, d := range sc.p.Docs {
			sc.merged.Docs = append(sc.merged.Docs, pt.base+d)
		}
		sc.merged.Freqs = append(sc.merged.Freqs, sc.p.Freqs...)
		sc.posOut = append(sc.posOut, sc.posIn...)
		return nil
	}
	at := 0
	for i, d := range sc.p.Docs {
		if int(d) >= len(remap) {
			return fmt.Errorf("%w: document %d of %d", errkind.Corrupt, d, len(remap))
		}
		f := int(sc.p.Freqs[i])
		if r := remap[d]; r >= 0 {
			sc.merged.Docs = append(sc.merged.Docs, uint32(r))
			sc.merged.Freqs = append(sc.merged.Freqs, sc.p.Freqs[i])
			if withPos {
				sc.posOut = append(sc.posOut, sc.posIn[at:at+f]...)
			}
		}
		at += f
	}
	return nil
}

// parallel calls f(0..n-1) on up to GOMAXPROCS goroutines and returns
// the first error (the others stop at their next item). A panic becomes
// an error.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() { first = err; cancel() })
	}
	for w := 0; w < max(1, min(runtime.GOMAXPROCS(0), 8, n)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					fail(fmt.Errorf("lance-segmerge kernel panic in an fts goroutine: %v\n%s", r, debug.Stack()))
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		return ctx.Err()
	}
	return first
}

// loadHead reads what a merge needs of partition p before its posting
// lists: documents, tokens and each token's document count.
func loadHead(ctx context.Context, s *Segment, p uint64) (*part, error) {
	op, err := s.openPartition(ctx, p)
	if err != nil {
		return nil, err
	}
	defer op.close()
	pt := &part{docs: op.docs, tokens: op.tokens, invBytes: op.inv.Size()}
	if pt.lengths, err = readU32s(ctx, op.inv, lengthColumn, 0, op.inv.NumRows()); err != nil {
		return nil, fmt.Errorf("%s: %w", InvertFile(p), err)
	}
	return pt, nil
}

// sameLayout refuses inputs whose analyzer or layout differ: their
// tokens, or their files, would not mean the same thing. It returns the
// parameters the output carries: those of the input that names the most
// (see sameParams).
func sameLayout(segs []*Segment) (string, error) {
	parse := func(s *Segment) (map[string]any, error) {
		var p map[string]any
		if err := json.Unmarshal([]byte(s.Meta.Params), &p); err != nil {
			return nil, fmt.Errorf("%w: INVERTED segment %s: params: %v", errkind.Corrupt, table.IndexUUID(s.Index), err)
		}
		return p, nil
	}
	first, err := parse(segs[0])
	if err != nil {
		return "", err
	}
	params, most := segs[0].Meta.Params, len(first)
	for _, s := range segs[1:] {
		p, err := parse(s)
		if err != nil {
			return "", err
		}
		if !sameParams(first, p) {
			return "", fmt.Errorf("%w: INVERTED segments %s and %s were built with different parameters (%s, %s): one analyzer per merge",
				errkind.InvalidInput, table.IndexUUID(segs[0].Index), table.IndexUUID(s.Index), segs[0].Meta.Params, s.Meta.Params)
		}
		if len(p) > most {
			params, most = s.Meta.Params, len(p)
		}
		if s.Meta.format() != segs[0].Meta.format() {
			return "", fmt.Errorf("%w: INVERTED segments %s and %s are of FTS formats %s and %s: one format per merge", errkind.InvalidInput,
				table.IndexUUID(segs[0].Index), table.IndexUUID(s.Index), segs[0].Meta.format(), s.Meta.format())
		}
		if s.Meta.WithPositions() != segs[0].Meta.WithPositions() {
			return "", fmt.Errorf("%w: INVERTED segments %s and %s differ in positions", errkind.InvalidInput, table.IndexUUID(segs[0].Index), table.IndexUUID(s.Index))
		}
	}
	return params, nil
}

// paramDefaults are analyzer parameters that one pylance release records
// and another does not, with the value the other one means by leaving
// them out (2.0.1 records skip_merge; 14.0.2 records the rest).
var paramDefaults = map[string]any{
	"skip_merge": false, "block_size": float64(BlockSize), "split_identifiers": false,
	"split_on_numerics": false, "preserve_original": false, "index_operators": false,
}

// sameParams reports whether two analyzers' parameters mean the same: a
// parameter only one names must hold its default.
func sameParams(a, b map[string]any) bool {
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			d, known := paramDefaults[k]
			if !known || !reflect.DeepEqual(va, d) {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(va, vb) {
			return false
		}
	}
	for k, vb := range b {
		if _, ok := a[k]; !ok {
			if d, known := paramDefaults[k]; !known || !reflect.DeepEqual(vb, d) {
				return false
			}
		}
	}
	return true
}

// decodePositions appends the position deltas of token t (whose documents
// have frequencies freqs), block run by block run.
func (v *Invert) decodePositions(t int, freqs []uint32, dst []uint32) ([]uint32, error) {
	pb := v.PosBlocks
	lo, hi := pb.Offsets[t], pb.Offsets[t+1]
	return decodePositionRuns(v.Positions.Values[v.Positions.Offsets[t]:v.Positions.Offsets[t+1]], pb.Items.Values[4*lo:4*hi], freqs, dst)
}

// decodePositionRuns appends the position deltas of a token's stream,
// whose block runs start at runs (little-endian uint32).
func decodePositionRuns(stream, runs []byte, freqs []uint32, dst []uint32) ([]uint32, error) {
	nb := len(runs) / 4
	if want := (len(freqs) + BlockSize - 1) / BlockSize; nb != want {
		return nil, fmt.Errorf("%w: fts positions: %d runs for %d blocks", errkind.Corrupt, nb, want)
	}
	for b := 0; b < nb; b++ {
		start := binary.LittleEndian.Uint32(runs[4*b:])
		end := uint32(len(stream))
		if b+1 < nb {
			end = binary.LittleEndian.Uint32(runs[4*(b+1):])
		}
		if start > end || int(end) > len(stream) {
			return nil, fmt.Errorf("%w: fts positions: run [%d,%d) of %d bytes", errkind.Corrupt, start, end, len(stream))
		}
		var err error
		if dst, err = decodePositionRun(stream[start:end], freqs[b*BlockSize:min((b+1)*BlockSize, len(freqs))], dst); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// invertKeys are the schema metadata of an invert file (format 1's name
// no tail codec).
func invertKeys(keys map[string]string) map[string]string {
	out := map[string]string{}
	names := []string{keyFormat, keyBlockSize, keyTailCodec, keyPosLayout, keyPosCodec}
	if keys[keyFormat] == "1" {
		names = names[:2]
	}
	for _, k := range names {
		if v, ok := keys[k]; ok {
			out[k] = v
		}
	}
	return out
}

var (
	largeBinary = lancefile.DataType{Kind: lancefile.KindBinary, Logical: "large_binary"}
	plainBinary = lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}
	u32         = lancefile.Primitive(lancefile.KindUint32)
	u64         = lancefile.Primitive(lancefile.KindUint64)
	f32         = lancefile.Primitive(lancefile.KindFloat32)
)

// fileOut is one output file being written.
type fileOut struct {
	name string
	sw   storage.Writer
	cw   *storage.CountingWriter
	w    *lancefile.Writer
}

func createFile(ctx context.Context, st storage.Store, dir, name string, v lancefile.Version, fields []*lancefile.Field, keys map[string]string) (*fileOut, error) {
	sw, err := st.Create(ctx, dir+name)
	if err != nil {
		return nil, err
	}
	f := &fileOut{name: name, sw: sw, cw: &storage.CountingWriter{W: sw}}
	if f.w, err = lancefile.NewWriter(f.cw, fields, lancefile.WriterOptions{Version: v}); err != nil {
		sw.Abort()
		return nil, err
	}
	for k, v := range keys {
		f.w.SetMetadata(k, []byte(v))
	}
	return f, nil
}

func (f *fileOut) finish() (*pb.IndexFile, error) {
	if err := f.w.Finish(); err != nil {
		f.sw.Abort()
		return nil, err
	}
	if err := f.sw.Finish(); err != nil {
		return nil, err
	}
	return &pb.IndexFile{Path: f.name, SizeBytes: uint64(f.cw.N)}, nil
}

// writeOne writes a file of one batch.
func writeOne(ctx context.Context, st storage.Store, dir, name string, v lancefile.Version, fields []*lancefile.Field, keys map[string]string, cols []*lancefile.Array) (*pb.IndexFile, error) {
	f, err := createFile(ctx, st, dir, name, v, fields, keys)
	if err != nil {
		return nil, err
	}
	if err := f.w.Write(cols); err != nil {
		f.sw.Abort()
		return nil, err
	}
	return f.finish()
}

func binaryRow(t lancefile.DataType, b []byte) *lancefile.Array {
	return &lancefile.Array{Type: t, Len: 1, Values: b, Offsets: []int64{0, int64(len(b))}}
}

func writeTokens(ctx context.Context, st storage.Store, dir string, v lancefile.Version, tokens []string) (*pb.IndexFile, error) {
	ids := make([]int, len(tokens))
	var total uint64
	for i := range ids {
		ids[i] = i
		total += uint64(len(tokens[i]))
	}
	sort.Slice(ids, func(a, b int) bool { return tokens[ids[a]] < tokens[ids[b]] })
	fb := newFSTBuilder()
	for _, id := range ids {
		if err := fb.add([]byte(tokens[id]), uint64(id)); err != nil {
			return nil, err
		}
	}
	fields := []*lancefile.Field{lancefile.NewField(fstColumn, largeBinary, false), lancefile.NewField(nextIDColumn, u32, false), lancefile.NewField(tokenLenColumn, u64, false)}
	return writeOne(ctx, st, dir, TokensFile(0), v, fields, nil, []*lancefile.Array{
		binaryRow(largeBinary, fb.finish()),
		{Type: u32, Len: 1, Values: binary.LittleEndian.AppendUint32(nil, uint32(len(tokens)))},
		{Type: u64, Len: 1, Values: binary.LittleEndian.AppendUint64(nil, total)},
	})
}

func writeDocs(ctx context.Context, st storage.Store, dir string, v lancefile.Version, rowIDs []uint64, numTokens []uint32, total uint64) (*pb.IndexFile, error) {
	ids := make([]byte, 0, 8*len(rowIDs))
	for _, r := range rowIDs {
		ids = binary.LittleEndian.AppendUint64(ids, r)
	}
	nt := make([]byte, 0, 4*len(numTokens))
	for _, n := range numTokens {
		nt = binary.LittleEndian.AppendUint32(nt, n)
	}
	fields := []*lancefile.Field{lancefile.NewField(rowIDColumn, u64, false), lancefile.NewField(numTokensColumn, u32, false)}
	return writeOne(ctx, st, dir, DocsFile(0), v, fields, map[string]string{keyTotalTokens: strconv.FormatUint(total, 10)}, []*lancefile.Array{
		{Type: u64, Len: len(rowIDs), Values: ids},
		{Type: u32, Len: len(numTokens), Values: nt},
	})
}

// writeMetadata writes metadata.lance naming one partition, 0, or none
// when empty.
func writeMetadata(ctx context.Context, st storage.Store, dir string, m Meta, deleted *roaring.Bitmap, empty bool) (*pb.IndexFile, error) {
	del, err := deleted.ToBytes()
	if err != nil {
		return nil, err
	}
	keys := map[string]string{keyParams: m.Params, keyPartitions: "[0]", keyTokenSet: "fst"}
	if empty {
		keys[keyPartitions] = "[]"
	}
	for k, v := range m.Keys {
		if k != keyTokenSet {
			keys[k] = v
		}
	}
	return writeOne(ctx, st, dir, MetadataFile, m.Version, []*lancefile.Field{lancefile.NewField(deletedColumn, plainBinary, false)}, keys,
		[]*lancefile.Array{binaryRow(plainBinary, del)})
}

// invertWriter writes part_0_invert.lance a window of tokens at a time.
type invertWriter struct {
	f       *fileOut
	withPos bool
	format1 bool
	n       int
	// pending columns
	post, imp, posOff *lancefile.Array
	maxScore, length  []byte
	positions         *lancefile.Array // format 1: list<list<large_binary>>
	pendingBytes      int
}

const invertWindowBytes = 8 << 20

func newInvertWriter(ctx context.Context, st storage.Store, dir string, v lancefile.Version, withPos, format1 bool, keys map[string]string) (*invertWriter, error) {
	fields := []*lancefile.Field{
		lancefile.NewListField(postingColumn, largeBinary, false, true),
		lancefile.NewField(maxScoreColumn, f32, false),
		lancefile.NewField(lengthColumn, u32, false),
		lancefile.NewListField(impactsColumn, largeBinary, false, true),
	}
	switch {
	case withPos && format1:
		pos := lancefile.NewListField(position1Column, lancefile.ListType(), false, true)
		pos.Children[0].Children = []*lancefile.Field{{Name: "item", Type: largeBinary, Nullable: true}}
		fields = append(fields, pos)
	case withPos:
		fields = append(fields, lancefile.NewField(positionColumn, largeBinary, false), lancefile.NewListField(posOffsetColumn, u32, false, true))
	}
	f, err := createFile(ctx, st, dir, InvertFile(0), v, fields, keys)
	if err != nil {
		return nil, err
	}
	w := &invertWriter{f: f, withPos: withPos, format1: format1}
	w.reset()
	return w, nil
}

func emptyList(item lancefile.DataType) *lancefile.Array {
	items := &lancefile.Array{Type: item, Values: []byte{}}
	if item.Kind == lancefile.KindBinary {
		items.Offsets = []int64{0}
	}
	return &lancefile.Array{Type: lancefile.ListType(), Offsets: []int64{0}, Items: items}
}

func (w *invertWriter) reset() {
	w.n, w.pendingBytes = 0, 0
	w.post, w.imp, w.posOff = emptyList(largeBinary), emptyList(largeBinary), emptyList(u32)
	w.maxScore, w.length = nil, nil
	w.positions = &lancefile.Array{Type: largeBinary, Values: []byte{}, Offsets: []int64{0}}
	if w.format1 {
		w.positions = emptyList(lancefile.ListType())
		w.positions.Items.Items = emptyList(largeBinary).Items
		w.positions.Items.Offsets, w.positions.Items.Values = []int64{0}, nil
	}
}

func appendBinaryList(l *lancefile.Array, vals [][]byte) {
	it := l.Items
	for _, v := range vals {
		it.Values = append(it.Values, v...)
		it.Offsets = append(it.Offsets, int64(len(it.Values)))
		it.Len++
	}
	l.Offsets = append(l.Offsets, int64(it.Len))
	l.Len++
}

func (w *invertWriter) add(e encoded, length uint32, positions []byte, runs []uint32, pos1 *lancefile.Array) error {
	appendBinaryList(w.post, e.blocks)
	appendBinaryList(w.imp, e.impacts)
	w.maxScore = binary.LittleEndian.AppendUint32(w.maxScore, math.Float32bits(e.maxScore))
	w.length = binary.LittleEndian.AppendUint32(w.length, length)
	if w.withPos && w.format1 {
		docs, bins := w.positions.Items, w.positions.Items.Items
		for d := 0; d < pos1.Len; d++ {
			lo, hi := pos1.Offsets[d], pos1.Offsets[d+1]
			appendBinaryList(docs, nil)
			for i := lo; i < hi; i++ {
				bins.Values = append(bins.Values, pos1.Items.Values[pos1.Items.Offsets[i]:pos1.Items.Offsets[i+1]]...)
				bins.Offsets = append(bins.Offsets, int64(len(bins.Values)))
				bins.Len++
			}
			docs.Offsets[len(docs.Offsets)-1] = int64(bins.Len)
		}
		w.positions.Offsets = append(w.positions.Offsets, int64(docs.Len))
		w.positions.Len++
	} else if w.withPos {
		w.positions.Values = append(w.positions.Values, positions...)
		w.positions.Offsets = append(w.positions.Offsets, int64(len(w.positions.Values)))
		w.positions.Len++
		it := w.posOff.Items
		for _, r := range runs {
			it.Values = binary.LittleEndian.AppendUint32(it.Values, r)
			it.Len++
		}
		w.posOff.Offsets = append(w.posOff.Offsets, int64(it.Len))
		w.posOff.Len++
	}
	w.n++
	w.pendingBytes = len(w.post.Items.Values) + len(w.imp.Items.Values) + len(w.positions.Values)
	if w.format1 {
		w.pendingBytes += len(w.positions.Items.Items.Values)
	}
	if w.pendingBytes >= invertWindowBytes {
		return w.flush()
	}
	return nil
}

func (w *invertWriter) flush() error {
	if w.n == 0 {
		return nil
	}
	cols := []*lancefile.Array{w.post, {Type: f32, Len: w.n, Values: w.maxScore}, {Type: u32, Len: w.n, Values: w.length}, w.imp}
	switch {
	case w.withPos && w.format1:
		cols = append(cols, w.positions)
	case w.withPos:
		cols = append(cols, w.positions, w.posOff)
	}
	err := w.f.w.Write(cols)
	w.reset()
	return err
}

func (w *invertWriter) finish() (*pb.IndexFile, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	f, err := w.f.finish()
	w.f = nil
	return f, err
}

func (w *invertWriter) abort() {
	if w.f != nil {
		w.f.sw.Abort()
		w.f = nil
	}
}
