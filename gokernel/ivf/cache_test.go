package ivf

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// modelFile writes a Lance file whose "lance:ivf" global buffer (1) holds
// m, and global buffer 2 m's centroids as a Tensor message, and opens it.
func modelFile(t *testing.T, st storage.Store, name string, m *Model) *lancefile.Reader {
	t.Helper()
	ctx := context.Background()
	enc, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	sw, err := st.Create(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := lancefile.NewWriter(sw, []*lancefile.Field{lancefile.NewField("x", lancefile.Primitive(lancefile.KindUint64), false)}, lancefile.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.AddGlobalBuffer(enc)
	tb, err := EncodeTensor(m.Centroids)
	if err != nil {
		t.Fatal(err)
	}
	w.AddGlobalBuffer(tb)
	w.SetMetadata(KeyIVF, []byte("1"))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(); err != nil {
		t.Fatal(err)
	}
	obj, err := st.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := lancefile.Open(ctx, obj, name, lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReadSharedModel: a segment's centroids, PQ codebook or RQ rotation
// are read through a pooled buffer; they become the cache's tensor when it
// holds an equal one and get memory of their own otherwise, so that the
// next read into the same buffer (another segment's) leaves them as they
// were read.
func TestReadSharedModel(t *testing.T) {
	ctx := context.Background()
	defer SetCacheLimit(SetCacheLimit(0))
	vals := func(base float32) []float32 {
		v := make([]float32, 64*8)
		for i := range v {
			v[i] = base + float32(i)
		}
		return v
	}
	a := &Model{Lengths: make([]uint32, 64), Centroids: f32Tensor(64, 8, vals(1)...)}
	b := &Model{Lengths: make([]uint32, 64), Centroids: f32Tensor(64, 8, vals(1000)...)}
	reads := map[string]func(r *lancefile.Reader) (*Tensor, error){
		"centroids": func(r *lancefile.Reader) (*Tensor, error) {
			m, err := readSharedModel(ctx, r, "x.idx")
			if err != nil {
				return nil, err
			}
			return m.Centroids, nil
		},
		"tensor": func(r *lancefile.Reader) (*Tensor, error) { return readSharedTensor(ctx, r, 2) },
	}
	defer func(max int) { sharedReadMax = max }(sharedReadMax)
	for what, read := range reads {
		for _, limit := range []int64{0, DefaultCacheBytes} {
			for _, large := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s, cache %d, large %v", what, limit, large), func(t *testing.T) {
					SetCacheLimit(0) // empty
					SetCacheLimit(limit)
					sharedReadMax = 32 << 20
					if large { // read into memory of its own, interned once cached
						sharedReadMax = 16
					}
					st := storage.NewMem("memory://shared-model")
					ra, rb, ra2 := modelFile(t, st, "a.idx", a), modelFile(t, st, "b.idx", b), modelFile(t, st, "a2.idx", a)
					ta, err := read(ra)
					if err != nil {
						t.Fatal(err)
					}
					if limit > 0 {
						// as OpenFiles does once a segment is decoded
						cache.put("a", &segMeta{index: ra, aux: ra, ivf: &Model{Centroids: ta}})
					}
					tb, err := read(rb)
					if err != nil {
						t.Fatal(err)
					}
					ta2, err := read(ra2)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range []struct {
						name      string
						got, want *Tensor
					}{{"a", ta, a.Centroids}, {"b", tb, b.Centroids}, {"a again", ta2, a.Centroids}} {
						if !bytes.Equal(c.got.Data, c.want.Data) || !slices.Equal(c.got.Shape, c.want.Shape) || c.got.DType != c.want.DType {
							t.Errorf("%s: changed after later reads", c.name)
						}
					}
					if shared := ta2 == ta; shared != (limit > 0 && !large) {
						t.Errorf("equal tensors shared: %v, with the cache bounded to %d", shared, limit)
					}
					if tb == ta {
						t.Error("another tensor took the cached one")
					}
					if limit > 0 {
						cache.put("a2", &segMeta{index: ra2, aux: ra2, ivf: &Model{Centroids: ta2}})
						if got := ReadCacheStats(); got.Tensors != 1 || got.Entries != 2 {
							t.Errorf("two segments of one model hold %+v, want one tensor", got)
						}
						SetCacheLimit(0) // evicts all: no index keeps a tensor
						if n := len(cache.byTensor) + len(cache.bySize); n != 0 {
							t.Errorf("an empty cache still indexes %d tensors", n)
						}
					}
				})
			}
		}
	}
}
