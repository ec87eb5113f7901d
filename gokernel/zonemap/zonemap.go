// Package zonemap reads, merges and checks the segments of Lance ZONEMAP
// and BLOOMFILTER scalar indices, as pylance 14.0.2 writes them: both are
// a file of zones with a map of null rows, merged alike.
//
// A segment is one Lance file, zonemap.lance, with one row per zone (a
// run of at most rows_per_zone rows of one fragment): "min" and "max"
// (the key type, nullable), "null_count" and "nan_count" (uint32),
// "fragment_id", "zone_start" (the zone's first row offset in its
// fragment) and "zone_length" (uint64); schema metadata "rows_per_zone"
// and "null_bitmap". Zones never span fragments, so segments over
// disjoint fragments merge by concatenating their zones, in fragment and
// offset order, dropping the zones of fragments the dataset no longer has.
//
// A BLOOMFILTER segment is bloomfilter.lance, one row per zone of at most
// bloomfilter_item rows: "fragment_id", "zone_start", "zone_length"
// (uint64), "has_null" (bool) and "bloom_filter_data" (binary); schema
// metadata "bloomfilter_item", "bloomfilter_probability" and
// "null_bitmap", as ZONEMAP's.
// A zone keeps its bounds when rows inside it are deleted: bounds that
// cover more than the live rows only make a filter read a zone it could
// have skipped, never miss a row.
package zonemap

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// FileName is a ZONEMAP segment's file. Part of the format.
const FileName = "zonemap.lance"

// Kind is the layout of one of the zone index types.
type Kind struct {
	Name, File string
	columns    []string
	bounds     int // the leading columns that hold the key type, nullable
	// frag, start and length are the uint64 columns that place a zone.
	frag, start, length int
	sizeKey             string   // the metadata that bounds a zone's rows
	sameKeys            []string // metadata the inputs of a merge must share
}

// The zone index types. Part of the format.
var (
	ZoneMap = &Kind{Name: "ZONEMAP", File: FileName, columns: columns, bounds: 2,
		frag: 4, start: 5, length: 6, sizeKey: "rows_per_zone"}
	BloomFilter = &Kind{Name: "BLOOMFILTER", File: "bloomfilter.lance",
		columns: []string{"fragment_id", "zone_start", "zone_length", "has_null", "bloom_filter_data"},
		frag:    0, start: 1, length: 2, sizeKey: "bloomfilter_item", sameKeys: []string{"bloomfilter_probability"}}
)

// maxZones bounds the zones one segment may hold (untrusted metadata):
// a merge holds every zone in memory, 60 bytes each.
const maxZones = 1 << 24

var columns = []string{"min", "max", "null_count", "nan_count", "fragment_id", "zone_start", "zone_length"}

// Segment is a ZONEMAP segment read whole (zones are few: one per
// rows_per_zone rows).
type Segment struct {
	Kind        *Kind
	Meta        *pb.IndexMetadata
	KeyType     lancefile.DataType // ZONEMAP's bounds
	RowsPerZone int                // BLOOMFILTER's bloomfilter_item
	Metadata    map[string][]byte
	Version     lancefile.Version
	cols        []*lancefile.Array // in columns order
	boundField  *lancefile.Field   // the bounds' field as the file declares it (a list's item type)
	Zones       int
	Rows        uint64 // rows the zones cover
	// Nulls are the entries of the segment's null row map (the global
	// buffer its "null_bitmap" metadata names), one per fragment, kept as
	// their serialized bitmaps.
	Nulls []bitmap.RawEntry
}

// Read reads a segment: errkind.Unsupported for a key type that is
// neither fixed-width nor binary, errkind.Corrupt for a file that contradicts itself.
func Read(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Segment, error) {
	return ReadKind(ctx, st, im, ZoneMap)
}

// ReadKind reads a segment of the given zone index type.
func ReadKind(ctx context.Context, st storage.Store, im *pb.IndexMetadata, k *Kind) (*Segment, error) {
	u := table.IndexUUID(im)
	name := table.IndexDir(im) + k.File
	obj, err := st.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("zonemap segment %s: %w", u, err)
	}
	defer obj.Close()
	r, err := lancefile.Open(ctx, obj, name, lancefile.Options{})
	if err != nil {
		return nil, fmt.Errorf("zonemap segment %s: %w", u, err)
	}
	s := &Segment{Kind: k, Meta: im, Metadata: r.Metadata(), Version: r.Version()}
	n := r.NumRows()
	if n > maxZones {
		return nil, fmt.Errorf("%w: zonemap segment %s has %d zones (at most %d)", errkind.Corrupt, u, n, maxZones)
	}
	v, ok := r.MetadataString(k.sizeKey)
	if s.RowsPerZone, err = strconv.Atoi(v); !ok || err != nil || s.RowsPerZone < 1 {
		return nil, fmt.Errorf("%w: %s segment %s: %s %q", errkind.Corrupt, k.Name, u, k.sizeKey, v)
	}
	for i, c := range k.columns {
		f, ok := r.Field(c)
		if !ok {
			return nil, fmt.Errorf("%w: %s segment %s: no %q column", errkind.Corrupt, k.Name, u, c)
		}
		if (i == k.frag || i == k.start || i == k.length) && f.Type.Kind != lancefile.KindUint64 {
			return nil, fmt.Errorf("%w: %s segment %s: column %q of type %s, not uint64", errkind.Corrupt, k.Name, u, c, f.Type)
		}
		if i < k.bounds {
			list := f.Type.Kind == lancefile.KindList || f.Type.Kind == lancefile.KindLargeList
			fixed := f.Type.ValueBits() > 0 && !list && f.Type.ValueBits()%8 == 0
			// Other types (a dictionary, a list) are read when their bounds
			// are all null, as pylance writes them for such a column: a
			// zone it cannot prune.
			if !fixed && !list && f.Type.Kind != lancefile.KindBinary && f.Type.Kind != lancefile.KindUnknown {
				return nil, fmt.Errorf("%w: zonemap segment %s: zone bounds of type %s (merges handle fixed-width, string and binary keys)", errkind.Unsupported, u, f.Type)
			}
			s.KeyType = f.Type
			s.boundField = f
		}
		a, err := r.Read(ctx, c, 0, n)
		if err != nil && i < k.bounds && f.Type.Kind == lancefile.KindUnknown {
			return nil, fmt.Errorf("%w: zonemap segment %s: zone bounds of type %s that are not all null (merges handle fixed-width, string and binary keys)", errkind.Unsupported, u, f.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("zonemap segment %s: %w", u, err)
		}
		_, dict := lancefile.DictValues(f.Type)
		if i < k.bounds && (dict || a.Type.Kind == lancefile.KindList || a.Type.Kind == lancefile.KindLargeList) && a.NullCount() != a.Len {
			return nil, fmt.Errorf("%w: zonemap segment %s: zone bounds of type %s that are not all null (merges handle fixed-width, string and binary keys)", errkind.Unsupported, u, f.Type)
		}
		if i < k.bounds && dict {
			// null bounds of the column's own type, which a merge writes
			// back as they were (a dictionary reads as its values)
			a = &lancefile.Array{Type: f.Type, Len: a.Len, Validity: make([]byte, (a.Len+7)/8)}
		}
		if a.Len != int(n) {
			return nil, fmt.Errorf("%w: zonemap segment %s: column %s read back %d of %d rows", errkind.Corrupt, u, c, a.Len, n)
		}
		s.cols = append(s.cols, a)
	}
	if v, ok := r.MetadataString("null_bitmap"); ok {
		g, err := strconv.Atoi(v)
		if err != nil || g < 1 || g >= r.NumGlobalBuffers() {
			return nil, fmt.Errorf("%w: zonemap segment %s: null_bitmap names global buffer %q of %d", errkind.Corrupt, u, v, r.NumGlobalBuffers())
		}
		b, err := r.GlobalBuffer(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("zonemap segment %s: %w", u, err)
		}
		if s.Nulls, err = bitmap.SplitRowMap(b); err != nil {
			return nil, fmt.Errorf("zonemap segment %s: null_bitmap: %w", u, err)
		}
	}
	s.Zones = int(n)
	for z := 0; z < s.Zones; z++ {
		s.Rows += s.u64(k.length, z)
	}
	return s, nil
}

func (s *Segment) u64(col, z int) uint64 { return binary.LittleEndian.Uint64(s.cols[col].Values[z*8:]) }

// place is where zone z lies: its fragment, first row and rows.
func (s *Segment) place(z int) (frag, start, rows uint64) {
	return s.u64(s.Kind.frag, z), s.u64(s.Kind.start, z), s.u64(s.Kind.length, z)
}

type zone struct {
	seg       *Segment
	z         int
	frag, off uint64
}

// Merge writes one segment holding the zones of metas (they must share
// their key type and rows_per_zone) whose fragment keep accepts (nil: all),
// in fragment and offset order, under _indices/<indexUUID>/. It returns
// the files written and the zones kept.
func Merge(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, indexUUID uuid.UUID, keep func(frag uint32) bool) ([]*pb.IndexFile, int, error) {
	return MergeKind(ctx, st, metas, ZoneMap, indexUUID, keep, nil)
}

// MergeKind is Merge for segments of the given zone index type. When
// some inputs have a map of null rows and others (of pylance 2.0.1) none,
// nullRows gives the null rows of an input without one (read from the
// data: nil refuses such a mix, errkind.Unsupported).
func MergeKind(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, k *Kind, indexUUID uuid.UUID, keep func(frag uint32) bool,
	nullRows func(*pb.IndexMetadata) ([]bitmap.RawEntry, error)) ([]*pb.IndexFile, int, error) {
	segs, err := ReadAll(ctx, st, metas, k)
	if err != nil {
		return nil, 0, err
	}
	return MergeSegments(ctx, st, segs, indexUUID, keep, nullRows)
}

// ReadAll reads the segments of one merge, which must share their key
// type and parameters (SameAs).
func ReadAll(ctx context.Context, st storage.Store, metas []*pb.IndexMetadata, k *Kind) ([]*Segment, error) {
	// read a few at a time: on an object store each is a round trip or more
	segs := make([]*Segment, len(metas))
	if err := parallel.Each(len(metas), parallel.Opens, func(i int) (err error) {
		segs[i], err = ReadKind(ctx, st, metas[i], k)
		return err
	}); err != nil {
		return nil, err
	}
	for _, s := range segs[min(1, len(segs)):] {
		if err := segs[0].SameAs(s); err != nil {
			return nil, err
		}
	}
	return segs, nil
}

// Fragments returns the fragments s holds zones of, ascending.
func (s *Segment) Fragments() []uint32 {
	var out []uint32
	for z := 0; z < s.Zones; z++ {
		if f, _, _ := s.place(z); f <= 1<<32-1 {
			out = append(out, uint32(f))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// MergeSegments is MergeKind for segments read (ReadAll) of one kind.
func MergeSegments(ctx context.Context, st storage.Store, segs []*Segment, indexUUID uuid.UUID, keep func(frag uint32) bool,
	nullRows func(*pb.IndexMetadata) ([]bitmap.RawEntry, error)) ([]*pb.IndexFile, int, error) {
	if len(segs) == 0 {
		return nil, 0, fmt.Errorf("%w: at least one zone index segment is required", errkind.InvalidInput)
	}
	k := segs[0].Kind
	var zones []zone
	for _, s := range segs {
		if s.Kind != k {
			return nil, 0, fmt.Errorf("%w: a %s segment and a %s segment cannot merge", errkind.InvalidInput, k.Name, s.Kind.Name)
		}
		for z := 0; z < s.Zones; z++ {
			f, off, _ := s.place(z)
			if keep == nil || (f <= 1<<32-1 && keep(uint32(f))) {
				zones = append(zones, zone{s, z, f, off})
			}
		}
	}
	hasMap := func(s *Segment) bool { _, ok := s.Metadata["null_bitmap"]; return ok }
	anyMap := slices.ContainsFunc(segs, hasMap)
	for _, s := range segs {
		if !anyMap || hasMap(s) {
			continue
		}
		// the null rows of an input of an older writer, which kept no map
		// of them: pylance 14.0.2's merge knows them too (after it, IS NULL
		// finds every null row; a map of the later inputs' rows alone does
		// not)
		if nullRows == nil {
			return nil, 0, fmt.Errorf("%w: %s segment %s has no map of null rows (an older writer) and the others have one", errkind.Unsupported, k.Name, table.IndexUUID(s.Meta))
		}
		es, err := nullRows(s.Meta)
		if err != nil {
			return nil, 0, fmt.Errorf("%s segment %s: reading its null rows: %w", k.Name, table.IndexUUID(s.Meta), err)
		}
		s.Nulls = es
	}
	sort.Slice(zones, func(i, j int) bool {
		if zones[i].frag != zones[j].frag {
			return zones[i].frag < zones[j].frag
		}
		return zones[i].off < zones[j].off
	})
	first := segs[0]
	var fields []*lancefile.Field
	out := make([]*lancefile.Array, len(k.columns))
	for i, c := range k.columns {
		t := first.cols[i].Type
		if t.Kind == lancefile.KindList || t.Kind == lancefile.KindLargeList {
			// Null lists only (ReadKind): as many null rows, no items.
			f := *first.boundField
			f.Name, f.Nullable = c, true
			fields = append(fields, &f)
			out[i] = lancefile.NullLists(t, f.Children[0].Type, len(zones))
			continue
		}
		fields = append(fields, lancefile.NewField(c, t, i < k.bounds))
		out[i] = &lancefile.Array{Type: t, Len: len(zones)}
		if t.Kind == lancefile.KindBinary {
			out[i].Offsets = make([]int64, 1, len(zones)+1)
		}
	}
	var validity [2][]byte
	nulls := [2]bool{}
	for i := range validity {
		validity[i] = make([]byte, (len(zones)+7)/8)
	}
	for zi, zn := range zones {
		for i := range k.columns {
			a := zn.seg.cols[i]
			if out[i].Items != nil {
				continue // a null list (NullLists)
			}
			if a.Type.Kind == lancefile.KindBinary {
				out[i].Values = append(out[i].Values, a.Values[a.Offsets[zn.z]:a.Offsets[zn.z+1]]...)
				out[i].Offsets = append(out[i].Offsets, int64(len(out[i].Values)))
			} else {
				w := a.Type.ValueBits() / 8
				out[i].Values = append(out[i].Values, a.Values[zn.z*w:(zn.z+1)*w]...)
			}
			if i < k.bounds {
				if a.IsValid(zn.z) {
					validity[i][zi/8] |= 1 << (zi % 8)
				} else {
					nulls[i] = true
				}
			}
		}
	}
	for i := range validity {
		if nulls[i] && out[i].Items == nil {
			out[i].Validity = validity[i]
		}
	}
	name := table.IndicesDir + indexUUID.String() + "/" + k.File
	sw, err := st.Create(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	defer sw.Abort()
	cw := &storage.CountingWriter{W: sw}
	w, err := lancefile.NewWriter(cw, fields, lancefile.WriterOptions{Version: first.Version})
	if err != nil {
		return nil, 0, err
	}
	for key, v := range first.Metadata {
		w.SetMetadata(key, v)
	}
	// Segments of releases before the map of null rows (2.0.1) merge with
	// later ones into a segment that has one (their null rows read from
	// the data above), as pylance 14.0.2's own merge writes it.
	if anyMap {
		var nulls []bitmap.RawEntry
		for _, sg := range segs {
			for _, e := range sg.Nulls {
				if keep == nil || keep(e.Frag) {
					nulls = append(nulls, e)
				}
			}
		}
		sort.SliceStable(nulls, func(i, j int) bool { return nulls[i].Frag < nulls[j].Frag })
		g, err := w.AddGlobalBuffer(bitmap.AppendRowMap(nil, nulls))
		if err != nil {
			return nil, 0, err
		}
		w.SetMetadata("null_bitmap", []byte(strconv.Itoa(g)))
	}
	if len(zones) > 0 {
		if err := w.Write(out); err != nil {
			return nil, 0, err
		}
	}
	if err := w.Finish(); err != nil {
		return nil, 0, err
	}
	if err := sw.Finish(); err != nil {
		return nil, 0, err
	}
	return []*pb.IndexFile{{Path: k.File, SizeBytes: uint64(cw.N)}}, len(zones), nil
}

// SameAs refuses to merge s with t (its first input) unless they share
// their key type, zone size and the parameters of their kind.
func (s *Segment) SameAs(t *Segment) error {
	bad := s.KeyType != t.KeyType || s.RowsPerZone != t.RowsPerZone
	for _, key := range s.Kind.sameKeys {
		bad = bad || string(s.Metadata[key]) != string(t.Metadata[key])
	}
	if bad {
		return fmt.Errorf("%w: %s segments %s (%s, %s %d) and %s (%s, %d) cannot merge: their key types or parameters differ", errkind.InvalidInput,
			s.Kind.Name, table.IndexUUID(s.Meta), s.KeyType, s.Kind.sizeKey, s.RowsPerZone, table.IndexUUID(t.Meta), t.KeyType, t.RowsPerZone)
	}
	return nil
}

// Check reads a segment and reports what pylance's reader relies on that
// does not hold: zones of covered fragments, within rows_per_zone, in
// fragment and offset order without overlaps.
func Check(ctx context.Context, st storage.Store, im *pb.IndexMetadata, k *Kind, covered func(frag uint32) bool) (*Segment, []string, error) {
	s, err := ReadKind(ctx, st, im, k)
	if err != nil {
		return nil, nil, err
	}
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < 8 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for z := 0; z < s.Zones; z++ {
		f, off, n := s.place(z)
		// A zone holds at most rows-per-zone live rows, but zone_length
		// spans the rows deleted between them when it was built (pylance
		// 14.0.2 wrote a zone of 8,491 rows for 8,192 live ones): only an
		// empty zone is wrong.
		if n == 0 {
			add("zone %d has no rows", z)
		}
		if covered != nil && (f > 1<<32-1 || !covered(uint32(f))) {
			add("zone %d is of fragment %d, which the segment does not cover", z, f)
		}
		if z > 0 {
			pf, poff, pn := s.place(z - 1)
			if f < pf || f == pf && off < poff+pn {
				add("zone %d (fragment %d, rows %d+%d) is out of order or overlaps zone %d", z, f, off, n, z-1)
			}
		}
	}
	return s, problems, nil
}
