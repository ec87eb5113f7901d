package pybind

import (
	"context"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
)

// CommitSegments commits index segments (a JSON list of segment infos) as
// one new version of the dataset at uri, planned against version (0 =
// latest). requestJSON holds segment.CommitRequest's plain fields
// (index_name, column, replaces, max_retries). Returns the new version.
func CommitSegments(opID, uri, optionsJSON string, version int, segmentsJSON, requestJSON string) (int, error) {
	return offThread(func() (int, error) { return commitSegments(opID, uri, optionsJSON, version, segmentsJSON, requestJSON) })
}

func commitSegments(opID, uri, optionsJSON string, version int, segmentsJSON, requestJSON string) (out int, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return 0, tagged(err)
	}
	var req segment.CommitRequest
	if err := decodeArg("commit request", requestJSON, &req); err != nil {
		return 0, err
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

// CheckCoverage checks segments (a JSON list of segment infos) of the
// dataset at uri, version (0 = latest), against their rows, as the commit
// checks new segments, and commits nothing.
func CheckCoverage(uri, optionsJSON string, version int, segmentsJSON string, parallelism int) error {
	_, err := offThread(func() (struct{}, error) {
		return struct{}{}, checkCoverage(uri, optionsJSON, version, segmentsJSON, parallelism)
	})
	return err
}

func checkCoverage(uri, optionsJSON string, version int, segmentsJSON string, parallelism int) (err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return tagged(err)
	}
	metas, err := segment.ParseSegments([]byte(segmentsJSON), snap)
	if err != nil {
		return tagged(err)
	}
	return tagged(segment.CheckCoverage(ctx, st, snap, metas, parallelism))
}
