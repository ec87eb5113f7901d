// Package journal holds the run journal of lance-segmerge: the file that
// lets an interrupted optimize or maintain run resume. It records the
// run's plan and, for every merge task, its inputs, the output it was
// assigned and, once finished, the output's file sizes. Only the format
// lives here (read, validate, write, delete); whether a recorded output
// may be reused is the segment package's call (segment.VerifyOutput).
//
//	j, err := journal.Read(ctx, st, "vec_idx")  // errkind.NotFound: none
//	err = journal.Write(ctx, st, j)             // validated, then replaced whole
//
// Concurrency: one driver owns an index's journal; the functions are safe
// to call concurrently on different indices.
package journal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// A journal lives at Dir/<hash of the index name>.json.
//
// pylance never reads it. Its cleanup_old_versions treats any unreferenced
// file under _indices/ like an unreferenced segment file: it removes the
// journal, as it removes the run's outputs, once it is older than its
// unverified threshold (7 days) or with delete_unverified. Both are garbage
// by then, and a journal without its outputs only makes a resumed run redo
// the work.
const (
	// Dir holds run journals. Not a uuid, so no segment directory.
	Dir = table.IndicesDir + "_segmerge/"
	// Format and FormatVersion identify the file's content.
	Format        = "lance-segmerge-journal"
	FormatVersion = 1
	// Limit bounds what a journal read allocates: a task entry is a few
	// hundred bytes, so 16 MiB is tens of thousands of tasks.
	Limit = 16 << 20
)

// Task states in a journal.
const (
	TaskPlanned = "planned" // assigned an output, maybe running
	TaskDone    = "done"    // the output was written and verified
)

// File is one file of a finished output, with its size.
type File struct {
	Path      string `json:"path"`
	SizeBytes uint64 `json:"size_bytes"`
}

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
	Tasks     []Task         `json:"tasks"`
	UpdatedMs int64          `json:"updated_ms"`
	Extra     map[string]any `json:"extra,omitempty"`
}

// Task is one merge task of a run.
type Task struct {
	// Level 0 is a build task (a segment built over Fragments); levels
	// from 1 are merges of Inputs.
	Level     int      `json:"level"`
	Inputs    []string `json:"inputs"` // input segment uuids, in merge order
	Fragments []uint32 `json:"fragments,omitempty"`
	Output    string   `json:"output"` // the output segment's uuid
	State     string   `json:"state"`
	// Files are the output's files with their sizes, once done.
	Files []File `json:"files,omitempty"`
	Rows  uint64 `json:"rows,omitempty"`
}

// Path is where the journal of an index lives.
func Path(indexName string) string {
	h := sha256.Sum256([]byte(indexName))
	return Dir + hex.EncodeToString(h[:8]) + ".json"
}

// Validate checks a journal's shape (not whether its outputs still
// verify: see segment.VerifyOutput).
func (j *Journal) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: run journal: "+format, append([]any{errkind.Corrupt}, args...)...)
	}
	switch {
	case j.Format != Format:
		return bad("format is %q, not %q", j.Format, Format)
	case j.FormatVersion != FormatVersion:
		return bad("format_version %d is not %d", j.FormatVersion, FormatVersion)
	case j.IndexName == "" || j.PlanID == "" || j.ReadVersion == 0:
		return bad("index_name, plan_id and read_version are required")
	}
	outputs := map[string]bool{}
	for i, t := range j.Tasks {
		switch {
		case t.Level < 0 || (t.Level == 0) != (len(t.Fragments) > 0):
			return bad("task %d has level %d and %d fragments (a build task is level 0 and names its fragments)", i, t.Level, len(t.Fragments))
		case t.Level > 0 && len(t.Inputs) == 0:
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

// Read reads and validates the journal of an index: errkind.NotFound
// when there is none, errkind.Corrupt when it does not parse or validate.
func Read(ctx context.Context, st storage.Store, indexName string) (*Journal, error) {
	b, err := storage.ReadAll(ctx, st, Path(indexName), Limit)
	if err != nil {
		return nil, err
	}
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: run journal %s: %w", errkind.Corrupt, Path(indexName), err)
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	if j.IndexName != indexName {
		return nil, fmt.Errorf("%w: run journal %s is for index %q", errkind.Corrupt, Path(indexName), j.IndexName)
	}
	return &j, nil
}

// Write validates and writes (replaces) a journal.
func Write(ctx context.Context, st storage.Store, j *Journal) error {
	j.Format, j.FormatVersion = Format, FormatVersion
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
	if len(b) > Limit {
		return fmt.Errorf("%w: run journal of %d bytes is above the %d-byte limit", errkind.InvalidInput, len(b), Limit)
	}
	return storage.Put(ctx, st, Path(j.IndexName), b)
}

// Delete removes the journal of an index (missing is fine).
func Delete(ctx context.Context, st storage.Store, indexName string) error {
	return st.Delete(ctx, Path(indexName))
}
