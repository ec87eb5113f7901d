package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/search"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

// Options control Verify. Zero values mean the defaults noted.
type Options struct {
	// SampleRows is how many rows of each segment the codes check reads
	// back from the data (default 1024).
	SampleRows int `json:"sample_rows"`
	// Queries is how many queries the recall check samples from each
	// segment's data; 0 skips the recall check.
	Queries int `json:"queries"`
	// K and NProbes are the recall check's search parameters (default 10
	// and search.DefaultNProbes).
	K       int `json:"k"`
	NProbes int `json:"nprobes"`
	// Deep also checks that every row id names a row its fragment has.
	Deep bool   `json:"deep"`
	Seed uint64 `json:"seed"`
	// Segments restricts the check to these segment uuids (default: every
	// segment of the index).
	Segments []string `json:"segments"`
	// Cheap is the check before a commit: files, structure and the codes
	// of a sample read from a bounded number of partitions (no full row
	// id scan, no model comparison with other segments, no recall); for
	// BTREE, a sample of pages and the whole page table; for INVERTED, a
	// sample of posting lists per partition and no text.
	Cheap bool `json:"cheap"`
	// PartitionRows bounds the rows of the partitions the codes check
	// reads (default: 0, no bound; Cheap: 64 × SampleRows).
	PartitionRows int `json:"partition_rows"`
	// Parallelism bounds the goroutines of the recall check (default
	// GOMAXPROCS).
	Parallelism int `json:"parallelism"`
	// Progress receives counters (segments done, rows read) and stages.
	Progress *segment.Progress `json:"-"`
}

func (o Options) withDefaults() Options {
	if o.SampleRows <= 0 {
		o.SampleRows = 1024
	}
	if o.K <= 0 {
		o.K = 10
	}
	if o.NProbes <= 0 {
		o.NProbes = search.DefaultNProbes
	}
	if o.Parallelism <= 0 {
		o.Parallelism = runtime.GOMAXPROCS(0)
	}
	if o.Cheap {
		o.Queries, o.Deep = 0, false
		if o.PartitionRows <= 0 {
			o.PartitionRows = 64 * o.SampleRows
		}
	}
	if o.Progress == nil {
		o.Progress = &segment.Progress{}
	}
	return o
}

// Limits on what a caller may ask for.
const (
	maxSampleRows = 1 << 24
	maxQueries    = 1 << 16
	maxK          = 1 << 14
)

func (o Options) check() error {
	switch {
	case o.SampleRows > maxSampleRows:
		return fmt.Errorf("%w: sample_rows %d above %d", errkind.InvalidInput, o.SampleRows, maxSampleRows)
	case o.Queries < 0 || o.Queries > maxQueries:
		return fmt.Errorf("%w: queries %d outside [0, %d]", errkind.InvalidInput, o.Queries, maxQueries)
	case o.K > maxK:
		return fmt.Errorf("%w: k %d above %d", errkind.InvalidInput, o.K, maxK)
	}
	return nil
}

// indexSegments returns the manifest entries of a vector index, in
// manifest order. errkind.NotFound when the version has no such index.
func indexSegments(snap *table.Snapshot, indexName string) ([]*pb.IndexMetadata, error) {
	var out []*pb.IndexMetadata
	for _, im := range snap.Indices {
		if im.GetName() != indexName {
			continue
		}
		if t := segment.OtherType(im); !segment.MergeableTypes[t] {
			if err := segment.RequireVector(im); err != nil {
				return nil, err
			}
		}
		out = append(out, im)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: version %d has no index %q (indices: %v)", errkind.NotFound, snap.Ref.Version, indexName, segment.IndexNames(snap))
	}
	return out, nil
}

// Verify checks every segment of a vector index at a dataset version (or
// those opts.Segments names) and reports what it finds. Damage is reported,
// not returned: an error means the check itself could not run (the
// dataset, the index or the data files unreadable, cancellation).
func Verify(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName string, opts Options) (*Report, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	all, err := indexSegments(snap, indexName)
	if err != nil {
		return nil, err
	}
	metas := all
	if opts.Segments != nil {
		byUUID := map[string]*pb.IndexMetadata{}
		for _, im := range all {
			byUUID[table.IndexUUID(im)] = im
		}
		metas = nil
		for _, u := range opts.Segments {
			im, ok := byUUID[u]
			if !ok {
				return nil, fmt.Errorf("%w: index %q has no segment %s at version %d", errkind.NotFound, indexName, u, snap.Ref.Version)
			}
			metas = append(metas, im)
		}
	}
	return verifyMetas(ctx, st, snap, indexName, all, metas, opts)
}

// CheckSegments checks segments that may not be committed yet (merge
// outputs before their commit) against the dataset version snap: the
// manifest does not need to list them.
func CheckSegments(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts Options) (*Report, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if len(metas) == 0 {
		return &Report{Clean: true, Segments: []*SegmentReport{}}, nil
	}
	name := metas[0].GetName()
	var others []*pb.IndexMetadata
	if !opts.Cheap {
		others, _ = indexSegments(snap, name)
	}
	return verifyMetas(ctx, st, snap, name, append(others, metas...), metas, opts)
}

func verifyMetas(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName string, all, metas []*pb.IndexMetadata, opts Options) (*Report, error) {
	prog := opts.Progress
	prog.PartitionsTotal.Store(int64(len(metas)))
	rep := &Report{IndexName: indexName, Version: snap.Ref.Version, Deep: opts.Deep, SampleRows: opts.SampleRows,
		Queries: opts.Queries, K: opts.K, NProbes: opts.NProbes, Clean: true}
	if len(metas) > 0 && segment.MergeableTypes[segment.OtherType(metas[0])] {
		return verifyScalar(ctx, st, snap, rep, metas, opts)
	}

	// The index's models, for the consistency check (every segment's,
	// the ones not being checked too).
	var models *modelSet
	if !opts.Cheap && len(all) > 1 {
		prog.SetStage("models")
		var err error
		if models, err = readModels(ctx, st, snap, all); err != nil {
			return nil, err
		}
	}
	var col string
	for _, im := range metas {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sr, err := verifySegment(ctx, st, snap, im, models, &col, opts)
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
		}
		sr.finish(indexName, columnOf(snap, im))
		if rep.IndexType == "" && sr.IndexType != "" {
			rep.IndexType = sr.IndexType
		}
		if sr.Verdict == Damaged {
			rep.Clean = false
		}
		rep.Segments = append(rep.Segments, sr)
		prog.PartitionsDone.Add(1)
	}
	if models != nil {
		rep.Metric = models.metric
	}
	for _, im := range metas {
		if rep.Metric == "" {
			rep.Metric = metricOf(im)
		}
		if rep.Column == "" {
			rep.Column = columnOf(snap, im)
		}
	}
	prog.SetStage("done")
	return rep, nil
}

// columnOf is the path of the column an index entry indexes ("" when it
// names none).
func columnOf(snap *table.Snapshot, im *pb.IndexMetadata) string {
	if len(im.GetFields()) == 0 {
		return ""
	}
	return snap.FieldPath(im.GetFields()[0])
}

// metricOf reads the metric of an index entry's details, "" when it has
// none.
func metricOf(im *pb.IndexMetadata) string {
	d := &pb.VectorIndexDetails{}
	if im.GetIndexDetails() == nil || im.GetIndexDetails().UnmarshalTo(d) != nil {
		return ""
	}
	switch d.GetMetricType() {
	case pb.VectorIndexDetails_L2:
		return "l2"
	case pb.VectorIndexDetails_COSINE:
		return "cosine"
	case pb.VectorIndexDetails_DOT:
		return "dot"
	}
	return ""
}

// verifySegment runs every check of one segment. It returns an error only
// when a check could not run for reasons outside the segment (the data
// files, cancellation).
// verifyScalar checks the segments of a BTREE, ZONEMAP, BITMAP,
// LABEL_LIST or NGRAM index (verifyBTree, verifyZoneMap, verifyBitmap,
// verifyNgram) into rep.
func verifyScalar(ctx context.Context, st storage.Store, snap *table.Snapshot, rep *Report, metas []*pb.IndexMetadata, opts Options) (*Report, error) {
	typ := segment.OtherType(metas[0])
	rep.IndexType, rep.Queries, rep.SampleRows = typ, 0, 0
	for _, im := range metas {
		if t := segment.OtherType(im); t != typ {
			return nil, fmt.Errorf("%w: segment %s is a %s segment among %s ones", errkind.InvalidInput, table.IndexUUID(im), cmpOr(t, "vector"), typ)
		}
		check := func(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, error) {
			return verifyBTree(ctx, st, snap, im, opts.Cheap)
		}
		switch typ {
		case "ZONEMAP", "BLOOMFILTER":
			check = verifyZoneMap
		case "BITMAP", "LABEL_LIST":
			check = func(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, error) {
				return verifyBitmap(ctx, st, snap, im, opts.Cheap)
			}
		case "NGRAM":
			check = verifyNgram
		case "INVERTED":
			check = func(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, error) {
				return verifyFTS(ctx, st, snap, im, opts.Cheap)
			}
		}
		sr, err := check(ctx, st, snap, im)
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
		}
		sr.finish(rep.IndexName, columnOf(snap, im))
		if sr.Verdict == Damaged {
			rep.Clean = false
		}
		rep.Segments = append(rep.Segments, sr)
		opts.Progress.PartitionsDone.Add(1)
	}
	rep.Column = columnOf(snap, metas[0])
	opts.Progress.SetStage("done")
	return rep, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startSegment is a segment's report before its checks (numbers not
// measured are -1), and the store its files live in (a shallow clone's
// source for a segment of it).
func startSegment(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) (*SegmentReport, storage.Store, error) {
	sr := &SegmentReport{UUID: table.IndexUUID(im), LayoutDepth: -1, Recall: -1, FreshRecall: -1, CodesMismatch: -1}
	sr.FragmentIDs, _, _ = table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	if sr.FragmentIDs == nil {
		sr.FragmentIDs = []uint32{}
	}
	if im.BaseId == nil {
		return sr, st, nil
	}
	ist, err := snap.IndexStore(ctx, st, im)
	return sr, ist, err
}

func verifySegment(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, models *modelSet, col *string, opts Options) (*SegmentReport, error) {
	prog := opts.Progress
	prog.SetStage("structure")
	sr, ist, err := startSegment(ctx, st, snap, im)
	if err != nil || !checkFiles(ctx, ist, im, sr) {
		return sr, err
	}
	o, err := openSegment(ctx, st, snap, im)
	if err != nil {
		if ctx.Err() != nil || errkind.Tag(err) == "io" {
			return nil, err
		}
		if errors.Is(err, errkind.Unsupported) {
			// A layout we do not read is not damage: the writer's readers
			// may read it well.
			sr.add(Check{Name: "structure", Verdict: Skipped, Message: err.Error()})
			return sr, nil
		}
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("the segment's files do not open: %v", err)})
		return sr, nil
	}
	defer o.close()
	f := o.files
	sr.IndexType = string(f.Type)
	sr.NumRows = f.Aux.NumRows()
	if !checkStructure(o, sr) {
		return sr, nil
	}
	live, err := newLiveSet(ctx, st, snap, im)
	if err != nil {
		return nil, err
	}
	if opts.Cheap {
		sr.add(Check{Name: "row_ids", Verdict: Skipped, Message: "not scanned before a commit (the codes check reads the sampled rows' ids)"})
	} else if err := checkRowIDs(ctx, snap, o, live, opts, sr); err != nil {
		return nil, err
	}
	if models != nil {
		models.check(o, sr)
	}
	if o.model == nil {
		msg := o.noModel.Error()
		if i := len("unsupported: "); len(msg) > i && msg[:i] == "unsupported: " {
			msg = msg[i:]
		}
		sr.add(Check{Name: "codes", Verdict: Skipped, Message: msg})
		sr.add(Check{Name: "recall", Verdict: Skipped, Message: msg})
		return sr, nil
	}
	var rd *vecdata.Reader
	if *col == "" {
		*col = columnOf(snap, im)
	}
	if *col == "" {
		sr.add(Check{Name: "codes", Verdict: Skipped, Message: "the segment names no indexed column"})
		return sr, nil
	}
	if !snap.HasStableRowIDs() {
		if rd, err = vecdata.NewReader(st, snap, *col); err != nil {
			return nil, fmt.Errorf("column %q: %w", *col, err)
		}
		o.half = rd.Column().Elem == lancefile.KindFloat16
	}
	prog.SetStage("codes")
	if rd == nil {
		sr.add(Check{Name: "layout", Verdict: Skipped, Message: "the dataset uses stable row ids: sampled rows are not read back from the data (not supported yet)"})
		sr.add(Check{Name: "codes", Verdict: Skipped, Message: "the dataset uses stable row ids (not supported yet)"})
	} else if err := checkCodes(ctx, o, rd, live, opts, sr); err != nil {
		return nil, err
	}
	if opts.Queries > 0 {
		prog.SetStage("recall")
		if rd == nil {
			sr.add(Check{Name: "recall", Verdict: Skipped, Message: "the dataset uses stable row ids (not supported yet)"})
		} else if err := checkRecall(ctx, o, rd, live, opts, sr); err != nil {
			return nil, err
		}
	}
	return sr, nil
}

// checkFiles compares the files the manifest lists with the store. It
// reports false when the segment cannot be opened.
func checkFiles(ctx context.Context, st storage.Store, im *pb.IndexMetadata, sr *SegmentReport) bool {
	files := im.GetFiles()
	if len(files) == 0 {
		sr.add(Check{Name: "files", Verdict: OK, Message: "the manifest lists no files for this segment (older writers); opened by name"})
		return true
	}
	dir := table.IndexDir(im)
	ok := true
	var problems []string
	damage := ""
	for _, fl := range files {
		e, err := st.Stat(ctx, dir+fl.GetPath())
		switch {
		case errors.Is(err, errkind.NotFound):
			problems = append(problems, fmt.Sprintf("%s is missing", fl.GetPath()))
			damage, ok = DamageMissingFile, false
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", fl.GetPath(), err))
			if damage == "" {
				damage = DamageUnreadable
			}
			ok = false
		case uint64(e.Size) < fl.GetSizeBytes():
			problems = append(problems, fmt.Sprintf("%s has %d bytes, the manifest records %d (truncated)", fl.GetPath(), e.Size, fl.GetSizeBytes()))
			if damage != DamageMissingFile {
				damage = DamageTruncated
			}
		case uint64(e.Size) != fl.GetSizeBytes():
			problems = append(problems, fmt.Sprintf("%s has %d bytes, the manifest records %d (replaced or appended to)", fl.GetPath(), e.Size, fl.GetSizeBytes()))
			if damage == "" {
				damage = DamageFileSize
			}
		}
	}
	if damage == "" {
		sr.add(Check{Name: "files", Verdict: OK, Message: fmt.Sprintf("%d files with their recorded sizes", len(files))})
		return true
	}
	sr.add(Check{Name: "files", Verdict: Failed, Damage: damage, Message: joinProblems(problems)})
	return ok
}

func joinProblems(p []string) string {
	out := ""
	for i, s := range p {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out
}

// checkStructure checks what the opened files say about themselves: the
// partitions against the centroids, the columns against the model. It
// reports false when the codes cannot be read.
func checkStructure(o *opened, sr *SegmentReport) bool {
	why := o.noModel
	f := o.files
	c := f.Centroids()
	switch {
	case c == nil:
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageUnreadable, Message: "the segment stores no IVF centroids"})
		return false
	case f.NumPartitions() != c.Rows():
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("%d partitions and %d centroids", f.NumPartitions(), c.Rows())})
		return false
	}
	if o.model == nil {
		if !errors.Is(why, errkind.Unsupported) {
			sr.add(Check{Name: "structure", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("the segment's model does not read: %v", why)})
			return false
		}
		sr.add(Check{Name: "structure", Verdict: OK, Message: fmt.Sprintf("%d partitions hold the %d rows of %s", f.NumPartitions(), f.Aux.NumRows(), ivf.AuxiliaryFileName)})
		return true
	}
	if _, err := search.NewReader(o.index, f, 0); err != nil {
		damage := DamageColumns
		if errors.Is(err, errkind.Unsupported) {
			sr.add(Check{Name: "structure", Verdict: Skipped, Message: err.Error()})
			o.model, o.noModel = nil, err
			return true
		}
		sr.add(Check{Name: "structure", Verdict: Failed, Damage: damage, Message: err.Error()})
		return false
	}
	sr.add(Check{Name: "structure", Verdict: OK, Message: fmt.Sprintf("%d partitions hold the %d rows of %s; columns as the %s model implies",
		f.NumPartitions(), f.Aux.NumRows(), ivf.AuxiliaryFileName, f.Type)})
	return true
}

// rowIDWindow is how many row ids checkRowIDs reads at once.
const rowIDWindow = 1 << 17

// checkRowIDs streams the segment's row ids: unique, in fragments the
// segment covers, and (Deep) naming rows their fragments have; deleted
// rows are counted (stale: optimize reclaims them).
func checkRowIDs(ctx context.Context, snap *table.Snapshot, o *opened, live *liveSet, opts Options, sr *SegmentReport) error {
	f := o.files
	n := f.Aux.NumRows()
	seen := roaring64.New()
	covered := map[uint32]bool{}
	for _, id := range sr.FragmentIDs {
		covered[id] = true
	}
	stable := snap.HasStableRowIDs()
	var dups, foreign, dangling, stale uint64
	var firstDup, firstForeign, firstDangling uint64
	for lo := uint64(0); lo < n; lo += rowIDWindow {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(n, lo+rowIDWindow)
		a, err := f.Aux.Read(ctx, encode.ColRowID, lo, hi)
		if err != nil {
			sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageUnreadable, Message: fmt.Sprintf("rows [%d, %d) of _rowid do not read: %v", lo, hi, err)})
			return nil
		}
		opts.Progress.RowsRead.Add(int64(a.Len))
		for i := 0; i < a.Len; i++ {
			id := binary.LittleEndian.Uint64(a.Values[8*i:])
			if !seen.CheckedAdd(id) {
				if dups == 0 {
					firstDup = id
				}
				dups++
				continue
			}
			if stable {
				if opts.Deep && !live.contains(id) {
					stale++
				}
				continue
			}
			if !covered[uint32(id>>32)] {
				if foreign == 0 {
					firstForeign = id
				}
				foreign++
				continue
			}
			if !opts.Deep {
				continue
			}
			frag := live.frags[uint32(id>>32)]
			switch {
			case frag == nil:
				stale++ // the fragment was removed since; Lance skips its rows
			case frag.GetPhysicalRows() != 0 && uint64(uint32(id)) >= frag.GetPhysicalRows():
				if dangling == 0 {
					firstDangling = id
				}
				dangling++
			case !live.contains(id):
				stale++
			}
		}
	}
	nums := map[string]float64{"rows": float64(n), "duplicates": float64(dups), "foreign": float64(foreign)}
	if opts.Deep {
		nums["dangling"], nums["stale"] = float64(dangling), float64(stale)
	}
	addr := func(id uint64) string {
		return fmt.Sprintf("%d (fragment %d, row %d)", id, id>>32, uint32(id))
	}
	switch {
	case dups > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageDuplicateRowIDs, Numbers: nums,
			Message: fmt.Sprintf("%d row ids appear more than once (first: %s)", dups, addr(firstDup))})
	case foreign > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageForeignRowIDs, Numbers: nums,
			Message: fmt.Sprintf("%d rows belong to fragments the segment does not cover (first: %s; covered: %v)", foreign, addr(firstForeign), sr.FragmentIDs)})
	case dangling > 0:
		sr.add(Check{Name: "row_ids", Verdict: Failed, Damage: DamageDanglingRowIDs, Numbers: nums,
			Message: fmt.Sprintf("%d row ids name rows past the end of their fragment (first: %s)", dangling, addr(firstDangling))})
	default:
		msg := fmt.Sprintf("%d unique row ids in the %d covered fragments", n, len(sr.FragmentIDs))
		if stable {
			msg = fmt.Sprintf("%d unique stable row ids", n)
		}
		if opts.Deep {
			msg += fmt.Sprintf("; %d stale (deleted or removed since the segment was built; an optimize reclaims them)", stale)
		}
		sr.add(Check{Name: "row_ids", Verdict: OK, Numbers: nums, Message: msg})
	}
	return nil
}
