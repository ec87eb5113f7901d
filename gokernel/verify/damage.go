package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Damage kinds, for tests and drills: what Damage does to a segment.
const (
	// LayoutAgain applies the segment's code layout once more to every
	// partition (PQ transposed, RQ packed): the chained-merge damage.
	LayoutAgain = "layout_again"
	// FlipBits flips one bit of every byte in a run of the code column's
	// stored bytes (Fraction of them): a damaged page.
	FlipBits = "flip_bits"
	// Truncate cuts the auxiliary file in place (the manifest keeps the
	// recorded size): a bad copy.
	Truncate = "truncate"
	// ForeignRowID gives a few rows the id of a row in a fragment the
	// segment does not cover.
	ForeignRowID = "foreign_row_id"
	// WrongCentroid moves the IVF centroid of one partition far away.
	WrongCentroid = "wrong_centroid"
	// FlipFlag toggles the layout flag (transposed, packed) in the
	// quantizer metadata, leaving the codes as they are.
	FlipFlag = "flip_flag"
	// ClaimFragment adds a fragment to the segment's fragment bitmap
	// (Fragment, default the version's last fragment), its files as they
	// are: a merge that lost a fragment's rows and claimed it all the
	// same. Any index type.
	ClaimFragment = "claim_fragment"
)

// DamageSpec says what Damage does.
type DamageSpec struct {
	Kind string `json:"kind"`
	// Fraction of the code bytes FlipBits damages (default 0.05).
	Fraction float64 `json:"fraction"`
	// Partition WrongCentroid moves (default: the partition with the most
	// rows).
	Partition *int   `json:"partition"`
	Seed      uint64 `json:"seed"`
	// Fragment ClaimFragment claims.
	Fragment *uint32 `json:"fragment"`
}

// Damage damages one segment of an index for a test or a drill, the way
// the real faults do, and returns the damaged segment's entry. Truncate
// cuts the file in place; every other kind writes the damaged files under
// a new uuid and publishes a version whose index lists it in place of the
// original (with the new files' sizes), as the damaged segments a buggy
// writer committed. Never run it on data you care about.
func Damage(ctx context.Context, st storage.Store, snap *table.Snapshot, indexName, segUUID string, spec DamageSpec) (*pb.IndexMetadata, error) {
	im, err := findSegmentOf(snap, indexName, segUUID, spec.Kind != ClaimFragment)
	if err != nil {
		return nil, err
	}
	if im.BaseId != nil {
		return nil, fmt.Errorf("%w: damage: segment %s lives under a base path", errkind.Unsupported, segUUID)
	}
	if spec.Kind == ClaimFragment {
		return claimFragment(ctx, st, snap, im, spec.Fragment)
	}
	dir := table.IndexDir(im)
	f, err := ivf.OpenFiles(ctx, st, dir, lancefile.Options{})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Type.HNSW() {
		return nil, fmt.Errorf("%w: damage: %s segments", errkind.Unsupported, f.Type)
	}
	if spec.Kind == Truncate {
		size := f.Aux.Size()
		obj, err := st.Open(ctx, dir+ivf.AuxiliaryFileName)
		if err != nil {
			return nil, err
		}
		keep := make([]byte, size/2)
		err = obj.ReadAt(ctx, keep, 0)
		obj.Close()
		if err != nil {
			return nil, err
		}
		return im, storage.Put(ctx, st, dir+ivf.AuxiliaryFileName, keep)
	}
	aux, err := loadFile(ctx, f.Aux)
	if err != nil {
		return nil, err
	}
	idx, err := loadFile(ctx, f.Index)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	codeCol := map[string]string{"pq": encode.ColPQ, "rq": encode.ColRQ, "sq": encode.ColSQ, "flat": encode.ColFlat}[f.Type.Quantizer()]
	switch spec.Kind {
	case LayoutAgain:
		q := f.Type.Quantizer()
		if q != "pq" && q != "rq" {
			return nil, fmt.Errorf("%w: damage: %s codes have no layout", errkind.InvalidInput, f.Type)
		}
		a := aux.col(codeCol)
		w := a.Type.ValueBits() / 8
		out := make([]byte, len(a.Values))
		for p, n := range f.IVF.Lengths {
			lo, hi := int(f.IVF.Offsets[p])*w, (int(f.IVF.Offsets[p])+int(n))*w
			if q == "pq" {
				ivf.TransposePQ(out[lo:hi], a.Values[lo:hi], int(n), w)
			} else {
				ivf.PackRQ(out[lo:hi], a.Values[lo:hi], int(n), w)
			}
		}
		a.Values = out
	case FlipBits:
		a := aux.col(codeCol)
		frac := spec.Fraction
		if frac <= 0 || frac > 1 {
			frac = 0.05
		}
		n := max(1, int(frac*float64(len(a.Values))))
		start := rng.IntN(max(1, len(a.Values)-n+1))
		vals := bytes.Clone(a.Values)
		for i := start; i < start+n && i < len(vals); i++ {
			vals[i] ^= 1 << rng.IntN(8)
		}
		a.Values = vals
	case ForeignRowID:
		ids, _, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		if err != nil {
			return nil, err
		}
		maxFrag, _ := snap.MaxFragmentID()
		for _, id := range ids {
			maxFrag = max(maxFrag, id)
		}
		a := aux.col(encode.ColRowID)
		vals := bytes.Clone(a.Values)
		for k := 0; k < min(3, a.Len); k++ {
			i := rng.IntN(a.Len)
			binary.LittleEndian.PutUint64(vals[8*i:], uint64(maxFrag+7)<<32|uint64(k))
		}
		a.Values = vals
	case WrongCentroid:
		p := 0
		if spec.Partition != nil {
			p = *spec.Partition
		} else {
			for i, n := range f.IVF.Lengths {
				if n > f.IVF.Lengths[p] {
					p = i
				}
			}
		}
		if p < 0 || p >= f.NumPartitions() {
			return nil, fmt.Errorf("%w: damage: partition %d of %d", errkind.InvalidInput, p, f.NumPartitions())
		}
		for _, lf := range []*loadedFile{aux, idx} {
			if err := lf.moveCentroid(p); err != nil {
				return nil, err
			}
		}
	case FlipFlag:
		key := map[string]string{"pq": "transposed", "rq": "packed"}[f.Type.Quantizer()]
		if key == "" {
			return nil, fmt.Errorf("%w: damage: %s has no layout flag", errkind.InvalidInput, f.Type)
		}
		if err := aux.flipFlag(key, f.Type); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: damage: unknown kind %q", errkind.InvalidInput, spec.Kind)
	}
	id := uuid.New()
	newDir := table.IndicesDir + id.String() + "/"
	auxSize, err := aux.write(ctx, st, newDir+ivf.AuxiliaryFileName)
	if err != nil {
		return nil, err
	}
	idxSize, err := idx.write(ctx, st, newDir+ivf.IndexFileName)
	if err != nil {
		return nil, err
	}
	out := proto.Clone(im).(*pb.IndexMetadata)
	out.Uuid = &pb.UUID{Uuid: id[:]}
	out.Files = []*pb.IndexFile{{Path: ivf.AuxiliaryFileName, SizeBytes: uint64(auxSize)}, {Path: ivf.IndexFileName, SizeBytes: uint64(idxSize)}}
	if err := publishReplacement(ctx, st, snap, im, out); err != nil {
		return nil, err
	}
	return out, nil
}

// claimFragment publishes a version whose entry of im claims fragment f
// too (nil: the version's last fragment).
func claimFragment(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, f *uint32) (*pb.IndexMetadata, error) {
	ids, _, err := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
	if err != nil {
		return nil, err
	}
	if f == nil {
		frags := snap.FragmentIDs()
		if len(frags) == 0 {
			return nil, fmt.Errorf("%w: damage: the version has no fragment to claim", errkind.InvalidInput)
		}
		last := uint32(frags[len(frags)-1])
		f = &last
	}
	out := proto.Clone(im).(*pb.IndexMetadata)
	if out.FragmentBitmap, err = table.EncodeFragmentBitmap(append(ids, *f)); err != nil {
		return nil, err
	}
	if err := publishReplacement(ctx, st, snap, im, out); err != nil {
		return nil, err
	}
	return out, nil
}

// loadedFile is a whole Lance file in memory (test fixtures are small).
type loadedFile struct {
	version lancefile.Version
	fields  []*lancefile.Field
	cols    []*lancefile.Array
	meta    map[string][]byte
	globals [][]byte
}

func loadFile(ctx context.Context, r *lancefile.Reader) (*loadedFile, error) {
	lf := &loadedFile{version: r.Version(), fields: r.Fields(), meta: map[string][]byte{}}
	for k, v := range r.Metadata() {
		lf.meta[k] = v
	}
	for i := 1; i < r.NumGlobalBuffers(); i++ {
		b, err := r.GlobalBuffer(ctx, i)
		if err != nil {
			return nil, err
		}
		lf.globals = append(lf.globals, b)
	}
	for _, fd := range lf.fields {
		if fd.Type.ValueBits() <= 0 {
			return nil, fmt.Errorf("%w: damage: column %s is not fixed-width", errkind.Unsupported, fd.Name)
		}
		a, err := r.ReadAll(ctx, fd.Name)
		if err != nil {
			return nil, err
		}
		lf.cols = append(lf.cols, a)
	}
	return lf, nil
}

func (lf *loadedFile) col(name string) *lancefile.Array {
	for i, f := range lf.fields {
		if f.Name == name {
			return lf.cols[i]
		}
	}
	return &lancefile.Array{}
}

// moveCentroid moves centroid p of the file's IVF message, if it has
// centroids, to the far side of the origin.
func (lf *loadedFile) moveCentroid(p int) error {
	s, ok := lf.meta[ivf.KeyIVF]
	if !ok {
		return nil
	}
	pos, err := strconv.Atoi(string(s))
	if err != nil || pos < 1 || pos > len(lf.globals) {
		return fmt.Errorf("%w: damage: %s = %q", errkind.Corrupt, ivf.KeyIVF, s)
	}
	m, err := ivf.DecodeModel(lf.globals[pos-1])
	if err != nil {
		return err
	}
	if m.Centroids == nil {
		return nil
	}
	v, ok := m.Centroids.Float32s()
	if !ok {
		return fmt.Errorf("%w: damage: centroids of type %s", errkind.Unsupported, m.Centroids.DType)
	}
	dim := m.Centroids.Cols()
	var norm float64
	for _, x := range v {
		norm = math.Max(norm, math.Abs(float64(x)))
	}
	for j := p * dim; j < (p+1)*dim; j++ {
		v[j] = -v[j] - float32(10*norm+1)
	}
	m.Centroids = ivf.Float32Tensor(m.Centroids.Rows(), dim, v)
	b, err := m.Encode()
	if err != nil {
		return err
	}
	lf.globals[pos-1] = b
	return nil
}

// flipFlag toggles a boolean key of the quantizer metadata, in
// storage_metadata and in the type-specific key.
func (lf *loadedFile) flipFlag(key string, t ivf.IndexType) error {
	flip := func(raw []byte) ([]byte, error) {
		var q map[string]any
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, err
		}
		b, _ := q[key].(bool)
		q[key] = !b
		return json.Marshal(q)
	}
	if s, ok := lf.meta[ivf.KeyStorageMetadata]; ok {
		var list []string
		if err := json.Unmarshal(s, &list); err != nil || len(list) == 0 {
			return fmt.Errorf("%w: damage: storage_metadata %q", errkind.Corrupt, s)
		}
		b, err := flip([]byte(list[0]))
		if err != nil {
			return err
		}
		list[0] = string(b)
		lf.meta[ivf.KeyStorageMetadata], _ = json.Marshal(list)
	}
	k := map[string]string{"pq": ivf.KeyPQ, "rq": ivf.KeyRQ}[t.Quantizer()]
	if s, ok := lf.meta[k]; ok {
		b, err := flip(s)
		if err != nil {
			return err
		}
		lf.meta[k] = b
	}
	return nil
}

func (lf *loadedFile) write(ctx context.Context, st storage.Store, name string) (int64, error) {
	sw, err := st.Create(ctx, name)
	if err != nil {
		return 0, err
	}
	defer sw.Abort()
	var fields []*lancefile.Field
	for _, f := range lf.fields {
		fields = append(fields, lancefile.NewField(f.Name, f.Type, f.Nullable))
	}
	cw := &countWriter{w: sw}
	w, err := lancefile.NewWriter(cw, fields, lancefile.WriterOptions{Version: lf.version})
	if err != nil {
		return 0, err
	}
	for _, g := range lf.globals {
		if _, err := w.AddGlobalBuffer(g); err != nil {
			return 0, err
		}
	}
	for k, v := range lf.meta {
		w.SetMetadata(k, v)
	}
	if len(lf.cols) > 0 && lf.cols[0].Len > 0 {
		if err := w.Write(lf.cols); err != nil {
			return 0, err
		}
	}
	if err := w.Finish(); err != nil {
		return 0, err
	}
	return cw.n, sw.Finish()
}

type countWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// publishReplacement publishes the next version with one index entry
// replaced, without the checks a real commit makes (that is the point: a
// buggy writer committed it).
func publishReplacement(ctx context.Context, st storage.Store, snap *table.Snapshot, old, repl *pb.IndexMetadata) error {
	latest, err := table.Open(ctx, st, 0)
	if err != nil {
		return err
	}
	var indices []*pb.IndexMetadata
	for _, im := range latest.Indices {
		if table.IndexUUID(im) == table.IndexUUID(old) {
			indices = append(indices, repl)
		} else {
			indices = append(indices, im)
		}
	}
	m := proto.Clone(latest.Manifest).(*pb.Manifest)
	m.Version = latest.Ref.Version + 1
	m.VersionAuxData = 0
	m.Timestamp = timestamppb.New(time.Now())
	m.Tag = ""
	m.WriterVersion = &pb.WriterVersion{Library: segment.WriterLibrary, Version: segment.WriterVersion}
	txnID := uuid.NewString()
	m.TransactionFile = fmt.Sprintf("%d-%s.txn", latest.Ref.Version, txnID)
	if latest.Manifest.GetWriterFeatureFlags()&table.FlagDisableTxnFile != 0 {
		m.TransactionFile = ""
	}
	txn := &pb.Transaction{ReadVersion: latest.Ref.Version, Uuid: txnID,
		Operation: &pb.Transaction_CreateIndex_{CreateIndex: &pb.Transaction_CreateIndex{
			NewIndices: []*pb.IndexMetadata{repl}, RemovedIndices: []*pb.IndexMetadata{old}}}}
	return table.Publish(ctx, st, latest.Ref.Scheme, m, indices, txn)
}
