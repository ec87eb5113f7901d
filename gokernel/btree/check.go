package btree

import (
	"bytes"
	"context"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/rowset"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Problem is one thing Check found wrong, named by the check it failed
// ("structure": order and pages; "row_ids": uniqueness and coverage).
type Problem struct {
	Check   string
	Message string
}

// CheckResult is what Check read and found.
type CheckResult struct {
	Rows     uint64
	Pages    uint64
	Nulls    uint64
	Problems []Problem
}

// maxProblems bounds the problems one check reports (each names where).
const maxProblems = 8

// CheckOptions tune Check.
type CheckOptions struct {
	// Covered, when set, says which row ids the segment may hold.
	Covered func(rowID uint64) bool
	// Pages, when above 0 and below the segment's page count, reads only
	// that many pages, evenly spread (the first and the last among them):
	// the check of a merge's output before its commit. The page table is
	// then checked whole (every page's bounds in order of the next one's),
	// and rows, page bounds and row ids in the pages read.
	Pages int
}

// Check reads a segment and checks what pylance's reader relies on: rows
// sorted by value with nulls first, each page_lookup row the first and
// last value and the null count of its page, page_idx i at row i; row ids
// unique and, when opts.Covered is set, of the fragments the segment
// covers. By default it reads every row once; opts.Pages samples. A file
// that does not open is an error (errkind.Corrupt, NotFound or
// Unsupported), not a problem.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, opts CheckOptions) (*CheckResult, error) {
	s, err := Open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res := &CheckResult{Rows: s.Rows, Pages: s.Pages}
	problem := func(check, format string, args ...any) {
		if len(res.Problems) < maxProblems {
			res.Problems = append(res.Problems, Problem{check, fmt.Sprintf(format, args...)})
		}
	}
	dir := table.IndexDir(im)
	obj, err := st.Open(ctx, dir+LookupFile)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	lr, err := lancefile.Open(ctx, obj, dir+LookupFile, lancefile.Options{})
	if err != nil {
		return nil, err
	}
	read := func(name string) (*lancefile.Array, error) { return lr.Read(ctx, name, 0, lr.NumRows()) }
	mins, err := read("min")
	if err != nil {
		return nil, err
	}
	maxs, err := read("max")
	if err != nil {
		return nil, err
	}
	nullCounts, err := read("null_count")
	if err != nil {
		return nil, err
	}
	pageIdx, err := read("page_idx")
	if err != nil {
		return nil, err
	}
	width := s.KeyType.ValueBits() / 8
	if mins.Type != s.KeyType || maxs.Type != s.KeyType {
		problem("structure", "%s holds %s and %s bounds for %s keys", LookupFile, mins.Type, maxs.Type, s.KeyType)
		return res, nil
	}
	u32 := func(a *lancefile.Array, i int) uint32 {
		b := a.Values[i*4:]
		return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	}
	ids := rowset.New(s.Rows)
	var havePrev, prevNull bool
	var prevKey uint64
	var row uint64
	page, inPage, pageNulls := 0, 0, uint32(0)
	var first, last []byte
	var firstNull, lastNull bool
	endPage := func() {
		if page >= mins.Len {
			return
		}
		same := func(a *lancefile.Array, null bool, v []byte) bool {
			if !a.IsValid(page) {
				return null
			}
			return !null && bytes.Equal(valueAt(a, page, width), v)
		}
		if !same(mins, firstNull, first) || !same(maxs, lastNull, last) || u32(nullCounts, page) != pageNulls || u32(pageIdx, page) != uint32(page) {
			problem("structure", "page %d (rows %d to %d): its %s row does not match the page (min, max, null_count %d, page_idx %d)",
				page, uint64(page)*uint64(s.BatchSize), row-1, LookupFile, u32(nullCounts, page), u32(pageIdx, page))
		}
	}
	// rows checks the rows of c's window, the rows from row on.
	rows := func(c *cursor) {
		for c.i = 0; c.i < c.n; c.i++ {
			valid, key := c.key()
			if !valid {
				res.Nulls++
			}
			// last is still the previous row's value.
			if havePrev && (valid && !prevNull && (key < prevKey || key == prevKey && c.wide && lancefile.CompareWide(s.KeyType, c.value(), last) < 0) || !valid && !prevNull) {
				problem("structure", "row %d is out of order (rows must be sorted by value, nulls first)", row)
			}
			havePrev, prevNull, prevKey = true, !valid, key
			if inPage == 0 {
				first, firstNull = append(first[:0], c.value()...), !valid
			}
			last, lastNull = append(last[:0], c.value()...), !valid
			if !valid {
				pageNulls++
			}
			rid := c.rowID()
			if !ids.Add(rid) {
				problem("row_ids", "row id %d (fragment %d, offset %d) appears twice", rid, rid>>32, uint32(rid))
			}
			if opts.Covered != nil && !opts.Covered(rid) {
				problem("row_ids", "row id %d is of fragment %d, which the segment does not cover", rid, rid>>32)
			}
			row++
			inPage++
			if inPage == s.BatchSize {
				endPage()
				page, inPage, pageNulls = page+1, 0, 0
			}
		}
	}
	if opts.Pages > 0 && uint64(opts.Pages) < s.Pages {
		checkPageOrder(s, mins, maxs, width, problem)
		c := newCursor(s, s.BatchSize)
		n := uint64(opts.Pages)
		for j := uint64(0); j < n; j++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			p := j * (s.Pages - 1) / max(n-1, 1) // the first and the last page among them
			c.next = p * uint64(s.BatchSize)
			if _, err := c.fillExact(ctx); err != nil {
				return nil, err
			}
			row, page, inPage, pageNulls, havePrev = c.next-uint64(c.n), int(p), 0, 0, false
			rows(c)
			if inPage > 0 {
				endPage()
			}
		}
		if mins.Len != int(s.Pages) {
			problem("structure", "%s has %d rows for %d pages", LookupFile, mins.Len, s.Pages)
		}
		return res, nil
	}
	// The next window is decoded while this one is checked.
	ctx, cancel := context.WithCancel(ctx)
	windows, wait := readAhead(ctx, newCursor(s, maxWindowRows))
	defer func() {
		cancel()
		wait() // the reader reads s's files, closed when Check returns
	}()
	c := newCursor(s, maxWindowRows)
	for w := range windows {
		if w.err != nil {
			return nil, w.err
		}
		c.vals, c.ids, c.keys, c.n = w.vals, w.ids, w.keys, w.vals.Len
		rows(c)
	}
	if inPage > 0 {
		endPage()
	}
	if row != s.Rows {
		problem("structure", "%s read back %d rows, its metadata says %d", DataFile, row, s.Rows)
	}
	return res, nil
}

// checkPageOrder checks that the page table's bounds are in order: each
// page's first value at or after the previous page's last, nulls first.
func checkPageOrder(s *Segment, mins, maxs *lancefile.Array, width int, problem func(check, format string, args ...any)) {
	var lo, hi []uint64
	if lancefile.Wide(s.KeyType) {
		lo, hi = lancefile.AppendPrefixKeys(mins, nil), lancefile.AppendPrefixKeys(maxs, nil)
	} else {
		lo, hi = lancefile.AppendSortKeys(s.KeyType.Kind, mins.Values, mins.Len, nil), lancefile.AppendSortKeys(s.KeyType.Kind, maxs.Values, maxs.Len, nil)
	}
	for p := 1; p < min(mins.Len, maxs.Len); p++ {
		prevNull, null := !maxs.IsValid(p-1), !mins.IsValid(p)
		switch {
		case null && !prevNull:
			problem("structure", "page %d starts with a null after page %d ends with a value (nulls come first)", p, p-1)
		case null || prevNull:
		case hi[p-1] > lo[p] || hi[p-1] == lo[p] && lancefile.Wide(s.KeyType) && lancefile.CompareWide(s.KeyType, valueAt(maxs, p-1, width), valueAt(mins, p, width)) > 0:
			problem("structure", "page %d starts below the end of page %d (%s)", p, p-1, LookupFile)
		}
	}
}

// valueAt is row i's value of a fixed-width (of width bytes) or binary
// array.
func valueAt(a *lancefile.Array, i, width int) []byte {
	if a.Type.Kind == lancefile.KindBinary {
		return a.Values[a.Offsets[i]:a.Offsets[i+1]]
	}
	return a.Values[i*width : (i+1)*width]
}

// aheadWindow is a window of rows a readAhead goroutine decoded, or the
// error that stopped it.
type aheadWindow struct {
	vals, ids *lancefile.Array
	keys      []uint64
	err       error
}

// readAhead decodes c's windows on a goroutine, one ahead of the reader
// of the channel, which ends after the last window or an error. wait
// returns once the goroutine has stopped (cancel ctx first to stop it
// early).
func readAhead(ctx context.Context, c *cursor) (<-chan aheadWindow, func()) {
	out := make(chan aheadWindow, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			ok, err := c.fill(ctx)
			if !ok && err == nil {
				return
			}
			w := aheadWindow{vals: c.vals, ids: c.ids, keys: c.keys, err: err}
			c.keys = nil // the window's keys are the reader's now
			select {
			case out <- w:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out, func() { <-done }
}
