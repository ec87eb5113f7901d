package pybind

import (
	"encoding/json"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
)

// MergeSegments merges the segments (a JSON list of segment infos) of one
// vector index of the dataset at uri, version (0 = latest), into one new
// uncommitted segment, and returns its info (with statistics) as JSON.
// mergeOptionsJSON holds segment.MergeOptions ("" = defaults). opID names
// the operation for Progress and Cancel.
func MergeSegments(opID, uri, optionsJSON string, version int, segmentsJSON, mergeOptionsJSON string) (string, error) {
	return offThread(func() (string, error) {
		return mergeSegments(opID, uri, optionsJSON, version, segmentsJSON, mergeOptionsJSON)
	})
}

func mergeSegments(opID, uri, optionsJSON string, version int, segmentsJSON, mergeOptionsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	metas, err := segment.ParseSegments([]byte(segmentsJSON), snap)
	if err != nil {
		return "", tagged(err)
	}
	var opts segment.MergeOptions
	if mergeOptionsJSON != "" {
		if err := decodeArg("merge options", mergeOptionsJSON, &opts); err != nil {
			return "", err
		}
	}
	opts.Progress = prog
	merged, err := segment.Merge(ctx, st, snap, metas, opts)
	if err != nil {
		return "", tagged(err)
	}
	info, err := segment.DescribeWithStats(ctx, st, merged)
	if err != nil {
		return "", tagged(err)
	}
	// Notes ride along with the segment's fields; Python logs them.
	b, err := json.Marshal(struct {
		*segment.Info
		Notes []string `json:"notes,omitempty"`
	}{info, prog.Notes()})
	return string(b), tagged(err)
}
