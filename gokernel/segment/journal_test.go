package segment

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/journal"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

func TestVerifyOutput(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://verify")
	a := fakeSegment(t, st, 0, []uint32{10, 10, 10, 10, 10}, true)
	b := fakeSegment(t, st, 1, []uint32{5, 5, 5, 5, 5}, false)
	out := uuid.NewString()
	m, err := Merge(ctx, st, testSnapshot(), []*pb.IndexMetadata{a, b}, MergeOptions{IndexUUID: out})
	if err != nil {
		t.Fatal(err)
	}
	var files []File
	for _, f := range m.GetFiles() {
		files = append(files, File{Path: f.GetPath(), SizeBytes: f.GetSizeBytes()})
	}
	got, err := VerifyOutput(ctx, st, []*pb.IndexMetadata{a, b}, out, files)
	if err != nil {
		t.Fatal(err)
	}
	gi, _ := Describe(got)
	mi, _ := Describe(m)
	if gi.UUID != mi.UUID || gi.DatasetVersion != mi.DatasetVersion || len(gi.FragmentIDs) != 2 || len(gi.Files) != 2 || gi.Files[0] != mi.Files[0] {
		t.Fatalf("rebuilt %+v, merged %+v", gi, mi)
	}
	// A size that differs from the journal's, a missing file, a file that
	// does not parse: refused.
	wrong := append([]File(nil), files...)
	wrong[0].SizeBytes++
	if _, err := VerifyOutput(ctx, st, []*pb.IndexMetadata{a, b}, out, wrong); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("wrong size: %v", err)
	}
	dir := table.IndicesDir + out + "/"
	obj, _ := st.Open(ctx, dir+ivf.AuxiliaryFileName)
	head := make([]byte, obj.Size()/2)
	_ = obj.ReadAt(ctx, head, 0)
	obj.Close()
	if err := storage.Put(ctx, st, dir+ivf.AuxiliaryFileName, head); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyOutput(ctx, st, []*pb.IndexMetadata{a, b}, out, nil); err == nil {
		t.Fatal("a truncated output verified")
	}
	_ = st.Delete(ctx, dir+ivf.IndexFileName)
	if _, err := VerifyOutput(ctx, st, []*pb.IndexMetadata{a, b}, out, nil); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("missing index.idx: %v", err)
	}
}

// TestCleanupJournals: a live journal keeps its outputs whatever their
// age; a stale one (its plan's sources replaced, or corrupt) is removed
// with its outputs, whatever their age.
func TestCleanupJournals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := storage.NewLocal(dir, dir)
	newFakeDataset(t, st)
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := []string{table.IndexUUID(snap.Indices[0]), table.IndexUUID(snap.Indices[1])}
	out := uuid.NewString()
	if _, err := Merge(ctx, st, snap, snap.Indices[:2], MergeOptions{IndexUUID: out}); err != nil {
		t.Fatal(err)
	}
	j := &journal.Journal{IndexName: "vec_idx", PlanID: "p", ReadVersion: snap.Ref.Version, Sources: src,
		Tasks: []journal.Task{{Level: 1, Inputs: src, Output: out, State: journal.TaskPlanned}}}
	if err := journal.Write(ctx, st, j); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		if err := os.Chtimes(filepath.Join(dir, table.IndicesDir, out, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	orphans, err := Cleanup(ctx, st, time.Hour, false, time.Now())
	if err != nil || len(orphans) != 0 {
		t.Fatalf("live journal: %v %v", orphans, err)
	}
	j.Sources = []string{uuid.NewString()} // a source that is no longer committed
	if err := journal.Write(ctx, st, j); err != nil {
		t.Fatal(err)
	}
	orphans, err = Cleanup(ctx, st, time.Hour, false, time.Now())
	if err != nil || len(orphans) != 2 {
		t.Fatalf("stale journal: %+v %v", orphans, err)
	}
	for _, o := range orphans {
		if !o.Removed || o.Reason == "" {
			t.Fatalf("%+v", o)
		}
	}
	if _, err := journal.Read(ctx, st, "vec_idx"); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("journal left: %v", err)
	}
	if entries, _ := st.List(ctx, table.IndicesDir+out+"/"); len(entries) != 0 {
		t.Fatalf("output left: %v", entries)
	}
	// A corrupt journal is stale too (dry run: reported, kept).
	if err := storage.Put(ctx, st, journal.Path("x"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	orphans, err = Cleanup(ctx, st, time.Hour, true, time.Now())
	if err != nil || len(orphans) != 1 || !orphans[0].Journal || orphans[0].Removed {
		t.Fatalf("corrupt journal: %+v %v", orphans, err)
	}
}
