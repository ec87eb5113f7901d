package zonemap

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/lance-segmerge/lance-segmerge/gokernel/bitmap"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// DefaultProbability is the false-positive probability pylance 14.0.2
// builds BLOOMFILTER zones with, as its metadata spells it.
const DefaultProbability = "0.00057"

// Split block bloom filters (the Parquet spec's, which Lance uses): blocks
// of eight 32-bit words; a value's xxHash64 (seed 0) of its little-endian
// bytes (a string's or binary's own bytes) picks a block with its high
// half and sets one bit per word with its low half times a salt.
var bloomSalt = [8]uint32{0x47b6137b, 0x44974d91, 0x8824ad5b, 0xa2b7289d, 0x705495c7, 0x2df1424b, 0x9efc4947, 0x5c6bfb31}

const (
	bloomMinBytes = 32
	bloomMaxBytes = 128 << 20
)

// BloomBytes is the size of a zone's filter for ndv distinct values at
// false-positive probability fpp: m = -8·ndv / ln(1 - fpp^(1/8)) bits, in
// bytes, rounded up to a power of two within [32 B, 128 MiB]. pylance
// sizes every zone for bloomfilter_item values (8192 at 0.00057: 32 KiB).
func BloomBytes(ndv uint64, fpp float64) int {
	n := uint64(-8 * float64(ndv) / math.Log(1-math.Pow(fpp, 1.0/8)) / 8)
	n = min(max(n, bloomMinBytes), bloomMaxBytes)
	if n&(n-1) != 0 {
		n = 1 << bits.Len64(n)
	}
	return int(n)
}

// bloomBlock is the block of filter f (len a positive multiple of 32)
// that value v's hash picks, and the hash's low half, which picks a bit
// of each of the block's words.
func bloomBlock(f []byte, v []byte) ([]byte, uint32) {
	h := xxhash.Sum64(v)
	blocks := uint64(len(f) / 32)
	return f[((h>>32)*blocks)>>32*32:], uint32(h)
}

// bloomInsert sets value v's bits in filter f (len a multiple of 32).
func bloomInsert(f []byte, v []byte) {
	b, x := bloomBlock(f, v)
	for i, s := range bloomSalt {
		w := binary.LittleEndian.Uint32(b[4*i:])
		binary.LittleEndian.PutUint32(b[4*i:], w|1<<((x*s)>>27))
	}
}

// NewBloomBuilder starts the zones of a BLOOMFILTER segment over keys of
// type t: placed as a ZONEMAP's are (at most rowsPerZone live rows of one
// fragment, from the first live row to the last, null rows in the map of
// null rows), each zone a filter of every non-null value's bytes (NaN
// included) and whether it holds a null. probability is the
// bloomfilter_probability metadata, kept as written.
func NewBloomBuilder(t lancefile.DataType, rowsPerZone int, probability string) (*Builder, error) {
	// pylance 14.0.2 builds no bloom filter of bools or half floats ("does
	// not support data type"), so there is no layout of theirs to write.
	if !lancefile.Orderable(t.Kind) && t.Kind != lancefile.KindBinary || t.Kind == lancefile.KindBool || t.Kind == lancefile.KindFloat16 {
		return nil, fmt.Errorf("%w: bloomfilter build: keys of type %s (integer, floating-point, date, time, string and binary are built)", errkind.Unsupported, t)
	}
	fpp, err := strconv.ParseFloat(probability, 64)
	if err != nil || !(fpp > 0 && fpp < 1) {
		return nil, fmt.Errorf("%w: bloomfilter build: probability %q is not in (0, 1)", errkind.InvalidInput, probability)
	}
	b, err := NewBuilder(t, rowsPerZone)
	if err != nil {
		return nil, err
	}
	b.bloom = &bloomParams{bytes: BloomBytes(uint64(b.rowsPerZone), fpp), probability: probability}
	return b, nil
}

type bloomParams struct {
	bytes       int
	probability string
	// the file being written when the builder streams (StreamTo)
	sw      storage.Writer
	cw      *storage.CountingWriter
	w       *lancefile.Writer
	name    string
	version lancefile.Version
}

// streamZones is how many ended zones a streaming builder holds before
// writing them (2 MiB of filters at the defaults).
const streamZones = 64

// StreamTo makes a BLOOMFILTER builder write its zones to the file name
// (in file format v) as they end, so that it holds at most streamZones of
// them; Write then finishes the file. Close aborts it unless Write did.
func (b *Builder) StreamTo(ctx context.Context, st storage.Store, name string, v lancefile.Version) error {
	if b.bloom == nil {
		return fmt.Errorf("%w: zonemap: StreamTo of a ZONEMAP builder", errkind.InvalidInput)
	}
	return b.bloom.open(ctx, st, name, v, b.rowsPerZone)
}

func (p *bloomParams) open(ctx context.Context, st storage.Store, name string, v lancefile.Version, rowsPerZone int) error {
	sw, err := st.Create(ctx, name)
	if err != nil {
		return err
	}
	p.sw, p.cw, p.name, p.version = sw, &storage.CountingWriter{W: sw}, name, v
	fields := make([]*lancefile.Field, len(bloomTypes))
	for i, t := range bloomTypes {
		fields[i] = lancefile.NewField(BloomFilter.columns[i], t, false)
	}
	if p.w, err = lancefile.NewWriter(p.cw, fields, lancefile.WriterOptions{Version: v}); err != nil {
		sw.Abort()
		p.sw = nil
		return err
	}
	p.w.SetMetadata(BloomFilter.sizeKey, []byte(strconv.Itoa(rowsPerZone)))
	p.w.SetMetadata("bloomfilter_probability", []byte(p.probability))
	return nil
}

// Close aborts a streamed file that Write did not finish.
func (b *Builder) Close() {
	if b.bloom != nil && b.bloom.sw != nil {
		b.bloom.sw.Abort()
		b.bloom.sw = nil
	}
}

var bloomTypes = []lancefile.DataType{lancefile.Primitive(lancefile.KindUint64), lancefile.Primitive(lancefile.KindUint64),
	lancefile.Primitive(lancefile.KindUint64), lancefile.Primitive(lancefile.KindBool), {Kind: lancefile.KindBinary, Logical: "binary"}}

// writeZones writes zones (ended) as rows of the streamed file.
func (p *bloomParams) writeZones(zones []*builtZone) error {
	n := len(zones)
	if n == 0 {
		return nil
	}
	out := make([]*lancefile.Array, len(bloomTypes))
	for i, t := range bloomTypes {
		out[i] = &lancefile.Array{Type: t, Len: n}
	}
	out[4].Offsets = make([]int64, 1, n+1)
	out[4].Values = make([]byte, 0, n*p.bytes)
	for _, z := range zones {
		out[0].Values = binary.LittleEndian.AppendUint64(out[0].Values, z.frag)
		out[1].Values = binary.LittleEndian.AppendUint64(out[1].Values, z.start)
		out[2].Values = binary.LittleEndian.AppendUint64(out[2].Values, z.last-z.start+1)
		hasNull := byte(0)
		if z.nulls > 0 {
			hasNull = 1
		}
		out[3].Values = append(out[3].Values, hasNull)
		out[4].Values = append(out[4].Values, z.filter...)
		out[4].Offsets = append(out[4].Offsets, int64(len(out[4].Values)))
	}
	return p.w.Write(out)
}

// writeBloom writes a BLOOMFILTER segment's file (the rest of it, when
// streamed): a row per zone, the map of null rows, and the metadata.
func (b *Builder) writeBloom(ctx context.Context, st storage.Store, name string, v lancefile.Version) ([]*pb.IndexFile, error) {
	p := b.bloom
	if p.sw == nil {
		if err := p.open(ctx, st, name, v, b.rowsPerZone); err != nil {
			return nil, err
		}
	} else if name != p.name || v != p.version {
		return nil, fmt.Errorf("%w: zonemap: Write to %s, streamed to %s", errkind.InvalidInput, name, p.name)
	}
	defer b.Close()
	if err := p.writeZones(b.zones); err != nil {
		return nil, err
	}
	b.zones = b.zones[:0]
	g, err := p.w.AddGlobalBuffer(bitmap.AppendRowMap(nil, b.nulls))
	if err != nil {
		return nil, err
	}
	p.w.SetMetadata("null_bitmap", []byte(strconv.Itoa(g)))
	if err := p.w.Finish(); err != nil {
		return nil, err
	}
	if err := p.sw.Finish(); err != nil {
		return nil, err
	}
	p.sw = nil
	return []*pb.IndexFile{{Path: BloomFilter.File, SizeBytes: uint64(p.cw.N)}}, nil
}

// writeFile writes the zones' columns, the given metadata and the map of
// null rows (global buffer 1, named by null_bitmap).
func (b *Builder) writeFile(ctx context.Context, st storage.Store, name string, v lancefile.Version, fields []*lancefile.Field, out []*lancefile.Array, meta map[string]string) ([]*pb.IndexFile, error) {
	sw, err := st.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	defer sw.Abort()
	cw := &storage.CountingWriter{W: sw}
	w, err := lancefile.NewWriter(cw, fields, lancefile.WriterOptions{Version: v})
	if err != nil {
		return nil, err
	}
	for k, val := range meta {
		w.SetMetadata(k, []byte(val))
	}
	g, err := w.AddGlobalBuffer(bitmap.AppendRowMap(nil, b.nulls))
	if err != nil {
		return nil, err
	}
	w.SetMetadata("null_bitmap", []byte(strconv.Itoa(g)))
	if len(b.zones) > 0 {
		if err := w.Write(out); err != nil {
			return nil, err
		}
	}
	if err := w.Finish(); err != nil {
		return nil, err
	}
	if err := sw.Finish(); err != nil {
		return nil, err
	}
	return []*pb.IndexFile{{Path: ZoneMap.File, SizeBytes: uint64(cw.N)}}, nil
}

// bloomContains reports whether filter f may hold value v.
func bloomContains(f []byte, v []byte) bool {
	b, x := bloomBlock(f, v)
	for i, s := range bloomSalt {
		if binary.LittleEndian.Uint32(b[4*i:])&(1<<((x*s)>>27)) == 0 {
			return false
		}
	}
	return true
}

// coversBloom checks zone z of a BLOOMFILTER segment against the live
// rows of its span: its filter may hold each non-null value, and it has a
// null if any row is null.
func (s *Segment) coversBloom(z int, rows *lancefile.Array, live func(i int) bool) (string, error) {
	hasNull, filters := s.cols[3], s.cols[4]
	if hasNull.Type.Kind != lancefile.KindBool || filters.Type.Kind != lancefile.KindBinary {
		return "", fmt.Errorf("%w: bloomfilter segment: has_null of type %s, filters of type %s", errkind.Corrupt, hasNull.Type, filters.Type)
	}
	f := filters.Values[filters.Offsets[z]:filters.Offsets[z+1]]
	if len(f) == 0 || len(f)%32 != 0 {
		return fmt.Sprintf("its bloom filter is %d bytes (not a positive multiple of 32)", len(f)), nil
	}
	width := rows.Type.ValueBits() / 8
	for i := range rows.Len {
		if !live(i) {
			continue
		}
		if !rows.IsValid(i) {
			if hasNull.Values[z] == 0 {
				return fmt.Sprintf("row %d of its span is null, has_null is false", i), nil
			}
			continue
		}
		var v []byte
		if rows.Type.Kind == lancefile.KindBinary {
			v = rows.Values[rows.Offsets[i]:rows.Offsets[i+1]]
		} else {
			v = rows.Values[i*width : (i+1)*width]
		}
		if !bloomContains(f, v) {
			return fmt.Sprintf("its span holds %s (row %d), which its bloom filter does not", show(rows.Type, v), i), nil
		}
	}
	return "", nil
}
