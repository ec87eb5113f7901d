package zonemap

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// DefaultRowsPerZone is the zone size pylance 14.0.2 builds with.
const DefaultRowsPerZone = 8192

// builtZone is a zone being built: its place, counts and bounds.
type builtZone struct {
	frag, start, last uint64
	rows              int
	nulls, nans       uint32
	hasMin            bool
	minKey, maxKey    uint64 // fixed-width bounds' order (lancefile.SortKey)
	min, max          []byte
	nan               []byte // the first NaN's bytes: a zone with one has it as its max
	filter            []byte // BLOOMFILTER: the zone's split block bloom filter
}

// Builder builds the zones of a ZONEMAP segment from a column's live rows,
// given fragment by fragment (ascending) in row order, as pylance 14.0.2
// builds them: a zone is at most rows-per-zone live rows of one fragment,
// from its first live row (zone_start) to its last (zone_length spans
// the deleted rows between); min and max are of its non-null values, NaN
// left out of min and made the max of a zone that has one (nan_count
// counts them); null rows are counted and kept in the segment's map of
// null rows (fragments without nulls have no entry). Memory is the zones
// (one per rows-per-zone rows) and one fragment's null rows.
type Builder struct {
	t           lancefile.DataType
	binary      bool // variable-width keys (Offsets delimit them)
	wide        bool // keys ordered by lancefile.CompareWide
	width       int
	rowsPerZone int
	zones       []*builtZone
	cur         *builtZone
	nullFrag    uint32
	nullRows    *roaring.Bitmap
	nulls       []bitmap.RawEntry
	bloom       *bloomParams // set for a BLOOMFILTER segment's zones
	// boundless is set for the zones of a list or a dictionary column:
	// pylance 14.0.2 records no bounds there (null min and max of the
	// column's type in every zone), only each zone's null rows, so the
	// zones never prune.
	boundless bool
	// item is a list column's item type (boundless zones).
	item *lancefile.DataType
}

// NewListBuilder starts the zones of a list column of type t whose items
// have type item (see Builder.item).
func NewListBuilder(t, item lancefile.DataType, rowsPerZone int) (*Builder, error) {
	if t.Kind != lancefile.KindList && t.Kind != lancefile.KindLargeList {
		return nil, fmt.Errorf("%w: zonemap build: NewListBuilder of %s keys", errkind.InvalidInput, t)
	}
	if item.Kind == lancefile.KindUnknown || item.Kind == lancefile.KindStruct {
		return nil, fmt.Errorf("%w: zonemap build: keys of type list of %s", errkind.Unsupported, item)
	}
	if rowsPerZone < 1 {
		rowsPerZone = DefaultRowsPerZone
	}
	return &Builder{t: t, item: &item, boundless: true, rowsPerZone: rowsPerZone, nullRows: roaring.New()}, nil
}

// NewDictBuilder starts the zones of a dictionary column of type t, whose
// values this package decodes (lancefile.DictValues): boundless, see
// Builder.boundless.
func NewDictBuilder(t lancefile.DataType, rowsPerZone int) (*Builder, error) {
	if _, ok := lancefile.DictValues(t); !ok {
		return nil, fmt.Errorf("%w: zonemap build: keys of type %s", errkind.Unsupported, t)
	}
	if rowsPerZone < 1 {
		rowsPerZone = DefaultRowsPerZone
	}
	return &Builder{t: t, boundless: true, rowsPerZone: rowsPerZone, nullRows: roaring.New()}, nil
}

// NewBuilder starts the zones of keys of type t: fixed-width numbers,
// dates and times, strings and binary (errkind.Unsupported otherwise).
func NewBuilder(t lancefile.DataType, rowsPerZone int) (*Builder, error) {
	if !lancefile.Orderable(t.Kind) && !lancefile.Wide(t) {
		return nil, fmt.Errorf("%w: zonemap build: keys of type %s (bool, integer, floating-point, decimal, date, time, string and binary are built)", errkind.Unsupported, t)
	}
	if rowsPerZone < 1 {
		rowsPerZone = DefaultRowsPerZone
	}
	return &Builder{t: t, binary: t.Kind == lancefile.KindBinary, wide: lancefile.Wide(t), width: t.ValueBits() / 8, rowsPerZone: rowsPerZone, nullRows: roaring.New()}, nil
}

func (b *Builder) isNaN(v []byte) bool {
	switch b.t.Kind {
	case lancefile.KindFloat16:
		return lancefile.IsNaN16(binary.LittleEndian.Uint16(v))
	case lancefile.KindFloat32:
		return math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(v))))
	case lancefile.KindFloat64:
		return math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(v)))
	}
	return false
}

// Add adds row i of a, live row off of fragment frag. Rows come in
// fragment order, then row order.
func (b *Builder) Add(frag uint32, off uint64, a *lancefile.Array, i int) error {
	z := b.cur
	if z != nil && (uint64(frag) < z.frag || uint64(frag) == z.frag && off <= z.last) {
		return fmt.Errorf("%w: zonemap build: row %d of fragment %d after row %d of fragment %d", errkind.InvalidInput, off, frag, z.last, z.frag)
	}
	if z == nil || z.frag != uint64(frag) || z.rows == b.rowsPerZone {
		z = &builtZone{frag: uint64(frag), start: off}
		if b.bloom != nil {
			if b.bloom.sw != nil && len(b.zones) >= streamZones {
				// every zone held has ended: write them
				if err := b.bloom.writeZones(b.zones); err != nil {
					return err
				}
				b.zones = b.zones[:0]
			}
			z.filter = make([]byte, b.bloom.bytes)
		}
		b.zones = append(b.zones, z)
		b.cur = z
	}
	if frag != b.nullFrag {
		b.endNulls()
		b.nullFrag = frag
	}
	z.last = off
	z.rows++
	if !a.IsValid(i) {
		z.nulls++
		b.nullRows.Add(uint32(off))
		return nil
	}
	if b.boundless {
		return nil
	}
	var v []byte
	if b.binary {
		v = a.Values[a.Offsets[i]:a.Offsets[i+1]]
	} else {
		v = a.Values[i*b.width : (i+1)*b.width]
	}
	if b.bloom != nil {
		bloomInsert(z.filter, v)
		return nil
	}
	if b.isNaN(v) {
		if z.nans == 0 {
			z.nan = append(z.nan[:0], v...)
		}
		z.nans++
		return nil
	}
	if b.t.Kind == lancefile.KindFixedSizeBinary {
		// pylance 14.0.2 records no bounds for fixed-size binary zones
		// (null min and max beside values): a zone it cannot prune
		return nil
	}
	k := b.key(v)
	if !z.hasMin || b.less(v, k, z.min, z.minKey) {
		z.min, z.minKey = append(z.min[:0], v...), k
	}
	if !z.hasMin || b.less(z.max, z.maxKey, v, k) {
		z.max, z.maxKey = append(z.max[:0], v...), k
	}
	z.hasMin = true
	return nil
}

// endNulls closes the null rows of the current fragment.
func (b *Builder) endNulls() {
	if b.nullRows.IsEmpty() {
		return
	}
	bits, _ := b.nullRows.ToBytes() // no run containers, as pylance's
	b.nulls = append(b.nulls, bitmap.RawEntry{Frag: b.nullFrag, Bits: bits})
	b.nullRows = roaring.New()
}

// Zones is the number of zones built so far.
func (b *Builder) Zones() int { return len(b.zones) }

// Write writes the segment's file, name, in file format v.
func (b *Builder) Write(ctx context.Context, st storage.Store, name string, v lancefile.Version) ([]*pb.IndexFile, error) {
	b.endNulls()
	if b.bloom != nil {
		return b.writeBloom(ctx, st, name, v)
	}
	n := len(b.zones)
	fields := make([]*lancefile.Field, len(columns))
	out := make([]*lancefile.Array, len(columns))
	u32 := lancefile.Primitive(lancefile.KindUint32)
	u64 := lancefile.Primitive(lancefile.KindUint64)
	for i, c := range columns {
		t := u64
		switch {
		case i < 2:
			t = b.t
		case i < 4:
			t = u32
		}
		fields[i] = lancefile.NewField(c, t, i < 2)
		out[i] = &lancefile.Array{Type: t, Len: n}
		switch {
		case i < 2 && b.item != nil:
			fields[i].Children = []*lancefile.Field{lancefile.NewField("item", *b.item, true)}
			out[i] = lancefile.NullLists(t, *b.item, n) // see Builder.boundless
		case i < 2 && b.boundless:
			out[i].Validity = make([]byte, (n+7)/8)
		}
		if i < 2 && b.binary {
			out[i].Offsets = make([]int64, 1, n+1)
		}
	}
	valid := [2][]byte{make([]byte, (n+7)/8), make([]byte, (n+7)/8)}
	anyNull := [2]bool{}
	for zi, z := range b.zones {
		bounds := [2][]byte{z.min, z.max}
		ok := [2]bool{z.hasMin, z.hasMin}
		if z.nans > 0 {
			bounds[1], ok[1] = z.nan, true
		}
		for c := range 2 {
			if b.boundless {
				continue
			}
			if ok[c] {
				valid[c][zi/8] |= 1 << (zi % 8)
				out[c].Values = append(out[c].Values, bounds[c]...)
			} else {
				anyNull[c] = true
				if !b.binary {
					out[c].Values = append(out[c].Values, make([]byte, b.width)...)
				}
			}
			if b.binary {
				out[c].Offsets = append(out[c].Offsets, int64(len(out[c].Values)))
			}
		}
		out[2].Values = binary.LittleEndian.AppendUint32(out[2].Values, z.nulls)
		out[3].Values = binary.LittleEndian.AppendUint32(out[3].Values, z.nans)
		out[4].Values = binary.LittleEndian.AppendUint64(out[4].Values, z.frag)
		out[5].Values = binary.LittleEndian.AppendUint64(out[5].Values, z.start)
		out[6].Values = binary.LittleEndian.AppendUint64(out[6].Values, z.last-z.start+1)
	}
	for c := range 2 {
		if anyNull[c] {
			out[c].Validity = valid[c]
		}
	}
	return b.writeFile(ctx, st, name, v, fields, out, map[string]string{ZoneMap.sizeKey: strconv.Itoa(b.rowsPerZone)})
}

// Details is the ZoneMapIndexDetails message pylance 14.0.2 records for a
// new index of keys of type t: field 1 the zone size, field 2 set (1) for
// string, binary, fixed-size binary and decimal keys (the wide ones) and
// lists, field 3 set (1).
func Details(t lancefile.DataType, rowsPerZone int) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(rowsPerZone))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	if lancefile.Wide(t) || t.Kind == lancefile.KindList || t.Kind == lancefile.KindLargeList {
		b = protowire.AppendVarint(b, 1)
	} else {
		b = protowire.AppendVarint(b, 0)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// Place is where zone z lies: its fragment, first row and span of rows.
func (s *Segment) Place(z int) (frag, start, rows uint64) { return s.place(z) }

// Covers checks zone z of a ZONEMAP or BLOOMFILTER segment against the live rows of its
// span (rows, of fragment frag from the zone's start; live says which are
// not deleted): their non-null, non-NaN values lie within [min, max], a
// NaN among them has a NaN max, and the zone counts at least their nulls
// and NaNs (rows deleted since the build only make its bounds and counts
// wider). It returns what does not hold ("" when all do).
func (s *Segment) Covers(z int, rows *lancefile.Array, live func(i int) bool) (string, error) {
	if s.Kind == BloomFilter {
		return s.coversBloom(z, rows, live)
	}
	if s.Kind != ZoneMap {
		return "", fmt.Errorf("%w: zonemap: Covers of a %s segment", errkind.InvalidInput, s.Kind.Name)
	}
	held := s.KeyType
	vals, dict := lancefile.DictValues(s.KeyType)
	if dict {
		held = vals // a dictionary column reads as its values
	}
	if rows.Type.Kind != held.Kind {
		return fmt.Sprintf("the column holds %s values, the zones %s bounds", rows.Type, s.KeyType), nil
	}
	var b *Builder
	var err error
	switch {
	case dict:
		b, err = NewDictBuilder(s.KeyType, rows.Len+1)
	case s.boundField != nil && len(s.boundField.Children) == 1 && (s.KeyType.Kind == lancefile.KindList || s.KeyType.Kind == lancefile.KindLargeList):
		b, err = NewListBuilder(s.KeyType, s.boundField.Children[0].Type, rows.Len+1)
	default:
		b, err = NewBuilder(s.KeyType, rows.Len+1)
	}
	if err != nil {
		return "", err
	}
	frag, start, _ := s.place(z)
	for i := range rows.Len {
		if live(i) {
			if err := b.Add(uint32(frag), start+uint64(i), rows, i); err != nil {
				return "", err
			}
		}
	}
	if len(b.zones) == 0 {
		return "", nil // every row of the span deleted since: nothing to hold
	}
	got := b.zones[0]
	a, bnd := s.cols[0], s.cols[1]
	key := func(arr *lancefile.Array) ([]byte, uint64) {
		v := valueAtZone(arr, z)
		return v, b.key(v)
	}
	switch {
	case uint32At(s.cols[2], z) < got.nulls:
		return fmt.Sprintf("its span holds %d null rows, it counts %d", got.nulls, uint32At(s.cols[2], z)), nil
	case uint32At(s.cols[3], z) < got.nans:
		return fmt.Sprintf("its span holds %d NaN values, it counts %d", got.nans, uint32At(s.cols[3], z)), nil
	case got.nans > 0 && (!bnd.IsValid(z) || !b.isNaN(valueAtZone(bnd, z))):
		return "its span holds NaN, its max is not NaN", nil
	}
	if !got.hasMin {
		return "", nil
	}
	if !a.IsValid(z) || !bnd.IsValid(z) {
		return "its span holds values, its bounds are null", nil
	}
	mn, mnk := key(a)
	if b.less(got.min, got.minKey, mn, mnk) {
		return fmt.Sprintf("its span holds %s, below its min %s", show(s.KeyType, got.min), show(s.KeyType, mn)), nil
	}
	if mx, mxk := key(bnd); !b.isNaN(mx) && b.less(mx, mxk, got.max, got.maxKey) {
		return fmt.Sprintf("its span holds %s, above its max %s", show(s.KeyType, got.max), show(s.KeyType, mx)), nil
	}
	return "", nil
}

// key is a bound's SortKey (0 for a wide key: less compares its bytes).
func (b *Builder) key(v []byte) uint64 {
	if b.wide {
		return 0
	}
	return lancefile.SortKey(b.t.Kind, v)
}

// less orders two bounds, with their keys.
func (b *Builder) less(x []byte, xk uint64, y []byte, yk uint64) bool {
	if b.wide {
		return lancefile.CompareWide(b.t, x, y) < 0
	}
	return xk < yk
}

func valueAtZone(a *lancefile.Array, z int) []byte {
	if a.Type.Kind == lancefile.KindBinary {
		return a.Values[a.Offsets[z]:a.Offsets[z+1]]
	}
	w := a.Type.ValueBits() / 8
	return a.Values[z*w : (z+1)*w]
}

func uint32At(a *lancefile.Array, z int) uint32 { return binary.LittleEndian.Uint32(a.Values[z*4:]) }

// show renders a value for a message: a number as its value (temporal
// types as their stored integers), a string's text quoted.
func show(t lancefile.DataType, v []byte) string {
	le := binary.LittleEndian
	switch t.Kind {
	case lancefile.KindBinary:
		return strconv.Quote(string(v))
	case lancefile.KindBool:
		return strconv.FormatBool(v[0] != 0)
	case lancefile.KindInt8:
		return strconv.Itoa(int(int8(v[0])))
	case lancefile.KindInt16:
		return strconv.Itoa(int(int16(le.Uint16(v))))
	case lancefile.KindInt32:
		return strconv.Itoa(int(int32(le.Uint32(v))))
	case lancefile.KindInt64:
		return strconv.FormatInt(int64(le.Uint64(v)), 10)
	case lancefile.KindUint8:
		return strconv.Itoa(int(v[0]))
	case lancefile.KindUint16:
		return strconv.Itoa(int(le.Uint16(v)))
	case lancefile.KindUint32:
		return strconv.FormatUint(uint64(le.Uint32(v)), 10)
	case lancefile.KindUint64:
		return strconv.FormatUint(le.Uint64(v), 10)
	case lancefile.KindFloat32:
		return strconv.FormatFloat(float64(math.Float32frombits(le.Uint32(v))), 'g', -1, 32)
	case lancefile.KindFloat64:
		return strconv.FormatFloat(math.Float64frombits(le.Uint64(v)), 'g', -1, 64)
	}
	return fmt.Sprintf("0x%x", v)
}
