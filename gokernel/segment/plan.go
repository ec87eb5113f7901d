package segment

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/btree"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ngram"
	"github.com/lance-segmerge/lance-segmerge/gokernel/policy"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/zonemap"
)

// PlanFormatVersion versions the plan's serialised form; workers and the
// commit refuse versions they do not know.
const PlanFormatVersion = 1

// PlanOptions shape a plan: the index, the policy's options (see package
// policy; embedded, so their JSON keys sit beside index_name) and how
// IVF_SQ bounds are treated.
type PlanOptions struct {
	IndexName string `json:"index_name"`
	// StrictSQ refuses IVF_SQ segments whose bounds differ (see
	// MergeOptions.StrictSQ); by default they are planned, and the plan
	// records that its merges re-quantize.
	StrictSQ bool `json:"strict_sq"`
	policy.Options
}

// Task is one worker's job: merge these segments into one.
type Task struct {
	ID       int     `json:"task_id"`
	Segments []*Info `json:"segments"`
	Rows     uint64  `json:"rows"`
	Bytes    uint64  `json:"bytes"`
	// Reason says why the policy chose this task ("" for PolicyAll).
	Reason string `json:"reason"`
}

// Plan is a set of disjoint merge tasks over segments of one index, pinned
// to the dataset version it was made at.
type Plan struct {
	FormatVersion int    `json:"format_version"`
	PlanID        string `json:"plan_id"`
	URI           string `json:"dataset_uri"`
	ReadVersion   uint64 `json:"read_version"`
	IndexName     string `json:"index_name"`
	Column        string `json:"column"`
	IndexType     string `json:"index_type"`
	Tasks         []Task `json:"tasks"`
	// Untouched lists the index's segments the plan leaves alone.
	Untouched []string `json:"untouched"`
	// RequantizeSQ records that the planned IVF_SQ segments have different
	// bounds, which their merges re-quantize to the union.
	RequantizeSQ bool `json:"requantize_sq"`
	// Policy is the policy the plan was made with; Summary explains the
	// policy's decision as a whole (PolicyTiered).
	Policy  string `json:"policy"`
	Summary string `json:"summary"`
}

// PlanIndex plans the merge of the segments of one index at snap.
func PlanIndex(ctx context.Context, st storage.Store, snap *table.Snapshot, opts PlanOptions) (*Plan, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	compacted := compactedTest(ctx, st, snap)
	current := map[uint32]bool{}
	for _, f := range snap.FragmentIDs() {
		current[uint32(f)] = true
	}
	type cand struct {
		im  *pb.IndexMetadata
		pos int
	}
	var cands []cand
	var untouched []string
	found := false
	for pos, im := range movedView(ctx, st, snap, snap.Indices) {
		if im.GetName() != opts.IndexName {
			continue
		}
		if t := OtherType(im); !MergeableTypes[t] {
			if err := RequireVector(im); err != nil {
				return nil, err
			}
		}
		found = true
		ids, ok, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, fmt.Errorf("segment %s of index %q: %w", table.IndexUUID(im), opts.IndexName, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: segment %s of index %q has no fragment coverage; rebuild the index with pylance", errkind.InvalidInput, table.IndexUUID(im), opts.IndexName)
		}
		if err := refuseDeferredRemap(compacted, im, ids, func(f uint32) bool { return current[f] }); err != nil {
			return nil, err
		}
		live := slices.ContainsFunc(ids, func(f uint32) bool { return current[f] })
		if !live {
			// Deferred, or covering only deleted fragments: nothing to merge.
			untouched = append(untouched, table.IndexUUID(im))
			continue
		}
		cands = append(cands, cand{im, pos})
	}
	if !found {
		return nil, fmt.Errorf("%w: index %q does not exist in %s version %d (indices: %v)", errkind.NotFound, opts.IndexName, st.URI(), snap.Ref.Version, IndexNames(snap))
	}
	// Newest last: by the dataset version a segment was built at, then by
	// commit order.
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		return cmp.Or(cmp.Compare(a.im.GetDatasetVersion(), b.im.GetDatasetVersion()), cmp.Compare(a.pos, b.pos)) < 0
	})
	if n := opts.MaxSegmentsToMerge; n > 0 && len(cands) > n && opts.Policy != PolicyTiered {
		for _, c := range cands[:len(cands)-n] {
			untouched = append(untouched, table.IndexUUID(c.im))
		}
		cands = cands[len(cands)-n:]
	}
	metas := make([]*pb.IndexMetadata, len(cands))
	for i, c := range cands {
		metas[i] = c.im
	}
	p, err := PlanSegments(ctx, st, snap, metas, opts)
	if err != nil {
		return nil, err
	}
	untouched = append(untouched, p.Untouched...)
	sort.Strings(untouched)
	p.Untouched = untouched
	if len(metas) > 0 {
		p.Column = snap.FieldPath(metas[0].GetFields()[0])
	}
	if p.IndexType == "" {
		// A plan without tasks opened no segment: name the type from one.
		p.IndexType = indexTypeOf(ctx, st, snap, opts.IndexName)
	}
	p.PlanID = planID(p)
	return p, nil
}

// indexTypeOf names the type of an index from one of its segments: a
// scalar type from the entry, a vector one from its first segment's files
// ("" when they do not open: a plan without tasks does not fail on them).
func indexTypeOf(ctx context.Context, st storage.Store, snap *table.Snapshot, name string) string {
	for _, im := range snap.Indices {
		if im.GetName() != name {
			continue
		}
		if t := OtherType(im); t != "" {
			return t
		}
		srcs, err := openSources(ctx, st, snap, []*pb.IndexMetadata{im})
		if err != nil {
			return ""
		}
		defer closeSources(srcs)
		if m, err := sharedModel(srcs, true); err == nil {
			return string(m.typ)
		}
		return ""
	}
	return ""
}

func (o PlanOptions) check() error {
	if o.IndexName == "" {
		return fmt.Errorf("%w: an index name is required", errkind.InvalidInput)
	}
	return o.Options.Check()
}

// PlanSegments groups the given segments into balanced tasks after
// checking, once, that they can all be merged together (one index, one
// model, disjoint coverage), so that no task fails on a mismatch later.
// Fewer than two segments give a plan without tasks.
func PlanSegments(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts PlanOptions) (*Plan, error) {
	if opts.IndexName == "" && len(metas) > 0 {
		opts.IndexName = metas[0].GetName()
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	metas = movedView(ctx, st, snap, metas)
	p := &Plan{FormatVersion: PlanFormatVersion, URI: st.URI(), ReadVersion: snap.Ref.Version, IndexName: opts.IndexName, Tasks: []Task{}, Untouched: []string{}, Policy: cmp.Or(opts.Policy, PolicyAll)}
	if len(metas) < 2 && (opts.Policy != PolicyTiered || len(metas) == 0) {
		p.PlanID = planID(p)
		return p, nil
	}
	if err := checkEntries(ctx, st, metas, snap); err != nil {
		return nil, err
	}
	var sz *planSizes
	var err error
	switch OtherType(metas[0]) {
	case "BTREE":
		sz, err = btreeSizes(ctx, st, metas)
	case "ZONEMAP", "BLOOMFILTER":
		sz, err = zoneMapSizes(ctx, st, metas)
	case "BITMAP", "LABEL_LIST":
		sz, err = bitmapSizes(ctx, st, snap, metas)
	case "NGRAM":
		sz, err = ngramSizes(ctx, st, metas)
	case "INVERTED":
		sz, err = ftsSizes(ctx, st, metas)
	default:
		sz, err = vectorSizes(ctx, st, snap, metas, opts)
	}
	if err != nil {
		return nil, err
	}
	defer sz.close()
	p.IndexType = sz.indexType
	p.RequantizeSQ = sz.requantize
	p.Column = snap.FieldPath(metas[0].GetFields()[0])
	rows, bytes := sz.rows, sz.bytes
	var groups [][]int
	var reasons []string
	byID := fragmentsByID(snap)
	if opts.Policy == PolicyTiered {
		segs := make([]policy.Segment, len(metas))
		for i := range metas {
			segs[i] = policy.Segment{Rows: rows[i], Stale: staleRowsIn(byID, metas[i], rows[i]), Bytes: bytes[i]}
		}
		var tasks []policy.Task
		tasks, p.Summary = policy.ChooseTiered(segs, opts.Options)
		picked := map[int]bool{}
		for _, t := range tasks {
			groups = append(groups, t.Members)
			reasons = append(reasons, t.Reason)
			for _, i := range t.Members {
				picked[i] = true
			}
		}
		for i, im := range metas {
			if !picked[i] {
				p.Untouched = append(p.Untouched, table.IndexUUID(im))
			}
		}
	} else {
		o := opts.Options
		if sz.indexType == "INVERTED" {
			// A tree's last level rewrites every posting list (one
			// partition holds every token), so smaller first-level
			// groups only repeat work (bench_fts: 9.5 s as a tree of 32,
			// 8.2 s in one task): one task takes them all.
			o.SegmentsPerTask = max(o.SegmentsPerTask, len(metas))
		}
		if oneTask[sz.indexType] > 0 && o.SegmentsPerTask >= defaultSegmentsPerTask {
			// Every level of a tree rewrites every row of a BTREE or
			// BITMAP, and their k-way merges cost about the same per row
			// whatever k: one task is about half the time of a tree of two
			// levels (bench_btree, 201 BTREE segments: 2.08 s of merging
			// as 7 tasks then one, 1.11 s as one). Inputs are open at
			// once, so a task takes at most oneTask's bound. A caller
			// asking for smaller tasks than the default gets them.
			o.SegmentsPerTask = max(o.SegmentsPerTask, min(len(metas), oneTask[sz.indexType]))
		}
		groups = policy.Group(bytes, rows, o)
	}
	for ti, members := range groups {
		t := Task{ID: ti}
		if reasons != nil {
			t.Reason = reasons[ti]
		}
		for _, i := range members {
			info, err := Describe(metas[i])
			if err != nil {
				return nil, err
			}
			if info.Stats, err = sz.stats(i); err != nil {
				return nil, err
			}
			info.Stats.StaleRows = staleRowsIn(byID, metas[i], info.Stats.NumRows)
			t.Segments = append(t.Segments, info)
			t.Rows += rows[i]
			t.Bytes += bytes[i]
		}
		p.Tasks = append(p.Tasks, t)
	}
	p.PlanID = planID(p)
	return p, nil
}

// planSizes is what planning needs of its segments: their index type,
// rows and bytes, and their statistics for the plan's tasks.
type planSizes struct {
	indexType   string
	requantize  bool
	rows, bytes []uint64
	stats       func(i int) (*Stats, error)
	close       func()
}

// vectorSizes opens vector segments once, checking that they share one
// model (so that no task fails on a mismatch later).
func vectorSizes(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts PlanOptions) (*planSizes, error) {
	srcs, err := openSources(ctx, st, snap, metas)
	if err != nil {
		return nil, err
	}
	m, err := sharedModel(srcs, !opts.StrictSQ)
	if err != nil {
		closeSources(srcs)
		return nil, err
	}
	sz := &planSizes{indexType: string(m.typ), requantize: m.requantize, rows: make([]uint64, len(srcs)), bytes: make([]uint64, len(srcs)),
		close: func() { closeSources(srcs) }}
	for i, s := range srcs {
		sz.rows[i] = s.files.Aux.NumRows()
		sz.bytes[i] = uint64(s.files.Aux.Size() + s.files.Index.Size())
	}
	// The files are open already: their statistics cost nothing more.
	sz.stats = func(i int) (*Stats, error) { return filesStats(srcs[i].files, metas[i]) }
	return sz, nil
}

// btreeSizes opens BTREE segments once, checking that they share their
// key type and page size.
func btreeSizes(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) (*planSizes, error) {
	sz := &planSizes{indexType: "BTREE", rows: make([]uint64, len(metas)), bytes: make([]uint64, len(metas)), close: func() {}}
	if err := requireOneType(metas, "BTREE"); err != nil {
		return nil, err
	}
	// opened a few at a time: each open reads two files' metadata (a
	// thousand inputs took 0.26 s one after the other)
	type shape struct {
		key   lancefile.DataType
		batch int
	}
	shapes := make([]shape, len(metas))
	err := parallel.Each(len(metas), openParallelism, func(i int) error {
		s, err := btree.Open(ctx, st, metas[i])
		if err != nil {
			return err
		}
		shapes[i], sz.rows[i] = shape{s.KeyType, s.BatchSize}, s.Rows
		s.Close()
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, im := range metas {
		if a, b := shapes[0], shapes[i]; a != b {
			return nil, fmt.Errorf("%w: btree segments %s (%s keys, pages of %d) and %s (%s, %d) cannot merge", errkind.InvalidInput,
				table.IndexUUID(metas[0]), a.key, a.batch, table.IndexUUID(im), b.key, b.batch)
		}
		for _, f := range im.GetFiles() {
			sz.bytes[i] += f.GetSizeBytes()
		}
	}
	sz.stats = func(i int) (*Stats, error) { return otherStats(ctx, st, metas[i], "BTREE") }
	return sz, nil
}

// zoneMapSizes reads ZONEMAP or BLOOMFILTER segments once (their zones are few),
// checking that they share their key type and zone size.
func zoneMapSizes(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) (*planSizes, error) {
	kind := zoneKind(OtherType(metas[0]))
	if err := requireOneType(metas, kind.Name); err != nil {
		return nil, err
	}
	sz := &planSizes{indexType: kind.Name, rows: make([]uint64, len(metas)), bytes: make([]uint64, len(metas)), close: func() {}}
	var first *zonemap.Segment
	for i, im := range metas {
		s, err := zonemap.ReadKind(ctx, st, im, kind)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = s
		} else if err := first.SameAs(s); err != nil {
			return nil, err
		}
		sz.rows[i] = s.Rows
		for _, f := range im.GetFiles() {
			sz.bytes[i] += f.GetSizeBytes()
		}
	}
	sz.stats = func(i int) (*Stats, error) { return otherStats(ctx, st, metas[i], kind.Name) }
	return sz, nil
}

// bitmapSizes are the planner's numbers of BITMAP or LABEL_LIST segments:
// rows are the physical rows of the fragments each covers (a BITMAP lists
// each row once; counting the (row, key) pairs would read every bitmap,
// seconds for a million keys), and the inputs must agree on their key
// type (their keys, read by the merge, are not read here: 0.13 s of 201
// segments' ten million keys).
func bitmapSizes(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata) (*planSizes, error) {
	typ := OtherType(metas[0])
	if err := requireOneType(metas, typ); err != nil {
		return nil, err
	}
	sz := &planSizes{indexType: typ, rows: make([]uint64, len(metas)), bytes: make([]uint64, len(metas)), close: func() {}}
	byID := fragmentsByID(snap)
	var keyType lancefile.DataType
	for i, im := range metas {
		t, err := bitmap.KeyType(ctx, st, im)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			keyType = t
		} else if t != keyType {
			return nil, fmt.Errorf("%w: bitmap segments %s (%s keys) and %s (%s) cannot merge", errkind.InvalidInput,
				table.IndexUUID(metas[0]), keyType, table.IndexUUID(im), t)
		}
		frags, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, err
		}
		for _, f := range frags {
			if fr := byID[uint64(f)]; fr != nil {
				sz.rows[i] += fr.GetPhysicalRows()
			}
		}
		for _, f := range im.GetFiles() {
			sz.bytes[i] += f.GetSizeBytes()
		}
	}
	sz.stats = func(i int) (*Stats, error) { return otherStatsOf(ctx, st, metas[i], typ, false, nil) }
	return sz, nil
}

// ngramSizes are the planner's numbers of NGRAM segments: rows are their
// tokens (the file's rows; counting (token, row) pairs would read every
// posting list).
func ngramSizes(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) (*planSizes, error) {
	if err := requireOneType(metas, "NGRAM"); err != nil {
		return nil, err
	}
	sz := &planSizes{indexType: "NGRAM", rows: make([]uint64, len(metas)), bytes: make([]uint64, len(metas)), close: func() {}}
	err := parallel.Each(len(metas), openParallelism, func(i int) error {
		s, err := ngram.Open(ctx, st, metas[i])
		if err != nil {
			return err
		}
		sz.rows[i] = s.Tokens
		s.Close()
		for _, f := range metas[i].GetFiles() {
			sz.bytes[i] += f.GetSizeBytes()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sz.stats = func(i int) (*Stats, error) { return otherStats(ctx, st, metas[i], "NGRAM") }
	return sz, nil
}

// oneTask are the index types whose default plan merges their segments
// in one task, and up to how many (each input holds a file open and a
// window in memory; a BTREE merge of more than 256 runs in groups, and
// its 1,001 segments merge in one task in half the time of a tree of
// 256-segment tasks). defaultSegmentsPerTask is the Python verbs' default
// segments_per_task (and optimize's fan_in).
var oneTask = map[string]int{"BTREE": 1024, "BITMAP": 256, "LABEL_LIST": 256}

const defaultSegmentsPerTask = 32

// ftsSizes are the planner's numbers of INVERTED segments: rows are their
// documents (read from the files' metadata).
func ftsSizes(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata) (*planSizes, error) {
	if err := requireOneType(metas, "INVERTED"); err != nil {
		return nil, err
	}
	sz := &planSizes{indexType: "INVERTED", rows: make([]uint64, len(metas)), bytes: make([]uint64, len(metas)), close: func() {}}
	descs := make([]*fts.Description, len(metas))
	for i, im := range metas {
		d, err := fts.Describe(ctx, st, im)
		if err != nil {
			return nil, err
		}
		descs[i], sz.rows[i] = d, d.Docs
		for _, f := range im.GetFiles() {
			sz.bytes[i] += f.GetSizeBytes()
		}
	}
	sz.stats = func(i int) (*Stats, error) { return otherStatsOf(ctx, st, metas[i], "INVERTED", true, descs[i]) }
	return sz, nil
}

// MaxGroupSizes bounds the segments GroupSizes takes (a thousand deltas
// is the scale this package is built for; a million is far beyond it).
const MaxGroupSizes = 1 << 20

// GroupSizes groups segments of the given loads (bytes) and rows into
// tasks exactly as PlanSegments does, without opening any file: a driver
// uses it to predict the later levels of a tree merge, whose inputs do not
// exist yet. Returns each task's members (indices into load), in task
// order; fewer than two segments give no tasks.
func GroupSizes(load, rows []uint64, opts PlanOptions) ([][]int, error) {
	switch {
	case len(load) != len(rows):
		return nil, fmt.Errorf("%w: %d loads but %d row counts", errkind.InvalidInput, len(load), len(rows))
	case len(load) > MaxGroupSizes:
		return nil, fmt.Errorf("%w: %d segments to group (at most %d)", errkind.InvalidInput, len(load), MaxGroupSizes)
	case opts.SegmentsPerTask < 2:
		return nil, fmt.Errorf("%w: segments_per_task must be at least 2, got %d", errkind.InvalidInput, opts.SegmentsPerTask)
	case opts.TargetRowsPerTask < 0:
		return nil, fmt.Errorf("%w: target_rows_per_task must be positive, got %d", errkind.InvalidInput, opts.TargetRowsPerTask)
	}
	if len(load) < 2 {
		return [][]int{}, nil
	}
	return policy.Group(load, rows, opts.Options), nil
}

// planID names a plan by its content: the same inputs give the same id.
func planID(p *Plan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00", p.URI, p.ReadVersion, p.IndexName)
	for _, t := range p.Tasks {
		h.Write([]byte(strconv.Itoa(t.ID)))
		for _, s := range t.Segments {
			h.Write([]byte(s.UUID))
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// DecodePlan decodes a plan's JSON (as PlanIndex wrote it, after a trip
// through a user's hands or another machine) and checks it against snap,
// the dataset version it claims to be for: its format version, its read
// version, and every task: at least two segments, each of them a valid
// segment of the plan's index (ParseSegments: fragment bitmaps bounded by
// the dataset), no segment twice. Every failure is errkind.InvalidInput.
func DecodePlan(b []byte, snap *table.Snapshot) (*Plan, error) {
	var raw struct {
		Plan
		Tasks []struct {
			ID       int             `json:"task_id"`
			Segments json.RawMessage `json:"segments"`
			Rows     uint64          `json:"rows"`
			Bytes    uint64          `json:"bytes"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: plan JSON: %w", errkind.InvalidInput, err)
	}
	p := raw.Plan
	p.Tasks = nil
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: plan %s: %s", errkind.InvalidInput, p.PlanID, fmt.Sprintf(format, args...))
	}
	switch {
	case p.FormatVersion != PlanFormatVersion:
		return nil, bad("format version %d, this lance-segmerge reads %d", p.FormatVersion, PlanFormatVersion)
	case p.IndexName == "":
		return nil, bad("no index name")
	case p.ReadVersion != snap.Ref.Version:
		return nil, bad("was made at version %d, not at version %d", p.ReadVersion, snap.Ref.Version)
	}
	seen := map[string]int{}
	for _, t := range raw.Tasks {
		metas, err := ParseSegments(t.Segments, snap)
		if err != nil {
			return nil, bad("task %d: %v", t.ID, err)
		}
		if len(metas) < 2 {
			return nil, bad("task %d has %d segments; a task merges at least two", t.ID, len(metas))
		}
		task := Task{ID: t.ID, Rows: t.Rows, Bytes: t.Bytes}
		for _, im := range metas {
			u := table.IndexUUID(im)
			if other, dup := seen[u]; dup {
				return nil, bad("segment %s is in tasks %d and %d", u, other, t.ID)
			}
			seen[u] = t.ID
			if im.GetName() != p.IndexName {
				return nil, bad("task %d: segment %s belongs to index %q, the plan is for %q", t.ID, u, im.GetName(), p.IndexName)
			}
			info, err := Describe(im)
			if err != nil {
				return nil, bad("task %d: %v", t.ID, err)
			}
			task.Segments = append(task.Segments, info)
		}
		p.Tasks = append(p.Tasks, task)
	}
	if p.Tasks == nil {
		p.Tasks = []Task{}
	}
	return &p, nil
}
