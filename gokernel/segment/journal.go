package segment

import (
	"context"
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
	"github.com/lance-segmerge/lance-segmerge/gokernel/journal"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// VerifyOutput checks that the merge of inputs (committed at snap, or
// earlier outputs of the same run: pass their metadata) into the segment
// output finished and is intact, and returns its metadata, rebuilt as
// Merge builds it. Finished means both files exist under their final names
// (a store publishes a name only when its write finished; index.idx is
// written last) and parse as the segment files of this index type; intact
// means their sizes equal want's, when want lists files. A failed check is
// errkind.Corrupt or errkind.NotFound, with the reason.
func VerifyOutput(ctx context.Context, st storage.Store, inputs []*pb.IndexMetadata, output string, want []File) (*pb.IndexMetadata, error) {
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", errkind.InvalidInput)
	}
	id, sizes, files, err := OpenOutput(ctx, st, output, want)
	if err != nil {
		return nil, err
	}
	defer files.Close()
	im, err := buildMetadata(id, inputs, mergeOutput{auxBytes: sizes[ivf.AuxiliaryFileName], indexBytes: sizes[ivf.IndexFileName]})
	if err != nil {
		return nil, err
	}
	return im, nil
}

// OpenOutput opens an output a run journal recorded (see OutputFiles)
// and checks that its partitions hold the rows its file does. The caller
// closes the files.
func OpenOutput(ctx context.Context, st storage.Store, output string, want []File) (uuid.UUID, map[string]int64, *ivf.Files, error) {
	id, dir, sizes, err := OutputFiles(ctx, st, output, want)
	if err != nil {
		return id, nil, nil, err
	}
	files, err := ivf.OpenFiles(ctx, st, dir, lancefile.Options{})
	if err != nil {
		return id, nil, nil, fmt.Errorf("output %s does not parse: %w", output, err)
	}
	var total uint64
	for _, n := range files.IVF.Lengths {
		total += uint64(n)
	}
	if total != files.Aux.NumRows() {
		files.Close()
		return id, nil, nil, fmt.Errorf("%w: output %s: partitions hold %d rows, the file %d", errkind.Corrupt, output, total, files.Aux.NumRows())
	}
	return id, sizes, files, nil
}

// OutputFiles checks that an output recorded in a run journal finished:
// both files of a segment exist under their final names (a store publishes
// a name only when its write finished; index.idx is written last) with the
// sizes in want, when want lists files. It returns the output's uuid, its
// directory and the sizes of its files.
func OutputFiles(ctx context.Context, st storage.Store, output string, want []File) (uuid.UUID, string, map[string]int64, error) {
	id, err := uuid.Parse(output)
	if err != nil {
		return id, "", nil, fmt.Errorf("%w: output %q is not a uuid", errkind.InvalidInput, output)
	}
	dir := table.IndicesDir + id.String() + "/"
	entries, err := st.List(ctx, dir)
	if err != nil {
		return id, "", nil, err
	}
	sizes := map[string]int64{}
	for _, e := range entries {
		sizes[strings.TrimPrefix(e.Name, dir)] = e.Size
	}
	for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
		if _, ok := sizes[name]; !ok {
			return id, "", nil, fmt.Errorf("%w: output %s has no %s (its writer did not finish)", errkind.NotFound, output, name)
		}
	}
	for _, f := range want {
		if got, ok := sizes[f.Path]; !ok || uint64(got) != f.SizeBytes {
			return id, "", nil, fmt.Errorf("%w: output %s: %s is %d bytes, the journal recorded %d", errkind.Corrupt, output, f.Path, got, f.SizeBytes)
		}
	}
	return id, dir, sizes, nil
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
	entries, err := st.List(ctx, journal.Dir)
	if err != nil {
		return js, err
	}
	for _, e := range entries {
		if storage.IsTemp(e.Name[strings.LastIndex(e.Name, "/")+1:]) {
			continue // an unfinished write: the orphan pass removes it with its directory's age
		}
		reason := ""
		var j journal.Journal
		b, err := storage.ReadAll(ctx, st, e.Name, journal.Limit)
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
