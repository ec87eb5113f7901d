package segment

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage/faulty"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// mergeAndCommit merges the last two segments of the latest version and
// commits the result in their place.
func mergeAndCommit(ctx context.Context, st storage.Store) (string, error) {
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		return "", err
	}
	a, b := snap.Indices[len(snap.Indices)-2], snap.Indices[len(snap.Indices)-1]
	m, err := Merge(ctx, st, snap, []*pb.IndexMetadata{a, b}, MergeOptions{})
	if err != nil {
		return "", err
	}
	_, err = Commit(ctx, st, snap, CommitRequest{IndexName: "vec_idx", Column: "vec", Segments: []*pb.IndexMetadata{m},
		Replaces: []string{table.IndexUUID(a), table.IndexUUID(b)}}, nil)
	return table.IndexUUID(m), err
}

// TestFaultDiskFull runs a merge and its commit on a disk that fills up
// after N bytes, for N across everything the pair writes: each run
// succeeds, or fails with a storage error (errkind.IO, ENOSPC) that leaves
// the dataset exactly as it was: the same latest version, every version
// intact, no temporary file, no partial merge output.
func TestFaultDiskFull(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	newKillDataset(t, base)
	// What a merge and commit write in all.
	probe := copyDir(t, base)
	counting := faulty.New(storage.NewLocal(probe, probe), faulty.Options{})
	if _, err := mergeAndCommit(ctx, counting); err != nil {
		t.Fatal(err)
	}
	total := counting.Written()
	budgets := []int64{1, 16, 100, 1000}
	const steps = 40
	for i := int64(1); i < steps; i++ {
		budgets = append(budgets, total*i/steps)
	}
	// Writes vary by a few bytes from run to run (timestamps, uuids): the
	// last budgets leave room.
	budgets = append(budgets, total-1, total+4096, 2*total)
	failed := 0
	for _, budget := range budgets {
		dir := copyDir(t, base)
		st := faulty.New(storage.NewLocal(dir, dir), faulty.Options{WriteBudget: budget})
		out, err := mergeAndCommit(ctx, st)
		latest := verifyDataset(t, dir, int(budget))
		if err == nil {
			if st.Failures.Load() > 0 && latest != 3 {
				t.Fatalf("budget %d: a write failed, yet the commit reported success at version %d", budget, latest)
			}
			continue
		}
		failed++
		if errkind.Tag(err) != "io" || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("budget %d of %d: %v (tag %s), want a storage error with ENOSPC", budget, total, err, errkind.Tag(err))
		}
		if latest != 2 {
			t.Fatalf("budget %d: failed (%v), yet version %d exists", budget, err, latest)
		}
		if out == "" { // the merge failed: its output is gone
			entries, _ := os.ReadDir(filepath.Join(dir, "_indices"))
			if len(entries) != killFragments {
				t.Fatalf("budget %d: %d segment directories after a failed merge, want %d", budget, len(entries), killFragments)
			}
		}
		assertNoTemps(t, dir, budget)
	}
	if failed == 0 || failed == len(budgets) {
		t.Fatalf("%d of %d budgets failed: the sweep does not cross the writes", failed, len(budgets))
	}
	t.Logf("disk-full trials: %d budgets over %d bytes written, %d failed cleanly", len(budgets), total, failed)
}

// TestFaultFailedOperation fails the Nth call of each store operation a
// merge and commit make, with EIO: a storage error, the dataset intact.
func TestFaultFailedOperation(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	newKillDataset(t, base)
	trials := 0
	for _, op := range []string{"create", "write", "finish", "put", "sync"} {
		for n := int64(1); ; n++ {
			dir := copyDir(t, base)
			st := faulty.New(storage.NewLocal(dir, dir), faulty.Options{FailOp: op, FailAt: n})
			_, err := mergeAndCommit(ctx, st)
			latest := verifyDataset(t, dir, trials)
			trials++
			if st.Failures.Load() == 0 {
				if err != nil {
					t.Fatalf("%s #%d: no fault injected, yet %v", op, n, err)
				}
				break // past the last call of op
			}
			if errkind.Tag(err) != "io" || !errors.Is(err, syscall.EIO) {
				t.Fatalf("%s #%d: %v, want a storage error", op, n, err)
			}
			if latest != 2 {
				t.Fatalf("%s #%d: failed, yet version %d exists", op, n, latest)
			}
			assertNoTemps(t, dir, n)
		}
	}
	t.Logf("failed-operation trials: %d", trials)
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ds")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func assertNoTemps(t *testing.T, dir string, trial int64) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), storage.TempPrefix) {
			t.Fatalf("trial %d: temporary file %s left behind", trial, p)
		}
		return nil
	})
}
