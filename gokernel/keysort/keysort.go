// Package keysort sorts the (key, row) pairs of a scalar index build by
// key, in bounded memory.
//
// A build reads a column a window at a time and adds each live row's value
// and row address; Sort then hands the pairs back in the order BTREE pages
// and BITMAP keys are written: nulls first, then by key (numbers in
// lancefile.SortKey order, floats in total order; strings and binary by
// their bytes, decimals by value: lancefile.CompareWide), ties by row. Pairs beyond the memory budget are sorted and
// spilled to a temporary file as a run; Sort merges the runs with a k-way
// heap, reading each through a small buffer, so a build of any size holds
// one budget of pairs and a buffer per run.
package keysort

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/kway"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// DefaultMemoryBytes is the budget of pairs held before a run is spilled.
const DefaultMemoryBytes = 128 << 20

// maxValueBytes bounds one binary key: a spilled record's length is read
// back and checked against it.
const maxValueBytes = 1 << 30

// runBuffer is each spilled run's read buffer during the merge.
const runBuffer = 256 << 10

// Options tune a Sorter.
type Options struct {
	// MemoryBytes bounds the pairs held in memory (DefaultMemoryBytes
	// when <= 0).
	MemoryBytes int
	// TempDir holds spilled runs (os.TempDir() when "").
	TempDir string
}

// entry is one pair of the run in memory; its value lives in the
// Sorter's vals at [off, off+n).
type entry struct {
	key   uint64 // the value's order (a wide value's PrefixKey)
	row   uint64
	off   uint32
	n     uint32
	valid bool
}

// Sorter collects pairs and returns them sorted (see the package comment).
type Sorter struct {
	t      lancefile.DataType
	binary bool                  // variable-width values
	tie    func(a, b []byte) int // orders wide values of equal keys (lancefile.Wide); nil for others
	width  int
	opts   Options

	entries []entry
	vals    []byte
	runs    []*os.File
	rows    uint64
}

// New returns a Sorter of values of type t: a fixed-width type whose order
// lancefile knows (lancefile.Orderable) or a binary one.
func New(t lancefile.DataType, opts Options) (*Sorter, error) {
	if !lancefile.Orderable(t.Kind) && !lancefile.Wide(t) {
		return nil, fmt.Errorf("%w: keysort: values of type %s have no order here (bool, integer, floating-point, decimal, date and time, string and binary do)", errkind.Unsupported, t)
	}
	if opts.MemoryBytes <= 0 {
		opts.MemoryBytes = DefaultMemoryBytes
	}
	s := &Sorter{t: t, binary: t.Kind == lancefile.KindBinary, width: t.ValueBits() / 8, opts: opts}
	if lancefile.Wide(t) {
		s.tie = func(a, b []byte) int { return lancefile.CompareWide(t, a, b) }
	}
	return s, nil
}

// Rows is the number of pairs added.
func (s *Sorter) Rows() uint64 { return s.rows }

// Runs is the number of runs spilled so far.
func (s *Sorter) Runs() int { return len(s.runs) }

// Add adds row i of a (a value of the Sorter's type, or null) under row id
// row. Past the memory budget, the pairs held are spilled as a run.
func (s *Sorter) Add(a *lancefile.Array, i int, row uint64) error {
	if !a.IsValid(i) {
		return s.add(entry{row: row, off: uint32(len(s.vals))}, nil)
	}
	if s.binary {
		return s.AddValue(a.Values[a.Offsets[i]:a.Offsets[i+1]], row)
	}
	return s.AddValue(a.Values[i*s.width:(i+1)*s.width], row)
}

// AddValue adds a (non-null) value of the Sorter's type, its bytes as an
// Array holds them, under row id row.
func (s *Sorter) AddValue(v []byte, row uint64) error {
	e := entry{row: row, off: uint32(len(s.vals)), valid: true}
	if s.binary && len(v) > maxValueBytes {
		return fmt.Errorf("%w: keysort: a value of %d bytes (at most %d)", errkind.Unsupported, len(v), maxValueBytes)
	}
	if !s.binary && len(v) != s.width {
		return fmt.Errorf("%w: keysort: a %d-byte value of %s", errkind.InvalidInput, len(v), s.t)
	}
	e.key = s.key(v)
	return s.add(e, v)
}

func (s *Sorter) add(e entry, v []byte) error {
	if len(s.vals)+len(v) > 1<<32-1 {
		if err := s.spill(); err != nil {
			return err
		}
		e.off = 0
	}
	s.vals = append(s.vals, v...)
	e.n = uint32(len(v))
	s.entries = append(s.entries, e)
	s.rows++
	if len(s.entries)*32+len(s.vals) >= s.opts.MemoryBytes {
		return s.spill()
	}
	return nil
}

func (s *Sorter) value(e *entry) []byte { return s.vals[e.off : e.off+e.n] }

// key is a value's order: its SortKey, or a wide value's PrefixKey (ties
// broken by s.tie).
func (s *Sorter) key(v []byte) uint64 {
	if s.tie != nil {
		return lancefile.PrefixKey(s.t, v)
	}
	return lancefile.SortKey(s.t.Kind, v)
}

// compare orders pairs: nulls first, then by key (and tie, when set, for
// equal keys), then by row.
func compare(av, bv bool, ak, bk uint64, ab, bb []byte, tie func(a, b []byte) int, ar, br uint64) int {
	if av != bv {
		if !av {
			return -1
		}
		return 1
	}
	if av {
		if c := cmp.Compare(ak, bk); c != 0 {
			return c
		}
		if tie != nil {
			if c := tie(ab, bb); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(ar, br)
}

func (s *Sorter) sortMemory() {
	slices.SortFunc(s.entries, func(a, b entry) int {
		var av, bv []byte
		if s.tie != nil && a.key == b.key {
			av, bv = s.value(&a), s.value(&b)
		}
		return compare(a.valid, b.valid, a.key, b.key, av, bv, s.tie, a.row, b.row)
	})
}

// spill sorts the pairs held and writes them to a temporary file as a run:
// per pair a validity byte, the value (fixed width, or a u32 length and
// the bytes) when valid, and the row as a u64, little-endian.
func (s *Sorter) spill() error {
	if len(s.entries) == 0 {
		return nil
	}
	s.sortMemory()
	f, err := os.CreateTemp(s.opts.TempDir, "segmerge-keysort-*.run")
	if err != nil {
		return fmt.Errorf("keysort: spill: %w", err)
	}
	s.runs = append(s.runs, f)
	w := bufio.NewWriterSize(f, 1<<20)
	var b []byte
	for i := range s.entries {
		e := &s.entries[i]
		b = b[:0]
		if e.valid {
			b = append(b, 1)
			if s.binary {
				b = binary.LittleEndian.AppendUint32(b, e.n)
			}
			b = append(b, s.value(e)...)
		} else {
			b = append(b, 0)
		}
		b = binary.LittleEndian.AppendUint64(b, e.row)
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("keysort: spill: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("keysort: spill: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("keysort: spill: %w", err)
	}
	s.entries, s.vals = s.entries[:0], s.vals[:0]
	return nil
}

// Close removes the spilled runs.
func (s *Sorter) Close() {
	for _, f := range s.runs {
		name := f.Name()
		f.Close()
		os.Remove(name)
	}
	s.runs = nil
	s.entries, s.vals = nil, nil
}

// Sort calls fn with every pair, sorted (see the package comment). value
// is the value's bytes (fixed-width little-endian or binary), valid until
// fn returns; it is nil for a null. Sort may be called once.
func (s *Sorter) Sort(ctx context.Context, fn func(valid bool, value []byte, row uint64) error) error {
	if len(s.runs) == 0 {
		s.sortMemory()
		for i := range s.entries {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			e := &s.entries[i]
			var v []byte
			if e.valid {
				v = s.value(e)
			}
			if err := fn(e.valid, v, e.row); err != nil {
				return err
			}
		}
		return nil
	}
	if err := s.spill(); err != nil {
		return err
	}
	s.entries, s.vals = nil, nil // the runs hold every pair now
	h := make([]*run, 0, len(s.runs))
	for _, f := range s.runs {
		r := &run{r: bufio.NewReaderSize(f, runBuffer), s: s}
		ok, err := r.next()
		if err != nil {
			return err
		}
		if ok {
			h = append(h, r)
		}
	}
	less := func(a, b *run) bool {
		return compare(a.valid, b.valid, a.key, b.key, a.val, b.val, s.tie, a.row, b.row) < 0
	}
	kway.Heapify(h, less)
	for n := 0; len(h) > 0; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		r := h[0]
		var v []byte
		if r.valid {
			v = r.val
		}
		if err := fn(r.valid, v, r.row); err != nil {
			return err
		}
		ok, err := r.next()
		if err != nil {
			return err
		}
		if !ok {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		kway.SiftDown(h, 0, less)
	}
	return nil
}

// run reads back one spilled run, a pair at a time.
type run struct {
	r     *bufio.Reader
	s     *Sorter
	valid bool
	key   uint64
	val   []byte
	row   uint64
	hdr   [8]byte
}

// next reads the run's next pair; false at its end.
func (r *run) next() (bool, error) {
	flag, err := r.r.ReadByte()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("keysort: reading a run: %w", err)
	}
	r.valid = flag == 1
	if r.valid {
		n := r.s.width
		if r.s.binary {
			if _, err := io.ReadFull(r.r, r.hdr[:4]); err != nil {
				return false, fmt.Errorf("keysort: reading a run: %w", err)
			}
			n = int(binary.LittleEndian.Uint32(r.hdr[:4]))
			if n > maxValueBytes {
				return false, fmt.Errorf("%w: keysort: a spilled value of %d bytes", errkind.Corrupt, n)
			}
		}
		r.val = slices.Grow(r.val[:0], n)[:n]
		if _, err := io.ReadFull(r.r, r.val); err != nil {
			return false, fmt.Errorf("keysort: reading a run: %w", err)
		}
		r.key = r.s.key(r.val)
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return false, fmt.Errorf("keysort: reading a run: %w", err)
	}
	r.row = binary.LittleEndian.Uint64(r.hdr[:])
	return true, nil
}
