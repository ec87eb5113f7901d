package segment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// A run journal lets an interrupted optimize or maintain run resume: it
// records the run's plan and, for every merge task, its inputs and the
// output it was assigned, and (once finished) the output's verified file
// sizes. It lives at JournalDir/<hash of the index name>.json.
//
// pylance never reads it. Its cleanup_old_versions treats any unreferenced
// file under _indices/ like an unreferenced segment file: it removes the
// journal, as it removes the run's outputs, once it is older than its
// unverified threshold (7 days) or with delete_unverified. Both are garbage
// by then, and a journal without its outputs only makes a resumed run redo
// the work.
const (
	// JournalDir holds run journals. Not a uuid, so no segment directory.
	JournalDir = table.IndicesDir + "_segmerge/"
	// JournalFormat and JournalFormatVersion identify the file's content.
	JournalFormat        = "lance-segmerge-journal"
	JournalFormatVersion = 1
	// journalLimit bounds what a journal read allocates: a task entry is a
	// few hundred bytes, so 16 MiB is tens of thousands of tasks.
	journalLimit = 16 << 20
)

// Task states in a journal.
const (
	TaskPlanned = "planned" // assigned an output, maybe running
	TaskDone    = "done"    // the output was written and verified
)

// Journal is a run journal. The JSON names are the Python side's.
type Journal struct {
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	DatasetURI    string `json:"dataset_uri"`
	IndexName     string `json:"index_name"`
	// PlanID and ReadVersion name the plan the run executes; Params are
	// the run's parameters (fan-in, target, options) as the driver sees
	// them. A run resumes a journal only when all three match.
	PlanID      string          `json:"plan_id"`
	ReadVersion uint64          `json:"read_version"`
	Params      json.RawMessage `json:"params"`
	// Sources are the committed segments the run replaces.
	Sources   []string       `json:"sources"`
	Tasks     []JournalTask  `json:"tasks"`
	UpdatedMs int64          `json:"updated_ms"`
	Extra     map[string]any `json:"extra,omitempty"`
}

// JournalTask is one merge task of a run.
type JournalTask struct {
	Level  int      `json:"level"`
	Inputs []string `json:"inputs"` // input segment uuids, in merge order
	Output string   `json:"output"` // the output segment's uuid
	State  string   `json:"state"`
	// Files are the output's files with their sizes, once done.
	Files []File `json:"files,omitempty"`
	Rows  uint64 `json:"rows,omitempty"`
}

// JournalPath is where the journal of an index lives.
func JournalPath(indexName string) string {
	h := sha256.Sum256([]byte(indexName))
	return JournalDir + hex.EncodeToString(h[:8]) + ".json"
}

// Validate checks a journal's shape (not whether its outputs still
// verify: see VerifyOutput).
func (j *Journal) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: run journal: "+format, append([]any{errkind.Corrupt}, args...)...)
	}
	switch {
	case j.Format != JournalFormat:
		return bad("format is %q, not %q", j.Format, JournalFormat)
	case j.FormatVersion != JournalFormatVersion:
		return bad("format_version %d is not %d", j.FormatVersion, JournalFormatVersion)
	case j.IndexName == "" || j.PlanID == "" || j.ReadVersion == 0:
		return bad("index_name, plan_id and read_version are required")
	}
	outputs := map[string]bool{}
	for i, t := range j.Tasks {
		if t.Level < 1 || len(t.Inputs) == 0 {
			return bad("task %d has level %d and %d inputs", i, t.Level, len(t.Inputs))
		}
		if _, err := uuid.Parse(t.Output); err != nil {
			return bad("task %d: output %q is not a uuid", i, t.Output)
		}
		if outputs[t.Output] {
			return bad("output %s appears twice", t.Output)
		}
		outputs[t.Output] = true
		switch t.State {
		case TaskPlanned:
		case TaskDone:
			if len(t.Files) == 0 {
				return bad("task %d is done but lists no files", i)
			}
		default:
			return bad("task %d has state %q", i, t.State)
		}
	}
	return nil
}

// ReadJournal reads and validates the journal of an index:
// errkind.NotFound when there is none, errkind.Corrupt when it does not
// parse or validate.
func ReadJournal(ctx context.Context, st storage.Store, indexName string) (*Journal, error) {
	b, err := storage.ReadAll(ctx, st, JournalPath(indexName), journalLimit)
	if err != nil {
		return nil, err
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: run journal %s: %w", errkind.Corrupt, JournalPath(indexName), err)
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	if j.IndexName != indexName {
		return nil, fmt.Errorf("%w: run journal %s is for index %q", errkind.Corrupt, JournalPath(indexName), j.IndexName)
	}
	return &j, nil
}

// WriteJournal validates and writes (replaces) a journal.
func WriteJournal(ctx context.Context, st storage.Store, j *Journal) error {
	j.Format, j.FormatVersion = JournalFormat, JournalFormatVersion
	if j.UpdatedMs == 0 {
		j.UpdatedMs = time.Now().UnixMilli()
	}
	if err := j.Validate(); err != nil {
		return fmt.Errorf("%w: %w", errkind.InvalidInput, err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if len(b) > journalLimit {
		return fmt.Errorf("%w: run journal of %d bytes is above the %d-byte limit", errkind.InvalidInput, len(b), journalLimit)
	}
	return storage.Put(ctx, st, JournalPath(j.IndexName), b)
}

// DeleteJournal removes the journal of an index (missing is fine).
func DeleteJournal(ctx context.Context, st storage.Store, indexName string) error {
	return st.Delete(ctx, JournalPath(indexName))
}

// VerifyOutput checks that the merge of inputs (committed at snap, or
// earlier outputs of the same run: pass their metadata) into the segment
// output finished and is intact, and returns its metadata, rebuilt as
// Merge builds it. Finished means both files exist under their final names
// (a store publishes a name only when its write finished; index.idx is
// written last) and parse as the segment files of this index type; intact
// means their sizes equal want's, when want lists files. A failed check is
// errkind.Corrupt or errkind.NotFound, with the reason.
func VerifyOutput(ctx context.Context, st storage.Store, inputs []*pb.IndexMetadata, output string, want []File) (*pb.IndexMetadata, error) {
	id, err := uuid.Parse(output)
	if err != nil {
		return nil, fmt.Errorf("%w: output %q is not a uuid", errkind.InvalidInput, output)
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", errkind.InvalidInput)
	}
	dir := table.IndicesDir + id.String() + "/"
	entries, err := st.List(ctx, dir)
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, e := range entries {
		sizes[strings.TrimPrefix(e.Name, dir)] = e.Size
	}
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		if _, ok := sizes[name]; !ok {
			return nil, fmt.Errorf("%w: output %s has no %s (the merge did not finish)", errkind.NotFound, output, name)
		}
	}
	for _, f := range want {
		if got, ok := sizes[f.Path]; !ok || uint64(got) != f.SizeBytes {
			return nil, fmt.Errorf("%w: output %s: %s is %d bytes, the journal recorded %d", errkind.Corrupt, output, f.Path, got, f.SizeBytes)
		}
	}
	files, err := ivf.OpenFiles(ctx, st, dir, lancefile.Options{})
	if err != nil {
		return nil, fmt.Errorf("output %s does not parse: %w", output, err)
	}
	defer files.Close()
	var total uint64
	for _, n := range files.IVF.Lengths {
		total += uint64(n)
	}
	if total != files.Aux.NumRows() {
		return nil, fmt.Errorf("%w: output %s: partitions hold %d rows, the file %d", errkind.Corrupt, output, total, files.Aux.NumRows())
	}
	im, err := buildMetadata(id, inputs, mergeOutput{auxBytes: sizes[ivf.AuxiliaryFileName], indexBytes: sizes[ivf.IndexFileName]})
	if err != nil {
		return nil, err
	}
	return im, nil
}

// journalState is what Cleanup learns from the journals.
type journalState struct {
	protect map[string]bool // outputs of live journals
	stale   map[string]bool // outputs of stale journals
	orphans []Orphan        // the stale journals themselves
	names   []string
}

// scanJournals sorts the journals into live ones (a run that may resume:
// younger than olderThan and every source still committed at the latest
// version), whose outputs cleanup keeps, and stale ones, which cleanup
// removes together with their unreferenced outputs, whatever their age.
func scanJournals(ctx context.Context, st storage.Store, latest map[string]bool, olderThan time.Duration, now time.Time) (journalState, error) {
	js := journalState{protect: map[string]bool{}, stale: map[string]bool{}}
	entries, err := st.List(ctx, JournalDir)
	if err != nil {
		return js, err
	}
	for _, e := range entries {
		if storage.IsTemp(e.Name[strings.LastIndex(e.Name, "/")+1:]) {
			continue // an unfinished write: the orphan pass removes it with its directory's age
		}
		reason := ""
		var j Journal
		b, err := storage.ReadAll(ctx, st, e.Name, journalLimit)
		switch {
		case errors.Is(err, errkind.NotFound):
			continue
		case err != nil && !errors.Is(err, errkind.Corrupt):
			return js, err
		case err != nil:
			reason = err.Error()
		default:
			if err := json.Unmarshal(b, &j); err != nil {
				reason = "does not parse: " + err.Error()
			} else if err := j.Validate(); err != nil {
				reason = err.Error()
			}
		}
		if reason == "" {
			if now.Sub(e.ModTime) >= olderThan {
				reason = fmt.Sprintf("not updated for %s", now.Sub(e.ModTime).Round(time.Second))
			} else if i := slices.IndexFunc(j.Sources, func(u string) bool { return !latest[u] }); i >= 0 {
				reason = fmt.Sprintf("its plan's source %s is no longer committed", j.Sources[i])
			}
		}
		target := js.protect
		if reason != "" {
			target = js.stale
			js.orphans = append(js.orphans, Orphan{UUID: e.Name, Files: 1, Bytes: e.Size, Modified: e.ModTime, Journal: true, Reason: "stale run journal: " + reason})
			js.names = append(js.names, e.Name)
		}
		for _, t := range j.Tasks {
			target[t.Output] = true
		}
	}
	return js, nil
}
