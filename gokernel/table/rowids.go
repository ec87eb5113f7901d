package table

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Stable row ids. A dataset with the stable row ids feature
// (FlagStableRowIDs) gives every row an id that survives updates (a row
// rewritten into a new fragment keeps it) and compaction; its index
// segments store these ids in their _rowid column instead of row
// addresses (fragment<<32 | offset). Each fragment lists the ids of its
// rows, in row order, as an encoded RowIdSequence (rowids.proto), inline
// in the manifest or in a byte range of an external file. Rows removed by
// an update or a delete stay in the sequence and are marked in the
// fragment's deletion file.

// maxFragmentRows bounds a fragment's rows: row offsets inside a fragment
// are 32-bit (the low half of a row address).
const maxFragmentRows = 1 << 32

// maxRowIDSequenceBytes bounds an external row id sequence we read: eight
// bytes per row (an unsorted u64 array) for the largest fragment, plus the
// framing. Real ones are a few bytes (a range) to a few bytes per row.
func maxRowIDSequenceBytes(rows uint64) int64 {
	return int64(min(8*rows+1<<16, 1<<34))
}

// HasStableRowIDs reports whether the dataset's index row ids are stable
// row ids rather than row addresses.
func (s *Snapshot) HasStableRowIDs() bool {
	return s.Manifest.GetReaderFeatureFlags()&FlagStableRowIDs != 0
}

// RowIDRun is a run of consecutive row ids at consecutive row offsets of a
// fragment: rows [Offset, Offset+N) hold ids [Start, Start+N).
type RowIDRun struct {
	Offset, Start, N uint64
}

// DecodeRowIDSequence decodes an encoded RowIdSequence and checks it
// against the fragment's row count: it must list exactly rows ids, every
// segment well formed (ranges ordered, holes sorted inside their range,
// bitmaps as long as their range, arrays of whole integers). It never
// panics on bad bytes; every failure is errkind.Corrupt.
func DecodeRowIDSequence(b []byte, rows uint64) (*pb.RowIdSequence, error) {
	if rows > maxFragmentRows {
		return nil, fmt.Errorf("%w: row id sequence for %d rows, more than a fragment holds", errkind.Corrupt, rows)
	}
	seq := &pb.RowIdSequence{}
	if err := proto.Unmarshal(b, seq); err != nil {
		return nil, fmt.Errorf("%w: row id sequence: %w", errkind.Corrupt, err)
	}
	var total uint64
	for i, sg := range seq.GetSegments() {
		n, err := segmentLen(sg)
		if err != nil {
			return nil, fmt.Errorf("%w: row id sequence segment %d: %w", errkind.Corrupt, i, err)
		}
		if total += n; total > rows {
			return nil, fmt.Errorf("%w: row id sequence lists more than the fragment's %d rows", errkind.Corrupt, rows)
		}
	}
	if total != rows {
		return nil, fmt.Errorf("%w: row id sequence lists %d ids for %d rows", errkind.Corrupt, total, rows)
	}
	return seq, nil
}

// segmentLen validates a segment and returns how many ids it holds,
// without materialising them.
func segmentLen(sg *pb.U64Segment) (uint64, error) {
	switch s := sg.GetSegment().(type) {
	case *pb.U64Segment_Range_:
		r := s.Range
		if r.GetEnd() < r.GetStart() {
			return 0, fmt.Errorf("range [%d, %d) ends before it starts", r.GetStart(), r.GetEnd())
		}
		return r.GetEnd() - r.GetStart(), nil
	case *pb.U64Segment_RangeWithHoles_:
		r := s.RangeWithHoles
		if r.GetEnd() < r.GetStart() {
			return 0, fmt.Errorf("range [%d, %d) ends before it starts", r.GetStart(), r.GetEnd())
		}
		holes, err := decodeU64Array(r.GetHoles())
		if err != nil {
			return 0, fmt.Errorf("holes: %w", err)
		}
		for i, h := range holes {
			if h < r.GetStart() || h >= r.GetEnd() || (i > 0 && h <= holes[i-1]) {
				return 0, fmt.Errorf("hole %d (%d) is not sorted inside [%d, %d)", i, h, r.GetStart(), r.GetEnd())
			}
		}
		return r.GetEnd() - r.GetStart() - uint64(len(holes)), nil
	case *pb.U64Segment_RangeWithBitmap_:
		r := s.RangeWithBitmap
		if r.GetEnd() < r.GetStart() {
			return 0, fmt.Errorf("range [%d, %d) ends before it starts", r.GetStart(), r.GetEnd())
		}
		width := r.GetEnd() - r.GetStart()
		if uint64(len(r.GetBitmap())) != (width+7)/8 {
			return 0, fmt.Errorf("bitmap of %d bytes for a range of %d", len(r.GetBitmap()), width)
		}
		var n uint64
		for i, c := range r.GetBitmap() {
			if i == len(r.GetBitmap())-1 && width%8 != 0 {
				c &= byte(1)<<(width%8) - 1 // bits past the range are not ids
			}
			n += uint64(bits.OnesCount8(c))
		}
		return n, nil
	case *pb.U64Segment_SortedArray:
		v, err := decodeU64Array(s.SortedArray)
		if err != nil {
			return 0, err
		}
		for i := 1; i < len(v); i++ {
			if v[i] <= v[i-1] {
				return 0, fmt.Errorf("sorted array is not sorted at %d", i)
			}
		}
		return uint64(len(v)), nil
	case *pb.U64Segment_Array:
		v, err := decodeU64Array(s.Array)
		return uint64(len(v)), err
	default:
		return 0, fmt.Errorf("segment without a known encoding")
	}
}

// decodeU64Array decodes an EncodedU64Array: a base plus little-endian 16-
// or 32-bit offsets, or little-endian 64-bit values.
func decodeU64Array(a *pb.EncodedU64Array) ([]uint64, error) {
	switch arr := a.GetArray().(type) {
	case *pb.EncodedU64Array_U16Array_:
		off := arr.U16Array.GetOffsets()
		if len(off)%2 != 0 {
			return nil, fmt.Errorf("u16 array of %d bytes", len(off))
		}
		base := arr.U16Array.GetBase()
		if base > math.MaxUint64-math.MaxUint16 {
			return nil, fmt.Errorf("u16 array base %d overflows", base)
		}
		out := make([]uint64, len(off)/2)
		for i := range out {
			out[i] = base + uint64(binary.LittleEndian.Uint16(off[2*i:]))
		}
		return out, nil
	case *pb.EncodedU64Array_U32Array_:
		off := arr.U32Array.GetOffsets()
		if len(off)%4 != 0 {
			return nil, fmt.Errorf("u32 array of %d bytes", len(off))
		}
		base := arr.U32Array.GetBase()
		if base > math.MaxUint64-math.MaxUint32 {
			return nil, fmt.Errorf("u32 array base %d overflows", base)
		}
		out := make([]uint64, len(off)/4)
		for i := range out {
			out[i] = base + uint64(binary.LittleEndian.Uint32(off[4*i:]))
		}
		return out, nil
	case *pb.EncodedU64Array_U64Array_:
		v := arr.U64Array.GetValues()
		if len(v)%8 != 0 {
			return nil, fmt.Errorf("u64 array of %d bytes", len(v))
		}
		out := make([]uint64, len(v)/8)
		for i := range out {
			out[i] = binary.LittleEndian.Uint64(v[8*i:])
		}
		return out, nil
	default:
		return nil, fmt.Errorf("array without a known encoding")
	}
}

// WalkRowIDs calls fn for the runs of a validated sequence (from
// DecodeRowIDSequence), in row order. A range is one run; holes, bitmaps
// and arrays are split where ids stop being consecutive.
func WalkRowIDs(seq *pb.RowIdSequence, fn func(RowIDRun)) {
	var off uint64
	run := RowIDRun{}
	flush := func() {
		if run.N > 0 {
			fn(run)
		}
	}
	one := func(id uint64) {
		if run.N > 0 && run.Start+run.N == id && run.Offset+run.N == off {
			run.N++
		} else {
			flush()
			run = RowIDRun{Offset: off, Start: id, N: 1}
		}
		off++
	}
	for _, sg := range seq.GetSegments() {
		switch s := sg.GetSegment().(type) {
		case *pb.U64Segment_Range_:
			n := s.Range.GetEnd() - s.Range.GetStart()
			if n > 0 {
				flush()
				run = RowIDRun{Offset: off, Start: s.Range.GetStart(), N: n}
				off += n
			}
		case *pb.U64Segment_RangeWithHoles_:
			r := s.RangeWithHoles
			holes, _ := decodeU64Array(r.GetHoles())
			next := r.GetStart()
			for _, h := range append(holes, r.GetEnd()) {
				if h > next {
					flush()
					run = RowIDRun{Offset: off, Start: next, N: h - next}
					off += h - next
				}
				next = h + 1
			}
		case *pb.U64Segment_RangeWithBitmap_:
			r := s.RangeWithBitmap
			bm := r.GetBitmap()
			for i := uint64(0); i < r.GetEnd()-r.GetStart(); i++ {
				// Least-significant bit first, whatever Lance's proto
				// comment says (checked against pylance 14).
				if bm[i/8]&(1<<(i%8)) != 0 {
					one(r.GetStart() + i)
				}
			}
		case *pb.U64Segment_SortedArray:
			v, _ := decodeU64Array(s.SortedArray)
			for _, id := range v {
				one(id)
			}
		case *pb.U64Segment_Array:
			v, _ := decodeU64Array(s.Array)
			for _, id := range v {
				one(id)
			}
		}
	}
	flush()
}

// FragmentRowIDs reads and validates the row id sequence of a fragment:
// inline, from its external file (a ranged read of path, relative to the
// dataset root), or from the data file column it was spilled into.
// errkind.Corrupt when the fragment has none.
func (s *Snapshot) FragmentRowIDs(ctx context.Context, st storage.Store, frag *pb.DataFragment) (*pb.RowIdSequence, error) {
	rows := frag.GetPhysicalRows()
	var raw []byte
	switch src := frag.GetRowIdSequence().(type) {
	case *pb.DataFragment_InlineRowIds:
		raw = src.InlineRowIds
	case *pb.DataFragment_ExternalRowIds:
		ext := src.ExternalRowIds
		if int64(ext.GetSize()) < 0 || int64(ext.GetSize()) > maxRowIDSequenceBytes(rows) {
			return nil, fmt.Errorf("%w: fragment %d: external row ids of %d bytes for %d rows", errkind.Corrupt, frag.GetId(), ext.GetSize(), rows)
		}
		obj, err := st.Open(ctx, ext.GetPath())
		if err != nil {
			return nil, fmt.Errorf("table: fragment %d row ids: %w", frag.GetId(), err)
		}
		defer obj.Close()
		if ext.GetOffset() > uint64(obj.Size()) || ext.GetSize() > uint64(obj.Size())-ext.GetOffset() {
			return nil, fmt.Errorf("%w: fragment %d: row ids at [%d, +%d) outside %s (%d bytes)", errkind.Corrupt, frag.GetId(), ext.GetOffset(), ext.GetSize(), ext.GetPath(), obj.Size())
		}
		raw = make([]byte, ext.GetSize())
		if err := obj.ReadAt(ctx, raw, int64(ext.GetOffset())); err != nil {
			return nil, fmt.Errorf("table: fragment %d row ids: %w", frag.GetId(), err)
		}
	case *pb.DataFragment_SpilledRowIds:
		return s.spilledRowIDs(ctx, st, frag)
	default:
		return nil, fmt.Errorf("%w: fragment %d has no row id sequence in a dataset with stable row ids", errkind.Corrupt, frag.GetId())
	}
	seq, err := DecodeRowIDSequence(raw, rows)
	if err != nil {
		return nil, fmt.Errorf("fragment %d: %w", frag.GetId(), err)
	}
	return seq, nil
}

// LiveRowIDs returns the stable row ids of the rows of the given fragments
// (those of this version; others are ignored) that are not deleted: the
// rows an index segment covering these fragments still owns. A row that an
// update moved to another fragment is deleted here and live there.
func (s *Snapshot) LiveRowIDs(ctx context.Context, st storage.Store, fragIDs []uint32) (*roaring64.Bitmap, error) {
	want := make(map[uint64]bool, len(fragIDs))
	for _, f := range fragIDs {
		want[uint64(f)] = true
	}
	out := roaring64.New()
	for _, frag := range s.Manifest.GetFragments() {
		if !want[frag.GetId()] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		seq, err := s.FragmentRowIDs(ctx, st, frag)
		if err != nil {
			return nil, err
		}
		deleted, err := s.DeletedRows(ctx, st, frag)
		if err != nil {
			return nil, err
		}
		WalkRowIDs(seq, func(r RowIDRun) {
			if deleted == nil || !deleted.IntersectsWithInterval(r.Offset, r.Offset+r.N) {
				out.AddRange(r.Start, r.Start+r.N)
				return
			}
			for k := uint64(0); k < r.N; k++ {
				if !deleted.Contains(uint32(r.Offset + k)) {
					out.Add(r.Start + k)
				}
			}
		})
	}
	return out, nil
}

// RowIDFieldID is the reserved field id of a spilled row id column in a
// fragment's data file. Part of the format.
const RowIDFieldID = -3

// spilledRowIDs reads a row id sequence that pylance spilled into a UInt64
// column of one of the fragment's data files (the file listing field id
// RowIDFieldID; its column index names the top-level column).
func (s *Snapshot) spilledRowIDs(ctx context.Context, st storage.Store, frag *pb.DataFragment) (*pb.RowIdSequence, error) {
	for _, df := range frag.GetFiles() {
		pos := slices.Index(df.GetFields(), RowIDFieldID)
		if pos < 0 {
			continue
		}
		if pos >= len(df.GetColumnIndices()) || df.GetColumnIndices()[pos] < 0 {
			return nil, fmt.Errorf("%w: fragment %d: data file %s lists the row id field without a column", errkind.Corrupt, frag.GetId(), df.GetPath())
		}
		col := int(df.GetColumnIndices()[pos])
		dst, name, err := s.DataFileStore(ctx, st, df)
		if err != nil {
			return nil, fmt.Errorf("fragment %d spilled row ids: %w", frag.GetId(), err)
		}
		obj, err := dst.Open(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("table: fragment %d spilled row ids: %w", frag.GetId(), err)
		}
		defer obj.Close()
		r, err := lancefile.Open(ctx, obj, name, lancefile.Options{})
		if err != nil {
			return nil, fmt.Errorf("table: fragment %d spilled row ids: %w", frag.GetId(), err)
		}
		fields := r.Fields()
		if col >= len(fields) || fields[col].Type.Kind != lancefile.KindUint64 {
			return nil, fmt.Errorf("%w: fragment %d: %s has no UInt64 column %d for the spilled row ids", errkind.Corrupt, frag.GetId(), name, col)
		}
		if r.NumRows() != frag.GetPhysicalRows() {
			return nil, fmt.Errorf("%w: fragment %d: %s holds %d rows, the fragment %d", errkind.Corrupt, frag.GetId(), name, r.NumRows(), frag.GetPhysicalRows())
		}
		a, err := r.ReadAll(ctx, fields[col].Name)
		if err != nil {
			return nil, fmt.Errorf("table: fragment %d spilled row ids: %w", frag.GetId(), err)
		}
		if a.Validity != nil || len(a.Values) != 8*int(frag.GetPhysicalRows()) {
			return nil, fmt.Errorf("%w: fragment %d: spilled row ids in %s are not %d non-null values", errkind.Corrupt, frag.GetId(), name, frag.GetPhysicalRows())
		}
		return &pb.RowIdSequence{Segments: []*pb.U64Segment{{Segment: &pb.U64Segment_Array{Array: &pb.EncodedU64Array{
			Array: &pb.EncodedU64Array_U64Array_{U64Array: &pb.EncodedU64Array_U64Array{Values: a.Values}}}}}}}, nil
	}
	return nil, fmt.Errorf("%w: fragment %d marks its row ids as spilled, but none of its data files holds field %d", errkind.Corrupt, frag.GetId(), RowIDFieldID)
}
