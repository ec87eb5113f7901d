package table

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

// DataDir holds the data files of the fragments (DataFile.path is
// relative to it). Part of the format.
const DataDir = "data/"

// IndicesDir holds one directory per index segment, named by its uuid. Part
// of the format.
const IndicesDir = "_indices/"

// IndexUUID returns the hyphenated lowercase uuid of an index entry.
func IndexUUID(im *pb.IndexMetadata) string {
	u, err := uuid.FromBytes(im.GetUuid().GetUuid())
	if err != nil {
		return fmt.Sprintf("invalid-uuid-%x", im.GetUuid().GetUuid())
	}
	return u.String()
}

// IndexDir is the directory of an index segment ("_indices/<uuid>/"),
// relative to the root that holds it: the dataset's, or for an entry with
// a base_id (shallow clones) that base path's (Snapshot.IndexStore).
func IndexDir(im *pb.IndexMetadata) string { return IndicesDir + IndexUUID(im) + "/" }

// maxBitmapBytes bounds a fragment bitmap: 2^32 fragment ids as a plain
// bitmap take 512 MiB; real ones are tiny.
const maxBitmapBytes = 1 << 29

// MaxCoveredFragments bounds the fragment ids one bitmap may name (64 MiB
// once materialised). A manifest of that many fragments would be far above
// maxManifestBytes; a portable roaring bitmap, on the other hand, names
// 2^32 ids in under 1 MB (one full run per container), so the count is
// checked before anything is materialised.
const MaxCoveredFragments = 1 << 24

// DecodeFragmentBitmap decodes a portable 32-bit RoaringBitmap (with or
// without run containers). ok is false when b is empty, which Lance reads as
// "coverage unknown". A bitmap naming more than MaxCoveredFragments ids is
// refused before it is materialised; see DecodeFragmentBitmapUpTo for the
// bound a dataset gives.
func DecodeFragmentBitmap(b []byte) (ids []uint32, ok bool, err error) {
	return DecodeFragmentBitmapUpTo(b, math.MaxUint32)
}

// DecodeFragmentBitmapUpTo is DecodeFragmentBitmap for a bitmap that may
// only name fragment ids up to maxID (Snapshot.MaxFragmentID of the
// dataset it belongs to): a larger id is refused, like an oversized count,
// before anything is materialised. Every failure is errkind.Corrupt.
func DecodeFragmentBitmapUpTo(b []byte, maxID uint32) (ids []uint32, ok bool, err error) {
	if len(b) == 0 {
		return nil, false, nil
	}
	if len(b) > maxBitmapBytes {
		return nil, false, fmt.Errorf("%w: fragment bitmap of %d bytes", errkind.Corrupt, len(b))
	}
	defer func() {
		// roaring validates what it reads, but a decoder fed hostile bytes
		// must never take the process down.
		if r := recover(); r != nil {
			ids, ok, err = nil, false, fmt.Errorf("%w: fragment bitmap: %v", errkind.Corrupt, r)
		}
	}()
	bm := roaring.New()
	n, err := bm.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return nil, false, fmt.Errorf("%w: fragment bitmap: %w", errkind.Corrupt, err)
	}
	if n != int64(len(b)) {
		return nil, false, fmt.Errorf("%w: fragment bitmap has %d trailing bytes", errkind.Corrupt, int64(len(b))-n)
	}
	if err := bm.Validate(); err != nil {
		return nil, false, fmt.Errorf("%w: fragment bitmap: %w", errkind.Corrupt, err)
	}
	if bm.IsEmpty() {
		return []uint32{}, true, nil
	}
	if max := bm.Maximum(); max > maxID {
		return nil, false, fmt.Errorf("%w: fragment bitmap names fragment %d; the dataset has assigned ids up to %d only", errkind.Corrupt, max, maxID)
	}
	if card := bm.GetCardinality(); card > MaxCoveredFragments {
		return nil, false, fmt.Errorf("%w: fragment bitmap names %d fragments, more than the %d lance-segmerge accepts", errkind.Corrupt, card, MaxCoveredFragments)
	}
	return bm.ToArray(), true, nil
}

// MaxFragmentID is the largest fragment id this version has assigned: the
// manifest's max_fragment_id (or a larger fragment id, should one exist).
// An index segment can only cover fragments up to it. ok is false when the
// manifest does not record it (Lance before about 0.31 did not always):
// the largest current fragment is no bound, a segment may cover a deleted
// fragment above it.
func (s *Snapshot) MaxFragmentID() (id uint32, ok bool) {
	m := s.Manifest
	if m.MaxFragmentId == nil {
		return 0, false
	}
	id = m.GetMaxFragmentId()
	for _, f := range m.GetFragments() {
		if f.GetId() > math.MaxUint32 {
			return math.MaxUint32, true
		}
		id = max(id, uint32(f.GetId()))
	}
	return id, true
}

// DecodeCoverage decodes the fragment bitmap of an index entry of this
// dataset, bounded by MaxFragmentID.
func (s *Snapshot) DecodeCoverage(im *pb.IndexMetadata) (ids []uint32, ok bool, err error) {
	max, known := s.MaxFragmentID()
	if !known {
		max = math.MaxUint32
	}
	return DecodeFragmentBitmapUpTo(im.GetFragmentBitmap(), max)
}

// EncodeFragmentBitmap encodes ids as a portable RoaringBitmap without run
// containers (cookie 12346), which every roaring-rs version reads.
func EncodeFragmentBitmap(ids []uint32) ([]byte, error) {
	bm := roaring.BitmapOf(ids...)
	return bm.ToBytes()
}

// MarshalIndex encodes an index entry deterministically (map fields sorted),
// with its unknown fields.
func MarshalIndex(im *pb.IndexMetadata) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(im)
}

// UnmarshalIndex decodes an index entry; errkind.Corrupt on bad bytes.
func UnmarshalIndex(b []byte) (*pb.IndexMetadata, error) {
	im := &pb.IndexMetadata{}
	if err := proto.Unmarshal(b, im); err != nil {
		return nil, fmt.Errorf("%w: index metadata: %w", errkind.Corrupt, err)
	}
	if len(im.GetUuid().GetUuid()) != 16 {
		return nil, fmt.Errorf("%w: index metadata has a %d-byte uuid", errkind.Corrupt, len(im.GetUuid().GetUuid()))
	}
	return im, nil
}

// FieldByName returns the manifest field with the given top-level name.
func (s *Snapshot) FieldByName(name string) (*pb.Field, bool) {
	for _, f := range s.Manifest.GetFields() {
		if f.GetParentId() == -1 && f.GetName() == name {
			return f, true
		}
	}
	return nil, false
}

// FieldByPath returns the manifest field that path names: a top-level
// field's name, or the dotted path of a field inside others ("a.b"). A
// top-level field whose own name holds the dots wins.
func (s *Snapshot) FieldByPath(path string) (*pb.Field, bool) {
	if f, ok := s.FieldByName(path); ok {
		return f, true
	}
	byID := s.fieldsByID()
	for _, f := range s.Manifest.GetFields() {
		if f.GetParentId() != -1 && pathOf(byID, f.GetId()) == path {
			return f, true
		}
	}
	return nil, false
}

// FieldByID returns the manifest field with the given id.
func (s *Snapshot) FieldByID(id int32) (*pb.Field, bool) {
	for _, f := range s.Manifest.GetFields() {
		if f.GetId() == id {
			return f, true
		}
	}
	return nil, false
}

// ChildFields returns the manifest fields whose parent is the field with
// the given id (a list's item, a struct's members), in manifest order.
func (s *Snapshot) ChildFields(id int32) []*pb.Field {
	var out []*pb.Field
	for _, f := range s.Manifest.GetFields() {
		if f.GetParentId() == id {
			out = append(out, f)
		}
	}
	return out
}

// FieldPath returns the dotted name of the field with the given id ("vec",
// or "a.b" for a nested field); "" if there is none.
func (s *Snapshot) FieldPath(id int32) string { return pathOf(s.fieldsByID(), id) }

func (s *Snapshot) fieldsByID() map[int32]*pb.Field {
	byID := make(map[int32]*pb.Field, len(s.Manifest.GetFields()))
	for _, f := range s.Manifest.GetFields() {
		byID[f.GetId()] = f
	}
	return byID
}

// pathOf is FieldPath over the fields by id (a cycle of parents stops
// after as many steps as there are fields).
func pathOf(byID map[int32]*pb.Field, id int32) string {
	var parts []string
	for f, ok := byID[id]; ok && len(parts) <= len(byID); f, ok = byID[f.GetParentId()] {
		parts = append(parts, f.GetName())
	}
	slices.Reverse(parts)
	return strings.Join(parts, ".")
}

// FragmentIDs returns the ids of the fragments of this version, ascending.
func (s *Snapshot) FragmentIDs() []uint64 {
	out := make([]uint64, 0, len(s.Manifest.GetFragments()))
	for _, f := range s.Manifest.GetFragments() {
		out = append(out, f.GetId())
	}
	slices.Sort(out)
	return out
}

// FragmentSet is the set of the version's fragment ids.
func (s *Snapshot) FragmentSet() map[uint64]bool {
	set := make(map[uint64]bool, len(s.Manifest.GetFragments()))
	for _, f := range s.Manifest.GetFragments() {
		set[f.GetId()] = true
	}
	return set
}

// MergedCoverage is the coverage of a segment merged from metas: the union
// of their fragment bitmaps (encoded) and their smallest dataset version
// (the model's era survives merges).
func MergedCoverage(metas []*pb.IndexMetadata) ([]byte, uint64, error) {
	var frags []uint32
	var dv uint64
	for i, im := range metas {
		ids, _, err := DecodeFragmentBitmap(im.GetFragmentBitmap())
		if err != nil {
			return nil, 0, fmt.Errorf("segment %s: %w", IndexUUID(im), err)
		}
		frags = append(frags, ids...)
		if i == 0 || im.GetDatasetVersion() < dv {
			dv = im.GetDatasetVersion()
		}
	}
	bm, err := EncodeFragmentBitmap(frags)
	return bm, dv, err
}
