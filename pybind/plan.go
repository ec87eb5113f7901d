package pybind

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

func decodePlanOptions(planOptionsJSON string) (segment.PlanOptions, error) {
	var opts segment.PlanOptions
	if err := json.Unmarshal([]byte(planOptionsJSON), &opts); err != nil {
		return opts, fmt.Errorf("%w: plan options: %w", errkind.InvalidInput, err)
	}
	return opts, nil
}

// PlanIndex plans the merge of the segments of one index at a dataset
// version (0 = latest) and returns the plan as JSON (segment.Plan).
func PlanIndex(uri, optionsJSON string, version int, planOptionsJSON string) (string, error) {
	return offThread(func() (string, error) { return planIndex(uri, optionsJSON, version, planOptionsJSON) })
}

func planIndex(uri, optionsJSON string, version int, planOptionsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	opts, err := decodePlanOptions(planOptionsJSON)
	if err != nil {
		return "", tagged(err)
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	p, err := segment.PlanIndex(ctx, st, snap, opts)
	if err != nil {
		return "", tagged(err)
	}
	p.URI = storage.RedactURI(uri) // plans carry no credentials
	b, err := json.Marshal(p)
	return string(b), tagged(err)
}

// PlanSegments groups an explicit list of segments (a JSON list of segment
// infos, e.g. the outputs of one level of a tree merge) into tasks.
func PlanSegments(uri, optionsJSON string, version int, segmentsJSON, planOptionsJSON string) (string, error) {
	return offThread(func() (string, error) { return planSegments(uri, optionsJSON, version, segmentsJSON, planOptionsJSON) })
}

func planSegments(uri, optionsJSON string, version int, segmentsJSON, planOptionsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	opts, err := decodePlanOptions(planOptionsJSON)
	if err != nil {
		return "", tagged(err)
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	metas, err := segment.ParseSegments([]byte(segmentsJSON), snap)
	if err != nil {
		return "", tagged(err)
	}
	p, err := segment.PlanSegments(ctx, st, snap, metas, opts)
	if err != nil {
		return "", tagged(err)
	}
	p.URI = storage.RedactURI(uri) // plans carry no credentials
	b, err := json.Marshal(p)
	return string(b), tagged(err)
}

// GroupSizes groups segments given only by their sizes into tasks, as
// PlanSegments would, without opening files (to predict the later levels
// of a tree merge). Request: {"bytes": [...], "rows": [...],
// "segments_per_task": n, "target_rows_per_task": n}; returns a JSON list
// of tasks, each the list of its members' indices.
func GroupSizes(requestJSON string) (out string, err error) {
	defer recoverTo(&err)
	var req struct {
		Bytes []uint64 `json:"bytes"`
		Rows  []uint64 `json:"rows"`
		segment.PlanOptions
	}
	if len(requestJSON) > 64<<20 {
		return "", tagged(fmt.Errorf("%w: group request of %d bytes", errkind.InvalidInput, len(requestJSON)))
	}
	if err := decodeArg("group request", requestJSON, &req); err != nil {
		return "", err
	}
	groups, err := segment.GroupSizes(req.Bytes, req.Rows, req.PlanOptions)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(groups)
	return string(b), tagged(err)
}

// Cleanup lists (and unless dryRun removes) segment directories no version
// references, older than olderThanSeconds. Returns a JSON list.
func Cleanup(uri, optionsJSON string, olderThanSeconds float64, dryRun bool) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	opts, err := decodeOptions(optionsJSON)
	if err != nil {
		return "", tagged(err)
	}
	st, err := storage.Open(ctx, uri, opts)
	if err != nil {
		return "", tagged(err)
	}
	if math.IsNaN(olderThanSeconds) || olderThanSeconds < 0 || olderThanSeconds > float64(math.MaxInt64/int64(time.Second)) {
		return "", tagged(fmt.Errorf("%w: older_than must be a finite, non-negative number of seconds (at most %d), got %g",
			errkind.InvalidInput, math.MaxInt64/int64(time.Second), olderThanSeconds))
	}
	orphans, err := segment.Cleanup(ctx, st, time.Duration(olderThanSeconds*float64(time.Second)), dryRun, time.Now())
	if err != nil {
		return "", tagged(err)
	}
	if orphans == nil {
		orphans = []segment.Orphan{}
	}
	b, err := json.Marshal(orphans)
	return string(b), tagged(err)
}

// RemoveUncommitted deletes the files of uncommitted segments (a JSON list
// of uuids); committed ones are refused. Returns the number of files.
func RemoveUncommitted(uri, optionsJSON, uuidsJSON string) (n int, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	opts, err := decodeOptions(optionsJSON)
	if err != nil {
		return 0, tagged(err)
	}
	var uuids []string
	if err := decodeArg("uuids", uuidsJSON, &uuids); err != nil {
		return 0, err
	}
	st, err := storage.Open(ctx, uri, opts)
	if err != nil {
		return 0, tagged(err)
	}
	n, err = segment.RemoveUncommitted(ctx, st, uuids)
	return n, tagged(err)
}

// CheckPlan checks a plan's JSON (MergePlan.to_json) against the dataset
// version it is for (segment.DecodePlan), before any task runs: a
// corrupted or crafted plan is refused with an "[invalid_input]" error.
func CheckPlan(uri, optionsJSON string, version int, planJSON string) (err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	_, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return tagged(err)
	}
	_, err = segment.DecodePlan([]byte(planJSON), snap)
	return tagged(err)
}
