package ivf

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/bufpool"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
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
	// meta is what the files decoded to, shared through the segment cache
	// with every Files opened on the same bytes (see cache.go).
	meta *segMeta
}

// OpenFiles opens the segment under dir ("_indices/<uuid>/"). errkind.NotFound
// if a file is missing, errkind.Corrupt if a file or its metadata is broken,
// errkind.Unsupported for layouts this package does not read.
//
// What the files decode to is cached per process, by the files' storage
// identity (see cache.go): opening a segment again (to list, plan, merge,
// commit) reads nothing but the objects' identities. The returned Files
// share that decoded state: treat IVF, IndexIVF, Quant and their tensors
// as read-only.
func OpenFiles(ctx context.Context, st storage.Store, dir string, opts lancefile.Options) (*Files, error) {
	return OpenFilesChecked(ctx, st, dir, opts, nil)
}

// OpenFilesChecked is OpenFiles, calling check (when not nil) with each
// file's name and size, as the store reports them, before anything is read
// or decoded: a caller that knows the sizes the files must have refuses
// incomplete or replaced files first.
func OpenFilesChecked(ctx context.Context, st storage.Store, dir string, opts lancefile.Options, check func(name string, size int64) error) (_ *Files, err error) {
	f := &Files{Dir: dir}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	idx, err := f.openObject(ctx, st, IndexFileName)
	if err != nil {
		return nil, err
	}
	aux, err := f.openObject(ctx, st, AuxiliaryFileName)
	if err != nil {
		if errors.Is(err, errkind.NotFound) && legacySingleFile(ctx, idx) {
			return nil, fmt.Errorf("%w: ivf: segment %s is a single-file vector index (index.idx only, Lance file format 0.x), "+
				"the layout pylance 0.23 and earlier write for IVF_PQ; lance-segmerge reads the two-file layout (index.idx and auxiliary.idx). "+
				"Recreate the index with a current pylance (create_index(..., replace=True)) to merge its segments; "+
				"pylance 14.0.2's optimize_indices cannot merge this layout either", errkind.Unsupported, dir)
		}
		return nil, err
	}
	if check != nil {
		if err := check(IndexFileName, idx.Size()); err != nil {
			return nil, err
		}
		if err := check(AuxiliaryFileName, aux.Size()); err != nil {
			return nil, err
		}
	}
	key := cacheKey(idx, aux, opts)
	if m := cache.get(key); m != nil {
		f.use(m, idx, aux)
		return f, nil
	}
	if f.Index, err = lancefile.Open(ctx, idx, dir+IndexFileName, opts); err != nil {
		return nil, err
	}
	if f.Aux, err = lancefile.Open(ctx, aux, dir+AuxiliaryFileName, opts); err != nil {
		return nil, err
	}
	if err := f.decode(ctx); err != nil {
		return nil, fmt.Errorf("ivf: segment %s: %w", dir, err)
	}
	m := &segMeta{index: f.Index.Reopen(nil, ""), aux: f.Aux.Reopen(nil, ""), typ: f.Type, distance: f.Distance, ivf: f.IVF, indexIVF: f.IndexIVF,
		quant: f.Quant, quantJSON: f.QuantJSON}
	f.use(cache.put(key, m), idx, aux)
	return f, nil
}

// legacySingleFile reports whether obj ends as a Lance 0.x file does: the
// footer's version is 0.1 or 0.2 before the magic. Those index files hold
// the whole index (model, row ids and codes) with no auxiliary file.
func legacySingleFile(ctx context.Context, obj storage.Object) bool {
	if obj.Size() < 8 {
		return false
	}
	tail := make([]byte, 8)
	if err := obj.ReadAt(ctx, tail, obj.Size()-8); err != nil {
		return false
	}
	major, minor := binary.LittleEndian.Uint16(tail[0:]), binary.LittleEndian.Uint16(tail[2:])
	return string(tail[4:]) == "LANC" && major == 0 && minor <= 2
}

func (f *Files) openObject(ctx context.Context, st storage.Store, name string) (storage.Object, error) {
	obj, err := st.Open(ctx, f.Dir+name)
	if err != nil {
		return nil, fmt.Errorf("ivf: segment %s: %w", f.Dir, err)
	}
	f.objs = append(f.objs, obj)
	return obj, nil
}

// use points f at a decoded segment, read through the objects opened.
func (f *Files) use(m *segMeta, idx, aux storage.Object) {
	f.meta = m
	f.Index = m.index.Reopen(idx, f.Dir+IndexFileName)
	f.Aux = m.aux.Reopen(aux, f.Dir+AuxiliaryFileName)
	f.Type, f.Distance, f.IVF, f.IndexIVF, f.Quant, f.QuantJSON = m.typ, m.distance, m.ivf, m.indexIVF, m.quant, m.quantJSON
}

// QuantizerBuffers returns the model tensors the quantizer metadata points
// at in the auxiliary file: the PQ codebook (PQ types; from the global
// buffer codebook_position, or inline in codebook_tensor as Lance before
// 0.28 kept it) and the RQ rotation matrix (RQ with the matrix rotation).
// Both are nil for other types. They are read once per cached segment.
func (f *Files) QuantizerBuffers(ctx context.Context) (codebook, rotation *Tensor, err error) {
	m := f.meta
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loaded {
		return m.codebook, m.rotation, nil
	}
	if m.codebook, m.rotation, err = f.readQuantizerBuffers(ctx); err != nil {
		m.codebook, m.rotation = nil, nil
		return nil, nil, err
	}
	m.loaded = true
	cache.addTensors(m)
	return m.codebook, m.rotation, nil
}

func (f *Files) readQuantizerBuffers(ctx context.Context) (codebook, rotation *Tensor, err error) {
	q := f.Quant
	switch f.Type.Quantizer() {
	case "pq":
		if q.CodebookPosition > 0 {
			if codebook, err = readSharedTensor(ctx, f.Aux, q.CodebookPosition); err != nil {
				return nil, nil, fmt.Errorf("codebook: %w", err)
			}
			return codebook, nil, nil
		}
		// Lance before 0.28 kept the codebook inline, as the bytes of a
		// Tensor message in "codebook_tensor".
		var raw []byte
		if err := json.Unmarshal(q.Raw["codebook_tensor"], &raw); err != nil || len(raw) == 0 {
			return nil, nil, fmt.Errorf("%w: PQ metadata has neither codebook_position nor codebook_tensor", errkind.Corrupt)
		}
		if codebook, err = DecodeTensor(raw); err != nil {
			return nil, nil, fmt.Errorf("inline codebook: %w", err)
		}
		return codebook, nil, nil
	case "rq":
		if q.RotationType == "matrix" {
			if q.RotateMatPosition == nil || *q.RotateMatPosition <= 0 {
				return nil, nil, fmt.Errorf("%w: matrix rotation without rotate_mat_position", errkind.Corrupt)
			}
			if rotation, err = readSharedTensor(ctx, f.Aux, *q.RotateMatPosition); err != nil {
				return nil, nil, fmt.Errorf("rotation: %w", err)
			}
			return nil, rotation, nil
		}
	}
	return nil, nil, nil
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
	if f.IVF, err = readSharedModel(ctx, f.Aux, AuxiliaryFileName); err != nil {
		return err
	}
	if f.IndexIVF, err = readSharedModel(ctx, f.Index, IndexFileName); err != nil {
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
	pos, err := modelBuffer(r, name)
	if err != nil {
		return nil, err
	}
	// Read into fresh memory that the centroids keep (no copy).
	b, err := r.GlobalBuffer(ctx, pos)
	if err != nil {
		return nil, err
	}
	m, err := decodeModelInPlace(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// readSharedModel is ReadModel for a segment being opened: the message is
// read into a pooled buffer, and centroids equal to a tensor the segment
// cache holds (each delta segment stores a copy of its index's model) take
// that tensor instead of memory of their own. Only centroids the cache does
// not hold are copied out: a plan over 40 deltas of 2048 partitions reads
// 40 MiB of equal centroids, which in memory of their own took a third of
// a fresh process's plan.
func readSharedModel(ctx context.Context, r *lancefile.Reader, name string) (*Model, error) {
	pos, err := modelBuffer(r, name)
	if err != nil {
		return nil, err
	}
	var m *Model
	pooled, err := withPooledBuffer(ctx, r, pos, func(b []byte) (err error) {
		if m, err = decodeModelInPlace(b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if m.Centroids != nil {
			m.Centroids = sharedOrOwn(m.Centroids)
		}
		return nil
	})
	if !pooled {
		return ReadModel(ctx, r, name)
	}
	return m, err
}

// readSharedTensor reads the Tensor message in global buffer pos of r as
// readSharedModel reads centroids (a delta's copy of its index's PQ
// codebook or RQ rotation).
func readSharedTensor(ctx context.Context, r *lancefile.Reader, pos int) (*Tensor, error) {
	var t *Tensor
	pooled, err := withPooledBuffer(ctx, r, pos, func(b []byte) error {
		rest, data, ok := splitField(b, tensorDataField)
		if !ok {
			var err error
			t, err = DecodeTensor(b) // the plain path copies, and says what is wrong
			return err
		}
		pt := &pb.Tensor{}
		if err := proto.Unmarshal(rest, pt); err != nil {
			return fmt.Errorf("%w: ivf: decode tensor: %w", errkind.Corrupt, err)
		}
		pt.Data = data
		held, err := tensorFromProto(pt)
		if err != nil {
			return err
		}
		t = sharedOrOwn(held)
		return nil
	})
	if !pooled {
		b, err := r.GlobalBuffer(ctx, pos)
		if err != nil {
			return nil, err
		}
		return DecodeTensor(b)
	}
	return t, err
}

// withPooledBuffer reads global buffer pos of r into a pooled buffer and
// calls use with it; use must keep nothing of it. pooled is false, and
// nothing is read, when the buffer is over sharedReadMax.
func withPooledBuffer(ctx context.Context, r *lancefile.Reader, pos int, use func(b []byte) error) (pooled bool, err error) {
	n, err := r.GlobalBufferSize(pos)
	if err != nil {
		return true, err
	}
	if n > sharedReadMax {
		return false, nil
	}
	buf := bufpool.Default.Get(n) // capacity n or more: b is buf[:n]
	defer bufpool.Default.Put(buf)
	b, err := r.GlobalBufferInto(ctx, pos, buf)
	if err != nil {
		return true, err
	}
	return true, use(b)
}

// sharedOrOwn returns the cached tensor equal to t, or t with its data
// copied out of the caller's buffer.
func sharedOrOwn(t *Tensor) *Tensor {
	if held := cache.find(t); held != nil {
		return held
	}
	return &Tensor{DType: t.DType, Shape: t.Shape, Data: bytes.Clone(t.Data)}
}

// sharedReadMax bounds what is read through a pooled buffer. Above it (a
// model of 16,384 partitions of 1,536 dimensions is 100 MiB) a tensor the
// cache does not hold would be in memory twice, the buffer and its copy;
// it is read into memory of its own instead and interned afterwards.
var sharedReadMax = 32 << 20 // a variable for the tests

// modelBuffer is the global buffer that r's "lance:ivf" metadata names.
func modelBuffer(r *lancefile.Reader, name string) (int, error) {
	s, ok := r.MetadataString(KeyIVF)
	if !ok {
		return 0, fmt.Errorf("%w: %s has no %q metadata", errkind.Corrupt, name, KeyIVF)
	}
	pos, err := strconv.Atoi(s)
	if err != nil || pos <= 0 || pos >= r.NumGlobalBuffers() {
		return 0, fmt.Errorf("%w: %s: %q = %q is not a global buffer of the %d in the file", errkind.Corrupt, name, KeyIVF, s, r.NumGlobalBuffers())
	}
	return pos, nil
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
