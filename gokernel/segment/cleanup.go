package segment

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// Orphan is a segment directory no version of the dataset references.
type Orphan struct {
	UUID     string    `json:"uuid"`
	Files    int       `json:"files"`
	Bytes    int64     `json:"bytes"`
	Modified time.Time `json:"modified"`
	Removed  bool      `json:"removed"`
	// Journal marks a stale run journal (UUID is then its path); Reason
	// says why a journal or a journal's output is removed.
	Journal bool   `json:"journal,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// referenced collects the index uuids of every version of the dataset.
func referenced(ctx context.Context, st storage.Store) (map[string]bool, error) {
	refs, err := table.ListVersions(ctx, st)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, ref := range refs {
		snap, err := table.Open(ctx, st, ref.Version)
		if err != nil {
			return nil, err
		}
		for _, im := range snap.Indices {
			out[table.IndexUUID(im)] = true
		}
	}
	return out, nil
}

// Cleanup lists segment directories under _indices/ that no version of the
// dataset references and whose newest file is older than olderThan (a grace
// period for merges still running or commits about to land), and removes
// them unless dryRun. Crashed or cancelled workers leave such directories.
//
// Run journals (JournalDir) are read too: the outputs of a live journal (a
// run that may resume) are kept whatever their age; a stale journal
// (corrupt, older than olderThan, or whose plan's sources are no longer
// all committed) is removed with its unreferenced outputs, whatever their
// age.
func Cleanup(ctx context.Context, st storage.Store, olderThan time.Duration, dryRun bool, now time.Time) ([]Orphan, error) {
	if olderThan < 0 {
		return nil, fmt.Errorf("%w: older_than must not be negative", errkind.InvalidInput)
	}
	refd, err := referenced(ctx, st)
	if err != nil {
		return nil, err
	}
	latestSnap, err := table.Open(ctx, st, 0)
	if err != nil {
		return nil, err
	}
	latest := map[string]bool{}
	for _, im := range latestSnap.Indices {
		latest[table.IndexUUID(im)] = true
	}
	js, err := scanJournals(ctx, st, latest, olderThan, now)
	if err != nil {
		return nil, err
	}
	entries, err := st.List(ctx, table.IndicesDir)
	if err != nil {
		return nil, err
	}
	byDir := map[string]*Orphan{}
	var files = map[string][]string{}
	for _, e := range entries {
		rest := strings.TrimPrefix(e.Name, table.IndicesDir)
		dir, _, ok := strings.Cut(rest, "/")
		if !ok || refd[dir] || js.protect[dir] {
			continue
		}
		if _, err := uuid.Parse(dir); err != nil {
			continue // not a segment directory
		}
		o := byDir[dir]
		if o == nil {
			o = &Orphan{UUID: dir}
			byDir[dir] = o
		}
		o.Files++
		o.Bytes += e.Size
		if e.ModTime.After(o.Modified) {
			o.Modified = e.ModTime
		}
		files[dir] = append(files[dir], e.Name)
	}
	var out []Orphan
	for dir, o := range byDir {
		if js.stale[dir] {
			o.Reason = "output of a stale run journal"
		} else if now.Sub(o.Modified) < olderThan {
			continue
		}
		if !dryRun {
			for _, name := range files[dir] {
				if err := st.Delete(ctx, name); err != nil {
					return out, fmt.Errorf("segment: remove orphan %s: %w", dir, err)
				}
			}
			o.Removed = true
		}
		out = append(out, *o)
	}
	for i, name := range js.names {
		o := js.orphans[i]
		if !dryRun {
			if err := st.Delete(ctx, name); err != nil {
				return out, fmt.Errorf("segment: remove run journal %s: %w", name, err)
			}
			o.Removed = true
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UUID < out[j].UUID })
	return out, nil
}

// RemoveUncommitted deletes the files of segments that the latest version
// does not reference (outputs of a cancelled or superseded merge). A
// referenced uuid is refused with errkind.InvalidInput and nothing is
// deleted.
func RemoveUncommitted(ctx context.Context, st storage.Store, uuids []string) (int, error) {
	snap, err := table.Open(ctx, st, 0)
	if err != nil {
		return 0, err
	}
	live := map[string]bool{}
	for _, im := range snap.Indices {
		live[table.IndexUUID(im)] = true
	}
	for _, u := range uuids {
		if _, err := uuid.Parse(u); err != nil {
			return 0, fmt.Errorf("%w: %q is not a segment uuid", errkind.InvalidInput, u)
		}
		if live[u] {
			return 0, fmt.Errorf("%w: segment %s is committed in version %d; not removing it", errkind.InvalidInput, u, snap.Ref.Version)
		}
	}
	n := 0
	for _, u := range uuids {
		entries, err := st.List(ctx, table.IndicesDir+u+"/")
		if err != nil {
			return n, err
		}
		for _, e := range entries {
			if err := st.Delete(ctx, e.Name); err != nil {
				return n, err
			}
			n++
		}
		if d, ok := st.(storage.DirPruner); ok {
			if err := d.PruneDir(ctx, table.IndicesDir+u+"/"); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
