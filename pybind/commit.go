package pybind

import (
	"encoding/json"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
)

// CommitSegments commits index segments (a JSON list of segment infos) as
// one new version of the dataset at uri, planned against version (0 =
// latest). requestJSON holds segment.CommitRequest's plain fields
// (index_name, column, replaces, max_retries). Returns the new version.
func CommitSegments(opID, uri, optionsJSON string, version int, segmentsJSON, requestJSON string) (out int, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return 0, tagged(err)
	}
	var req segment.CommitRequest
	if err := json.Unmarshal([]byte(requestJSON), &req); err != nil {
		return 0, tagged(fmt.Errorf("%w: commit request: %w", errkind.InvalidInput, err))
	}
	if req.Segments, err = segment.ParseSegments([]byte(segmentsJSON), snap); err != nil {
		return 0, tagged(err)
	}
	v, err := segment.Commit(ctx, st, snap, req, prog)
	if err != nil {
		return 0, tagged(err)
	}
	return int(v), nil
}
