package segment

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/s3test"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

func s3Store(t testing.TB, bucket, endpoint string, attempts int) storage.Store {
	st, err := storage.NewS3("s3://"+bucket+"/ds.lance", storage.S3Config{
		Endpoint: endpoint, AllowHTTP: true, AccessKeyID: "testing", SecretAccessKey: "testing", MaxAttempts: attempts})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Merges and commits through a proxy that fails or delays a fifth of the
// requests succeed after retries; through a dead one they fail, and the
// failed commit changes nothing.
func TestMergeCommitOverFaultyS3(t *testing.T) {
	ctx := context.Background()
	bucket := s3test.NewBucket(t)
	direct := s3Store(t, bucket, s3test.Endpoint(t), 3)
	newFakeDataset(t, direct)

	proxy := s3test.NewFaultProxy(t, s3test.Endpoint(t), 0.2, 0.1)
	flaky := s3Store(t, bucket, proxy.URL, 10)
	for round := 0; round < 3; round++ {
		snap, err := table.Open(ctx, flaky, 0)
		if err != nil {
			t.Fatal(err)
		}
		segs := snap.Indices
		a, b := segs[len(segs)-2], segs[len(segs)-1]
		m, err := Merge(ctx, flaky, snap, []*pb.IndexMetadata{a, b}, MergeOptions{})
		if err != nil {
			t.Fatalf("merge over a flaky store: %v", err)
		}
		v, err := Commit(ctx, flaky, snap, CommitRequest{IndexName: "vec_idx", Column: "vec", Segments: []*pb.IndexMetadata{m},
			Replaces: []string{table.IndexUUID(a), table.IndexUUID(b)}}, nil)
		if err != nil || v != snap.Ref.Version+1 {
			t.Fatalf("commit over a flaky store: %d %v", v, err)
		}
	}
	if proxy.Faults.Load() == 0 {
		t.Fatal("no fault was injected")
	}
	verifyS3(t, direct)

	snap, _ := table.Open(ctx, direct, 0)
	m, err := Merge(ctx, direct, snap, snap.Indices[:2], MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dead := s3test.NewFaultProxy(t, s3test.Endpoint(t), 1.0, 0)
	if _, err := Commit(ctx, s3Store(t, bucket, dead.URL, 2), snap, CommitRequest{IndexName: "vec_idx", Column: "vec",
		Segments: []*pb.IndexMetadata{m}, Replaces: []string{table.IndexUUID(snap.Indices[0]), table.IndexUUID(snap.Indices[1])}}, nil); err == nil {
		t.Fatal("a commit through a dead store succeeded")
	}
	after, err := table.Open(ctx, direct, 0)
	if err != nil || after.Ref.Version != snap.Ref.Version {
		t.Fatalf("a failed commit changed the dataset: version %d -> %d (%v)", snap.Ref.Version, after.Ref.Version, err)
	}
	verifyS3(t, direct)
}

func verifyS3(t *testing.T, st storage.Store) {
	t.Helper()
	ctx := context.Background()
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for _, im := range snap.Indices {
		ids, _, _ := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
		for _, f := range ids {
			if seen[f] {
				t.Fatalf("fragment %d covered twice", f)
			}
			seen[f] = true
		}
		for _, f := range im.GetFiles() {
			if e, err := st.Stat(ctx, table.IndexDir(im)+f.GetPath()); err != nil || uint64(e.Size) != f.GetSizeBytes() {
				t.Fatalf("segment file %s: %v", f.GetPath(), err)
			}
		}
	}
	if len(seen) != killFragments {
		t.Fatalf("%d fragments covered", len(seen))
	}
}

// On an object store the merge reads windows ahead (3 by default); the
// merged rows are exactly those of the same merge on a memory store, with
// windows of one row and of many, through the block cache.
func TestMergeReadAheadOnS3(t *testing.T) {
	ctx := context.Background()
	endpoint := s3test.InProcess(t)
	remote := s3Store(t, s3test.NewBucketAt(t, endpoint), endpoint, 3)
	mem := storage.NewMem("memory://readahead")
	r := rand.New(rand.NewPCG(4, 4))
	var onS3, inMem []*pb.IndexMetadata
	for frag := uint32(0); frag < 5; frag++ {
		lengths := make([]uint32, testParts)
		for p := range lengths {
			lengths[p] = uint32(r.IntN(90))
		}
		onS3 = append(onS3, fakeSegment(t, remote, frag, lengths, frag%2 == 0))
		inMem = append(inMem, fakeSegment(t, mem, frag, lengths, frag%2 == 0))
	}
	if got := storage.Concurrency(remote, defaultParallelism); got <= defaultParallelism {
		t.Fatalf("the S3 store asks for %d requests in flight: the default read-ahead would not apply", got)
	}
	for _, window := range []int{1, 40, 1 << 20} {
		want, err := Merge(ctx, mem, testSnapshot(), inMem, MergeOptions{WindowRows: window})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Merge(ctx, remote, testSnapshot(), onS3, MergeOptions{WindowRows: window})
		if err != nil {
			t.Fatal(err)
		}
		w, g := rowMajor(t, mem, want), rowMajor(t, remote, got)
		if len(w) == 0 || len(g) != len(w) {
			t.Fatalf("window %d: %d rows on S3, %d in memory", window, len(g), len(w))
		}
		for k, v := range w {
			if g[k] != v {
				t.Fatalf("window %d: row %x is %s on S3, %s in memory", window, k, g[k], v)
			}
		}
	}
}
