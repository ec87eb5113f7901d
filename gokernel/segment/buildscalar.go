package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/btree"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/keysort"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ngram"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/zonemap"
)

// ScalarBuildOptions tune BuildScalar.
type ScalarBuildOptions struct {
	// Column is the indexed column; IndexName the logical index;
	// IndexType BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER or NGRAM. Required.
	Column    string `json:"column"`
	IndexName string `json:"name"`
	IndexType string `json:"index_type"`
	// FragmentIDs are the fragments whose rows the segment indexes.
	// Required (non-empty).
	FragmentIDs []uint64 `json:"fragment_ids"`
	// IndexUUID names the segment; a new random uuid when "".
	IndexUUID string `json:"index_uuid"`
	// WindowRows bounds the rows read at once (default 32768).
	WindowRows int `json:"window_rows"`
	// MemoryBytes bounds the (key, row) pairs held before a sorted run is
	// spilled to a temporary file (default 128 MiB).
	MemoryBytes int `json:"memory_bytes"`
	// TempDir holds spilled runs (default os.TempDir()).
	TempDir string `json:"temp_dir"`
	// Params are an INVERTED index's analyzer parameters (pylance's
	// create_scalar_index keywords: base_tokenizer, language,
	// with_position, max_token_length, lower_case, stem,
	// remove_stop_words, custom_stop_words, ascii_folding), over pylance's
	// defaults; an index that has segments keeps its own.
	Params json.RawMessage `json:"params,omitempty"`
	// Progress receives counters as the build goes (optional).
	Progress *Progress `json:"-"`
}

// BuildableScalarTypes are the scalar index types BuildScalar builds.
var BuildableScalarTypes = map[string]bool{"BTREE": true, "BITMAP": true, "LABEL_LIST": true, "ZONEMAP": true, "BLOOMFILTER": true, "NGRAM": true, "INVERTED": true}

// scalarDetailsURL is the index details type pylance 14.0.2's
// create_index_uncommitted records for each buildable type (an empty
// message), used when the index has no segment yet.
var scalarDetailsURL = map[string]string{
	"BTREE":       "/lance.table.BTreeIndexDetails",
	"BITMAP":      "/lance.table.BitmapIndexDetails",
	"LABEL_LIST":  "/lance.table.LabelListIndexDetails",
	"ZONEMAP":     "/lance.table.ZoneMapIndexDetails",
	"BLOOMFILTER": "/lance.index.pb.BloomFilterIndexDetails",
	"NGRAM":       "/lance.table.NGramIndexDetails",
	"INVERTED":    "/lance.table.InvertedIndexDetails",
}

// BuildScalar writes one uncommitted BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER or NGRAM segment over the
// given fragments from the column's data, as pylance's
// create_index_uncommitted writes it: deleted rows are left out, null
// values kept (under the null key; a LABEL_LIST row under each of its
// labels, a null list in the map of null lists), the files in the dataset's file
// format. It returns the segment's IndexMetadata; the manifest is not
// touched. Memory is bounded by MemoryBytes and a window of rows whatever
// the fragments' size (the pairs are sorted in spilled runs). On any
// error, cancellation included, the partial output is removed.
func BuildScalar(ctx context.Context, st storage.Store, snap *table.Snapshot, opts ScalarBuildOptions) (*pb.IndexMetadata, error) {
	if opts.Progress == nil {
		opts.Progress = &Progress{}
	}
	prog := opts.Progress
	prog.SetStage("validate")
	switch {
	case !BuildableScalarTypes[opts.IndexType]:
		return nil, fmt.Errorf("%w: build: %s segments are not built here (BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM and INVERTED are; build others with pylance's create_index_uncommitted)", errkind.Unsupported, opts.IndexType)
	case opts.IndexName == "":
		return nil, fmt.Errorf("%w: build: an index name is required", errkind.InvalidInput)
	case len(opts.FragmentIDs) == 0:
		return nil, fmt.Errorf("%w: build: no fragments to index", errkind.InvalidInput)
	}
	rd, err := vecdata.NewValueReader(st, snap, opts.Column)
	if err != nil {
		return nil, err
	}
	if err := rd.CheckFragments(opts.FragmentIDs); err != nil {
		return nil, err
	}
	col := rd.Column()
	keyType := col.Type
	if opts.IndexType == "LABEL_LIST" {
		if k := col.Type.Kind; k != lancefile.KindList && k != lancefile.KindLargeList || col.Item.Kind == lancefile.KindUnknown {
			return nil, fmt.Errorf("%w: build: a LABEL_LIST index is built over a list column; column %q is %s", errkind.InvalidInput, opts.Column, col.Type)
		}
		keyType = col.Item
	}
	if opts.IndexType == "NGRAM" {
		if !isText(col.Type) {
			return nil, fmt.Errorf("%w: build: an NGRAM index is built over a string column; column %q is %s", errkind.InvalidInput, opts.Column, col.Type)
		}
		keyType = lancefile.Primitive(lancefile.KindUint32)
	}
	existing, err := existingScalarIndex(snap, opts, col)
	if err != nil {
		return nil, err
	}
	version, err := datasetFileVersion(snap)
	if err != nil {
		return nil, err
	}
	if opts.IndexType == "INVERTED" {
		return buildFTS(ctx, st, snap, opts, rd, col, existing, version)
	}
	batchSize, rowsPerZone, probability := btree.DefaultBatchSize, zonemap.DefaultRowsPerZone, zonemap.DefaultProbability
	if existing != nil && (opts.IndexType == "BTREE" || opts.IndexType == "ZONEMAP" || opts.IndexType == "BLOOMFILTER") {
		// pages or zones of the size the index's segments have, or they do
		// not merge (read where the segment lives: a shallow clone's are
		// in its base)
		ist, err := snap.IndexStore(ctx, st, existing)
		if err != nil {
			return nil, err
		}
		if opts.IndexType == "BTREE" {
			seg, err := btree.Open(ctx, ist, existing)
			if err != nil {
				return nil, fmt.Errorf("build: reading index %q's segment %s: %w", opts.IndexName, table.IndexUUID(existing), err)
			}
			batchSize = seg.BatchSize
			seg.Close()
		} else {
			kind := zonemap.ZoneMap
			if opts.IndexType == "BLOOMFILTER" {
				kind = zonemap.BloomFilter
			}
			seg, err := zonemap.ReadKind(ctx, ist, existing, kind)
			if err != nil {
				return nil, fmt.Errorf("build: reading index %q's segment %s: %w", opts.IndexName, table.IndexUUID(existing), err)
			}
			rowsPerZone = seg.RowsPerZone
			if p, ok := seg.Metadata["bloomfilter_probability"]; ok {
				probability = string(p)
			}
		}
	}
	frags := slices.Clone(opts.FragmentIDs)
	if opts.IndexType == "BITMAP" || opts.IndexType == "LABEL_LIST" || opts.IndexType == "NGRAM" {
		// these hold stable row ids where the dataset has them (also in
		// LABEL_LIST's map of null lists), as pylance 14.0.2 writes them;
		// BTREE, ZONEMAP and BLOOMFILTER keep addresses
		rd.NameRowsByStableIDs()
	}
	var add func(w *vecdata.ValueWindow, i int) error
	var sorter *keysort.Sorter
	var zones *zonemap.Builder
	var nullLists map[uint32]*roaring.Bitmap
	if opts.IndexType == "ZONEMAP" || opts.IndexType == "BLOOMFILTER" {
		slices.Sort(frags) // zones are in fragment order
		switch {
		case opts.IndexType == "ZONEMAP" && (col.Type.Kind == lancefile.KindList || col.Type.Kind == lancefile.KindLargeList):
			zones, err = zonemap.NewListBuilder(col.Type, col.Item, rowsPerZone)
		case opts.IndexType == "ZONEMAP" && strings.HasPrefix(col.Type.Logical, "dict:"):
			zones, err = zonemap.NewDictBuilder(col.Type, rowsPerZone)
		case opts.IndexType == "ZONEMAP":
			zones, err = zonemap.NewBuilder(col.Type, rowsPerZone)
		default:
			zones, err = zonemap.NewBloomBuilder(col.Type, rowsPerZone, probability)
		}
		if err != nil {
			return nil, fmt.Errorf("build: column %q: %w", opts.Column, err)
		}
		add = func(w *vecdata.ValueWindow, i int) error {
			return zones.Add(uint32(w.Fragment), w.Start+uint64(i), w.Values, i)
		}
	} else {
		if sorter, err = keysort.New(keyType, keysort.Options{MemoryBytes: opts.MemoryBytes, TempDir: opts.TempDir}); err != nil {
			return nil, fmt.Errorf("build: column %q: %w", opts.Column, err)
		}
		defer sorter.Close()
		add = func(w *vecdata.ValueWindow, i int) error { return sorter.Add(w.Values, i, w.RowID(i)) }
		if opts.IndexType == "NGRAM" {
			var tok [4]byte
			var toks []uint32 // a row's tokens, each passed to the sorter once
			collect := func(t uint32) error { toks = append(toks, t); return nil }
			add = func(w *vecdata.ValueWindow, i int) error {
				id := w.RowID(i)
				toks = toks[:0]
				if !w.Values.IsValid(i) {
					toks = append(toks, ngram.NullToken)
				} else if err := ngram.Tokens(w.Values.Values[w.Values.Offsets[i]:w.Values.Offsets[i+1]], collect); err != nil {
					return fmt.Errorf("build: column %q, row %d of fragment %d: %w", opts.Column, w.Start+uint64(i), w.Fragment, err)
				}
				slices.Sort(toks)
				for _, t := range slices.Compact(toks) {
					binary.LittleEndian.PutUint32(tok[:], t)
					if err := sorter.AddValue(tok[:], id); err != nil {
						return err
					}
				}
				return nil
			}
		}
		if opts.IndexType == "LABEL_LIST" {
			nullLists = map[uint32]*roaring.Bitmap{}
			add = func(w *vecdata.ValueWindow, i int) error {
				id := w.RowID(i)
				if !w.Values.IsValid(i) {
					// a row map, keyed as the row's id (its address, or
					// its stable id, split the same way)
					bm := nullLists[uint32(id>>32)]
					if bm == nil {
						bm = roaring.New()
						nullLists[uint32(id>>32)] = bm
					}
					bm.Add(uint32(id))
					return nil
				}
				for j := w.Values.Offsets[i]; j < w.Values.Offsets[i+1]; j++ {
					if err := sorter.Add(w.Values.Items, int(j), id); err != nil {
						return err
					}
				}
				return nil
			}
		}
	}
	id, dir, err := outputDir(ctx, st, opts.IndexUUID)
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			removeOutput(ctx, st, dir, btree.DataFile, btree.LookupFile, bitmap.FileName, zonemap.FileName, zonemap.BloomFilter.File, ngram.FileName)
		}
	}()
	if opts.IndexType == "BLOOMFILTER" {
		// a zone's filter (32 KiB at the defaults) is written when the zone ends
		if err := zones.StreamTo(ctx, st, dir+zonemap.BloomFilter.File, version); err != nil {
			return nil, err
		}
		defer zones.Close()
	}
	prog.SetStage("read")
	err = rd.ScanValues(ctx, frags, opts.WindowRows, func(w *vecdata.ValueWindow) error {
		for i := range w.Values.Len {
			if !w.Live(i) {
				continue
			}
			if err := add(w, i); err != nil {
				return err
			}
		}
		prog.RowsRead.Add(int64(w.Values.Len))
		return nil
	})
	if err != nil {
		return nil, err
	}
	prog.SetStage("write")
	var files []*pb.IndexFile
	switch opts.IndexType {
	case "BTREE":
		var res *btree.Result
		res, err = btree.Build(ctx, st, sorter, btree.BuildOptions{Dir: dir, KeyType: col.Type, BatchSize: batchSize, Version: version})
		if err == nil {
			files = res.Files
			prog.RowsWritten.Add(int64(res.RowsWritten))
		}
	case "BITMAP", "LABEL_LIST":
		var res *bitmap.BuildResult
		res, err = bitmap.Build(ctx, st, sorter, bitmap.BuildOptions{Name: dir + bitmap.FileName, KeyType: keyType, Version: version, NullLists: nullLists})
		if err == nil {
			files = res.Files
			prog.RowsWritten.Add(int64(res.Rows))
		}
	case "ZONEMAP":
		files, err = zones.Write(ctx, st, dir+zonemap.FileName, version)
	case "BLOOMFILTER":
		files, err = zones.Write(ctx, st, dir+zonemap.BloomFilter.File, version)
	case "NGRAM":
		var res *ngram.Result
		res, err = ngram.Build(ctx, st, sorter, dir+ngram.FileName, version)
		if err == nil {
			files = res.Files
			prog.RowsWritten.Add(int64(res.RowsWritten))
		}
	}
	if err != nil {
		return nil, err
	}
	done = true
	prog.SetStage("done")
	var details []byte
	if opts.IndexType == "ZONEMAP" {
		details = zonemap.Details(col.Type, rowsPerZone)
	}
	return scalarEntry(id, snap, opts, col, existing, files, details)
}

// scalarIndexVersion is the index version pylance 14.0.2 records for a
// segment of typ: 0, but 1 for LABEL_LIST, and 1 for BTREE on a dataset with stable row ids,
// where a version-0 BTREE is read as holding stable ids and version 1 as
// holding the row addresses pylance (and Build) write
// (test_scalar_build.py::test_stable_row_ids_btree_builds_bitmap_refused).
func scalarIndexVersion(snap *table.Snapshot, typ string) int32 {
	if typ == "INVERTED" {
		return ftsIndexVersion
	}
	if typ == "LABEL_LIST" || typ == "BTREE" && snap.HasStableRowIDs() {
		return 1
	}
	return 0
}

// existingScalarIndex returns a segment of the index the build joins (nil
// for a new index), refusing an index of that name on another column or
// of another type.
func existingScalarIndex(snap *table.Snapshot, opts ScalarBuildOptions, col *vecdata.Column) (*pb.IndexMetadata, error) {
	for _, im := range snap.Indices {
		if im.GetName() != opts.IndexName {
			continue
		}
		if f := im.GetFields(); len(f) != 1 || f[0] != col.FieldID {
			return nil, fmt.Errorf("%w: build: index %q already exists on fields %v, not on column %q (field %d)", errkind.InvalidInput, opts.IndexName, f, col.Name, col.FieldID)
		}
		if t := OtherType(im); t != opts.IndexType {
			return nil, fmt.Errorf("%w: build: index %q is a %s index, not %s", errkind.InvalidInput, opts.IndexName, kindName(t), opts.IndexType)
		}
		// An INVERTED index of version 1 is FTS format 1, which buildFTS
		// writes too; of version 0, pylance 0.27's layout, which fts.Open
		// names.
		olderFTS := opts.IndexType == "INVERTED" && im.GetIndexVersion() < ftsIndexVersion
		if want := scalarIndexVersion(snap, opts.IndexType); im.GetIndexVersion() != want && !olderFTS {
			// a BTREE of version 0 on a dataset with stable row ids holds
			// stable ids, which the data files do not carry
			return nil, fmt.Errorf("%w: build: index %q's segments are of index version %d (this build writes version %d)", errkind.Unsupported, opts.IndexName, im.GetIndexVersion(), want)
		}
		return im, nil
	}
	return nil, nil
}

func kindName(otherType string) string {
	if otherType == "" {
		return "vector"
	}
	return otherType
}

// scalarEntry is the manifest entry of a built scalar segment: the
// details and index version of the index it joins, else the type's
// details message holding details (pylance 14.0.2 writes an empty one
// but for ZONEMAP and INVERTED).
func scalarEntry(id uuid.UUID, snap *table.Snapshot, opts ScalarBuildOptions, col *vecdata.Column, existing *pb.IndexMetadata, files []*pb.IndexFile, details []byte) (*pb.IndexMetadata, error) {
	frags := make([]uint32, len(opts.FragmentIDs))
	for i, f := range opts.FragmentIDs {
		frags[i] = uint32(f)
	}
	slices.Sort(frags)
	bm, err := table.EncodeFragmentBitmap(frags)
	if err != nil {
		return nil, err
	}
	d := &anypb.Any{TypeUrl: scalarDetailsURL[opts.IndexType], Value: details}
	iv := scalarIndexVersion(snap, opts.IndexType)
	if existing != nil {
		d = cloneAny(existing.GetIndexDetails())
	}
	now := uint64(time.Now().UnixMilli())
	return &pb.IndexMetadata{
		Uuid:           &pb.UUID{Uuid: id[:]},
		Fields:         []int32{col.FieldID},
		Name:           opts.IndexName,
		DatasetVersion: snap.Ref.Version,
		FragmentBitmap: bm,
		IndexDetails:   d,
		IndexVersion:   &iv,
		CreatedAt:      &now,
		Files:          files,
	}, nil
}
