package segment

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/btree"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fragreuse"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ngram"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/zonemap"
)

// liveRows says which rows of the given fragments are live at snap (nil:
// all of them). With stableIDs (the segment holds stable row ids), the set
// of their live ids; else a row address is live when its fragment is
// still there and its offset is not deleted. pylance 14.0.2 writes
// addresses into BTREE segments even of datasets with stable row ids, but
// stable ids into BITMAP and LABEL_LIST ones
// (test_bitmap.py::test_stable_row_ids_updates_and_deletes).
func liveRows(ctx context.Context, st storage.Store, snap *table.Snapshot, frags []uint32, stableIDs bool) (func(uint64) bool, error) {
	if stableIDs {
		live, err := snap.LiveRowIDs(ctx, st, frags)
		if err != nil {
			return nil, err
		}
		return live.Contains, nil
	}
	want := map[uint64]bool{}
	for _, f := range frags {
		want[uint64(f)] = true
	}
	// Dense tables by fragment id (ids are bounded by the manifest's
	// fragments): the merge asks once per row, in key order, so fragments
	// alternate from one row to the next.
	var maxID uint64
	for _, f := range snap.Manifest.GetFragments() {
		maxID = max(maxID, f.GetId())
	}
	if maxID >= 1<<26 {
		return nil, fmt.Errorf("%w: fragment id %d", errkind.Unsupported, maxID)
	}
	present := make([]bool, maxID+1)
	deleted := make([]*roaring.Bitmap, maxID+1)
	drops := false
	for _, f := range snap.Manifest.GetFragments() {
		if !want[f.GetId()] {
			continue
		}
		present[f.GetId()] = true
		d, err := snap.DeletedRows(ctx, st, f)
		if err != nil {
			return nil, err
		}
		if d != nil && !d.IsEmpty() {
			deleted[f.GetId()], drops = d, true
		}
	}
	for f := range want {
		if f > maxID || !present[f] {
			drops = true
		}
	}
	if !drops {
		return nil, nil // every row stays
	}
	return func(id uint64) bool {
		f := id >> 32
		if f > maxID || !present[f] {
			return false
		}
		d := deleted[f]
		return d == nil || !d.Contains(uint32(id))
	}, nil
}

// checkedRows applies the checks every merge applies to segments of
// index type typ and returns the fragments each covers.
func checkedRows(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, typ string) ([][]uint32, error) {
	if err := requireOneType(metas, typ); err != nil {
		return nil, err
	}
	if err := checkEntries(ctx, st, metas, snap); err != nil {
		return nil, err
	}
	out := make([][]uint32, len(metas))
	for i, im := range metas {
		ids, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, err
		}
		out[i] = ids
	}
	return out, nil
}

// checkedLiveRows applies the checks every merge applies to segments of
// index type typ, then returns liveRows (by address) of the fragments
// they cover.
func checkedLiveRows(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, typ string) (func(uint64) bool, error) {
	frags, err := checkedRows(ctx, st, snap, metas, typ)
	if err != nil {
		return nil, err
	}
	return liveRows(ctx, st, snap, slices.Concat(frags...), false)
}

// mergeBTree merges segments of a BTREE index (see btree.Merge): the
// checks every merge applies (one index, one field, disjoint coverage,
// fragments the version can have), then a k-way merge that keeps the live
// rows of snap (rows deleted since, or of fragments snap no longer has,
// are dropped, where pylance's own merge keeps rows deleted inside a live
// fragment). On any error the partial output is removed.
func mergeBTree(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	keep, err := checkedLiveRows(ctx, st, snap, metas, "BTREE")
	if err != nil {
		return nil, err
	}
	guard := newRowRemap(ctx, st, snap)
	keep = guard.wrap(keep)
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	opts.Progress.SetStage("merge")
	res, err := btree.Merge(ctx, st, metas, btree.MergeOptions{IndexUUID: id.String(), Keep: keep, Remap: guard.remap()})
	if gerr := guard.err(); gerr != nil {
		err = gerr // what the merge then failed on, if it failed
	}
	if err != nil {
		removeOutput(ctx, st, dir, btree.DataFile, btree.LookupFile)
		return nil, err
	}
	opts.Progress.RowsRead.Add(int64(res.RowsRead))
	opts.Progress.RowsWritten.Add(int64(res.RowsWritten))
	opts.Progress.SetStage("done")
	im, err := mergedEntry(id, metas, res.Files)
	if err != nil {
		return nil, err
	}
	return newestLayout(im, metas), nil
}

// removeOutput removes the named files of a failed merge's or build's
// output under dir, even when ctx is cancelled.
func removeOutput(ctx context.Context, st storage.Store, dir string, names ...string) {
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, name := range names {
		_ = st.Delete(cleanup, dir+name)
	}
}

// MergeableTypes are the index types other than vector ones that merges
// handle.
var MergeableTypes = map[string]bool{"BTREE": true, "ZONEMAP": true, "BLOOMFILTER": true, "BITMAP": true, "LABEL_LIST": true, "NGRAM": true, "INVERTED": true}

// zoneKind is the zone layout of a ZONEMAP or BLOOMFILTER index type.
func zoneKind(typ string) *zonemap.Kind {
	if typ == "BLOOMFILTER" {
		return zonemap.BloomFilter
	}
	return zonemap.ZoneMap
}

// requireOneType refuses a merge or plan that mixes index types.
func requireOneType(metas []*pb.IndexMetadata, typ string) error {
	for _, im := range metas {
		if t := OtherType(im); t != typ {
			return fmt.Errorf("%w: segment %s is a %s segment, %s a %s one: one index type per merge", errkind.InvalidInput,
				table.IndexUUID(im), cmp.Or(t, "vector"), table.IndexUUID(metas[0]), typ)
		}
	}
	return nil
}

// mergeZoneMap merges segments of a ZONEMAP or BLOOMFILTER index (see
// zonemap.MergeKind): the checks every merge applies, then the zones of
// every input whose fragment snap still has, in fragment order. Zones
// of fragments a compaction with defer_index_remap rewrote are replaced
// by zones built from the data of the fragments it wrote (zonesOfMoved).
func mergeZoneMap(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	kind := zoneKind(OtherType(metas[0]))
	if err := requireOneType(metas, kind.Name); err != nil {
		return nil, err
	}
	if err := checkEntries(ctx, st, metas, snap); err != nil {
		return nil, err
	}
	current := map[uint32]bool{}
	for _, f := range snap.Manifest.GetFragments() {
		current[uint32(f.GetId())] = true
	}
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	opts.Progress.SetStage("merge")
	segs, err := zonemap.ReadAll(ctx, st, metas, kind)
	if err != nil {
		return nil, err
	}
	guard := newRemapGuard(ctx, st, snap)
	built, err := zonesOfMoved(ctx, st, snap, metas, segs)
	if err != nil {
		return nil, err
	}
	if built != nil {
		defer removeOutput(ctx, st, table.IndexDir(built.Meta), kind.File)
		segs = append(segs, built)
		guard = &remapGuard{} // every zone of a rewritten fragment has its replacement
	}
	files, _, err := zonemap.MergeSegments(ctx, st, segs, id, func(f uint32) bool { return !guard.gone(uint64(f)<<32) && current[f] },
		func(im *pb.IndexMetadata) ([]bitmap.RawEntry, error) { return liveNullRows(ctx, st, snap, im) })
	if gerr := guard.err(); gerr != nil {
		err = gerr // what the merge then failed on, if it failed
	}
	if err != nil {
		removeOutput(ctx, st, dir, kind.File)
		return nil, err
	}
	opts.Progress.SetStage("done")
	im, err := mergedEntry(id, metas, files)
	if err != nil {
		return nil, err
	}
	return newestLayout(im, metas), nil
}

// zonesOfMoved builds, from the column's data, a segment of the zones of
// the fragments that a compaction with defer_index_remap wrote, that the
// segments metas claim (movedView, or pylance's optimize, pointed their
// bitmaps at them) and that segs (metas read) hold no zone of. A zone
// spans rows of one fragment at their old addresses, which the fragment
// reuse index cannot move into zones of the new fragments (pylance's
// ZONEMAP and BLOOMFILTER cannot remap either). It returns nil when there
// is no such fragment (no map, or none read: the merge's guard then
// refuses zones of rewritten fragments). The segment is written under a
// directory of its own, which the caller removes.
func zonesOfMoved(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, segs []*zonemap.Segment) (*zonemap.Segment, error) {
	if snap == nil || snap.HasStableRowIDs() || fragreuse.Find(snap) == nil {
		return nil, nil
	}
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil || m == nil {
		return nil, nil // without the map, the merge's guard refuses zones of rewritten fragments
	}
	zoned := map[uint32]bool{}
	for _, s := range segs {
		for _, f := range s.Fragments() {
			zoned[f] = true
		}
	}
	current := currentFragments(snap)
	var frags []uint64
	for _, im := range metas {
		ids, _, err := snap.DecodeCoverage(im)
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
		}
		for _, f := range ids {
			if current(f) && !zoned[f] && m.Written(f) {
				frags = append(frags, uint64(f))
			}
		}
	}
	if len(frags) == 0 {
		return nil, nil
	}
	first, kind := metas[0], segs[0].Kind
	im, err := BuildScalar(ctx, st, snap, ScalarBuildOptions{Column: snap.FieldPath(first.GetFields()[0]), IndexName: first.GetName(), IndexType: kind.Name, FragmentIDs: frags})
	if err != nil {
		return nil, fmt.Errorf("building the zones of fragments %v, which a compaction with defer_index_remap wrote: %w", frags, err)
	}
	s, err := zonemap.ReadKind(ctx, st, im, kind)
	if err == nil {
		err = segs[0].SameAs(s) // its zones and parameters those of the index's
	}
	if err != nil {
		removeOutput(ctx, st, table.IndexDir(im), kind.File)
		return nil, err
	}
	return s, nil
}

// liveNullRows reads the live null rows of the fragments snap still has of
// those segment im covers, from its column's data: a row map entry per
// fragment that has some (a ZONEMAP or BLOOMFILTER map of null rows).
func liveNullRows(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata) ([]bitmap.RawEntry, error) {
	if len(im.GetFields()) != 1 {
		return nil, fmt.Errorf("%w: segment %s indexes %d fields", errkind.InvalidInput, table.IndexUUID(im), len(im.GetFields()))
	}
	rd, err := vecdata.NewValueReader(st, snap, snap.FieldPath(im.GetFields()[0]))
	if err != nil {
		return nil, err
	}
	covered, _, err := snap.DecodeCoverage(im)
	if err != nil {
		return nil, err
	}
	current := map[uint32]bool{}
	for _, f := range snap.Manifest.GetFragments() {
		current[uint32(f.GetId())] = true
	}
	var frags []uint64
	for _, f := range covered {
		if current[f] {
			frags = append(frags, uint64(f))
		}
	}
	slices.Sort(frags)
	var out []bitmap.RawEntry
	frag, rows := uint64(0), roaring.New() // the fragment being read, its null rows so far
	flush := func() error {
		if rows.IsEmpty() {
			return nil
		}
		bits, err := rows.ToBytes()
		out, rows = append(out, bitmap.RawEntry{Frag: uint32(frag), Bits: bits}), roaring.New()
		return err
	}
	err = rd.ScanValues(ctx, frags, 0, func(w *vecdata.ValueWindow) error {
		if w.Fragment != frag {
			if err := flush(); err != nil {
				return err
			}
			frag = w.Fragment
		}
		for i := range w.Values.Len {
			if w.Live(i) && !w.Values.IsValid(i) {
				rows.Add(uint32(w.Start) + uint32(i))
			}
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return out, err
}

// guardEach is keep (nil: every row of every input stays), one per input
// of n, each watched by g.
func guardEach(g *remapGuard, keep []func(uint64) bool, n int) []func(uint64) bool {
	if g.present == nil {
		return keep
	}
	out := make([]func(uint64) bool, n)
	for i := range out {
		var k func(uint64) bool
		if keep != nil {
			k = keep[i]
		}
		out[i] = g.wrap(k)
	}
	return out
}

// keepPerInput says, for each input covering frags[i], which of its rows
// stay (nil: all of every input). Segments that hold row ids rather than
// addresses (BITMAP, LABEL_LIST and NGRAM on datasets with stable row
// ids) keep the live ids of their own fragments: an updated row keeps its
// id in a newer fragment, where a newer segment holds its new value.
func keepPerInput(ctx context.Context, st storage.Store, snap *table.Snapshot, frags [][]uint32) ([]func(uint64) bool, error) {
	if snap.HasStableRowIDs() {
		keep := make([]func(uint64) bool, len(frags))
		for i := range frags {
			var err error
			if keep[i], err = liveRows(ctx, st, snap, frags[i], true); err != nil {
				return nil, err
			}
		}
		return keep, nil
	}
	k, err := liveRows(ctx, st, snap, slices.Concat(frags...), false)
	if err != nil || k == nil {
		return nil, err
	}
	return slices.Repeat([]func(uint64) bool{k}, len(frags)), nil
}

// mergeBitmap merges segments of a BITMAP or LABEL_LIST index (see
// bitmap.Merge): a k-way merge by key that drops keys left without rows.
func mergeBitmap(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	im, err := mergeByKey(ctx, st, snap, metas, opts, OtherType(metas[0]), []string{bitmap.FileName},
		func(id uuid.UUID, keep []func(uint64) bool, g *remapGuard) ([]*pb.IndexFile, uint64, uint64, error) {
			res, err := bitmap.Merge(ctx, st, metas, bitmap.MergeOptions{IndexUUID: id, Keep: keep, Remap: g.remap(), Moves: g.movedTest()})
			if err != nil {
				return nil, 0, 0, err
			}
			return res.Files, res.KeysRead, res.KeysWritten, nil
		})
	if err != nil {
		return nil, err
	}
	return newestLayout(im, metas), nil
}

// newestLayout gives a merged BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER or
// INVERTED entry the index version and details of its newest input
// layout: the output is written in it (a LABEL_LIST of pylance 2.0.1,
// version 0 and no map of null lists, merged with 14.0.2's version-1
// deltas is version 1 with a map; a ZONEMAP of 2.0.1, empty details and
// no map of null rows, takes the later inputs' details; an INVERTED index
// of 2.0.1, whose details name no block size or FTS format, takes those
// of 14.0.2's format 1 deltas), as pylance 14.0.2's own merge writes it.
// Inputs of one layout are unchanged by this.
func newestLayout(im *pb.IndexMetadata, metas []*pb.IndexMetadata) *pb.IndexMetadata {
	newest := metas[0]
	for _, m := range metas[1:] {
		if m.GetIndexVersion() > newest.GetIndexVersion() ||
			m.GetIndexVersion() == newest.GetIndexVersion() && len(m.GetIndexDetails().GetValue()) > len(newest.GetIndexDetails().GetValue()) {
			newest = m
		}
	}
	iv := newest.GetIndexVersion()
	im.IndexVersion, im.IndexDetails = &iv, cloneAny(newest.GetIndexDetails())
	return im
}

// mergeNgram merges segments of an NGRAM index (see ngram.Merge): a k-way
// merge by token that drops tokens left without rows.
func mergeNgram(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	return mergeByKey(ctx, st, snap, metas, opts, "NGRAM", []string{ngram.FileName},
		func(id uuid.UUID, keep []func(uint64) bool, g *remapGuard) ([]*pb.IndexFile, uint64, uint64, error) {
			res, err := ngram.Merge(ctx, st, metas, ngram.MergeOptions{IndexUUID: id, Keep: keep, Remap: g.remap(), Moves: g.movedTest()})
			if err != nil {
				return nil, 0, 0, err
			}
			return res.Files, res.TokensRead, res.TokensWritten, nil
		})
}

// mergeFTS merges segments of an INVERTED index (see fts.Merge): one
// partition, token dictionaries unioned, documents renumbered, blocks,
// scores and impacts computed for the merged partition. As pylance's own
// merge does, it keeps the documents of rows deleted inside a live
// fragment (the index's BM25 statistics count them, and pylance filters
// deleted rows at query time), so scores equal those after pylance's
// merge; documents of fragments the version no longer has are dropped.
func mergeFTS(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions) (*pb.IndexMetadata, error) {
	frags, err := checkedRows(ctx, st, snap, metas, "INVERTED")
	if err != nil {
		return nil, err
	}
	var keep []func(uint64) bool
	if snap.HasStableRowIDs() {
		// pylance 14.0.2 drops deleted rows here (test_fts.py::test_stable_row_ids).
		if keep, err = keepPerInput(ctx, st, snap, frags); err != nil {
			return nil, err
		}
	} else {
		present := map[uint64]bool{}
		for _, f := range snap.Manifest.GetFragments() {
			present[f.GetId()] = true
		}
		k := func(addr uint64) bool { return present[addr>>32] }
		keep = slices.Repeat([]func(uint64) bool{k}, len(frags))
	}
	guard := newRowRemap(ctx, st, snap)
	keep = guardEach(guard, keep, len(frags))
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	opts.Progress.SetStage("merge")
	res, err := fts.Merge(ctx, st, metas, fts.MergeOptions{IndexUUID: id, Keep: keep, Remap: guard.remap(), MemoryBytes: opts.MemoryBytes, TempDir: opts.TempDir})
	if gerr := guard.err(); gerr != nil {
		err = gerr // what the merge then failed on, if it failed
	}
	if err != nil {
		removeOutput(ctx, st, dir, fts.Names()...)
		return nil, err
	}
	opts.Progress.RowsRead.Add(int64(res.DocsRead))
	opts.Progress.RowsWritten.Add(int64(res.DocsWritten))
	opts.Progress.SetStage("done")
	im, err := mergedEntry(id, metas, res.Files)
	if err != nil {
		return nil, err
	}
	return newestLayout(im, metas), nil
}

// mergeByKey runs a merge whose segments list rows by key (BITMAP,
// LABEL_LIST, NGRAM): the checks every merge applies, the live rows of
// snap each input keeps (keepPerInput: these segments hold stable row ids
// on datasets that have them), then run, whose output files are removed
// if it fails. run applies the guard's map of rows of rewritten fragments
// and returns the files written and the keys read and written.
func mergeByKey(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, opts MergeOptions, typ string, files []string,
	run func(id uuid.UUID, keep []func(uint64) bool, g *remapGuard) ([]*pb.IndexFile, uint64, uint64, error)) (*pb.IndexMetadata, error) {
	frags, err := checkedRows(ctx, st, snap, metas, typ)
	if err != nil {
		return nil, err
	}
	keep, err := keepPerInput(ctx, st, snap, frags)
	if err != nil {
		return nil, err
	}
	guard := newRowRemap(ctx, st, snap)
	keep = guardEach(guard, keep, len(frags))
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	opts.Progress.SetStage("merge")
	out, read, written, err := run(id, keep, guard)
	if gerr := guard.err(); gerr != nil {
		err = gerr // what the merge then failed on, if it failed
	}
	if err != nil {
		removeOutput(ctx, st, dir, files...)
		return nil, err
	}
	opts.Progress.RowsRead.Add(int64(read))
	opts.Progress.RowsWritten.Add(int64(written))
	opts.Progress.SetStage("done")
	return mergedEntry(id, metas, out)
}
