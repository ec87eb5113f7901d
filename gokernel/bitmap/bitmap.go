// Package bitmap reads, lists and merges the segments of Lance BITMAP and LABEL_LIST scalar
// indices, as pylance 14.0.2 writes them.
//
// A segment is one Lance file, bitmap_page_lookup.lance, with a row per
// distinct key: "keys" (the indexed type; for LABEL_LIST the list's item
// type; one row with a null key holds the null rows) and "bitmaps"
// (binary): the rows that hold the key, as a row map. A row map is a u32
// entry count, then per fragment (ascending) a u32 fragment id, a u32
// length and that many bytes of a portable 32-bit roaring bitmap of the
// fragment's row offsets; a length of 0 stands for the whole fragment.
// All integers are little-endian. ZONEMAP's null_bitmap is the same
// format.
//
// Segments over disjoint rows merge by a k-way merge of their sorted keys,
// joining each key's row maps (see Merge).
package bitmap

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/recent"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// File and column names of a segment. Part of the format.
const (
	FileName      = "bitmap_page_lookup.lance"
	keysColumn    = "keys"
	bitmapsColumn = "bitmaps"
)

// windowRows is how many keys are decoded at a time: a segment's bitmaps
// are streamed, never loaded whole.
const windowRows = 1024

// Entry is one fragment's part of a row map. Full means every row of the
// fragment (Rows is then nil).
type Entry struct {
	Frag uint32
	Full bool
	Rows *roaring.Bitmap
}

// RawEntry is one fragment's part of a row map, its bitmap still
// serialized (empty: the whole fragment).
type RawEntry struct {
	Frag uint32
	Bits []byte
}

// SplitRowMap splits a serialized row map into its entries without
// decoding the bitmaps (a merge of maps over disjoint fragments joins
// them). Untrusted: every length is checked against the bytes before it
// is used; the entries share b.
func SplitRowMap(b []byte) ([]RawEntry, error) {
	return AppendRowMapEntries(nil, b)
}

// AppendRowMapEntries is SplitRowMap appending to dst (a merge reuses one
// slice for every key's entries).
func AppendRowMapEntries(dst []RawEntry, b []byte) ([]RawEntry, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: row map of %d bytes", errkind.Corrupt, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n)*8 > uint64(len(b)-4) {
		return nil, fmt.Errorf("%w: row map of %d bytes claims %d entries", errkind.Corrupt, len(b), n)
	}
	out := slices.Grow(dst, int(n))
	b = b[4:]
	for i := uint32(0); i < n; i++ {
		if len(b) < 8 {
			return nil, fmt.Errorf("%w: row map ends inside entry %d", errkind.Corrupt, i)
		}
		f, l := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if uint64(l) > uint64(len(b)-8) {
			return nil, fmt.Errorf("%w: row map entry of fragment %d claims %d bytes, %d left", errkind.Corrupt, f, l, len(b)-8)
		}
		out = append(out, RawEntry{f, b[8 : 8+l]})
		b = b[8+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: row map has %d bytes after its %d entries", errkind.Corrupt, len(b), n)
	}
	return out, nil
}

// AppendRowMap appends the serialized row map of es (in the order given:
// a row map's fragments ascend) to dst.
func AppendRowMap(dst []byte, es []RawEntry) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(es)))
	for _, e := range es {
		dst = binary.LittleEndian.AppendUint32(dst, e.Frag)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.Bits)))
		dst = append(dst, e.Bits...)
	}
	return dst
}

// DecodeRowMap decodes a serialized row map, fragments ascending.
func DecodeRowMap(b []byte) ([]Entry, error) {
	raw, err := SplitRowMap(b)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(raw))
	for i, r := range raw {
		if i > 0 && r.Frag <= raw[i-1].Frag {
			return nil, fmt.Errorf("%w: row map fragments out of order (%d after %d)", errkind.Corrupt, r.Frag, raw[i-1].Frag)
		}
		e := Entry{Frag: r.Frag, Full: len(r.Bits) == 0}
		if !e.Full {
			e.Rows = roaring.New()
			if err := e.Rows.UnmarshalBinary(r.Bits); err != nil {
				return nil, fmt.Errorf("%w: row map entry of fragment %d: %v", errkind.Corrupt, r.Frag, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// Stats is what a listing says of a segment.
type Stats struct {
	Version lancefile.Version
	Keys    uint64 // distinct keys, the null key included
	// Rows counts the (row, key) pairs the segment holds: for BITMAP one
	// per indexed row, for LABEL_LIST one per distinct label of a row.
	Rows uint64
	// Largest is the most rows one key holds.
	Largest uint64
}

// Described is Describe, or what a merge of this process counted as it
// wrote the segment (its files are never rewritten: a segment's directory
// is its own).
func Described(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Stats, error) {
	if s, ok := written.Get(st.URI() + "/" + table.IndexDir(im)); ok {
		return &s, nil
	}
	return Describe(ctx, st, im)
}

// written holds the statistics of the segments merges of this process
// wrote last, by their directory (a plan's tasks, a few each).
var written = recent.New[Stats](64)

// Describe opens a segment and counts its bitmaps (see Segment.Describe).
func Describe(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Stats, error) {
	s, err := open(ctx, st, im)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Describe(ctx)
}

// Describe streams the segment's bitmaps, windowRows keys at a time, and
// counts them from their headers: a portable roaring bitmap states each
// container's cardinality up front, so no bitmap is decoded (decoding a
// million keys' bitmaps took 6 s, as long as the merge that wrote them).
// verify, not Describe, checks the bitmaps themselves.
func (s *Segment) Describe(ctx context.Context) (*Stats, error) {
	name := table.IndexUUID(s.Meta)
	st := &Stats{Version: s.Version, Keys: s.Keys}
	var scratch []RawEntry // each key's entries, one slice for all
	for lo := uint64(0); lo < s.Keys; lo += windowRows {
		hi := min(lo+windowRows, s.Keys)
		a, err := s.r.Read(ctx, bitmapsColumn, lo, hi)
		if err != nil {
			return nil, err
		}
		for i := 0; i < a.Len; i++ {
			if !a.IsValid(i) {
				return nil, fmt.Errorf("%w: bitmap segment %s: key %d has a null bitmap", errkind.Corrupt, name, lo+uint64(i))
			}
			if scratch, err = AppendRowMapEntries(scratch[:0], a.Values[a.Offsets[i]:a.Offsets[i+1]]); err != nil {
				return nil, fmt.Errorf("bitmap segment %s: key %d: %w", name, lo+uint64(i), err)
			}
			n, err := rowMapRows(scratch)
			if err != nil {
				return nil, fmt.Errorf("bitmap segment %s: key %d: %w", name, lo+uint64(i), err)
			}
			st.Rows += n
			st.Largest = max(st.Largest, n)
		}
	}
	return st, nil
}

// rowMapRows counts the rows of a row map's entries from their bitmaps'
// headers (roaringCardinality), checking what that needs: fragments
// ascending, no whole-fragment entry (Unsupported: it names no rows),
// headers well formed. It counts on past a problem and returns the first.
func rowMapRows(es []RawEntry) (uint64, error) {
	var rows uint64
	var first error
	note := func(err error) {
		if first == nil {
			first = err
		}
	}
	for j, e := range es {
		if j > 0 && e.Frag <= es[j-1].Frag {
			note(fmt.Errorf("%w: row map fragments out of order (%d after %d)", errkind.Corrupt, e.Frag, es[j-1].Frag))
		}
		if len(e.Bits) == 0 {
			note(fmt.Errorf("%w: the row map holds all of fragment %d (a whole-fragment entry)", errkind.Unsupported, e.Frag))
			continue
		}
		n, err := roaringCardinality(e.Bits)
		if err != nil {
			note(fmt.Errorf("row map entry of fragment %d: %w", e.Frag, err))
		}
		rows += n
	}
	return rows, first
}

// The cookies of a portable (32-bit) roaring bitmap: with run containers
// (the high 16 bits are the containers less one, a bitset of which are
// runs follows) and without (the containers follow as a uint32).
const (
	roaringCookieRuns   = 12347
	roaringCookieNoRuns = 12346
)

// roaringCardinality is the number of values of a serialized portable
// roaring bitmap, read from its descriptive header (a key and a
// cardinality less one per container), bounded by b's length.
func roaringCardinality(b []byte) (uint64, error) {
	le := binary.LittleEndian
	if len(b) < 4 {
		return 0, fmt.Errorf("%w: roaring bitmap of %d bytes", errkind.Corrupt, len(b))
	}
	cookie := le.Uint32(b)
	var n, pos int
	switch {
	case cookie&0xffff == roaringCookieRuns:
		n = int(cookie>>16) + 1
		pos = 4 + (n+7)/8
	case cookie == roaringCookieNoRuns:
		if len(b) < 8 {
			return 0, fmt.Errorf("%w: roaring bitmap of %d bytes", errkind.Corrupt, len(b))
		}
		n, pos = int(le.Uint32(b[4:])), 8
	default:
		return 0, fmt.Errorf("%w: roaring bitmap cookie %#x", errkind.Corrupt, cookie)
	}
	if n > 1<<16 || pos+4*n > len(b) {
		return 0, fmt.Errorf("%w: roaring bitmap of %d bytes claims %d containers", errkind.Corrupt, len(b), n)
	}
	var total uint64
	for i := range n {
		if i > 0 && le.Uint16(b[pos+4*i:]) <= le.Uint16(b[pos+4*i-4:]) {
			return 0, fmt.Errorf("%w: roaring bitmap containers out of order (key %d after %d)", errkind.Corrupt, le.Uint16(b[pos+4*i:]), le.Uint16(b[pos+4*i-4:]))
		}
		total += uint64(le.Uint16(b[pos+4*i+2:])) + 1
	}
	return total, nil
}
