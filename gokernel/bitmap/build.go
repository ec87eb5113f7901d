package bitmap

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/keysort"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// BuildResult is what Build wrote.
type BuildResult struct {
	Files []*pb.IndexFile
	Rows  uint64
	Keys  uint64
}

// BuildOptions say what Build writes.
type BuildOptions struct {
	// Name is the file's path in the store (a segment's directory and
	// FileName).
	Name string
	// KeyType is the keys' type: the indexed column's, or a LABEL_LIST
	// column's item type.
	KeyType lancefile.DataType
	// Version is the file format (the dataset's).
	Version lancefile.Version
	// NullLists, set for a LABEL_LIST segment (even when it holds no
	// rows), is the fragment -> row offsets map of the rows whose list is
	// null: written as global buffer 1, named by lance:label_list_nulls,
	// as pylance writes it whether or not any list is null.
	NullLists map[uint32]*roaring.Bitmap
}

// Build writes a BITMAP or LABEL_LIST segment's bitmap_page_lookup.lance
// of the (key, row address) pairs s holds, as pylance's
// create_index_uncommitted writes one: a row per distinct key, ascending,
// the null key first, each holding the row map of its rows (a row listed
// twice under a key, as a LABEL_LIST row with a repeated label is, once);
// schema metadata lance:index_stats. Memory is the sorter's budget, one
// window of keys and the rows of the largest key.
func Build(ctx context.Context, st storage.Store, s *keysort.Sorter, opts BuildOptions) (*BuildResult, error) {
	w, err := createKeyWriter(ctx, st, opts.Name,
		lancefile.NewField(keysColumn, opts.KeyType, true), lancefile.NewField(bitmapsColumn, lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}, true),
		opts.Version, nil)
	if err != nil {
		return nil, err
	}
	defer w.abort()
	var (
		cur     key
		have    bool
		rows    []uint64 // the current key's row addresses, ascending
		rowMap  []byte
		entries []RawEntry
	)
	flush := func() error {
		if !have {
			return nil
		}
		entries = entries[:0]
		for i := 0; i < len(rows); {
			frag := uint32(rows[i] >> 32)
			j := i
			bm := roaring.New()
			for j < len(rows) && uint32(rows[j]>>32) == frag {
				bm.Add(uint32(rows[j]))
				j++
			}
			bits, err := bm.ToBytes()
			if err != nil {
				return fmt.Errorf("bitmap build: %w", err)
			}
			entries = append(entries, RawEntry{Frag: frag, Bits: bits})
			i = j
		}
		rowMap = AppendRowMap(rowMap[:0], entries)
		return w.add(cur, rowMap)
	}
	err = s.Sort(ctx, func(valid bool, value []byte, row uint64) error {
		if have && cur.valid == valid && (!valid || bytes.Equal(cur.b, value)) {
			rows = append(rows, row)
			return nil
		}
		if err := flush(); err != nil {
			return err
		}
		// value is the sorter's until this call returns
		cur, have, rows = key{valid: valid, b: slices.Clone(value)}, true, append(rows[:0], row)
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return nil, err
	}
	if opts.NullLists != nil {
		if err := w.setNullLists(opts.NullLists); err != nil {
			return nil, err
		}
	}
	files, err := w.finish()
	if err != nil {
		return nil, err
	}
	return &BuildResult{Files: files, Rows: s.Rows(), Keys: w.keys}, nil
}

// setNullLists writes the map of null-list rows as a global buffer and
// names it in the schema metadata.
func (kw *keyWriter) setNullLists(m map[uint32]*roaring.Bitmap) error {
	frags := slices.Sorted(maps.Keys(m))
	es := make([]RawEntry, 0, len(frags))
	for _, f := range frags {
		if m[f].IsEmpty() {
			continue
		}
		bits, err := m[f].ToBytes()
		if err != nil {
			return fmt.Errorf("bitmap build: %w", err)
		}
		es = append(es, RawEntry{Frag: f, Bits: bits})
	}
	g, err := kw.w.AddGlobalBuffer(AppendRowMap(nil, es))
	if err != nil {
		return err
	}
	kw.w.SetMetadata(labelListNullsKey, []byte(strconv.Itoa(g)))
	return nil
}
