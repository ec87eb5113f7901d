package verify

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// compatCopy copies a dataset of testdata/lance-compat (written by an old
// Lance) into a temporary directory and opens it.
func compatCopy(t *testing.T, name string) (storage.Store, string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "lance-compat", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return storage.NewLocal(dst, dst), dst
}

func latest(t *testing.T, st storage.Store) *table.Snapshot {
	t.Helper()
	snap, err := table.Open(context.Background(), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func onlyIndex(t *testing.T, snap *table.Snapshot) (string, string) {
	t.Helper()
	for _, im := range snap.Indices {
		return im.GetName(), table.IndexUUID(im)
	}
	t.Fatal("no index")
	return "", ""
}

func checkNamed(t *testing.T, s *SegmentReport, damage string) {
	t.Helper()
	if s.Verdict != Damaged || !slices.Contains(s.Damage, damage) {
		t.Fatalf("want %s, got %s %v: %s", damage, s.Verdict, s.Damage, describe(s))
	}
}

// TestVerifyOldLanceIndex verifies a real IVF_PQ index written by Lance
// 0.27, damages it the ways Damage knows, and repairs the layout damage.
func TestVerifyOldLanceIndex(t *testing.T) {
	ctx := context.Background()
	st, _ := compatCopy(t, "v0.27.1/pq_in_schema")
	snap := latest(t, st)
	name, seg := onlyIndex(t, snap)
	opts := Options{SampleRows: 256, Queries: 8, NProbes: 4}
	rep, err := Verify(ctx, st, snap, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Segments[0]
	if s.Verdict != Clean || !rep.Clean {
		t.Fatalf("the undamaged index: %s %v: %s", s.Verdict, s.Damage, describe(s))
	}
	if s.Recall < 0 || s.Recall < s.FreshRecall-recallMargin {
		t.Fatalf("recall %v, fresh %v", s.Recall, s.FreshRecall)
	}

	for _, tc := range []struct {
		kind, damage string
		depth        int
	}{
		{LayoutAgain, DamagePQTwice, 2},
		{FlipFlag, DamageFlagLies, 1},
		{FlipBits, DamageCodes, -1},
		{ForeignRowID, DamageForeignRowIDs, -1},
		// One partition: the rows cannot move, their residuals do.
		{WrongCentroid, DamageCodes, -1},
		// Lance 0.27 recorded no file sizes: the footer tells.
		{Truncate, DamageUnreadable, -1},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			st, _ := compatCopy(t, "v0.27.1/pq_in_schema")
			im, err := Damage(ctx, st, latest(t, st), name, seg, DamageSpec{Kind: tc.kind, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			snap := latest(t, st)
			rep, err := Verify(ctx, st, snap, name, opts)
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Segments[0]
			if s.UUID != table.IndexUUID(im) || rep.Clean {
				t.Fatalf("segment %s, clean %v", s.UUID, rep.Clean)
			}
			checkNamed(t, s, tc.damage)
			if (tc.depth >= 0) != s.Rescuable || tc.depth >= 0 && s.LayoutDepth != tc.depth {
				t.Fatalf("rescuable %v at depth %d: %s", s.Rescuable, s.LayoutDepth, describe(s))
			}
			if !s.Rescuable {
				return
			}
			out, srep, err := Repair(ctx, st, snap, im, s.LayoutDepth, RepairOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if srep.Verdict != Clean || table.IndexUUID(out) == s.UUID {
				t.Fatalf("rewrite %s: %s", table.IndexUUID(out), describe(srep))
			}
		})
	}
}
