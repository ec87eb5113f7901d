package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/hnsw"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// hnswSeg describes a fake IVF_HNSW_FLAT segment: its rows of each
// partition, spread round-robin over its fragments, with vectors near the
// partition's centroid.
type hnswSeg struct {
	frags   []uint32
	lengths []uint32
	params  hnsw.Params
	seed    uint64
	// damage, when set, edits a partition's encoded graph before it is
	// written (ids, neighbours, distances; metadata).
	damage func(p int, cols []*lancefile.Array, meta *hnsw.Metadata)
}

func hnswVector(seed uint64, p, i int) []float32 {
	r := rand.New(rand.NewPCG(seed, uint64(p*100000+i)))
	v := make([]float32, testDim)
	for j := range v {
		v[j] = float32(p*testDim+j) + float32(r.NormFloat64())*3
	}
	return v
}

// writeHNSW writes the segment's two files (graphs built with the hnsw
// package, as pylance lays them out) and returns its manifest entry.
func writeHNSW(t *testing.T, st storage.Store, sg hnswSeg) *pb.IndexMetadata {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	dir := table.IndicesDir + id.String() + "/"
	f32 := lancefile.FixedSizeList(lancefile.KindFloat32, testDim)
	var rowids, vecs []byte
	var graphCols [3][]*lancefile.Array
	metas := make([]*hnsw.Metadata, testParts)
	graphRows := make([]uint32, testParts)
	next := map[uint32]uint64{}
	for p, n := range sg.lengths {
		var part []float32
		for i := 0; i < int(n); i++ {
			frag := sg.frags[i%len(sg.frags)]
			rowids = binary.LittleEndian.AppendUint64(rowids, uint64(frag)<<32|next[frag])
			next[frag]++
			v := hnswVector(sg.seed, p, i)
			part = append(part, v...)
			for _, x := range v {
				vecs = binary.LittleEndian.AppendUint32(vecs, math.Float32bits(x))
			}
		}
		if n == 0 {
			continue
		}
		space, err := hnsw.NewFlat(part, testDim, "l2")
		if err != nil {
			t.Fatal(err)
		}
		g, _, err := hnsw.Build(ctx, space, sg.params, hnsw.Options{Seed: sg.seed + uint64(p)})
		if err != nil {
			t.Fatal(err)
		}
		cols, meta := g.Encode()
		if sg.damage != nil {
			sg.damage(p, cols, meta)
		}
		for c := range cols {
			graphCols[c] = append(graphCols[c], cols[c])
		}
		metas[p], graphRows[p] = meta, uint32(meta.Rows())
	}
	nrows := len(rowids) / 8
	sw, _ := st.Create(ctx, dir+ivf.AuxiliaryFileName)
	w, err := lancefile.NewWriter(sw, []*lancefile.Field{
		lancefile.NewField("_rowid", lancefile.Primitive(lancefile.KindUint64), true),
		lancefile.NewField("flat", f32, true),
	}, lancefile.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ivfBytes, _ := (&ivf.Model{Lengths: sg.lengths}).Encode()
	w.AddGlobalBuffer(ivfBytes)
	if err := w.Write([]*lancefile.Array{
		{Type: lancefile.Primitive(lancefile.KindUint64), Len: nrows, Values: rowids},
		{Type: f32, Len: nrows, Values: vecs},
	}); err != nil {
		t.Fatal(err)
	}
	w.SetMetadata(ivf.KeyDistanceType, []byte("l2"))
	w.SetMetadata(ivf.KeyIVF, []byte("1"))
	w.SetMetadata(ivf.KeyStorageMetadata, []byte(`["{\"dim\":8}"]`))
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	sw.Finish()

	sw, _ = st.Create(ctx, dir+ivf.IndexFileName)
	w, _ = lancefile.NewWriter(sw, hnsw.Fields(), lancefile.WriterOptions{})
	if len(graphCols[0]) > 0 {
		if err := w.WriteChunked(graphCols[:]); err != nil {
			t.Fatal(err)
		}
	}
	ivfBytes, _ = (&ivf.Model{Lengths: graphRows, Centroids: centroids()}).Encode()
	w.AddGlobalBuffer(ivfBytes)
	list, _ := hnsw.MarshalList(metas)
	w.SetMetadata(ivf.KeyIndex, []byte(`{"type":"IVF_HNSW_FLAT","distance_type":"l2"}`))
	w.SetMetadata(ivf.KeyIVF, []byte("1"))
	w.SetMetadata(ivf.KeyHNSW, list)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	sw.Finish()
	bm, _ := table.EncodeFragmentBitmap(sg.frags)
	iv := int32(1)
	return &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Fields: []int32{1}, Name: "vec_idx", DatasetVersion: 1,
		FragmentBitmap: bm, IndexVersion: &iv, IndexDetails: &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails"}}
}

func smallParams() hnsw.Params {
	p := hnsw.DefaultParams()
	p.M, p.EfConstruction, p.Raw = 8, 40, nil
	raw, _ := json.Marshal(p)
	p.Raw = raw
	return p
}

// checkMergedGraphs asserts that every partition of a merged segment has a
// graph over all its rows that Lance's readers accept, with the distances
// of its storage, every node reachable, and recall@5 of at least 0.9.
func checkMergedGraphs(t *testing.T, st storage.Store, im *pb.IndexMetadata) {
	t.Helper()
	ctx := context.Background()
	infos, err := InspectHNSW(ctx, st, table.IndexDir(im))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ivf.OpenFiles(ctx, st, table.IndexDir(im), lancefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byPart := map[int]GraphInfo{}
	for _, gi := range infos {
		byPart[gi.Partition] = gi
		if gi.Unreachable != 0 || gi.MaxDistanceError != 0 || gi.Rows != int(f.IndexIVF.Lengths[gi.Partition]) {
			t.Fatalf("partition %d: %+v (graph rows %d)", gi.Partition, gi, f.IndexIVF.Lengths[gi.Partition])
		}
	}
	for p, n := range f.IVF.Lengths {
		if gi := byPart[p]; gi.Nodes != int(n) {
			t.Fatalf("partition %d: %d rows, a graph of %d nodes", p, n, gi.Nodes)
		}
	}
}

func TestHNSWMerge(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://hnsw")
	p := smallParams()
	base := writeHNSW(t, st, hnswSeg{frags: []uint32{0, 1, 2}, lengths: []uint32{300, 0, 250, 40, 1}, params: p, seed: 1})
	d1 := writeHNSW(t, st, hnswSeg{frags: []uint32{3}, lengths: []uint32{60, 5, 0, 70, 0}, params: p, seed: 2})
	d2 := writeHNSW(t, st, hnswSeg{frags: []uint32{4}, lengths: []uint32{50, 0, 30, 90, 2}, params: p, seed: 3})
	for _, mode := range []string{HNSWReuse, HNSWRebuild} {
		for _, window := range []int{1, 1 << 20} {
			prog := &Progress{}
			out, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{base, d1, d2},
				MergeOptions{HNSWGraph: mode, WindowRows: window, Parallelism: 3, Progress: prog})
			if err != nil {
				t.Fatalf("%s window %d: %v", mode, window, err)
			}
			checkMergedGraphs(t, st, out)
			snap := prog.Snapshot()
			inserted, reused := snap.GraphRowsInserted, snap.GraphRowsReused
			switch {
			case mode == HNSWRebuild && (inserted != 898 || reused != 0),
				// Reused: the largest input of each partition (300, 5, 250, 90, 2 rows).
				mode == HNSWReuse && (reused != 647 || inserted != 898-647 || snap.GraphDistances == 0):
				t.Fatalf("%s: progress %s", mode, snap)
			}
			if snap.Stage != "done" {
				t.Fatalf("stage %q", snap.Stage)
			}
			stats, err := ReadStats(ctx, st, out)
			if err != nil || stats.HNSWM != 8 || stats.HNSWEfConstruction != 40 || stats.HNSWMaxLevel != 7 || stats.HNSWLevels < 2 {
				t.Fatalf("stats %+v %v", stats, err)
			}
			// Merged again (a chain), with a segment that is not merged yet.
			d3 := writeHNSW(t, st, hnswSeg{frags: []uint32{5}, lengths: []uint32{20, 20, 20, 20, 20}, params: p, seed: 4})
			again, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{d3, out}, MergeOptions{HNSWGraph: mode})
			if err != nil {
				t.Fatal(err)
			}
			checkMergedGraphs(t, st, again)
		}
	}
}

// TestHNSWMergeDroppedRows reuses a graph some of whose rows are gone (their
// fragment is no longer covered): the nodes are removed, lists repaired.
func TestHNSWMergeDroppedRows(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://hnsw-drop")
	p := smallParams()
	base := writeHNSW(t, st, hnswSeg{frags: []uint32{0, 1, 2}, lengths: []uint32{300, 200, 100, 60, 30}, params: p, seed: 5})
	base.FragmentBitmap, _ = table.EncodeFragmentBitmap([]uint32{0, 2}) // fragment 1 was compacted away
	d1 := writeHNSW(t, st, hnswSeg{frags: []uint32{3}, lengths: []uint32{30, 30, 30, 30, 30}, params: p, seed: 6})
	prog := &Progress{}
	out, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{d1, base}, MergeOptions{Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	checkMergedGraphs(t, st, out)
	// The base keeps 200, 133, 67, 40 and 20 rows of its partitions; the
	// last partition reuses the delta's graph (30 rows).
	if s := prog.Snapshot(); s.GraphRowsReused != 470 || s.GraphRowsInserted != 140 || s.RowsWritten != 610 {
		t.Fatalf("progress %s", s)
	}
}

func leftovers(t *testing.T, st storage.Store, before int) {
	t.Helper()
	es, err := st.List(context.Background(), table.IndicesDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != before {
		t.Fatalf("%d files under _indices/, %d before the merge", len(es), before)
	}
}

// Inputs built with other HNSW parameters (pylance before 0.31 builds its
// optimize deltas with m=20 whatever the base has) merge: the output takes
// the parameters of the input with the most rows and never reuses a graph
// built with others.
func TestHNSWMergeMixedParameters(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://hnsw-mixed")
	p := smallParams()
	other := p
	other.M, other.Raw = 12, nil
	small := []uint32{40, 20, 0, 30, 10}
	large := []uint32{120, 60, 30, 90, 30}
	tests := []struct {
		name      string
		smallP    hnsw.Params
		largeP    hnsw.Params
		wantM     int
		maxReused int64
	}{
		{"the larger input's m=12 wins", p, other, 12, 330},
		{"the larger input's m=8 wins", other, p, 8, 330},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := writeHNSW(t, st, hnswSeg{frags: []uint32{0}, lengths: small, params: tc.smallP, seed: 21})
			b := writeHNSW(t, st, hnswSeg{frags: []uint32{1}, lengths: large, params: tc.largeP, seed: 22})
			for _, mode := range []string{HNSWReuse, HNSWRebuild} {
				prog := &Progress{}
				out, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{a, b}, MergeOptions{HNSWGraph: mode, Progress: prog})
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				checkMergedGraphs(t, st, out)
				stats, err := ReadStats(ctx, st, out)
				if err != nil || stats.HNSWM != tc.wantM {
					t.Fatalf("%s: m=%d, want %d (%v)", mode, stats.HNSWM, tc.wantM, err)
				}
				snap := prog.Snapshot()
				if snap.GraphRowsReused > tc.maxReused || snap.GraphRowsInserted+snap.GraphRowsReused != 430 {
					t.Fatalf("%s: progress %s", mode, snap)
				}
			}
		})
	}
}

func TestHNSWMergeRefusals(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://hnsw-bad")
	p := smallParams()
	lengths := []uint32{80, 40, 0, 60, 20}
	good := writeHNSW(t, st, hnswSeg{frags: []uint32{0}, lengths: lengths, params: p, seed: 7})
	pqSeg := fakeSegment(t, st, 2, lengths, true)
	outOfRange := writeHNSW(t, st, hnswSeg{frags: []uint32{3}, lengths: lengths, params: p, seed: 9,
		damage: func(part int, cols []*lancefile.Array, _ *hnsw.Metadata) {
			if part == 3 {
				binary.LittleEndian.PutUint32(cols[1].Items.Values[4*5:], 5000) // a neighbour id out of range
			}
		}})
	badLevels := writeHNSW(t, st, hnswSeg{frags: []uint32{4}, lengths: lengths, params: p, seed: 10,
		damage: func(part int, cols []*lancefile.Array, meta *hnsw.Metadata) {
			if part == 1 {
				meta.LevelOffsets[len(meta.LevelOffsets)-1]++ // the level counts disagree with the rows
			}
		}})
	truncated := writeHNSW(t, st, hnswSeg{frags: []uint32{5}, lengths: lengths, params: p, seed: 11})
	cut(t, st, table.IndexDir(truncated)+ivf.IndexFileName, 200)

	tests := []struct {
		name string
		segs []*pb.IndexMetadata
		kind error
		want []string
	}{
		{"HNSW with IVF_PQ", []*pb.IndexMetadata{good, pqSeg}, errkind.InvalidInput, []string{"index type", "IVF_PQ"}},
		{"neighbour out of range", []*pb.IndexMetadata{outOfRange, good}, errkind.Corrupt, []string{"neighbour 5000", table.IndexUUID(outOfRange)}},
		{"level count disagrees", []*pb.IndexMetadata{good, badLevels}, errkind.Corrupt, []string{"level", table.IndexUUID(badLevels)}},
		{"truncated graph file", []*pb.IndexMetadata{good, truncated}, errkind.Corrupt, []string{table.IndexUUID(truncated)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{HNSWReuse, HNSWRebuild} {
				es, _ := st.List(ctx, table.IndicesDir)
				_, err := Merge(ctx, st, testSnapshot(), tc.segs, MergeOptions{HNSWGraph: mode, WindowRows: 50})
				if tc.name == "neighbour out of range" && mode == HNSWRebuild {
					// A rebuild never reads the graphs' rows.
					if err != nil {
						t.Fatalf("rebuild: %v", err)
					}
					continue
				}
				if !errors.Is(err, tc.kind) {
					t.Fatalf("%s: err = %v, want %v", mode, err, tc.kind)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("%s: %q does not mention %q", mode, err, w)
					}
				}
				leftovers(t, st, len(es)) // nothing half-written is left
			}
		})
	}
	if _, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{good, outOfRange}, MergeOptions{HNSWGraph: "sometimes"}); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("bad mode: %v", err)
	}
}

// cut truncates an object of a memory store by n bytes.
func cut(t *testing.T, st storage.Store, name string, n int) {
	t.Helper()
	ctx := context.Background()
	obj, err := st.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, obj.Size())
	if err := obj.ReadAt(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	obj.Close()
	if err := st.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	w, _ := st.Create(ctx, name)
	w.Write(slices.Concat(b[:100], b[100+n:]))
	w.Finish()
}

func TestHNSWMergeCancel(t *testing.T) {
	st := storage.NewMem("memory://hnsw-cancel")
	p := smallParams()
	a := writeHNSW(t, st, hnswSeg{frags: []uint32{0}, lengths: []uint32{2000, 2000, 2000, 2000, 2000}, params: p, seed: 12})
	b := writeHNSW(t, st, hnswSeg{frags: []uint32{1}, lengths: []uint32{2000, 2000, 2000, 2000, 2000}, params: p, seed: 13})
	es, _ := st.List(context.Background(), table.IndicesDir)
	ctx, cancel := context.WithCancel(context.Background())
	prog := &Progress{}
	done := make(chan error, 1)
	go func() {
		_, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{a, b}, MergeOptions{HNSWGraph: HNSWRebuild, Progress: prog, Parallelism: 2})
		done <- err
	}()
	for prog.GraphRowsInserted.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if prog.Stage() != "build_graph" {
		t.Fatalf("stage %q", prog.Stage())
	}
	leftovers(t, st, len(es))
}
