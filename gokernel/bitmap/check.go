package bitmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/rowset"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Problem is one thing Check found wrong, named by the check it failed
// ("structure": key order and row maps; "row_ids": coverage and, for
// BITMAP, rows under two keys).
type Problem struct {
	Check   string
	Message string
}

// CheckResult is what Check read and found.
type CheckResult struct {
	Keys uint64
	// Rows counts (row, key) pairs; NullKeyRows the rows of the null key.
	Rows, NullKeyRows uint64
	// Decoded counts the keys whose bitmaps were decoded (all of them
	// unless CheckOptions.SampleKeys samples).
	Decoded  uint64
	Problems []Problem
}

// maxProblems bounds the problems one check reports (each names where).
const maxProblems = 8

// CheckOptions says what Check checks beyond key order and row maps.
type CheckOptions struct {
	// Covered, when set, says which fragments the segment may hold rows of.
	Covered func(frag uint32) bool
	// Unique (BITMAP: a row has one value) checks that no row is under two
	// keys.
	Unique bool
	// SampleKeys, when above 0 and below the segment's key count, decodes
	// the row maps of only that many keys, evenly spread (the first among
	// them): the check of a merge's output before its commit. Every key's
	// order, its row map's fragments (ascending, covered) and the headers
	// of its bitmaps, which give the row counts, are still checked;
	// uniqueness then holds among the keys decoded.
	SampleKeys int
}

// Check streams a whole segment once and checks what pylance's reader
// relies on: keys ascending, the null key first, each once; every row map
// well formed with its fragments ascending; when opts.Covered is set,
// every fragment one the segment covers; when opts.Unique, no row under
// two keys. opts.SampleKeys decodes a sample of the row maps. A file that
// does not open is an error, not a problem.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, opts CheckOptions) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &CheckResult{}
	add := func(check, format string, args ...any) {
		if len(res.Problems) < maxProblems {
			res.Problems = append(res.Problems, Problem{check, fmt.Sprintf(format, args...)})
		}
	}
	step := uint64(1)
	if n := uint64(opts.SampleKeys); n > 0 && n < s.Keys {
		// a million keys decoded took half of a high-cardinality optimize
		step = (s.Keys + n - 1) / n
	}
	// rows seen under a key so far: a bit per row (unioning each key's
	// bitmap into one per fragment cost a merge of sorted arrays per key,
	// quadratic with a million keys)
	seen := rowset.New(s.Keys / step * 4)
	c := newCursor(s, 0)
	defer c.run(ctx, nil)()
	ok, err := c.fill(ctx)
	if err == nil && ok {
		err = c.load(nil, true)
	}
	var entries []RawEntry // countRowMap's, reused for every key
	for k := uint64(0); ok && err == nil; k++ {
		var b []byte
		if b, err = c.rowMap(); err != nil {
			break
		}
		var n uint64
		if k%step == 0 {
			n = checkRowMap(k, b, opts, seen, add)
			res.Decoded++
		} else {
			n, entries = countRowMap(k, b, opts.Covered, add, entries[:0])
		}
		res.Rows += n
		if !c.cur.valid {
			res.NullKeyRows += n
		}
		res.Keys++
		if k%windowRows == 0 {
			if err = ctx.Err(); err != nil {
				break
			}
		}
		ok, err = c.advance(ctx)
	}
	if errors.Is(err, errkind.Corrupt) {
		// Out-of-order keys and null bitmaps are the segment's damage.
		add("structure", "%v", err)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkRowMap decodes key k's row map b and checks it (see Check); it
// returns the rows the map holds.
func checkRowMap(k uint64, b []byte, opts CheckOptions, seen *rowset.Set, add func(check, format string, args ...any)) uint64 {
	es, err := DecodeRowMap(b)
	if err != nil {
		add("structure", "key %d: %v", k, err)
	}
	var rows uint64
	for _, e := range es {
		if opts.Covered != nil && !opts.Covered(e.Frag) {
			add("row_ids", "key %d holds rows of fragment %d, which the segment does not cover", k, e.Frag)
		}
		if e.Full {
			add("structure", "key %d holds all of fragment %d (a whole-fragment entry, which this check cannot count)", k, e.Frag)
			continue
		}
		rows += e.Rows.GetCardinality()
		if opts.Unique {
			it := e.Rows.Iterator()
			for it.HasNext() {
				if !seen.Add(uint64(e.Frag)<<32 | uint64(it.Next())) {
					add("row_ids", "key %d holds rows of fragment %d that another key holds too", k, e.Frag)
					break
				}
			}
		}
	}
	return rows
}

// countRowMap checks key k's row map b without decoding its bitmaps: its
// fragments covered, and what rowMapRows checks as it counts the rows.
// The map's entries are appended to scratch, returned for the next key.
func countRowMap(k uint64, b []byte, covered func(uint32) bool, add func(check, format string, args ...any), scratch []RawEntry) (uint64, []RawEntry) {
	raw, err := AppendRowMapEntries(scratch, b)
	if err != nil {
		add("structure", "key %d: %v", k, err)
		return 0, scratch
	}
	for _, e := range raw {
		if covered != nil && !covered(e.Frag) {
			add("row_ids", "key %d holds rows of fragment %d, which the segment does not cover", k, e.Frag)
		}
	}
	rows, err := rowMapRows(raw)
	if err != nil {
		add("structure", "key %d: %v", k, err)
	}
	return rows, raw
}

// KeyRow is one row a segment lists under a key (Null: the null key).
type KeyRow struct {
	Null  bool
	Key   []byte
	RowID uint64
}

// Sample returns up to perKey rows of about n/perKey of a segment's keys,
// evenly spread, to check against the column's data. It reads those keys'
// rows only (a million-key segment was streamed whole for 64 keys).
func Sample(ctx context.Context, st storage.Store, im *pb.IndexMetadata, n, perKey int) ([]KeyRow, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	step := max(uint64(1), s.Keys*uint64(perKey)/uint64(max(n, 1)))
	width := 0
	if s.KeyType.Kind != lancefile.KindBinary {
		width = s.KeyType.ValueBits() / 8
	}
	var out []KeyRow
	for k := uint64(0); k < s.Keys; k += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		keys, err := s.readRows(ctx, keysColumn, k, k+1)
		if err != nil {
			return nil, fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(im), err)
		}
		maps, err := s.readRows(ctx, bitmapsColumn, k, k+1)
		if err != nil {
			return nil, fmt.Errorf("bitmap segment %s: %w", table.IndexUUID(im), err)
		}
		if keys.Len != 1 || maps.Len != 1 {
			return nil, fmt.Errorf("%w: bitmap segment %s: key %d read back as %d keys and %d bitmaps", errkind.Corrupt, table.IndexUUID(im), k, keys.Len, maps.Len)
		}
		if !maps.IsValid(0) {
			return nil, fmt.Errorf("%w: bitmap segment %s: key %d has a null bitmap", errkind.Corrupt, table.IndexUUID(im), k)
		}
		key := keyOf(keys, nil, 0, width, true) // wide: its bytes only, no sort key
		es, err := DecodeRowMap(maps.Values[maps.Offsets[0]:maps.Offsets[1]])
		if err != nil {
			return nil, err
		}
		taken := 0
		for _, e := range es {
			if e.Full {
				continue
			}
			it := e.Rows.Iterator()
			for it.HasNext() && taken < perKey {
				out = append(out, KeyRow{Null: !key.valid, Key: bytes.Clone(key.b), RowID: uint64(e.Frag)<<32 | uint64(it.Next())})
				taken++
			}
		}
	}
	return out, nil
}
