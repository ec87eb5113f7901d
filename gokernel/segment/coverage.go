package segment

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Coverage is checked against rows, not believed. A segment's fragment
// bitmap tells a query which fragments the segment answers for: a fragment
// it claims but holds no rows of is never searched (its rows are found
// neither in the index nor by the flat search of unindexed fragments).
//
// The merge counts the rows it keeps of each input, per fragment, and
// refuses an input that claims a fragment it has no rows of; it records the
// fragments it verified in its output (VerifiedKey). The commit reads the
// row ids of every other new segment (pylance's, or ours whose claims no
// longer match what was verified) and applies the same check.
//
// pylance covers a fragment whose vectors are all null with zero rows
// (create_index, optimize_indices, create_index_uncommitted all do), and an
// index built after deletions holds no deleted rows. So a claimed fragment
// without rows is refused only when the data proves rows are missing: the
// fragment still exists, its vector column has more non-null values than
// its deletion file deletes.

// With stable row ids (a reader feature flag), row ids do not name their
// fragment: rows cannot be attributed to fragments without the fragments'
// row id sequences, which this package does not read; the check is then
// skipped (rowsNameFragments).

// rowsNameFragments reports whether the row ids of snap's index segments
// are row addresses (fragment id << 32 | offset).
func rowsNameFragments(snap *table.Snapshot) bool {
	return snap.Manifest.GetReaderFeatureFlags()&table.FlagStableRowIDs == 0
}

// VerifiedKey is the auxiliary.idx schema metadata key under which a merge
// records the fragments whose rows it verified: a portable roaring bitmap,
// base64 (Lance reads schema metadata as UTF-8). Lance ignores the key.
const VerifiedKey = "lance_segmerge:verified_fragments"

// fragRows counts a segment's rows per fragment.
type fragRows map[uint32]uint64

// rowIDFragment is the fragment of a row id (its upper 32 bits; Lance's
// address-style row ids, without stable row ids).
func rowIDFragment(ids []byte, i int) uint32 {
	return uint32(binary.LittleEndian.Uint64(ids[8*i:]) >> 32)
}

// countRows adds a row id column's rows to counts, run by run.
func countRows(ids *lancefile.Array, counts fragRows) {
	for i := 0; i < ids.Len; {
		f := rowIDFragment(ids.Values, i)
		j := i + 1
		for j < ids.Len && rowIDFragment(ids.Values, j) == f {
			j++
		}
		counts[f] += uint64(j - i)
		i = j
	}
}

// checkCoverage checks that a segment holds rows of every fragment it
// claims (see above); rows are its counted rows. Refusals are
// errkind.InvalidInput naming the segment and the fragment.
func checkCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, segUUID string, fieldID int32, claimed []uint32, rows fragRows) error {
	if !rowsNameFragments(snap) {
		return nil
	}
	var frags map[uint64]*pb.DataFragment
	for _, f := range claimed {
		if rows[f] > 0 {
			continue
		}
		if frags == nil {
			frags = make(map[uint64]*pb.DataFragment, len(snap.Manifest.GetFragments()))
			for _, fr := range snap.Manifest.GetFragments() {
				frags[fr.GetId()] = fr
			}
		}
		frag := frags[uint64(f)]
		if frag == nil {
			continue // deleted since: nothing left to hide
		}
		deleted := frag.GetDeletionFile().GetNumDeletedRows()
		n, err := indexableRows(ctx, st, snap, frag, fieldID, deleted)
		if errors.Is(err, errkind.Unsupported) {
			continue // a data file we cannot read (legacy format, another base): not provable
		}
		if err != nil {
			return fmt.Errorf("segment %s: check fragment %d: %w", segUUID, f, err)
		}
		if n > deleted {
			return fmt.Errorf("%w: segment %s claims fragment %d but holds none of its rows, while the fragment has %d rows with a vector (%d deleted at most); its rows would be hidden from search",
				errkind.InvalidInput, segUUID, f, n, deleted)
		}
	}
	return nil
}

// dataWindowRows is how many vectors indexableRows reads at once (a 128-d
// float32 window is 32 MiB).
const dataWindowRows = 1 << 16

// indexableRows counts the non-null values of field fieldID in a fragment,
// stopping once the count exceeds stopAbove (the answer is then known).
// errkind.Unsupported when the data cannot be read here.
func indexableRows(ctx context.Context, st storage.Store, snap *table.Snapshot, frag *pb.DataFragment, fieldID int32, stopAbove uint64) (uint64, error) {
	var file *pb.DataFile
	for _, df := range frag.GetFiles() {
		for _, id := range df.GetFields() {
			if id == fieldID {
				file = df
			}
		}
	}
	if file == nil {
		// The column was added after the fragment was written: all null.
		return 0, nil
	}
	if file.BaseId != nil || file.GetFileMajorVersion() < 2 {
		return 0, fmt.Errorf("%w: data file %s", errkind.Unsupported, file.GetPath())
	}
	name := table.DataDir + file.GetPath()
	obj, err := st.Open(ctx, name)
	if err != nil {
		return 0, err
	}
	defer obj.Close()
	r, err := lancefile.Open(ctx, obj, name, lancefile.Options{})
	if err != nil {
		return 0, err
	}
	col := ""
	path := snap.FieldPath(fieldID)
	for _, f := range r.Fields() {
		if f.ID == fieldID || (col == "" && f.Name == path) {
			col = f.Name
		}
	}
	if col == "" || strings.Contains(path, ".") {
		return 0, fmt.Errorf("%w: column %q in data file %s", errkind.Unsupported, path, file.GetPath())
	}
	var n uint64
	for lo := uint64(0); lo < r.NumRows() && n <= stopAbove; lo += dataWindowRows {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		a, err := r.Read(ctx, col, lo, min(lo+dataWindowRows, r.NumRows()))
		if err != nil {
			return 0, err
		}
		n += uint64(a.Len - a.NullCount())
	}
	return n, nil
}

// encodeVerified is the VerifiedKey value for fragment ids.
func encodeVerified(ids []uint32) ([]byte, error) {
	b, err := table.EncodeFragmentBitmap(ids)
	if err != nil {
		return nil, err
	}
	return []byte(base64.StdEncoding.EncodeToString(b)), nil
}

// verifiedByMerge reports whether a merge of ours verified every fragment
// the segment claims (VerifiedKey).
func (s *source) verifiedByMerge() bool {
	v, ok := s.files.Aux.MetadataString(VerifiedKey)
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return false
	}
	ids, ok, err := table.DecodeFragmentBitmap(raw)
	if err != nil || !ok {
		return false
	}
	verified := make(map[uint32]bool, len(ids))
	for _, id := range ids {
		verified[id] = true
	}
	for _, f := range s.frags {
		if !verified[f] {
			return false
		}
	}
	return true
}

// rowIDWindowRows is how many row ids the commit's check reads at once
// (2 MiB).
const rowIDWindowRows = 1 << 18

// countSourceRows reads a segment's row ids and counts them per fragment.
func countSourceRows(ctx context.Context, s *source) (fragRows, error) {
	counts := fragRows{}
	aux := s.files.Aux
	for lo := uint64(0); lo < aux.NumRows(); lo += rowIDWindowRows {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ids, err := aux.Read(ctx, "_rowid", lo, min(lo+rowIDWindowRows, aux.NumRows()))
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", s.uuid, err)
		}
		if ids.Type.ValueBits() != 64 {
			return nil, fmt.Errorf("%w: segment %s: _rowid is %s", errkind.Corrupt, s.uuid, ids.Type)
		}
		countRows(ids, counts)
	}
	return counts, nil
}

// checkNewCoverage checks the coverage of the commit's new vector segments
// against their rows, reading the row ids of those our merge did not
// verify, in parallel.
func checkNewCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, news []*source, parallelism int) error {
	if !rowsNameFragments(snap) {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, parallelism))
	for _, s := range news {
		if s.verifiedByMerge() {
			continue
		}
		goSafe(g, func() error {
			counts, err := countSourceRows(gctx, s)
			if err != nil {
				return err
			}
			return checkCoverage(gctx, st, snap, s.uuid, s.meta.GetFields()[0], s.frags, counts)
		})
	}
	return g.Wait()
}

// CheckCoverage checks segments of the dataset version snap against their
// rows, as a commit checks its new segments (see checkCoverage), without
// committing anything: for a caller who wants to know before, and for
// measuring what the check costs.
func CheckCoverage(ctx context.Context, st storage.Store, snap *table.Snapshot, metas []*pb.IndexMetadata, parallelism int) error {
	if err := checkEntries(ctx, st, metas, snap); err != nil {
		return err
	}
	var srcs []*source
	defer func() { closeSources(srcs) }()
	for _, im := range metas {
		if !IsVector(im) {
			continue
		}
		s, err := openSource(ctx, st, snap, im, true)
		if err != nil {
			return err
		}
		srcs = append(srcs, s)
	}
	return checkNewCoverage(ctx, st, snap, srcs, parallelism)
}
