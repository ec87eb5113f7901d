package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/search"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// mismatchTolerance is the share of sampled rows whose codes may disagree
// with their data before a segment counts as damaged. Near ties (a vector
// as close to two centroids or codebook entries, a rotated value on the
// sign boundary) are not disagreements; this only absorbs the odd row
// another summation order decides differently.
const mismatchTolerance = 0.005

// maxDepth is the highest number of layout applications tried.
const maxDepth = 2

// sample is one sampled row of a segment.
type sample struct {
	part, idx int    // partition and row within it
	addr      uint64 // its row id
	vec       int    // its vector in the read batch, -1 when it has none
}

// rng seeds a generator from the options' seed and a segment's uuid, so
// that every segment gets its own deterministic sample.
func rngFor(seed uint64, uuid string, salt uint64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(uuid))
	x := h.Sum64()
	return rand.New(rand.NewPCG(seed^x, salt^0x9e3779b97f4a7c15))
}

// draw returns k distinct integers of [0, n), ascending.
func draw(rng *rand.Rand, n, k uint64) []uint64 {
	if k >= n {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i)
		}
		return out
	}
	seen := make(map[uint64]struct{}, k)
	out := make([]uint64, 0, k)
	for j := n - k; j < n; j++ {
		t := rng.Uint64N(j + 1)
		if _, dup := seen[t]; dup {
			t = j
		}
		seen[t] = struct{}{}
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// codeStats counts what the comparison of sampled rows found.
type codeStats struct {
	sampled, stale, noVector, dropped, compared int
	ties                                        int // rows on a partition tie (codes not compared)
	// earlier: rows placed by a narrower model this one extends (see
	// comparer.earlierModel; codes not compared)
	earlier   map[int]int
	drawn     map[int]*cloud // the earlier rows of each partition
	misplaced map[int]int
	sampledIn map[int]int
	match     [maxDepth + 1]int // codes agree with the layout applied d times
	extras    int               // RQ ex codes or factors disagree
	firstBad  string
	// dot PQ: rows whose codes are exactly the nearest-entry (L2)
	// encoding, or the inner-product one; and those that are only one
	exactL2, exactIP int
	onlyL2, onlyIP   int
	// per fragment: rows compared, and rows matching at each depth
	fragSampled map[uint32]int
	fragMatch   [maxDepth + 1]map[uint32]int
}

// checkCodes reads a sample of the segment's rows back from the data,
// encodes them with the segment's model and compares the partitions and
// codes it stores, under the declared layout and under the known wrong
// ones.
func checkCodes(ctx context.Context, o *opened, rd *vecdata.Reader, live *liveSet, opts Options, sr *SegmentReport) error {
	f := o.files
	ix := o.index
	n := f.Aux.NumRows()
	if n == 0 {
		sr.add(Check{Name: "layout", Verdict: OK, Message: "the segment has no rows"})
		sr.add(Check{Name: "codes", Verdict: OK, Message: "the segment has no rows"})
		sr.CodesMismatch = 0
		return nil
	}
	rng := rngFor(opts.Seed, o.uuid, 1)
	pos := draw(rng, n, uint64(opts.SampleRows))
	offs := f.IVF.Offsets
	byPart := map[int][]int{} // partition -> rows within it
	for _, x := range pos {
		p := sort.Search(len(offs), func(i int) bool { return offs[i] > x }) - 1
		byPart[p] = append(byPart[p], int(x-offs[p]))
	}
	parts := make([]int, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	if opts.PartitionRows > 0 {
		// Bound the rows read: whole partitions, drawn at random.
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		rows, keep := 0, parts[:0]
		for _, p := range parts {
			l := int(f.IVF.Lengths[p])
			if len(keep) > 0 && rows+l > opts.PartitionRows {
				continue
			}
			rows += l
			keep = append(keep, p)
		}
		parts = keep
		slices.Sort(parts)
	}

	// Pass 1: the sampled rows' ids, and their vectors from the data.
	var samples []sample
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		lo := offs[p]
		a, err := f.Aux.Read(ctx, encode.ColRowID, lo, lo+uint64(f.IVF.Lengths[p]))
		if err != nil {
			sr.add(Check{Name: "codes", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("partition %d's row ids do not read: %v", p, err)})
			return nil
		}
		for _, i := range byPart[p] {
			samples = append(samples, sample{part: p, idx: i, addr: binary.LittleEndian.Uint64(a.Values[8*i:]), vec: -1})
		}
	}
	st := &codeStats{sampled: len(samples), misplaced: map[int]int{}, earlier: map[int]int{}, drawn: map[int]*cloud{}, sampledIn: map[int]int{}, fragSampled: map[uint32]int{}}
	for d := range st.fragMatch {
		st.fragMatch[d] = map[uint32]int{}
	}
	var addrs []uint64
	for _, s := range samples {
		if live.contains(s.addr) {
			addrs = append(addrs, s.addr)
		}
	}
	batch, err := rd.ReadRows(ctx, addrs)
	if err != nil {
		return err
	}
	opts.Progress.RowsRead.Add(int64(len(batch.RowIDs)))
	at := make(map[uint64]int, len(batch.RowIDs))
	for i, id := range batch.RowIDs {
		at[id] = i
	}
	for i := range samples {
		s := &samples[i]
		switch j, ok := at[s.addr]; {
		case !live.contains(s.addr):
			st.stale++
		case !ok:
			st.noVector++
		default:
			s.vec = j
		}
	}

	// Encode the vectors with the segment's model (and, for dot PQ, with
	// pylance's other assignment: create_index_uncommitted with an
	// injected codebook assigns by inner product).
	dim := o.model.Dim
	raw := slices.Clone(batch.Vectors)
	exp, err := o.encodeBatch(o.model, batch.Vectors)
	if err != nil {
		return err
	}
	var alt *encoded
	if o.model.PQ != nil && o.model.Metric == encode.Dot {
		m2 := *o.model
		pq := *m2.PQ
		pq.DotByInnerProduct = true
		m2.PQ = &pq
		if alt, err = o.encodeBatch(&m2, slices.Clone(raw)); err != nil {
			return err
		}
	}
	prepared := batch.Vectors // prepared in place by the encoder

	// Pass 2: per partition, the stored codes against the expected ones.
	rd0, err := search.NewReader(ix, f, 0)
	if err != nil {
		return err
	}
	quant := o.model.Type.Quantizer()
	w := ix.CodeWidth()
	depths := 1
	if quant == "pq" || quant == "rq" {
		depths = maxDepth + 1
	}
	cmp := newComparer(o, ix)
	si := 0
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		mine := samples[si:]
		k := 0
		for k < len(mine) && mine[k].part == p {
			k++
		}
		mine, si = mine[:k], si+k
		part, err := rd0.Read(ctx, p)
		if err != nil {
			sr.add(Check{Name: "codes", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("partition %d does not read: %v", p, err)})
			return nil
		}
		opts.Progress.RowsRead.Add(int64(part.Len()))
		cand := make([][]byte, depths)
		cand[0] = part.Codes
		for d := 1; d < depths; d++ {
			cand[d] = search.Undo(quant, cand[d-1], part.Len(), w, 1)
		}
		for _, s := range mine {
			if s.vec < 0 {
				continue
			}
			e := int(exp.parts[s.vec])
			if e < 0 {
				st.dropped++
				continue
			}
			v := prepared[s.vec*dim : (s.vec+1)*dim]
			st.sampledIn[p]++
			if e != p {
				switch {
				case cmp.partitionTie(v, p, e):
					st.ties++
				case cmp.earlierModel(v, p, e):
					st.earlier[p]++
					st.drawnTo(p, dim).add(v)
				default:
					st.misplaced[p]++
				}
				continue
			}
			st.compared++
			frag := uint32(s.addr >> 32)
			st.fragSampled[frag]++
			for d := 0; d < depths; d++ {
				row := cand[d][s.idx*w : (s.idx+1)*w]
				if cmp.codesMatch(v, p, row, exp.row(0, s.vec), alt) || alt != nil && cmp.codesMatch(v, p, row, alt.row(0, s.vec), alt) {
					st.match[d]++
					st.fragMatch[d][frag]++
				}
				if alt != nil {
					l2, ip := slices.Equal(row, exp.row(0, s.vec)), slices.Equal(row, alt.row(0, s.vec))
					if l2 {
						st.exactL2++
					}
					if ip {
						st.exactIP++
					}
					switch {
					case l2 && !ip:
						st.onlyL2++
					case ip && !l2:
						st.onlyIP++
					}
				}
			}
			if quant == "rq" && !cmp.rqExtrasMatch(part, s.idx, exp, s.vec) {
				st.extras++
				if st.firstBad == "" {
					st.firstBad = fmt.Sprintf("row %d (partition %d)", s.addr, p)
				}
			}
		}
	}
	if alt != nil && min(st.onlyL2, st.onlyIP) >= max(2, st.compared/100) {
		// Rows of both assignments: pylance's create_index encodes dot PQ
		// by nearest entry (L2), its optimize_indices deltas by inner
		// product, and a merge (pylance's or ours) keeps both.
		o.mixedDot = [2]int{st.onlyL2, st.onlyIP}
	}
	if alt != nil && st.exactIP > st.exactL2 {
		// The segment was encoded by inner product (pylance's
		// create_index_uncommitted and optimize_indices deltas with the
		// dot metric): a fresh build to compare its recall with does too.
		m2 := *o.model
		pq := *m2.PQ
		pq.DotByInnerProduct = true
		m2.PQ = &pq
		o.fresh = &m2
	}
	st.disown(cmp)
	report(o, st, sr)
	return nil
}

// cloud sums rows to give their mean and spread.
type cloud struct {
	n   int
	sum []float64
	sq  float64
}

func (c *cloud) add(v []float32) {
	c.n++
	for j, x := range v {
		c.sum[j] += float64(x)
		c.sq += float64(x) * float64(x)
	}
}

func (st *codeStats) drawnTo(p, dim int) *cloud {
	c := st.drawn[p]
	if c == nil {
		c = &cloud{sum: make([]float64, dim)}
		st.drawn[p] = c
	}
	return c
}

// disown counts as misplaced the earlier rows of a partition whose
// centroid disagrees with its rows. An extension's appended centroid may
// draw nearly all rows of a partition it lands beside, but those rows
// were placed by the narrower model, whose centroid p still lies among
// them. A damaged centroid does not: nearly all the partition's sampled
// rows are nearer other centroids and the centroid lies far outside
// their cloud (its distance to their mean more than three times their
// spread), whatever the centroids' order.
func (st *codeStats) disown(cmp *comparer) {
	dim := cmp.m.Dim
	for p, k := range st.earlier {
		in := st.sampledIn[p]
		if in < 4 || (k+st.misplaced[p])*10 < in*9 {
			continue
		}
		c := st.drawn[p]
		centroid := cmp.m.Centroids[p*dim : (p+1)*dim]
		var norm2, offset2 float64
		for j, s := range c.sum {
			mean := s / float64(c.n)
			norm2 += mean * mean
			d := mean - float64(centroid[j])
			offset2 += d * d
		}
		spread := c.sq/float64(c.n) - norm2 // mean squared distance to the mean
		if offset2 > 9*max(spread, 0) {
			st.misplaced[p] += k
			delete(st.earlier, p)
		}
	}
}

// encoded is a batch encoded with a model.
type encoded struct {
	parts []int32
	cols  [][]byte
	width []int
	names []string
}

func (e *encoded) row(c, i int) []byte { return e.cols[c][i*e.width[c] : (i+1)*e.width[c]] }

func (e *encoded) col(name string) int {
	for i, n := range e.names {
		if n == name {
			return i
		}
	}
	return -1
}

// encodeBatch encodes vecs (prepared in place) with m as a fresh build of
// the segment's rows does (o.encoder). float16 IVF_FLAT rows come back
// widened to float32, the form the search reader gives stored rows in.
func (o *opened) encodeBatch(m *encode.Model, vecs []float32) (*encoded, error) {
	enc, err := o.encoder(m)
	if err != nil {
		return nil, err
	}
	n := len(vecs) / max(m.Dim, 1)
	out := &encoded{parts: make([]int32, n)}
	cols := enc.Columns()
	for _, c := range cols {
		out.cols = append(out.cols, make([]byte, n*c.Width()))
		out.width = append(out.width, c.Width())
		out.names = append(out.names, c.Name)
	}
	if n > 0 {
		enc.Encode(&encode.Scratch{}, vecs, out.parts, out.cols)
	}
	for c, col := range cols {
		if col.Type.Kind == lancefile.KindFixedSizeList && col.Type.Elem == lancefile.KindFloat16 {
			out.cols[c], out.width[c] = search.WidenHalf(out.cols[c]), 4*col.Type.Dim
		}
	}
	return out, nil
}

// comparer decides whether stored values agree with expected ones, up to
// near ties.
type comparer struct {
	m   *encode.Model
	enc *encode.Encoder
	dot bool
	// scratch
	resid, rot []float32
}

func newComparer(o *opened, ix *search.Index) *comparer {
	enc, _ := o.encoder(o.model) // the model validated when the index was made
	return &comparer{m: o.model, enc: enc, dot: o.model.Metric == encode.Dot}
}

// closeTo reports whether two distances are equal but for the summation
// order.
func closeTo(a, b float64) bool {
	return math.Abs(a-b) <= 1e-5*math.Max(math.Max(math.Abs(a), math.Abs(b)), 1e-3)
}

func (c *comparer) dist(a, b []float32) float64 {
	if c.dot {
		return 1 - float64(vecmath.Dot(a, b))
	}
	return float64(vecmath.L2Sq(a, b))
}

// earlierModel reports whether a row stored in partition p, whose
// nearest centroid is e, was placed right by a narrower model that this
// one extends: an extended model (maintain's retrain="auto") appends
// centroids and keeps the rows encoded before where they were, so a row
// may have a nearer centroid among the appended ones (e > p) while p is
// still its nearest among the centroids up to p. A row nearer to an
// earlier centroid than to its own was never placed right by any model.
func (c *comparer) earlierModel(v []float32, p, e int) bool {
	if e < p {
		return false
	}
	dim := c.m.Dim
	dp := c.dist(v, c.m.Centroids[p*dim:(p+1)*dim])
	for j := 0; j < p; j++ {
		if d := c.dist(v, c.m.Centroids[j*dim:(j+1)*dim]); d < dp && !closeTo(d, dp) {
			return false
		}
	}
	return true
}

// partitionTie: v is (but for rounding) as close to centroid p as to e.
func (c *comparer) partitionTie(v []float32, p, e int) bool {
	dim := c.m.Dim
	return closeTo(c.dist(v, c.m.Centroids[p*dim:(p+1)*dim]), c.dist(v, c.m.Centroids[e*dim:(e+1)*dim]))
}

func (c *comparer) residual(v []float32, p int) []float32 {
	dim := c.m.Dim
	c.resid = slices.Grow(c.resid[:0], dim)[:dim]
	cp := c.m.Centroids[p*dim : (p+1)*dim]
	for j := range c.resid {
		c.resid[j] = v[j] - cp[j]
	}
	return c.resid
}

// codesMatch compares a stored code row with the expected one.
func (c *comparer) codesMatch(v []float32, p int, stored, want []byte, alt *encoded) bool {
	if slices.Equal(stored, want) {
		return true
	}
	m := c.m
	switch m.Type.Quantizer() {
	case "flat":
		for j := 0; j < m.Dim; j++ {
			a := math.Float32frombits(binary.LittleEndian.Uint32(stored[4*j:]))
			b := math.Float32frombits(binary.LittleEndian.Uint32(want[4*j:]))
			if a != b && !(math.Abs(float64(a-b)) <= 1e-6*math.Max(1, math.Abs(float64(b)))) {
				return false
			}
		}
		return true
	case "sq":
		for j := range stored {
			if d := int(stored[j]) - int(want[j]); d > 1 || d < -1 {
				return false
			}
		}
		return true
	case "pq":
		x := v
		if !c.dot {
			x = c.residual(v, p)
		}
		pq := m.PQ
		nc := 1 << pq.NumBits
		sd := m.Dim / pq.NumSubVectors
		code := func(b []byte, s int) int {
			if pq.NumBits == 8 {
				return int(b[s])
			}
			return int(b[s/2]>>(4*(s%2))) & 0x0f
		}
		for s := 0; s < pq.NumSubVectors; s++ {
			a, b := code(stored, s), code(want, s)
			if a == b {
				continue
			}
			sub := x[s*sd : (s+1)*sd]
			cb := pq.Codebook[s*nc*sd : (s+1)*nc*sd]
			ea, eb := cb[a*sd:(a+1)*sd], cb[b*sd:(b+1)*sd]
			tie := closeTo(float64(vecmath.L2Sq(sub, ea)), float64(vecmath.L2Sq(sub, eb)))
			if alt != nil {
				tie = tie || closeTo(float64(vecmath.Dot(sub, ea)), float64(vecmath.Dot(sub, eb)))
			}
			if !tie {
				return false
			}
		}
		return true
	case "rq":
		res := c.residual(v, p)
		c.rot = slices.Grow(c.rot[:0], m.Dim)[:m.Dim]
		c.enc.Rotate(c.rot, res)
		norm := float64(vecmath.Norm(c.rot))
		for j := range stored {
			diff := stored[j] ^ want[j]
			for bit := 0; diff != 0; bit++ {
				if diff&1 != 0 {
					d := 8*j + bit
					if d >= m.Dim || math.Abs(float64(c.rot[d])) > 1e-5*math.Max(norm, 1e-6) {
						return false
					}
				}
				diff >>= 1
			}
		}
		return true
	}
	return false
}

// rqExtrasMatch compares what the RQ layout leaves alone: the extended
// codes and the correction factors.
func (c *comparer) rqExtrasMatch(part *search.Partition, i int, exp *encoded, j int) bool {
	f32 := func(name string) (float32, bool) {
		k := exp.col(name)
		if k < 0 {
			return 0, false
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(exp.row(k, j))), true
	}
	close32 := func(a, b float32) bool {
		return a == b || math.Abs(float64(a-b)) <= 1e-3*math.Max(1, math.Max(math.Abs(float64(a)), math.Abs(float64(b))))
	}
	for _, fc := range []struct {
		name string
		got  []float32
	}{{encode.ColRQAdd, part.Add}, {encode.ColRQScale, part.Scale}, {encode.ColRQError, part.Err}, {encode.ColRQExAdd, part.ExAdd}, {encode.ColRQExScale, part.ExScale}} {
		want, ok := f32(fc.name)
		if !ok || fc.got == nil {
			continue
		}
		if !close32(fc.got[i], want) {
			return false
		}
	}
	if k := exp.col(encode.ColRQExCodes); k >= 0 && part.Ex != nil {
		dim := c.m.Dim
		want := encode.UnpackBlockedRow(exp.row(k, j), c.m.RQ.NumBits-1, dim)
		got := part.Ex[i*dim : (i+1)*dim]
		off := 0
		for d := range want {
			if diff := int(got[d]) - int(want[d]); diff != 0 {
				if diff > 1 || diff < -1 {
					return false
				}
				off++
			}
		}
		// The extended code search may settle a few dimensions one level
		// apart for another summation order; more than that is damage.
		if off > max(2, dim/32) {
			return false
		}
	}
	return true
}

// report turns the counts into the layout and codes checks.
func report(o *opened, st *codeStats, sr *SegmentReport) {
	f := o.files
	quant := o.model.Type.Quantizer()
	declared := search.DeclaredDepth(f)
	nums := map[string]float64{"sampled": float64(st.sampled), "compared": float64(st.compared), "stale": float64(st.stale),
		"partition_ties": float64(st.ties)}
	misplaced := 0
	for _, k := range st.misplaced {
		misplaced += k
	}
	earlier := 0
	for _, k := range st.earlier {
		earlier += k
	}
	nums["misplaced"] = float64(misplaced)
	nums["earlier_model"] = float64(earlier)
	placed := st.compared + st.ties + earlier + misplaced
	if placed == 0 {
		msg := fmt.Sprintf("none of the %d sampled rows has a live vector to compare with (%d stale, %d without a vector)", st.sampled, st.stale, st.noVector)
		sr.add(Check{Name: "layout", Verdict: Skipped, Message: msg})
		sr.add(Check{Name: "codes", Verdict: Skipped, Message: msg, Numbers: nums})
		return
	}
	// Rows stored in the wrong partition.
	if float64(misplaced) > mismatchTolerance*float64(placed) {
		worst, worstN := -1, 0
		for p, k := range st.misplaced {
			if k > worstN || k == worstN && p < worst {
				worst, worstN = p, k
			}
		}
		msg := fmt.Sprintf("%d of %d sampled rows are stored in a partition whose centroid is not their nearest", misplaced, placed)
		if in := st.sampledIn[worst]; worstN*10 >= in*9 && worstN*2 >= misplaced {
			msg += fmt.Sprintf("; partition %d: %d of its %d sampled rows are nearer another centroid (its centroid disagrees with its rows)", worst, worstN, in)
			nums["worst_partition"] = float64(worst)
		}
		sr.add(Check{Name: "partitions", Verdict: Failed, Damage: DamageWrongPartition, Message: msg, Numbers: nums})
	}
	n := st.compared
	if n == 0 {
		sr.add(Check{Name: "layout", Verdict: Skipped, Message: "no sampled row is in the partition its vector belongs to"})
		sr.add(Check{Name: "codes", Verdict: Skipped, Message: "no sampled row is in the partition its vector belongs to", Numbers: nums})
		return
	}
	good := func(d int) bool { return float64(n-st.match[d]) <= mismatchTolerance*float64(n) }
	sr.CodesMismatch = float64(n-st.match[declared]) / float64(n)
	for d := 0; d <= maxDepth; d++ {
		nums[fmt.Sprintf("match_depth_%d", d)] = float64(st.match[d]) / float64(n)
	}
	nums["mismatch"] = sr.CodesMismatch
	layout := search.Layout(o.model.Type)
	depth := declared
	switch {
	case layout == "":
		sr.add(Check{Name: "layout", Verdict: OK, Message: fmt.Sprintf("%s codes have no layout transformation", strings.ToUpper(quant))})
	case good(declared):
		sr.add(Check{Name: "layout", Verdict: OK, Message: fmt.Sprintf("codes stored %s, as the metadata says (%s=%v)", layoutWords(layout, declared), layout, declared == 1)})
	default:
		found := -1
		for d := 0; d <= maxDepth; d++ {
			if d != declared && good(d) && (found < 0 || st.match[d] > st.match[found]) {
				found = d
			}
		}
		if found < 0 {
			sr.add(Check{Name: "layout", Verdict: Warning, Message: fmt.Sprintf("no known layout explains the codes (the metadata says %s=%v)", layout, declared == 1)})
			break
		}
		depth = found
		sr.LayoutDepth = found
		var damage, msg string
		switch {
		case found == 2 && declared == 1:
			damage = map[string]string{"pq": DamagePQTwice, "rq": DamageRQTwice}[quant]
			what := map[string]string{"pq": "PQ codes transposed twice", "rq": "RQ codes packed twice"}[quant]
			msg = fmt.Sprintf("%s: %.1f%% of sampled rows match their data once the layout is undone twice, %.1f%% as stored (the chained-merge damage)",
				what, 100*float64(st.match[2])/float64(n), 100*float64(st.match[declared])/float64(n))
		case found > declared:
			damage = DamageFlagLies
			msg = fmt.Sprintf("the metadata says %s=false, but the codes are stored %s (%.1f%% of sampled rows match that way)",
				layout, layoutWords(layout, found), 100*float64(st.match[found])/float64(n))
		default:
			damage = DamageFlagLies
			msg = fmt.Sprintf("the metadata says %s=true, but the codes are stored %s (%.1f%% of sampled rows match that way)",
				layout, layoutWords(layout, found), 100*float64(st.match[found])/float64(n))
		}
		ln := map[string]float64{"layout_depth": float64(found), "declared_depth": float64(declared)}
		for d := 0; d <= maxDepth; d++ {
			ln[fmt.Sprintf("match_depth_%d", d)] = nums[fmt.Sprintf("match_depth_%d", d)]
		}
		sr.add(Check{Name: "layout", Verdict: Failed, Damage: damage, Message: msg, Numbers: ln})
	}
	bad := n - st.match[depth] + st.extras
	nums["extras_mismatch"] = float64(st.extras)
	if float64(bad) <= mismatchTolerance*float64(n) {
		msg := fmt.Sprintf("%d sampled rows encode to their stored codes", n-bad)
		if depth != declared {
			msg += " once the layout is corrected"
		}
		if st.ties > 0 {
			msg += fmt.Sprintf(" (%d rows on a partition tie not compared)", st.ties)
		}
		sr.add(Check{Name: "codes", Verdict: OK, Message: msg, Numbers: nums})
		return
	}
	msg := fmt.Sprintf("%d of %d sampled rows have codes that differ from their data's (%.1f%%)", bad, n, 100*float64(bad)/float64(n))
	if st.extras > 0 {
		msg += fmt.Sprintf("; %d rows' extended codes or factors differ (first: %s)", st.extras, st.firstBad)
	}
	if layout != "" && depth == declared {
		msg += "; no layout transformation explains them"
	}
	msg += "; " + fragmentsOf(st, depth)
	sr.add(Check{Name: "codes", Verdict: Failed, Damage: DamageCodes, Message: msg, Numbers: nums})
}

func layoutWords(layout string, depth int) string {
	switch depth {
	case 0:
		return "row-major"
	case 1:
		return layout
	}
	return fmt.Sprintf("%s %d times", layout, depth)
}

// fragmentsOf names the fragments whose sampled rows disagree most (a
// segment merged from a damaged input has them in that input's
// fragments).
func fragmentsOf(st *codeStats, depth int) string {
	type fb struct {
		frag     uint32
		bad, all int
	}
	var list []fb
	for f, all := range st.fragSampled {
		if bad := all - st.fragMatch[depth][f]; bad > 0 {
			list = append(list, fb{f, bad, all})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].bad != list[j].bad {
			return list[i].bad > list[j].bad
		}
		return list[i].frag < list[j].frag
	})
	var parts []string
	for i, x := range list {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(list)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("%d (%d of %d sampled)", x.frag, x.bad, x.all))
	}
	return "they are in fragments " + strings.Join(parts, ", ")
}
