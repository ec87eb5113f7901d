package segment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

const killFragments = 16

// newKillDataset writes a dataset of killFragments fragments at version 1
// and commits one segment per fragment as version 2.
func newKillDataset(t *testing.T, dir string) {
	newFakeDataset(t, storage.NewLocal(dir, dir))
}

// newFakeDataset writes a dataset of killFragments fragments at version 1
// into st and commits one segment per fragment as version 2.
func newFakeDataset(t *testing.T, st storage.Store) {
	ctx := context.Background()
	m := &pb.Manifest{
		Version:       1,
		Fields:        []*pb.Field{{Name: "id", Id: 0, ParentId: -1, LogicalType: "int64"}, {Name: "vec", Id: 1, ParentId: -1, LogicalType: "fixed_size_list:float:8"}},
		WriterVersion: &pb.WriterVersion{Library: "lance", Version: "14.0.2"},
		DataFormat:    &pb.DataStorageFormat{FileFormat: "lance", Version: "2.2"},
	}
	for f := uint64(0); f < killFragments; f++ {
		m.Fragments = append(m.Fragments, &pb.DataFragment{Id: f, PhysicalRows: 100})
	}
	txn := &pb.Transaction{Uuid: "00000000-0000-4000-8000-000000000000", Operation: &pb.Transaction_Overwrite_{Overwrite: &pb.Transaction_Overwrite{}}}
	if err := table.Publish(ctx, st, table.SchemeV2, m, nil, txn); err != nil {
		t.Fatal(err)
	}
	var segs []*pb.IndexMetadata
	for f := uint32(0); f < killFragments; f++ {
		segs = append(segs, fakeSegment(t, st, f, []uint32{20, 20, 20, 20, 20}, true))
	}
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Commit(ctx, st, snap, CommitRequest{IndexName: "vec_idx", Column: "vec", Segments: segs}, nil); err != nil {
		t.Fatal(err)
	}
}

// killChild merges the last two segments and commits, until one is left.
func killChild(dir string) error {
	ctx := context.Background()
	st := storage.NewLocal(dir, dir)
	for {
		snap, err := table.Open(ctx, st, 0)
		if err != nil {
			return err
		}
		segs := snap.Indices
		if len(segs) < 2 {
			return nil
		}
		a, b := segs[len(segs)-2], segs[len(segs)-1]
		m, err := Merge(ctx, st, snap, []*pb.IndexMetadata{a, b}, MergeOptions{})
		if err != nil {
			return err
		}
		_, err = Commit(ctx, st, snap, CommitRequest{IndexName: "vec_idx", Column: "vec", Segments: []*pb.IndexMetadata{m},
			Replaces: []string{table.IndexUUID(a), table.IndexUUID(b)}}, nil)
		if err != nil {
			return err
		}
	}
}

// TestKillDuringCommit runs merge+commit loops in a child process and
// kills it with SIGKILL at random moments. Whatever the moment, the dataset
// must open at some version whose index covers every fragment exactly once,
// with every committed segment's files complete, and no half-written
// manifest may exist.
func TestKillDuringCommit(t *testing.T) {
	if dir := os.Getenv("SEGMERGE_KILL_CHILD"); dir != "" {
		if err := killChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	trials := 50
	if s := os.Getenv("SEGMERGE_KILL_TRIALS"); s != "" {
		trials, _ = strconv.Atoi(s)
	} else if testing.Short() {
		trials = 10
	}
	base := t.TempDir()
	newKillDataset(t, base)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	midway := 0 // trials killed after some commits and before the last
	for trial := 0; trial < trials; trial++ {
		dir := filepath.Join(t.TempDir(), "ds")
		if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringCommit$")
		cmd.Env = append(os.Environ(), "SEGMERGE_KILL_CHILD="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(r.IntN(120)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if v := verifyDataset(t, dir, trial); v > 2 && v < 2+killFragments-1 {
			midway++
		}
	}
	if trials >= 10 && midway == 0 {
		t.Fatalf("no trial was killed between commits: the test exercises nothing")
	}
	t.Logf("%d of %d trials killed mid-way", midway, trials)
}

// verifyDataset checks every version and returns the latest.
func verifyDataset(t *testing.T, dir string, trial int) uint64 {
	t.Helper()
	ctx := context.Background()
	st := storage.NewLocal(dir, dir)
	refs, err := table.ListVersions(ctx, st)
	if err != nil {
		t.Fatalf("trial %d: %v", trial, err)
	}
	for i, ref := range refs {
		if ref.Version != uint64(i+1) {
			t.Fatalf("trial %d: versions %v are not contiguous", trial, refs)
		}
		snap, err := table.Open(ctx, st, ref.Version)
		if err != nil {
			t.Fatalf("trial %d: version %d: %v", trial, ref.Version, err)
		}
		if ref.Version < 2 {
			continue
		}
		var frags []int
		for _, im := range snap.Indices {
			ids, _, _ := table.DecodeFragmentBitmap(im.GetFragmentBitmap())
			for _, f := range ids {
				frags = append(frags, int(f))
			}
			for _, f := range im.GetFiles() {
				e, err := st.Stat(ctx, table.IndexDir(im)+f.GetPath())
				if err != nil || uint64(e.Size) != f.GetSizeBytes() {
					t.Fatalf("trial %d: version %d: segment %s file %s: %v", trial, ref.Version, table.IndexUUID(im), f.GetPath(), err)
				}
			}
			if _, err := snap.Transaction(ctx, st); err != nil {
				t.Fatalf("trial %d: version %d transaction: %v", trial, ref.Version, err)
			}
		}
		sort.Ints(frags)
		if len(frags) != killFragments || frags[0] != 0 || frags[killFragments-1] != killFragments-1 {
			t.Fatalf("trial %d: version %d covers %v", trial, ref.Version, frags)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "_versions"))
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "d") {
			t.Fatalf("trial %d: stray file %s would read as a detached manifest", trial, n)
		}
	}
	return refs[len(refs)-1].Version
}
