package fts

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// testVersion is the file version synthetic segments are written in (as
// pylance 14.0.2 writes them).
var testVersion = lancefile.V2_2

const testParams = `{"base_tokenizer":"simple","with_position":true,"stem":true}`

// doc is a synthetic document: its row id and its tokens in order.
type doc struct {
	row  uint64
	toks []string
}

// writeSegment writes a one-partition segment of docs with the Builder
// (the layout pylance reads: python/tests/test_fts.py) and returns its
// index entry.
func writeSegment(t *testing.T, st storage.Store, docs []doc, params string) *pb.IndexMetadata {
	t.Helper()
	id := uuid.New()
	im := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Name: "text_idx"}
	b := NewBuilder(strings.Contains(params, `"with_position":true`))
	for _, dc := range docs {
		for p, tok := range dc.toks {
			if err := b.Token([]byte(tok), uint32(p)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.EndDoc(dc.row); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Write(context.Background(), st, WriteOptions{Dir: table.IndexDir(im), Params: params, Version: testVersion})
	if err != nil {
		t.Fatal(err)
	}
	im.Files = res.Files
	return im
}

func randomDocs(rng *rand.Rand, frag uint64, n int) []doc {
	var out []doc
	for i := 0; i < n; i++ {
		k := 1 + rng.IntN(30)
		toks := make([]string, k)
		for j := range toks {
			toks[j] = fmt.Sprintf("t%d", int(rng.ExpFloat64()*20)) // a few common tokens: long lists
		}
		out = append(out, doc{row: frag<<32 | uint64(i), toks: toks})
	}
	return out
}

// loaded is a partition read whole.
type loaded struct {
	docs   *Docs
	inv    *Invert
	tokens []string
}

func loadPart(ctx context.Context, s *Segment, p uint64) (*loaded, error) {
	pt := &loaded{}
	var err error
	if pt.docs, err = s.ReadDocs(ctx, p); err != nil {
		return nil, err
	}
	if pt.inv, err = s.ReadInvert(ctx, p); err != nil {
		return nil, err
	}
	if pt.tokens, err = s.ReadTokens(ctx, p, pt.inv.Tokens()); err != nil {
		return nil, err
	}
	return pt, nil
}

// index reads a segment back as token -> row -> positions.
func index(t *testing.T, st storage.Store, im *pb.IndexMetadata) map[string]map[uint64][]uint32 {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, st, im)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[uint64][]uint32{}
	for _, part := range s.Meta.Partitions {
		pt, err := loadPart(ctx, s, part)
		if err != nil {
			t.Fatal(err)
		}
		var p Posting
		for id, tok := range pt.tokens {
			if err := DecodePosting(pt.inv.Blocks(id), int(pt.inv.Length[id]), &p); err != nil {
				t.Fatal(err)
			}
			deltas, err := pt.inv.decodePositions(id, p.Freqs, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := map[uint64][]uint32{}
			at := 0
			for i, d := range p.Docs {
				var pos []uint32
				var cur uint32
				for k := 0; k < int(p.Freqs[i]); k++ {
					cur += deltas[at+k]
					pos = append(pos, cur)
				}
				at += int(p.Freqs[i])
				m[pt.docs.RowIDs[d]] = pos
			}
			out[tok] = m
		}
	}
	return out
}

func want(docs ...[]doc) map[string]map[uint64][]uint32 {
	out := map[string]map[uint64][]uint32{}
	for _, ds := range docs {
		for _, d := range ds {
			for p, tok := range d.toks {
				if out[tok] == nil {
					out[tok] = map[uint64][]uint32{}
				}
				out[tok][d.row] = append(out[tok][d.row], uint32(p))
			}
		}
	}
	return out
}

func equalIndex(t *testing.T, got, want map[string]map[uint64][]uint32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tokens, want %d", len(got), len(want))
	}
	for tok, rows := range want {
		if len(got[tok]) != len(rows) {
			t.Fatalf("token %q: %d rows, want %d", tok, len(got[tok]), len(rows))
		}
		for r, pos := range rows {
			if !slices.Equal(got[tok][r], pos) {
				t.Fatalf("token %q row %d: positions %v, want %v", tok, r, got[tok][r], pos)
			}
		}
	}
}

func TestMergeKeepsEveryPostingAndPosition(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("mem://t")
	rng := rand.New(rand.NewPCG(9, 10))
	a, b, c := randomDocs(rng, 0, 3000), randomDocs(rng, 1, 500), randomDocs(rng, 2, 40)
	ims := []*pb.IndexMetadata{writeSegment(t, st, a, testParams), writeSegment(t, st, b, testParams), writeSegment(t, st, c, testParams)}
	for i, im := range ims {
		equalIndex(t, index(t, st, im), want([][]doc{a, b, c}[i]))
		res, err := Check(ctx, st, im, CheckOptions{})
		if err != nil || len(res.Problems) > 0 {
			t.Fatalf("segment %d: %v %v", i, err, res.Problems)
		}
	}
	// Fragment 1 is gone: its documents are dropped.
	drop1 := func(r uint64) bool { return r>>32 != 1 }
	out := uuid.New()
	res, err := Merge(ctx, st, ims, MergeOptions{IndexUUID: out, Keep: []func(uint64) bool{drop1, drop1, drop1}})
	if err != nil {
		t.Fatal(err)
	}
	merged := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: out[:]}, Files: res.Files}
	if res.DocsWritten != 3040 || res.DocsRead != 3540 {
		t.Fatalf("docs %d read, %d written", res.DocsRead, res.DocsWritten)
	}
	equalIndex(t, index(t, st, merged), want(a, c))
	chk, err := Check(ctx, st, merged, CheckOptions{Covered: func(f uint32) bool { return f != 1 }, Sample: 50})
	if err != nil || len(chk.Problems) > 0 || chk.Docs != 3040 || chk.Partitions != 1 {
		t.Fatalf("check: %v %+v", err, chk)
	}
	// the check before a commit decodes a sample of the lists
	cheap, err := Check(ctx, st, merged, CheckOptions{Covered: func(f uint32) bool { return f != 1 }, Tokens: 5})
	if err != nil || len(cheap.Problems) > 0 || cheap.Docs != 3040 || cheap.Tokens != chk.Tokens || cheap.Postings == 0 || cheap.Postings >= chk.Postings {
		t.Fatalf("sampled check: %v %+v (full: %+v)", err, cheap, chk)
	}
	// the sampled documents carry their tokens' frequencies
	byRow := map[uint64][]string{}
	for _, dc := range append(a, c...) {
		byRow[dc.row] = dc.toks
	}
	if len(chk.Sample) != 50 {
		t.Fatalf("%d sampled documents", len(chk.Sample))
	}
	for _, sd := range chk.Sample {
		freqs := map[string]uint32{}
		for _, tok := range byRow[sd.RowID] {
			freqs[tok]++
		}
		if !reflect.DeepEqual(freqs, sd.Freqs) || int(sd.NumTokens) != len(byRow[sd.RowID]) {
			t.Fatalf("row %d: sampled %v (%d tokens), wrote %v", sd.RowID, sd.Freqs, sd.NumTokens, freqs)
		}
	}
	// A merged segment merges again.
	d := randomDocs(rng, 3, 300)
	again := uuid.New()
	res, err = Merge(ctx, st, []*pb.IndexMetadata{merged, writeSegment(t, st, d, testParams)}, MergeOptions{IndexUUID: again})
	if err != nil {
		t.Fatal(err)
	}
	equalIndex(t, index(t, st, &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: again[:]}, Files: res.Files}), want(a, c, d))
}

// TestMergeSpillsBuckets merges with budgets that cut the output tokens
// into many buckets, spilled to a file: the files equal those of a merge
// in one bucket in memory, and no spill file is left behind.
func TestMergeSpillsBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params string
		budget int64
	}{
		{"positions, one token a bucket", testParams, 1},
		{"positions, 4 KiB buckets", testParams, 4 << 10},
		{"no positions, 16 KiB buckets", `{"base_tokenizer":"simple","with_position":false}`, 16 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := storage.NewMem("mem://t")
			rng := rand.New(rand.NewPCG(5, 6))
			var ims []*pb.IndexMetadata
			for f := range 4 {
				ims = append(ims, writeSegment(t, st, randomDocs(rng, uint64(f), 300*(f+1)), tc.params))
			}
			drop := func(r uint64) bool { return r%7 != 3 }
			keep := []func(uint64) bool{drop, nil, drop, nil}
			files := func(opts MergeOptions) map[string][]byte {
				opts.IndexUUID, opts.Keep = uuid.New(), keep
				res, err := Merge(ctx, st, ims, opts)
				if err != nil {
					t.Fatal(err)
				}
				out := map[string][]byte{}
				dir := table.IndexDir(&pb.IndexMetadata{Uuid: &pb.UUID{Uuid: opts.IndexUUID[:]}})
				for _, f := range res.Files {
					b, err := storage.ReadAll(ctx, st, dir+f.GetPath(), 1<<30)
					if err != nil {
						t.Fatal(err)
					}
					out[f.GetPath()] = b
				}
				return out
			}
			tmp := t.TempDir()
			whole := files(MergeOptions{})
			spilled := files(MergeOptions{MemoryBytes: tc.budget, TempDir: tmp})
			if len(whole) != 4 || !reflect.DeepEqual(whole, spilled) {
				t.Fatalf("spilled merge wrote different files (%d and %d files)", len(whole), len(spilled))
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Fatalf("spill files left: %v", left)
			}
		})
	}
}

// TestMergeSpillFailsCleanly: a spill file that cannot be made is an I/O
// error, and the merge writes nothing.
func TestMergeSpillFailsCleanly(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("mem://t")
	rng := rand.New(rand.NewPCG(7, 8))
	ims := []*pb.IndexMetadata{writeSegment(t, st, randomDocs(rng, 0, 200), testParams), writeSegment(t, st, randomDocs(rng, 1, 200), testParams)}
	before, _ := st.List(ctx, "")
	_, err := Merge(ctx, st, ims, MergeOptions{IndexUUID: uuid.New(), MemoryBytes: 1, TempDir: filepath.Join(t.TempDir(), "missing")})
	if !errors.Is(err, errkind.IO) || !strings.Contains(err.Error(), "spill file") {
		t.Fatalf("err = %v", err)
	}
	if after, _ := st.List(ctx, ""); len(after) != len(before) {
		t.Fatalf("a failed merge left %d files", len(after)-len(before))
	}
}

func TestMergeBuckets(t *testing.T) {
	pt := func(invBytes int64, tokens []string, lengths ...uint32) *part {
		return &part{tokens: tokens, lengths: lengths, invBytes: invBytes}
	}
	for _, tc := range []struct {
		name   string
		budget int64
		want   []int
	}{
		{"all in one", 1 << 20, []int{0, 3}},
		{"the heavy token alone", 600, []int{0, 1, 3}},
		{"one token a bucket", 1, []int{0, 1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := []*part{pt(1000, []string{"a", "b"}, 90, 10), pt(100, []string{"c", "a"}, 5, 5)}
			u, err := unionTokens(parts)
			if err != nil {
				t.Fatal(err)
			}
			bounds, bucketOf, _, estimate := u.buckets(parts, tc.budget)
			if !slices.Equal(bounds, tc.want) {
				t.Fatalf("bounds %v, want %v", bounds, tc.want)
			}
			for c := range u.order {
				if w := bucketOf[c]; bounds[w] > c || c >= bounds[w+1] {
					t.Fatalf("token %d in bucket %d of %v", c, w, bounds)
				}
			}
			if estimate < 1100 || estimate > 1100+4*16 {
				t.Fatalf("estimate %d for 1,100 stored bytes", estimate)
			}
		})
	}
}

func TestMergeRefusesMixedAnalyzers(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("mem://t")
	rng := rand.New(rand.NewPCG(1, 1))
	a := writeSegment(t, st, randomDocs(rng, 0, 10), testParams)
	b := writeSegment(t, st, randomDocs(rng, 1, 10), strings.Replace(testParams, `"stem":true`, `"stem":false`, 1))
	before, _ := st.List(ctx, "")
	_, err := Merge(ctx, st, []*pb.IndexMetadata{a, b}, MergeOptions{IndexUUID: uuid.New()})
	if !errors.Is(err, errkind.InvalidInput) || !strings.Contains(err.Error(), "different parameters") {
		t.Fatalf("err = %v", err)
	}
	after, _ := st.List(ctx, "")
	if len(after) != len(before) {
		t.Fatalf("a refused merge wrote %d files", len(after)-len(before))
	}
}

func TestCheckFindsDisagreeingCounts(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("mem://t")
	docs := randomDocs(rand.New(rand.NewPCG(2, 2)), 0, 200)
	im := writeSegment(t, st, docs, testParams)
	// Rewrite the documents file with one document's count off by one.
	dir := table.IndexDir(im)
	s, _ := Open(ctx, st, im)
	d, err := s.ReadDocs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.NumTokens[7]++
	if _, err := writeDocs(ctx, st, dir, testVersion, d.RowIDs, d.NumTokens, d.TotalTokens+1); err != nil {
		t.Fatal(err)
	}
	res, err := Check(ctx, st, im, CheckOptions{Covered: func(f uint32) bool { return f != 0 }})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, p := range res.Problems {
		msgs = append(msgs, p.Check+": "+p.Message)
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "structure: partition 0, document 7") || !strings.Contains(all, "row_ids: ") {
		t.Fatalf("problems:\n%s", all)
	}
}
