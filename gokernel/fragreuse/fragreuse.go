// Package fragreuse reads the fragment reuse index a Lance compaction with
// defer_index_remap leaves behind (the system index "__lance_frag_reuse"):
// which fragments each compaction rewrote, and where their rows went.
//
// Its details message (lance.table.FragmentReuseIndexDetails) holds, inline
// or in a file under the index's directory, one version per compaction,
// each with the rewrite groups of that compaction: the old fragments, the
// new ones (ids and physical rows), and the row addresses of the old
// fragments that were carried over, as a serialized 64-bit roaring bitmap
// (a u64 count of buckets, then per bucket a u32 key, the fragment id, and
// a portable 32-bit roaring bitmap of offsets). The carried-over rows, in
// ascending address order, are the new fragments' rows in order, fragment
// after fragment; an old row not among them was deleted. Versions apply in
// order: a row rewritten twice is mapped through both.
//
// Everything here is untrusted input: sizes are checked against the bytes
// that hold them before anything is allocated.
package fragreuse

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/recent"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// IndexName is the manifest name of the fragment reuse index.
const IndexName = "__lance_frag_reuse"

// detailsTypeSuffix ends the type URL of its details.
const detailsTypeSuffix = "FragmentReuseIndexDetails"

// Field numbers of the details messages (lance.table, table.proto).
const (
	detailsInline   protowire.Number = 1 // InlineContent
	detailsExternal protowire.Number = 2 // ExternalFile

	inlineVersions protowire.Number = 1 // repeated Version

	versionDatasetVersion protowire.Number = 1
	versionGroups         protowire.Number = 3 // repeated Group

	groupChanged protowire.Number = 1 // bytes: the carried-over row addresses
	groupOld     protowire.Number = 2 // repeated FragmentDigest
	groupNew     protowire.Number = 3 // repeated FragmentDigest

	digestID       protowire.Number = 1
	digestPhysical protowire.Number = 2
	digestDeleted  protowire.Number = 3

	externalPath   protowire.Number = 1
	externalOffset protowire.Number = 2
	externalSize   protowire.Number = 3
)

// maxExternalBytes bounds an external details file read (pylance moves
// the content to a file past 200 KB; each compaction adds a few KB).
const maxExternalBytes = 256 << 20

// Digest is a fragment as a rewrite group records it.
type Digest struct {
	ID           uint32
	PhysicalRows uint64
	DeletedRows  uint64
}

// Group is one rewrite of a compaction: Old's rows that were carried over
// became New's rows.
type Group struct {
	Old, New []Digest
	kept     map[uint32]*roaring.Bitmap // old fragment -> its carried-over offsets
	base     map[uint32]uint64          // old fragment -> carried-over rows of old fragments below it
	starts   []uint64                   // New[i]'s first row among the group's new rows
	rows     uint64                     // carried-over rows
}

// Version is one compaction's entry.
type Version struct {
	DatasetVersion uint64
	Groups         []*Group
	byOld          map[uint32]*Group
}

// Map is a fragment reuse index read whole.
type Map struct {
	Versions []*Version
}

// Find returns the version's fragment reuse index entry (nil when it has
// none).
func Find(snap *table.Snapshot) *pb.IndexMetadata {
	for _, im := range snap.Indices {
		if im.GetName() == IndexName {
			return im
		}
	}
	return nil
}

// Load reads the fragment reuse index of snap: nil (and no error) when
// the version has none. Its details are inline in the manifest, or in a
// file under the index's directory (read from st). A plan, its merges and
// a verify of many segments each ask for the version's map, one map until
// the next compaction: the maps read last are kept, by their content or,
// for a file, by where it lies (an index's directory is never rewritten).
func Load(ctx context.Context, st storage.Store, snap *table.Snapshot) (*Map, error) {
	im, inline, ext, err := details(snap)
	if im == nil || err != nil {
		return nil, err
	}
	if ext == nil {
		return cached(string(inline), func() ([]byte, error) { return inline, nil })
	}
	if st == nil {
		return nil, fmt.Errorf("%w: the fragment reuse index's content is in a file, and no store to read it from", errkind.InvalidInput)
	}
	dir := table.IndexDir(im)
	key := fmt.Sprintf("file %s/%s%s [%d,+%d)", st.URI(), dir, ext.path, ext.offset, ext.size)
	return cached(key, func() ([]byte, error) { return readExternal(ctx, st, dir, ext) })
}

// parsed holds the maps read last. Maps are never modified once parsed.
var parsed = recent.New[*Map](parsedHeld)

// parsedHeld bounds parsed (maps of a few tables in one process).
const parsedHeld = 4

// cached is the map held under key, else Parse of what read returns.
func cached(key string, read func() ([]byte, error)) (*Map, error) {
	if m, ok := parsed.Get(key); ok {
		return m, nil
	}
	b, err := read()
	if err != nil {
		return nil, err
	}
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	parsed.Put(key, m)
	return m, nil
}

// details returns snap's fragment reuse index entry (nil: none) and its
// content or where it lives.
func details(snap *table.Snapshot) (*pb.IndexMetadata, []byte, *external, error) {
	im := Find(snap)
	if im == nil {
		return nil, nil, nil, nil
	}
	d := im.GetIndexDetails()
	if d == nil || !strings.HasSuffix(d.GetTypeUrl(), detailsTypeSuffix) {
		return im, nil, nil, fmt.Errorf("%w: the fragment reuse index has details of type %q", errkind.Unsupported, d.GetTypeUrl())
	}
	inline, ext, err := splitDetails(d.GetValue())
	return im, inline, ext, err
}

type external struct {
	path         string
	offset, size uint64
}

// splitDetails returns the inline content of a details message, or where
// it lives.
func splitDetails(b []byte) (inline []byte, ext *external, err error) {
	found := false
	err = eachField(b, "fragment reuse details", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == detailsInline && typ == protowire.BytesType:
			inline, ext, found = v, nil, true
		case num == detailsExternal && typ == protowire.BytesType:
			e := &external{}
			err := eachField(v, "fragment reuse external file", func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
				switch {
				case num == externalPath && typ == protowire.BytesType:
					e.path = string(v)
				case num == externalOffset && typ == protowire.VarintType:
					e.offset = n
				case num == externalSize && typ == protowire.VarintType:
					e.size = n
				}
				return nil
			})
			if err != nil {
				return err
			}
			inline, ext, found = nil, e, true
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%w: the fragment reuse index's details hold no content", errkind.Corrupt)
	}
	return inline, ext, err
}

// readExternal reads the content a details message places in a file
// under the index's directory.
func readExternal(ctx context.Context, st storage.Store, dir string, e *external) ([]byte, error) {
	if e.path == "" || strings.Contains(e.path, "..") || strings.HasPrefix(e.path, "/") {
		return nil, fmt.Errorf("%w: the fragment reuse index's content file is %q", errkind.Corrupt, e.path)
	}
	if e.size > maxExternalBytes {
		return nil, fmt.Errorf("%w: the fragment reuse index's content is %d bytes, above the %d read here", errkind.Unsupported, e.size, maxExternalBytes)
	}
	obj, err := st.Open(ctx, dir+e.path)
	if err != nil {
		return nil, fmt.Errorf("the fragment reuse index's content: %w", err)
	}
	defer obj.Close()
	if end := e.offset + e.size; end < e.offset || end > uint64(obj.Size()) {
		return nil, fmt.Errorf("%w: the fragment reuse index's content [%d, +%d) lies past its file %s (%d bytes)", errkind.Corrupt, e.offset, e.size, e.path, obj.Size())
	}
	b := make([]byte, e.size)
	if err := obj.ReadAt(ctx, b, int64(e.offset)); err != nil {
		return nil, fmt.Errorf("the fragment reuse index's content: %w", err)
	}
	return b, nil
}

// Parse reads a fragment reuse index's content (an InlineContent message).
func Parse(b []byte) (*Map, error) {
	m := &Map{}
	err := eachField(b, "fragment reuse content", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != inlineVersions || typ != protowire.BytesType {
			return nil
		}
		ver, err := parseVersion(v)
		if err != nil {
			return fmt.Errorf("fragment reuse version %d: %w", len(m.Versions), err)
		}
		m.Versions = append(m.Versions, ver)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func parseVersion(b []byte) (*Version, error) {
	ver := &Version{byOld: map[uint32]*Group{}}
	err := eachField(b, "version", func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == versionDatasetVersion && typ == protowire.VarintType:
			ver.DatasetVersion = n
		case num == versionGroups && typ == protowire.BytesType:
			g, err := parseGroup(v)
			if err != nil {
				return fmt.Errorf("group %d: %w", len(ver.Groups), err)
			}
			for _, d := range g.Old {
				if _, dup := ver.byOld[d.ID]; dup {
					return fmt.Errorf("%w: fragment %d is rewritten twice in one compaction", errkind.Corrupt, d.ID)
				}
				ver.byOld[d.ID] = g
			}
			ver.Groups = append(ver.Groups, g)
		}
		return nil
	})
	return ver, err
}

func parseGroup(b []byte) (*Group, error) {
	g := &Group{}
	var changed []byte
	err := eachField(b, "group", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case groupChanged:
			changed = v
		case groupOld, groupNew:
			d, err := parseDigest(v)
			if err != nil {
				return err
			}
			if num == groupOld {
				g.Old = append(g.Old, d)
			} else {
				g.New = append(g.New, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := g.index(changed); err != nil {
		return nil, err
	}
	return g, nil
}

func parseDigest(b []byte) (Digest, error) {
	var d Digest
	err := eachField(b, "fragment digest", func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
		if typ != protowire.VarintType {
			return nil
		}
		switch num {
		case digestID:
			if n > 1<<32-1 {
				return fmt.Errorf("%w: fragment id %d", errkind.Corrupt, n)
			}
			d.ID = uint32(n)
		case digestPhysical:
			d.PhysicalRows = n
		case digestDeleted:
			d.DeletedRows = n
		}
		return nil
	})
	return d, err
}

// index reads the group's carried-over row addresses and checks them
// against its fragments: each bucket is an old fragment's, within its
// rows, and there are as many as the new fragments hold.
func (g *Group) index(changed []byte) error {
	old := map[uint32]uint64{}
	for _, d := range g.Old {
		old[d.ID] = d.PhysicalRows
	}
	g.kept, g.base = map[uint32]*roaring.Bitmap{}, map[uint32]uint64{}
	if len(changed) > 0 {
		if len(changed) < 8 {
			return fmt.Errorf("%w: row address map of %d bytes", errkind.Corrupt, len(changed))
		}
		buckets := binary.LittleEndian.Uint64(changed)
		if buckets > uint64(len(changed)-8)/4 {
			return fmt.Errorf("%w: row address map of %d bytes claims %d fragments", errkind.Corrupt, len(changed), buckets)
		}
		pos := 8
		prev := int64(-1)
		for range buckets {
			if len(changed)-pos < 4 {
				return fmt.Errorf("%w: row address map ends inside a fragment's key", errkind.Corrupt)
			}
			f := binary.LittleEndian.Uint32(changed[pos:])
			pos += 4
			if int64(f) <= prev {
				return fmt.Errorf("%w: row address map's fragments out of order (%d after %d)", errkind.Corrupt, f, prev)
			}
			prev = int64(f)
			bm := roaring.New()
			n, err := bm.FromBuffer(changed[pos:])
			if err != nil {
				return fmt.Errorf("%w: row address map of fragment %d: %v", errkind.Corrupt, f, err)
			}
			pos += int(n)
			physical, ok := old[f]
			if !ok {
				return fmt.Errorf("%w: row address map names fragment %d, which the group does not rewrite", errkind.Corrupt, f)
			}
			if !bm.IsEmpty() && uint64(bm.Maximum()) >= physical {
				return fmt.Errorf("%w: row address map holds row %d of fragment %d, which has %d rows", errkind.Corrupt, bm.Maximum(), f, physical)
			}
			g.kept[f], g.base[f] = bm, g.rows
			g.rows += bm.GetCardinality()
		}
		if pos != len(changed) {
			return fmt.Errorf("%w: row address map has %d bytes after its last fragment", errkind.Corrupt, len(changed)-pos)
		}
	}
	var total uint64
	for _, d := range g.New {
		g.starts = append(g.starts, total)
		total += d.PhysicalRows
	}
	if total != g.rows {
		return fmt.Errorf("%w: a rewrite group carries %d rows over into new fragments of %d rows", errkind.Corrupt, g.rows, total)
	}
	return nil
}

// Compacted reports whether some compaction of the map rewrote fragment f
// (its rows live on, if at all, at other addresses).
func (m *Map) Compacted(f uint32) bool {
	if m == nil {
		return false
	}
	for _, v := range m.Versions {
		if _, ok := v.byOld[f]; ok {
			return true
		}
	}
	return false
}

// Rewritten returns the fragments some compaction of the map rewrote,
// ascending.
func (m *Map) Rewritten() []uint32 {
	var out []uint32
	for _, v := range m.Versions {
		for f := range v.byOld {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Written reports whether some compaction of the map wrote fragment f:
// its rows are rows of rewritten fragments, at new addresses.
func (m *Map) Written(f uint32) bool {
	if m == nil {
		return false
	}
	for _, v := range m.Versions {
		for _, g := range v.Groups {
			if slices.ContainsFunc(g.New, func(d Digest) bool { return d.ID == f }) {
				return true
			}
		}
	}
	return false
}

// Remap returns where the row at addr lives now, through every version in
// order: ok is false when a compaction dropped it (it was deleted). An
// address of a fragment no compaction rewrote is its own.
func (m *Map) Remap(addr uint64) (uint64, bool) {
	if m == nil {
		return addr, true
	}
	for _, v := range m.Versions {
		g := v.byOld[uint32(addr>>32)]
		if g == nil {
			continue
		}
		var ok bool
		if addr, ok = g.remap(addr); !ok {
			return 0, false
		}
	}
	return addr, true
}

func (g *Group) remap(addr uint64) (uint64, bool) {
	f, off := uint32(addr>>32), uint32(addr)
	bm := g.kept[f]
	if bm == nil || !bm.Contains(off) {
		return 0, false
	}
	r := g.base[f] + bm.Rank(off) - 1 // its place among the group's carried-over rows
	i := sort.Search(len(g.starts), func(i int) bool { return g.starts[i] > r }) - 1
	return uint64(g.New[i].ID)<<32 | (r - g.starts[i]), true
}

// NewFragments returns the fragments a compaction wrote in place of old:
// the new fragments of every group that rewrote one of them, through
// later versions too, ascending. complete is false when some group's old
// fragments are not all in old (pylance refuses such a remap).
func (m *Map) NewFragments(old []uint32) (out []uint32, complete bool) {
	cur := slices.Clone(old)
	complete = true
	for _, v := range m.Versions {
		in := map[uint32]bool{}
		for _, f := range cur {
			in[f] = true
		}
		next := cur[:0:0]
		done := map[*Group]bool{}
		for _, f := range cur {
			g := v.byOld[f]
			if g == nil {
				next = append(next, f)
				continue
			}
			if done[g] {
				continue
			}
			done[g] = true
			for _, d := range g.Old {
				complete = complete && in[d.ID]
			}
			for _, d := range g.New {
				next = append(next, d.ID)
			}
		}
		cur = next
	}
	slices.Sort(cur)
	return slices.Compact(cur), complete
}

// eachField calls fn for every field of a protobuf message: v holds a
// length-delimited field's bytes, n a varint's value.
func eachField(b []byte, what string, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("%w: %s: %v", errkind.Corrupt, what, protowire.ParseError(k))
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
		}
		if k < 0 {
			return fmt.Errorf("%w: %s: %v", errkind.Corrupt, what, protowire.ParseError(k))
		}
		b = b[k:]
		if err := fn(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
