package segment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// WriterLibrary and WriterVersion are what our manifests record as their
// writer. Lance treats any library other than "lance" as unaffected by its
// old fragment-bitmap bug, so nothing is recomputed on the next Lance
// commit.
const (
	WriterLibrary = "lance-segmerge"
	WriterVersion = "0.1.0"
)

// CommitRequest describes one commit of index segments.
type CommitRequest struct {
	// IndexName is the logical index the segments belong to.
	IndexName string `json:"index_name"`
	// Column is the indexed column (a top-level name, or a dotted path).
	Column string `json:"column"`
	// Segments are the new segments.
	Segments []*pb.IndexMetadata `json:"-"`
	// Replaces lists the uuids of the committed segments the new ones
	// replace (a plan's sources). They must all still be there when the
	// commit lands, else errkind.Conflict. When nil, the segments to replace
	// are derived as Lance does: same-name segments whose coverage the new
	// segments cover entirely; a partial overlap is an error.
	Replaces []string `json:"replaces"`
	// MaxRetries bounds the attempts after losing a race. Default 20.
	MaxRetries int `json:"max_retries"`
	// Parallelism bounds the new segments whose row ids are read at once
	// to check their coverage (those no merge of ours verified). Default 4.
	Parallelism int `json:"parallelism"`
	// Properties are written into the transaction (its
	// transaction_properties): what made the version (the verb, the run,
	// our version) and the caller's key-values. pylance reads them with
	// read_transaction. At most MaxProperties pairs of at most
	// MaxPropertyBytes each.
	Properties map[string]string `json:"properties"`
}

// Bounds of CommitRequest.Properties: a transaction file is read whole by
// every reader of the version.
const (
	MaxProperties    = 64
	MaxPropertyBytes = 4096
)

func checkProperties(props map[string]string) error {
	if len(props) > MaxProperties {
		return fmt.Errorf("%w: %d transaction properties (at most %d)", errkind.InvalidInput, len(props), MaxProperties)
	}
	for k, v := range props {
		if k == "" || len(k) > MaxPropertyBytes || len(v) > MaxPropertyBytes {
			return fmt.Errorf("%w: transaction property %.40q: keys must be non-empty, keys and values at most %d bytes", errkind.InvalidInput, k, MaxPropertyBytes)
		}
	}
	return nil
}

// Commit publishes new index segments as one new dataset version, built on
// the latest version and checked against every transaction committed since
// base (the version the segments were planned against). Nothing is written
// before validation passes; a lost race is retried with backoff when the
// intervening commits are compatible, and fails with errkind.Conflict when
// one of them removed or replaced a source segment, rewrote or updated a
// fragment the segments cover, or overwrote or restored the dataset.
// It returns the new version.
func Commit(ctx context.Context, st storage.Store, base *table.Snapshot, req CommitRequest, prog *Progress) (uint64, error) {
	if prog == nil {
		prog = &Progress{}
	}
	prog.SetStage("validate")
	if req.MaxRetries <= 0 {
		req.MaxRetries = 20
	}
	if req.Parallelism <= 0 {
		req.Parallelism = 4
	}
	if err := checkProperties(req.Properties); err != nil {
		return 0, err
	}
	fieldID, err := columnField(base, req.Column)
	if err != nil {
		return 0, err
	}
	for _, u := range req.Replaces {
		if id, err := uuid.Parse(u); err != nil || id.String() != strings.ToLower(u) {
			return 0, fmt.Errorf("%w: replaces: %q is not a segment uuid", errkind.InvalidInput, u)
		}
	}
	segs, news, err := prepareSegments(ctx, st, base, req, fieldID)
	if err != nil {
		return 0, err
	}
	models := &modelChecker{st: st, snap: base, index: req.IndexName, news: news}
	defer func() {
		closeSources(news)
		models.close()
	}()
	if err := models.checkNew(); err != nil {
		return 0, err
	}
	if err := checkNewCoverage(ctx, st, base, news, req.Parallelism); err != nil {
		return 0, err
	}
	coverage := map[uint32]bool{}
	for _, s := range segs {
		ids, _, _ := table.DecodeFragmentBitmap(s.GetFragmentBitmap())
		for _, f := range ids {
			coverage[f] = true
		}
	}
	prog.SetStage("commit")
	txnID := uuid.NewString()
	checked := base.Ref.Version
	backoff := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		latest, err := table.Open(ctx, st, 0)
		if err != nil {
			return 0, err
		}
		for v := checked + 1; v <= latest.Ref.Version; v++ {
			if err := checkConcurrent(ctx, st, v, req, segs, coverage, fieldID); err != nil {
				return 0, err
			}
		}
		checked = latest.Ref.Version
		m, indices, txn, err := buildVersion(latest, base, txnID, req, segs, coverage)
		if err != nil {
			return 0, err
		}
		removed := map[string]bool{}
		for _, im := range txn.GetCreateIndex().GetRemovedIndices() {
			removed[table.IndexUUID(im)] = true
		}
		if err := models.check(ctx, latest, removed); err != nil {
			return 0, err
		}
		err = table.Publish(ctx, st, latest.Ref.Scheme, m, indices, txn)
		if err == nil {
			prog.SetStage("done")
			return m.GetVersion(), nil
		}
		if errkind.Tag(err) != "conflict" || attempt >= req.MaxRetries {
			if errkind.Tag(err) == "conflict" {
				return 0, fmt.Errorf("segment: commit lost %d races in a row: %w", attempt+1, err)
			}
			return 0, err
		}
		// Another writer took version latest+1: re-read and re-check at
		// once the first time, then back off with jitter.
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Duration(rand.Int64N(int64(backoff)))):
			}
			backoff = min(2*backoff, time.Second)
		}
	}
}

// columnField resolves the indexed column to its field id.
func columnField(snap *table.Snapshot, column string) (int32, error) {
	if column == "" {
		return 0, fmt.Errorf("%w: a column is required", errkind.InvalidInput)
	}
	for _, f := range snap.Manifest.GetFields() {
		if snap.FieldPath(f.GetId()) == column {
			return f.GetId(), nil
		}
	}
	return 0, fmt.Errorf("%w: column %q does not exist in version %d", errkind.InvalidInput, column, snap.Ref.Version)
}

// prepareSegments validates the new segments against the base version and
// their files, and returns the entries to commit (named after the index,
// with the files as listed in storage and a fresh created_at) and the
// vector ones opened (the caller closes them).
func prepareSegments(ctx context.Context, st storage.Store, base *table.Snapshot, req CommitRequest, fieldID int32) (_ []*pb.IndexMetadata, news []*source, err error) {
	defer func() {
		if err != nil {
			closeSources(news)
			news = nil
		}
	}()
	if req.IndexName == "" {
		return nil, nil, fmt.Errorf("%w: an index name is required", errkind.InvalidInput)
	}
	if len(req.Segments) == 0 {
		return nil, nil, fmt.Errorf("%w: at least one index segment is required", errkind.InvalidInput)
	}
	named := make([]*pb.IndexMetadata, len(req.Segments))
	for i, s := range req.Segments {
		named[i] = proto.Clone(s).(*pb.IndexMetadata)
		named[i].Name = req.IndexName
		if len(s.GetFields()) != 1 || s.GetFields()[0] != fieldID {
			return nil, nil, fmt.Errorf("%w: segment %s indexes fields %v, column %q is field %d", errkind.InvalidInput, table.IndexUUID(s), s.GetFields(), req.Column, fieldID)
		}
		if s.GetIndexDetails().GetTypeUrl() == "" {
			return nil, nil, fmt.Errorf("%w: segment %s has no index details", errkind.InvalidInput, table.IndexUUID(s))
		}
	}
	if err := checkEntries(ctx, st, named, base); err != nil {
		return nil, nil, err
	}
	now := uint64(time.Now().UnixMilli())
	for _, s := range named {
		u := table.IndexUUID(s)
		dir := table.IndexDir(s)
		// A segment of a shallow clone's source (base_id set) is checked
		// where it lives; new segments live under the dataset's root.
		sst, err := indexStore(ctx, st, base, s)
		if err != nil {
			return nil, nil, err
		}
		listed, err := sst.List(ctx, dir)
		if err != nil {
			return nil, nil, err
		}
		sizes := map[string]int64{}
		for _, e := range listed {
			if !storage.IsTemp(e.Name) {
				sizes[strings.TrimPrefix(e.Name, dir)] = e.Size
			}
		}
		for _, f := range s.GetFiles() {
			got, ok := sizes[f.GetPath()]
			if !ok {
				return nil, nil, fmt.Errorf("%w: segment %s: %s is missing", errkind.NotFound, u, f.GetPath())
			}
			if uint64(got) != f.GetSizeBytes() {
				return nil, nil, fmt.Errorf("%w: segment %s: %s has %d bytes, the segment's metadata says %d", errkind.Corrupt, u, f.GetPath(), got, f.GetSizeBytes())
			}
		}
		if IsVector(s) {
			// The files must exist and decode: pylance accepts a commit of a
			// segment without files, and then fails every query.
			src, err := openSource(ctx, st, base, s, false)
			if err != nil {
				return nil, nil, err
			}
			news = append(news, src)
		} else if len(sizes) == 0 {
			return nil, nil, fmt.Errorf("%w: segment %s has no files under %s", errkind.NotFound, u, dir)
		}
		names := make([]string, 0, len(sizes))
		for n := range sizes {
			names = append(names, n)
		}
		sort.Strings(names)
		// The files must be durable before a manifest references them.
		paths := make([]string, len(names))
		for i, n := range names {
			paths[i] = dir + n
		}
		if err := sst.Sync(ctx, paths); err != nil {
			return nil, nil, fmt.Errorf("segment %s: %w", u, err)
		}
		s.Files = nil
		for _, n := range names {
			s.Files = append(s.Files, &pb.IndexFile{Path: n, SizeBytes: uint64(sizes[n])})
		}
		s.CreatedAt = &now
	}
	return named, news, nil
}

// checkConcurrent checks the transaction of version v, committed after the
// base version, against this commit.
func checkConcurrent(ctx context.Context, st storage.Store, v uint64, req CommitRequest, segs []*pb.IndexMetadata, coverage map[uint32]bool, fieldID int32) error {
	snap, err := table.Open(ctx, st, v)
	if err != nil {
		return err
	}
	txn, err := snap.Transaction(ctx, st)
	if err != nil {
		if errkind.Tag(err) == "not_found" {
			return fmt.Errorf("%w: version %d was committed without a transaction; cannot tell whether it conflicts", errkind.Conflict, v)
		}
		return err
	}
	conflict := func(format string, args ...any) error {
		return fmt.Errorf("%w: version %d, committed concurrently, %s; re-plan and retry", errkind.Conflict, v, fmt.Sprintf(format, args...))
	}
	touches := func(ids ...uint64) []uint64 {
		var hit []uint64
		for _, id := range ids {
			if id <= 0xffffffff && coverage[uint32(id)] {
				hit = append(hit, id)
			}
		}
		return hit
	}
	fragIDs := func(frags []*pb.DataFragment) []uint64 {
		out := make([]uint64, len(frags))
		for i, f := range frags {
			out[i] = f.GetId()
		}
		return out
	}
	replaced := map[string]bool{}
	for _, u := range req.Replaces {
		replaced[u] = true
	}
	ours := map[string]bool{}
	for _, s := range segs {
		ours[table.IndexUUID(s)] = true
	}
	switch op := txn.GetOperation().(type) {
	case *pb.Transaction_Append_, *pb.Transaction_Delete_, *pb.Transaction_ReserveFragments_, *pb.Transaction_Project_,
		*pb.Transaction_UpdateConfig_, *pb.Transaction_Clone_, *pb.Transaction_UpdateBases_, *pb.Transaction_DataOverlay_,
		*pb.Transaction_Merge_:
		return nil
	case *pb.Transaction_Rewrite_:
		old := fragIDs(op.Rewrite.GetOldFragments())
		for _, g := range op.Rewrite.GetGroups() {
			old = append(old, fragIDs(g.GetOldFragments())...)
		}
		if hit := touches(old...); len(hit) > 0 {
			return conflict("compaction rewrote fragments %v the segments cover", hit)
		}
		for _, ri := range op.Rewrite.GetRewrittenIndices() {
			if u, err := uuid.FromBytes(ri.GetOldId().GetUuid()); err == nil && (replaced[u.String()] || ours[u.String()]) {
				return conflict("compaction rewrote segment %s", u)
			}
		}
		return nil
	case *pb.Transaction_Update_:
		u := op.Update
		if len(u.GetFieldsModified()) > 0 && !slices.Contains(u.GetFieldsModified(), uint32(fieldID)) {
			return nil
		}
		if hit := touches(append(u.GetRemovedFragmentIds(), fragIDs(u.GetUpdatedFragments())...)...); len(hit) > 0 {
			return conflict("an update changed fragments %v the segments cover", hit)
		}
		return nil
	case *pb.Transaction_DataReplacement_:
		for _, g := range op.DataReplacement.GetReplacements() {
			if len(touches(g.GetFragmentId())) > 0 && slices.Contains(g.GetNewFile().GetFields(), fieldID) {
				return conflict("data of fragment %d, column %q, was replaced", g.GetFragmentId(), req.Column)
			}
		}
		return nil
	case *pb.Transaction_CreateIndex_:
		for _, r := range op.CreateIndex.GetRemovedIndices() {
			u := table.IndexUUID(r)
			if replaced[u] {
				return conflict("removed or replaced source segment %s", u)
			}
		}
		for _, n := range op.CreateIndex.GetNewIndices() {
			if n.GetName() != req.IndexName || ours[table.IndexUUID(n)] {
				continue
			}
			ids, _, _ := table.DecodeFragmentBitmap(n.GetFragmentBitmap())
			var hit []uint64
			for _, f := range ids {
				hit = append(hit, touches(uint64(f))...)
			}
			if len(hit) > 0 {
				return conflict("added segment %s of index %q covering fragments %v", table.IndexUUID(n), req.IndexName, hit)
			}
		}
		return nil
	case *pb.Transaction_Overwrite_:
		return conflict("overwrote the dataset")
	case *pb.Transaction_Restore_:
		return conflict("restored an older version")
	default:
		return conflict("performed an operation lance-segmerge does not know (%T)", op)
	}
}

// buildVersion builds version latest+1: the latest manifest carried over
// unchanged (unknown fields included) but for its version, timestamp,
// writer and transaction, and its index section with the replaced segments
// removed and the new ones appended.
func buildVersion(latest, base *table.Snapshot, txnID string, req CommitRequest, segs []*pb.IndexMetadata, coverage map[uint32]bool) (*pb.Manifest, []*pb.IndexMetadata, *pb.Transaction, error) {
	readVersion := base.Ref.Version
	// Segments of the index at the version the commit was planned against:
	// one missing now was removed by a concurrent commit (a race); one that
	// was never there is the caller's mistake.
	atBase := map[string]*pb.IndexMetadata{}
	for _, im := range base.Indices {
		atBase[table.IndexUUID(im)] = im
	}
	prev := latest.Manifest
	if unknown := prev.GetWriterFeatureFlags() &^ table.KnownWriterFlags; unknown != 0 {
		return nil, nil, nil, fmt.Errorf("%w: version %d needs writer feature flags %#x that lance-segmerge does not know", errkind.Unsupported, latest.Ref.Version, unknown)
	}
	current := map[uint32]bool{}
	for _, f := range prev.GetFragments() {
		if f.GetId() <= 0xffffffff {
			current[uint32(f.GetId())] = true
		}
	}
	effective := func(im *pb.IndexMetadata) []uint32 {
		ids, _, _ := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		out := ids[:0:0]
		for _, f := range ids {
			if current[f] {
				out = append(out, f)
			}
		}
		return out
	}
	ours := map[string]bool{}
	for _, s := range segs {
		ours[table.IndexUUID(s)] = true
	}
	remove := map[string]bool{}
	if req.Replaces != nil {
		present := map[string]*pb.IndexMetadata{}
		for _, im := range latest.Indices {
			if im.GetName() == req.IndexName {
				present[table.IndexUUID(im)] = im
			}
		}
		var lost []uint32
		for _, u := range req.Replaces {
			im, ok := present[u]
			if !ok {
				was := atBase[u]
				switch {
				case was == nil:
					return nil, nil, nil, fmt.Errorf("%w: segment %s, which the commit replaces, is not a segment of version %d (the version it was planned against)", errkind.InvalidInput, u, readVersion)
				case was.GetName() != req.IndexName:
					return nil, nil, nil, fmt.Errorf("%w: segment %s, which the commit replaces, belongs to index %q, not %q", errkind.InvalidInput, u, was.GetName(), req.IndexName)
				case len(effective(was)) == 0:
					// A delete removed every fragment it covered, and Lance
					// dropped it from the index with them: the new segments
					// simply hold rows of fragments that are gone (queries
					// skip them, as they skip deleted rows). Rebased.
					continue
				}
				return nil, nil, nil, fmt.Errorf("%w: source segment %s of index %q is no longer in version %d (a concurrent commit replaced it); re-plan", errkind.Conflict, u, req.IndexName, latest.Ref.Version)
			}
			remove[u] = true
			for _, f := range effective(im) {
				if !coverage[f] {
					lost = append(lost, f)
				}
			}
		}
		if len(lost) > 0 {
			return nil, nil, nil, fmt.Errorf("%w: the new segments do not cover fragments %v of the segments they replace; committing would drop them from the index", errkind.InvalidInput, lost)
		}
	}
	for _, im := range latest.Indices {
		u := table.IndexUUID(im)
		if ours[u] {
			remove[u] = true // re-committing a segment replaces its entry
			continue
		}
		if im.GetName() != req.IndexName || remove[u] {
			continue
		}
		if !strings.EqualFold(im.GetIndexDetails().GetTypeUrl(), segs[0].GetIndexDetails().GetTypeUrl()) && im.GetIndexDetails().GetTypeUrl() != "" {
			return nil, nil, nil, fmt.Errorf("%w: index %q is a %s, the new segments are %s", errkind.InvalidInput, req.IndexName, im.GetIndexDetails().GetTypeUrl(), segs[0].GetIndexDetails().GetTypeUrl())
		}
		eff := effective(im)
		var in, out []uint32
		for _, f := range eff {
			if coverage[f] {
				in = append(in, f)
			} else {
				out = append(out, f)
			}
		}
		switch {
		case len(in) == 0 && len(eff) > 0:
			// Disjoint: keep.
		case len(out) == 0 && req.Replaces == nil:
			remove[u] = true // fully covered (or empty): replaced
		case len(out) == 0 && len(eff) == 0:
			// Empty and not named as a source: keep, as committed.
		case req.Replaces != nil && atBase[u] != nil && atBase[u].GetName() == req.IndexName:
			return nil, nil, nil, fmt.Errorf("%w: segment %s of index %q, which the commit does not replace, covers fragments %v of the new segments", errkind.InvalidInput, u, req.IndexName, in)
		case req.Replaces != nil:
			return nil, nil, nil, fmt.Errorf("%w: segment %s of index %q, committed concurrently, covers fragments %v of the new segments; re-plan", errkind.Conflict, u, req.IndexName, in)
		default:
			return nil, nil, nil, fmt.Errorf("%w: the new segments cover fragments %v of segment %s but not its fragments %v; committing would orphan them", errkind.InvalidInput, in, u, out)
		}
	}
	var indices, removed []*pb.IndexMetadata
	for _, im := range latest.Indices {
		if remove[table.IndexUUID(im)] {
			removed = append(removed, im)
		} else {
			indices = append(indices, im)
		}
	}
	indices = append(indices, segs...)

	m := proto.Clone(prev).(*pb.Manifest)
	m.Version = latest.Ref.Version + 1
	m.VersionAuxData = 0
	m.Timestamp = timestamppb.Now()
	m.Tag = ""
	m.WriterVersion = &pb.WriterVersion{Library: WriterLibrary, Version: WriterVersion}
	m.TransactionFile = fmt.Sprintf("%d-%s.txn", readVersion, txnID)
	if prev.GetWriterFeatureFlags()&table.FlagDisableTxnFile != 0 {
		m.TransactionFile = ""
	}
	txn := &pb.Transaction{
		ReadVersion: readVersion,
		Uuid:        txnID,
		Operation: &pb.Transaction_CreateIndex_{CreateIndex: &pb.Transaction_CreateIndex{
			NewIndices: segs, RemovedIndices: removed,
		}},
		TransactionProperties: req.Properties,
	}
	return m, indices, txn, nil
}
