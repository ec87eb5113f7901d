package bitmap

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
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

// Build writes a BITMAP segment (bitmap_page_lookup.lance, at name) of
// the (key, row address) pairs s holds, as pylance's
// create_index_uncommitted writes one: a row per distinct key, ascending,
// the null key first, each holding the row map of its rows; schema
// metadata lance:index_stats. keyType is the indexed column's type; v the
// file format (the dataset's). Memory is the sorter's budget, one window
// of keys and the rows of the largest key.
func Build(ctx context.Context, st storage.Store, s *keysort.Sorter, name string, keyType lancefile.DataType, v lancefile.Version) (*BuildResult, error) {
	if keyType.Kind == lancefile.KindBool {
		return nil, fmt.Errorf("%w: bitmap build: bool keys", errkind.Unsupported)
	}
	w, err := createKeyWriter(ctx, st, name,
		lancefile.NewField(keysColumn, keyType, true), lancefile.NewField(bitmapsColumn, lancefile.DataType{Kind: lancefile.KindBinary, Logical: "binary"}, true),
		v, nil)
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
	files, err := w.finish()
	if err != nil {
		return nil, err
	}
	return &BuildResult{Files: files, Rows: s.Rows(), Keys: w.keys}, nil
}
