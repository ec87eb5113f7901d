package journal

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func TestJournalValidate(t *testing.T) {
	out := uuid.NewString()
	good := func() *Journal {
		return &Journal{Format: Format, FormatVersion: FormatVersion, IndexName: "vec_idx", PlanID: "p", ReadVersion: 3,
			Tasks: []Task{{Level: 1, Inputs: []string{"a", "b"}, Output: out, State: TaskPlanned}}}
	}
	for _, tc := range []struct {
		name string
		edit func(j *Journal)
		want string
	}{
		{"good", func(j *Journal) {}, ""},
		{"other format", func(j *Journal) { j.Format = "x" }, "format"},
		{"future version", func(j *Journal) { j.FormatVersion = 2 }, "format_version"},
		{"no plan", func(j *Journal) { j.PlanID = "" }, "required"},
		{"bad output", func(j *Journal) { j.Tasks[0].Output = "../../x" }, "not a uuid"},
		{"bad state", func(j *Journal) { j.Tasks[0].State = "maybe" }, "state"},
		{"done without files", func(j *Journal) { j.Tasks[0].State = TaskDone }, "no files"},
		{"duplicate output", func(j *Journal) { j.Tasks = append(j.Tasks, j.Tasks[0]) }, "twice"},
		{"no inputs", func(j *Journal) { j.Tasks[0].Inputs = nil }, "inputs"},
		{"a build task", func(j *Journal) { j.Tasks[0].Level, j.Tasks[0].Inputs, j.Tasks[0].Fragments = 0, nil, []uint32{3, 4} }, ""},
		{"a build task without fragments", func(j *Journal) { j.Tasks[0].Level = 0 }, "fragments"},
		{"a merge task with fragments", func(j *Journal) { j.Tasks[0].Fragments = []uint32{1} }, "fragments"},
		{"negative level", func(j *Journal) { j.Tasks[0].Level = -1 }, "level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := good()
			tc.edit(j)
			err := j.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errkind.Corrupt)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestJournalReadWrite(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://journal")
	if _, err := Read(ctx, st, "vec_idx"); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("no journal: %v", err)
	}
	j := &Journal{IndexName: "vec_idx", PlanID: "p", ReadVersion: 3, Tasks: []Task{}}
	if err := Write(ctx, st, j); err != nil {
		t.Fatal(err)
	}
	got, err := Read(ctx, st, "vec_idx")
	if err != nil || got.PlanID != "p" || got.Format != Format {
		t.Fatalf("%v %v", got, err)
	}
	if !strings.HasPrefix(Path("vec_idx"), "_indices/_segmerge/") || Path("a") == Path("b") {
		t.Fatal(Path("vec_idx"))
	}
	for _, body := range []string{"{", `{"format":"other"}`, strings.Repeat(" ", Limit+1)} {
		if err := storage.Put(ctx, st, Path("vec_idx"), []byte(body)); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(ctx, st, "vec_idx"); !errors.Is(err, errkind.Corrupt) {
			t.Fatalf("%.20q: %v", body, err)
		}
	}
	if err := Write(ctx, st, &Journal{IndexName: "vec_idx"}); !errors.Is(err, errkind.InvalidInput) {
		t.Fatalf("invalid journal written: %v", err)
	}
	if err := Delete(ctx, st, "vec_idx"); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadJournal: whatever bytes sit where a journal should be, reading
// it gives a journal that validates or a typed error, never a panic.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"format":"lance-segmerge-journal","format_version":1,"index_name":"i","plan_id":"p","read_version":3,"tasks":[{"level":1,"inputs":["a"],"output":"00000000-0000-4000-8000-000000000000","state":"done","files":[{"path":"auxiliary.idx","size_bytes":5}]}]}`))
	f.Add([]byte(`{"format":"lance-segmerge-journal","format_version":1,"index_name":"i","plan_id":"p","read_version":3,"tasks":[{"level":0}]}`))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		st := storage.NewMem("memory://fuzz-journal")
		if err := storage.Put(ctx, st, Path("i"), b); err != nil {
			t.Fatal(err)
		}
		j, err := Read(ctx, st, "i")
		if err != nil {
			if !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := j.Validate(); err != nil {
			t.Fatalf("read a journal that does not validate: %v", err)
		}
	})
}
