package segment

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/fts"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/zonemap"
)

// The index types other than vector ones, by the message name of their
// index details (pylance 14.0.2 writes lance.table.BTreeIndexDetails,
// lance.index.pb.BloomFilterIndexDetails...; the package varies, the
// message name does not), with the file whose rows a listing reports.
var otherTypes = map[string]struct{ name, rowsFile string }{
	"btreeindexdetails":       {"BTREE", "page_data.lance"},
	"bitmapindexdetails":      {"BITMAP", ""},
	"labellistindexdetails":   {"LABEL_LIST", ""},
	"invertedindexdetails":    {"INVERTED", ""},
	"ngramindexdetails":       {"NGRAM", ""},
	"zonemapindexdetails":     {"ZONEMAP", ""},
	"bloomfilterindexdetails": {"BLOOMFILTER", ""},
	"rtreeindexdetails":       {"RTREE", ""},
	"jsonindexdetails":        {"JSON", ""},
}

// OtherType is the type of an index entry that is not a vector index
// (BTREE, BITMAP, INVERTED...; for details we do not know, the message
// name without its "IndexDetails" suffix, upper-cased; SYSTEM for Lance's
// own "__lance" entries), or "" for a vector index.
func OtherType(im *pb.IndexMetadata) string {
	if IsVector(im) {
		return ""
	}
	url := im.GetIndexDetails().GetTypeUrl()
	if url == "" {
		return "SYSTEM"
	}
	msg := url[strings.LastIndexAny(url, "./")+1:]
	if t, ok := otherTypes[strings.ToLower(msg)]; ok {
		return t.name
	}
	if n := strings.TrimSuffix(msg, "IndexDetails"); n != "" {
		return strings.ToUpper(n)
	}
	return strings.ToUpper(msg)
}

// RequireVector refuses an index entry that is not a vector index, as
// errkind.Unsupported naming its type (callers that handle the scalar and
// full-text types we merge ask MergeableTypes first): its segments are
// listed, and nothing more.
func RequireVector(im *pb.IndexMetadata) error {
	t := OtherType(im)
	switch {
	case t == "":
		return nil
	case IsSystemIndex(im):
		return fmt.Errorf("%w: index %q is Lance's %s system index, which pylance maintains: lance-segmerge lists it, and has nothing to merge",
			errkind.Unsupported, im.GetName(), t)
	}
	return fmt.Errorf("%w: index %q is a %s index: lance-segmerge lists its segments, but does not plan, merge, commit, verify or build %s indices (pylance's optimize_indices merges them)",
		errkind.Unsupported, im.GetName(), t, t)
}

// IsSystemIndex reports whether an index entry is one of Lance's own
// (the fragment reuse index, the MemWAL index: names that begin with
// "__lance_"), which pylance writes and maintains.
func IsSystemIndex(im *pb.IndexMetadata) bool {
	return strings.HasPrefix(im.GetName(), "__lance_")
}

// otherStats is what a listing says of a segment of another index type:
// its type, its files and their sizes (listed from its directory, whatever
// the manifest records), the Lance file version of its files and, where
// one file holds a row per indexed row (BTREE's page_data.lance), the rows.
func otherStats(ctx context.Context, st storage.Store, im *pb.IndexMetadata, typ string) (*Stats, error) {
	return otherStatsOf(ctx, st, im, typ, true, nil)
}

// otherStatsOf is otherStats; without counted, BITMAP and LABEL_LIST
// segments are not streamed to count their keys and rows (a plan's
// segments: counting reads every bitmap, seconds for a million keys).
// described, when set, is an INVERTED segment's description, already
// read (a plan reads it to size its tasks).
func otherStatsOf(ctx context.Context, st storage.Store, im *pb.IndexMetadata, typ string, counted bool, described *fts.Description) (*Stats, error) {
	dir := table.IndexDir(im)
	entries, err := st.List(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
	}
	if len(entries) == 0 && !MergeableTypes[typ] {
		// a type kept in the manifest alone (the fragment reuse index's
		// map is inline in its details)
		return &Stats{IndexType: typ, PartitionRows: []uint32{}, notVector: true}, nil
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: segment %s (%s): no files under %s", errkind.NotFound, table.IndexUUID(im), typ, dir)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimPrefix(e.Name, dir))
	}
	sort.Strings(names)
	s := &Stats{IndexType: typ, PartitionRows: []uint32{}, notVector: true}
	if counted && (typ == "BITMAP" || typ == "LABEL_LIST") {
		if b, err := bitmap.Described(ctx, st, im); err == nil {
			s.FileVersion, s.DistinctKeys, s.LargestKeyRows = b.Version.String(), &b.Keys, &b.Largest
			if typ == "BITMAP" { // a row per indexed row; LABEL_LIST rows hold several labels
				s.NumRows, s.rowsCounted = b.Rows, true
			}
			return s, nil
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if typ == "INVERTED" {
		d, err := described, error(nil)
		if d == nil {
			d, err = fts.Describe(ctx, st, im)
		}
		if err == nil {
			s.FileVersion, s.NumRows, s.rowsCounted = d.Version.String(), d.Docs, true
			s.NumPartitions, s.DistinctKeys = d.Partitions, &d.Tokens
			return s, nil
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if typ == "ZONEMAP" || typ == "BLOOMFILTER" {
		if z, err := zonemap.ReadKind(ctx, st, im, zoneKind(typ)); err == nil {
			s.FileVersion, s.NumRows, s.rowsCounted = z.Version.String(), z.Rows, true
			return s, nil
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	var rowsFile string
	for _, t := range otherTypes {
		if t.name == typ {
			rowsFile = t.rowsFile
		}
	}
	for _, n := range names {
		if path.Ext(n) != ".lance" || (rowsFile != "" && n != rowsFile) {
			continue
		}
		obj, err := st.Open(ctx, dir+n)
		if err != nil {
			return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
		}
		// A listing reports what it can read; verification is what
		// judges a file (a layout this reader does not know is no error
		// here).
		if r, err := lancefile.Open(ctx, obj, dir+n, lancefile.Options{}); err == nil {
			s.FileVersion = r.Version().String()
			if rowsFile != "" {
				s.NumRows, s.rowsCounted = r.NumRows(), true
			}
		}
		obj.Close()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		break
	}
	return s, nil
}
