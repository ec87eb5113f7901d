package ivf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// File names inside a segment directory. Part of the format.
const (
	IndexFileName     = "index.idx"
	AuxiliaryFileName = "auxiliary.idx"
)

// Files is an opened vector index segment: its two files and the model
// metadata decoded from them. Close releases the file handles.
type Files struct {
	Dir   string // "_indices/<uuid>/"
	Index *lancefile.Reader
	Aux   *lancefile.Reader

	Type     IndexType
	Distance string
	// IVF is the auxiliary file's IVF message: its lengths give each
	// partition's rows in auxiliary.idx.
	IVF *Model
	// IndexIVF is index.idx's IVF message (centroids for builder-written
	// segments; row ranges of the HNSW graph).
	IndexIVF *Model
	// Quant is the quantizer metadata; nil for IVF_FLAT files that carry
	// none.
	Quant *QuantizerMeta
	// QuantJSON is the quantizer metadata as stored.
	QuantJSON string

	objs []storage.Object
}

// OpenFiles opens the segment under dir ("_indices/<uuid>/"). errkind.NotFound
// if a file is missing, errkind.Corrupt if a file or its metadata is broken,
// errkind.Unsupported for layouts this package does not read.
func OpenFiles(ctx context.Context, st storage.Store, dir string, opts lancefile.Options) (_ *Files, err error) {
	f := &Files{Dir: dir}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.Index, err = f.open(ctx, st, IndexFileName, opts); err != nil {
		return nil, err
	}
	if f.Aux, err = f.open(ctx, st, AuxiliaryFileName, opts); err != nil {
		return nil, err
	}
	if err := f.decode(ctx); err != nil {
		return nil, fmt.Errorf("ivf: segment %s: %w", dir, err)
	}
	return f, nil
}

func (f *Files) open(ctx context.Context, st storage.Store, name string, opts lancefile.Options) (*lancefile.Reader, error) {
	obj, err := st.Open(ctx, f.Dir+name)
	if err != nil {
		return nil, fmt.Errorf("ivf: segment %s: %w", f.Dir, err)
	}
	f.objs = append(f.objs, obj)
	return lancefile.Open(ctx, obj, f.Dir+name, opts)
}

// Close closes the segment's files.
func (f *Files) Close() error {
	var errs []error
	for _, o := range f.objs {
		errs = append(errs, o.Close())
	}
	f.objs = nil
	return errors.Join(errs...)
}

func (f *Files) decode(ctx context.Context) error {
	var im IndexMeta
	raw, ok := f.Index.MetadataString(KeyIndex)
	if !ok {
		raw, ok = f.Aux.MetadataString(KeyIndex)
	}
	if !ok {
		return fmt.Errorf("%w: %s has no %q metadata (not a vector index of the V3 layout)", errkind.Unsupported, IndexFileName, KeyIndex)
	}
	if err := json.Unmarshal([]byte(raw), &im); err != nil {
		return fmt.Errorf("%w: %s %q: %w", errkind.Corrupt, KeyIndex, raw, err)
	}
	if !im.Type.Known() {
		return fmt.Errorf("%w: index type %q", errkind.Unsupported, im.Type)
	}
	f.Type = im.Type
	if f.Distance, ok = f.Aux.MetadataString(KeyDistanceType); !ok {
		f.Distance = im.DistanceType
	}
	if f.Distance == "" {
		return fmt.Errorf("%w: %s has no %q", errkind.Corrupt, AuxiliaryFileName, KeyDistanceType)
	}

	var err error
	if f.IVF, err = ReadModel(ctx, f.Aux, AuxiliaryFileName); err != nil {
		return err
	}
	if f.IndexIVF, err = ReadModel(ctx, f.Index, IndexFileName); err != nil {
		return err
	}
	if f.IVF.TotalRows() != f.Aux.NumRows() {
		return fmt.Errorf("%w: %s partitions hold %d rows, the file %d", errkind.Corrupt, AuxiliaryFileName, f.IVF.TotalRows(), f.Aux.NumRows())
	}
	if f.IVF.Centroids == nil && f.IndexIVF.Centroids != nil && f.IndexIVF.NumPartitions() != len(f.IVF.Lengths) {
		return fmt.Errorf("%w: %d centroids in %s for %d partitions in %s", errkind.Corrupt, f.IndexIVF.NumPartitions(), IndexFileName, len(f.IVF.Lengths), AuxiliaryFileName)
	}

	if key := quantizerKey(f.Type.Quantizer()); key != "" {
		if s, ok := f.Aux.MetadataString(key); ok {
			f.QuantJSON = s
		}
	}
	if f.QuantJSON == "" {
		if s, ok := f.Aux.MetadataString(KeyStorageMetadata); ok {
			if f.QuantJSON, err = parseStorageMetadata(s); err != nil {
				return err
			}
		}
	}
	if f.QuantJSON != "" {
		if f.Quant, err = ParseQuantizerMeta(f.QuantJSON); err != nil {
			return err
		}
	} else if f.Type.Quantizer() != "flat" {
		return fmt.Errorf("%w: %s has no quantizer metadata", errkind.Corrupt, AuxiliaryFileName)
	}
	return nil
}

// ReadModel reads the IVF message that the "lance:ivf" metadata of r names.
func ReadModel(ctx context.Context, r *lancefile.Reader, name string) (*Model, error) {
	s, ok := r.MetadataString(KeyIVF)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no %q metadata", errkind.Corrupt, name, KeyIVF)
	}
	pos, err := strconv.Atoi(s)
	if err != nil || pos <= 0 || pos >= r.NumGlobalBuffers() {
		return nil, fmt.Errorf("%w: %s: %q = %q is not a global buffer of the %d in the file", errkind.Corrupt, name, KeyIVF, s, r.NumGlobalBuffers())
	}
	b, err := r.GlobalBuffer(ctx, pos)
	if err != nil {
		return nil, err
	}
	m, err := DecodeModel(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// NumPartitions is the segment's IVF partition count.
func (f *Files) NumPartitions() int {
	if n := len(f.IVF.Lengths); n > 0 {
		return n
	}
	return f.IndexIVF.NumPartitions()
}

// Centroids returns the IVF centroids, from whichever file has them.
func (f *Files) Centroids() *Tensor {
	if f.IVF.Centroids != nil {
		return f.IVF.Centroids
	}
	return f.IndexIVF.Centroids
}
