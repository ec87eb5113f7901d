package segment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/parallel"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// File is one file of a segment, as IndexMetadata.files lists it.
type File struct {
	Path      string `json:"path"`
	SizeBytes uint64 `json:"size_bytes"`
}

// Info describes one segment: its manifest entry and what its files say.
// The JSON names are the Python IndexSegment's field names.
type Info struct {
	UUID           string  `json:"uuid"`
	Name           string  `json:"name"`
	Fields         []int32 `json:"fields"`
	DatasetVersion uint64  `json:"dataset_version"`
	// FragmentIDs is sorted; nil when the entry has no bitmap.
	FragmentIDs  []uint32 `json:"fragment_ids"`
	IndexVersion int32    `json:"index_version"`
	// CreatedAtMillis is milliseconds since the Unix epoch, or nil.
	CreatedAtMillis *uint64 `json:"created_at_ms"`
	BaseID          *uint32 `json:"base_id"`
	Files           []File  `json:"files"`
	DetailsTypeURL  string  `json:"index_details_type_url"`
	Details         []byte  `json:"index_details"`
	// Metadata is the IndexMetadata protobuf, unknown fields included.
	Metadata []byte `json:"metadata"`

	Stats *Stats `json:"stats"`
}

// Stats is what the segment's files say, beyond the manifest entry.
type Stats struct {
	IndexType      string   `json:"index_type"`
	DistanceType   string   `json:"distance_type"`
	NumPartitions  int      `json:"num_partitions"`
	PartitionRows  []uint32 `json:"partition_rows"`
	NumRows        uint64   `json:"num_rows"`
	PQTransposed   *bool    `json:"pq_transposed"`
	RQPacked       *bool    `json:"rq_packed"`
	NumBits        int      `json:"num_bits"`
	NumSubVectors  int      `json:"num_sub_vectors"`
	Dimension      int      `json:"dimension"`
	FileVersion    string   `json:"file_version"`
	IndexFileBytes int64    `json:"index_file_bytes"`
	AuxFileBytes   int64    `json:"auxiliary_file_bytes"`
	// StaleRows estimates the rows a merge would drop: deleted, or of
	// fragments no longer in the dataset (see StaleRows).
	StaleRows uint64 `json:"stale_rows"`
	// IVF_HNSW_*: the graphs' build parameters (max_level is the level
	// cap), the most levels a partition's graph has, and each
	// partition's graph rows in index.idx (one per node and level).
	HNSWM              int      `json:"hnsw_m,omitempty"`
	HNSWEfConstruction int      `json:"hnsw_ef_construction,omitempty"`
	HNSWMaxLevel       int      `json:"hnsw_max_level,omitempty"`
	HNSWLevels         int      `json:"hnsw_levels,omitempty"`
	PartitionGraphRows []uint32 `json:"partition_graph_rows,omitempty"`

	// BITMAP and LABEL_LIST: the distinct keys (the null key included) and
	// the most rows one key holds.
	DistinctKeys   *uint64 `json:"distinct_keys,omitempty"`
	LargestKeyRows *uint64 `json:"largest_key_rows,omitempty"`

	// notVector: a segment of another index type (otherStats), whose rows
	// and partitions are not counted unless a file holds one row per
	// indexed row; JSON says null for what is not counted.
	notVector   bool
	rowsCounted bool
}

// MarshalJSON writes the uncounted numbers of another index type's
// segment as null (the Python side shows them as unknown, not as 0).
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	if !s.notVector {
		return json.Marshal(plain(s))
	}
	out := struct {
		plain
		NumRows       *uint64 `json:"num_rows"`
		NumPartitions *int    `json:"num_partitions"`
	}{plain: plain(s)}
	if s.rowsCounted {
		out.NumRows = &s.NumRows
	}
	return json.Marshal(out)
}

// Describe builds the Info of one index entry without reading its files.
func Describe(im *pb.IndexMetadata) (*Info, error) {
	ids, _, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
	}
	raw, err := table.MarshalIndex(im)
	if err != nil {
		return nil, fmt.Errorf("segment %s: encode metadata: %w", table.IndexUUID(im), err)
	}
	info := &Info{
		UUID:            table.IndexUUID(im),
		Name:            im.GetName(),
		Fields:          im.GetFields(),
		DatasetVersion:  im.GetDatasetVersion(),
		FragmentIDs:     ids,
		IndexVersion:    im.GetIndexVersion(),
		CreatedAtMillis: im.CreatedAt,
		BaseID:          im.BaseId,
		DetailsTypeURL:  im.GetIndexDetails().GetTypeUrl(),
		Details:         im.GetIndexDetails().GetValue(),
		Metadata:        raw,
	}
	if info.Fields == nil {
		info.Fields = []int32{}
	}
	for _, f := range im.GetFiles() {
		info.Files = append(info.Files, File{Path: f.GetPath(), SizeBytes: f.GetSizeBytes()})
	}
	return info, nil
}

// ReadStats opens a segment's files and summarises them. st is the store
// that holds the segment's directory (for an entry with a base_id, the
// base path's: see Snapshot.IndexStore).
func ReadStats(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Stats, error) {
	if t := OtherType(im); t != "" {
		return otherStats(ctx, st, im, t)
	}
	f, err := ivf.OpenFiles(ctx, st, table.IndexDir(im), lancefile.Options{})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return filesStats(f, im)
}

// filesStats summarises a segment's opened files.
func filesStats(f *ivf.Files, im *pb.IndexMetadata) (*Stats, error) {
	s := &Stats{
		IndexType:      string(f.Type),
		DistanceType:   f.Distance,
		NumPartitions:  f.NumPartitions(),
		PartitionRows:  f.IVF.Lengths,
		NumRows:        f.Aux.NumRows(),
		FileVersion:    f.Aux.Version().String(),
		IndexFileBytes: f.Index.Size(),
		AuxFileBytes:   f.Aux.Size(),
	}
	if s.PartitionRows == nil {
		s.PartitionRows = []uint32{}
	}
	if f.Type.HNSW() {
		if err := hnswStats(f, s); err != nil {
			return nil, fmt.Errorf("segment %s: %w", table.IndexUUID(im), err)
		}
	}
	if q := f.Quant; q != nil {
		switch f.Type.Quantizer() {
		case "pq":
			s.PQTransposed = q.Transposed
			if s.PQTransposed == nil {
				// PQ metadata without the key predates the transposed layout.
				no := false
				s.PQTransposed = &no
			}
			s.NumBits, s.NumSubVectors, s.Dimension = q.NBits, q.NumSubVectors, q.Dimension
		case "rq":
			s.RQPacked = q.Packed
			s.NumBits, s.Dimension = q.NumBits, q.CodeDim
			if c := f.Centroids(); s.Dimension == 0 && c != nil {
				s.Dimension = rqCodeDim(q, c.Cols())
			}
		case "sq":
			s.NumBits, s.Dimension = q.NumBits, q.Dim
		case "flat":
			s.Dimension = q.Dim
		}
	}
	return s, nil
}

// Options control List.
type Options struct {
	// IndexName selects one logical index; "" lists every vector index.
	IndexName string
	// SkipStats lists manifest entries only, without opening index files.
	SkipStats bool
}

// List returns the segments of the vector indices of snap, in manifest
// order. errkind.NotFound when IndexName names no index. Segments' files
// are read in parallel (a thousand deltas on an object store are a
// thousand round trips); a failure is the first failing segment's, in
// manifest order.
func List(ctx context.Context, st storage.Store, snap *table.Snapshot, opts Options) ([]*Info, error) {
	var out []*Info
	var metas []*pb.IndexMetadata
	var stores []storage.Store
	var errs []error // per entry of out, from the steps before its files are read
	for _, im := range snap.Indices {
		if opts.IndexName != "" && im.GetName() != opts.IndexName {
			continue
		}
		if opts.IndexName == "" && !IsVector(im) {
			continue
		}
		info, err := Describe(im)
		var ist storage.Store
		if err == nil && !opts.SkipStats {
			ist, err = indexStore(ctx, st, snap, im)
		}
		out, metas, stores, errs = append(out, info), append(metas, im), append(stores, ist), append(errs, err)
	}
	if !opts.SkipStats {
		byID := fragmentsByID(snap)
		err := parallel.Each(len(out), openParallelism, func(i int) error {
			if errs[i] != nil {
				return errs[i]
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			stats, err := ReadStats(ctx, stores[i], metas[i])
			if err != nil && !errors.Is(err, errkind.Unsupported) {
				return err
			}
			if stats != nil {
				stats.StaleRows = staleRowsIn(byID, metas[i], stats.NumRows)
			}
			out[i].Stats = stats
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
	}
	if opts.IndexName != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: index %q does not exist in %s version %d (indices: %v)",
			errkind.NotFound, opts.IndexName, st.URI(), snap.Ref.Version, IndexNames(snap))
	}
	return out, nil
}

// DescribeWithStats is Describe with the statistics read from the
// segment's files (whatever the context's cancellation: a caller
// describing what it just wrote must not lose it to a late cancel).
func DescribeWithStats(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (*Info, error) {
	info, err := Describe(im)
	if err != nil {
		return nil, err
	}
	if info.Stats, err = ReadStats(context.WithoutCancel(ctx), st, im); err != nil {
		return nil, err
	}
	return info, nil
}

// IsVector reports whether an index entry is a vector index: its details
// are VectorIndexDetails (any package), or, for entries without details,
// its files include auxiliary.idx.
func IsVector(im *pb.IndexMetadata) bool {
	url := im.GetIndexDetails().GetTypeUrl()
	if url != "" {
		return hasSuffixFold(url, "VectorIndexDetails")
	}
	for _, f := range im.GetFiles() {
		if f.GetPath() == ivf.AuxiliaryFileName {
			return true
		}
	}
	// Legacy entries carry neither details nor files: Lance infers them by
	// opening the files. Names of system indices start with "__lance".
	return len(im.GetName()) < 7 || im.GetName()[:7] != "__lance"
}

func hasSuffixFold(s, suffix string) bool {
	if len(s) < len(suffix) {
		return false
	}
	tail := s[len(s)-len(suffix):]
	for i := range tail {
		a, b := tail[i], suffix[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// IndexNames lists the distinct index names of a snapshot, sorted.
func IndexNames(snap *table.Snapshot) []string {
	seen := map[string]bool{}
	var names []string
	for _, im := range snap.Indices {
		if !seen[im.GetName()] {
			seen[im.GetName()] = true
			names = append(names, im.GetName())
		}
	}
	sort.Strings(names)
	return names
}

// ToMetadata builds the IndexMetadata an Info describes. When Metadata (the
// original bytes) is set it is decoded and returned as is, so that fields we
// do not model survive; otherwise the entry is rebuilt from the plain fields
// (e.g. from a pylance Index).
func (i *Info) ToMetadata() (*pb.IndexMetadata, error) {
	if len(i.Metadata) > 0 {
		return table.UnmarshalIndex(i.Metadata)
	}
	u, err := uuid.Parse(i.UUID)
	if err != nil {
		return nil, fmt.Errorf("%w: segment uuid %q: %w", errkind.InvalidInput, i.UUID, err)
	}
	bm, err := table.EncodeFragmentBitmap(i.FragmentIDs)
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", i.UUID, err)
	}
	iv := i.IndexVersion
	im := &pb.IndexMetadata{
		Uuid:           &pb.UUID{Uuid: u[:]},
		Fields:         i.Fields,
		Name:           i.Name,
		DatasetVersion: i.DatasetVersion,
		FragmentBitmap: bm,
		IndexVersion:   &iv,
		CreatedAt:      i.CreatedAtMillis,
		BaseId:         i.BaseID,
	}
	if i.DetailsTypeURL != "" {
		im.IndexDetails = &anypb.Any{TypeUrl: i.DetailsTypeURL, Value: i.Details}
	}
	for _, f := range i.Files {
		im.Files = append(im.Files, &pb.IndexFile{Path: f.Path, SizeBytes: f.SizeBytes})
	}
	return im, nil
}

// ParseInfos decodes a JSON list of Infos (as the binding passes segments)
// into IndexMetadata, the original metadata bytes when present. See
// ParseSegments, which also bounds them by a dataset.
func ParseInfos(b []byte) ([]*pb.IndexMetadata, error) { return ParseSegments(b, nil) }

// ParseSegments decodes a JSON list of Infos, the caller's segments for
// the dataset version snap (nil: none), into IndexMetadata. They are
// untrusted: each must have a 16-byte uuid and a fragment bitmap naming
// only fragment ids snap has assigned (and no more than
// table.MaxCoveredFragments), checked before the bitmap is materialised.
// Every failure is errkind.InvalidInput and names the segment.
func ParseSegments(b []byte, snap *table.Snapshot) ([]*pb.IndexMetadata, error) {
	var infos []Info
	if err := json.Unmarshal(b, &infos); err != nil {
		return nil, fmt.Errorf("%w: segments JSON: %w", errkind.InvalidInput, err)
	}
	out := make([]*pb.IndexMetadata, 0, len(infos))
	for i := range infos {
		im, err := infos[i].checked(snap)
		if err != nil {
			return nil, fmt.Errorf("%w: segment %d (%s): %v", errkind.InvalidInput, i, infos[i].UUID, err)
		}
		out = append(out, im)
	}
	return out, nil
}

// ParseSegment is ParseSegments for one segment's JSON.
func ParseSegment(b []byte, snap *table.Snapshot) (*pb.IndexMetadata, error) {
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, fmt.Errorf("%w: segment JSON: %w", errkind.InvalidInput, err)
	}
	im, err := info.checked(snap)
	if err != nil {
		return nil, fmt.Errorf("%w: segment %s: %v", errkind.InvalidInput, info.UUID, err)
	}
	return im, nil
}

// checked is ToMetadata, with the fragment bitmap checked (see
// ParseSegments).
func (i *Info) checked(snap *table.Snapshot) (*pb.IndexMetadata, error) {
	im, err := i.ToMetadata()
	if err != nil {
		return nil, err
	}
	if snap != nil {
		_, _, err = snap.DecodeCoverage(im)
	} else {
		_, _, err = table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	}
	if err != nil {
		return nil, err
	}
	return im, nil
}
