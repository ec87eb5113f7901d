// Package policy holds the merge policies of an index's segments, as pure
// functions of their sizes: which segments to merge now and how to group
// them into tasks. It does no I/O: the segment package measures the
// segments (rows, stale rows, bytes) and turns the chosen groups into a
// plan.
//
//	groups := policy.Group(bytes, rows, opts)    // All: balanced tasks
//	tasks, why := policy.ChooseTiered(segs, opts) // Tiered: the merges worth running now
//
// Concurrency: the functions hold no state and are safe to call concurrently.
package policy

import (
	"cmp"
	"fmt"
	"sort"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Merge policies (Options.Policy).
const (
	// All merges every live segment of the index (or the newest
	// MaxSegmentsToMerge) into balanced tasks: what optimize does.
	All = "all"
	// Tiered picks which segments are worth merging now, the way Lucene's
	// TieredMergePolicy does: similar sizes together, a bounded number of
	// segments per size tier, a maximum merged size, and preference for
	// merges that reclaim deleted or stale rows.
	Tiered = "tiered"
)

// Options shape a plan; the zero value of each means its default. They
// cross the binding as JSON (the keys are part of the plan options the
// Python package sends).
type Options struct {
	// SegmentsPerTask is the most segments one task merges (a task of an
	// odd remainder may get one more so that no task merges a single
	// segment). At least 2.
	SegmentsPerTask int `json:"segments_per_task"`
	// MaxSegmentsToMerge limits an All plan to the newest segments (by
	// dataset version, then commit order); the rest (typically the large
	// base) is left untouched. 0 plans every segment.
	MaxSegmentsToMerge int `json:"max_segments_to_merge"`
	// TargetRowsPerTask, when set, adds tasks until the average task has
	// about this many rows.
	TargetRowsPerTask int64 `json:"target_rows_per_task"`

	// Policy chooses the segments: "" or All, or Tiered (see Tiered). The
	// options below apply to Tiered only; zero means the default.
	Policy string `json:"policy"`
	// SegmentsPerTier is how many segments of about the same size the
	// index may hold before they are merged; a tiered task merges at
	// most this many (and at most SegmentsPerTask). Default 10.
	SegmentsPerTier int `json:"segments_per_tier"`
	// MaxSegmentRows: no merge writes more live rows, and a segment at or
	// above it is only rewritten (alone) to reclaim deleted or stale rows.
	// Default DefaultMaxSegmentRows.
	MaxSegmentRows int64 `json:"max_segment_rows"`
	// FloorRows: smaller segments count as this large. Default
	// DefaultFloorRows.
	FloorRows int64 `json:"floor_rows"`
	// DeletesPctAllowed is the share of deleted or stale rows (percent) a
	// segment may carry before it is rewritten to drop them. nil means
	// DefaultDeletesPctAllowed.
	DeletesPctAllowed *float64 `json:"deletes_pct_allowed"`
	// MaxSegments caps the segments a tiered pass leaves (latency first):
	// when the tiered choice would leave more, the smallest are merged
	// together until at most this many remain, whatever max_segment_rows
	// says (segments at or above it count, but are only ever rewritten
	// alone). A query probes every segment, so this bounds its cost, at
	// the price of rewriting rows more often (bench/ingest_bound.py gives
	// the least any policy can rewrite under a cap). 0: no cap.
	MaxSegments int `json:"max_segments"`
}

// Check validates the options; every failure is errkind.InvalidInput.
func (o Options) Check() error {
	switch {
	case o.SegmentsPerTask < 2:
		return fmt.Errorf("%w: segments_per_task must be at least 2, got %d", errkind.InvalidInput, o.SegmentsPerTask)
	case o.MaxSegmentsToMerge < 0 || o.MaxSegmentsToMerge == 1:
		return fmt.Errorf("%w: max_segments_to_merge must be at least 2, got %d", errkind.InvalidInput, o.MaxSegmentsToMerge)
	case o.TargetRowsPerTask < 0:
		return fmt.Errorf("%w: target_rows_per_task must be positive, got %d", errkind.InvalidInput, o.TargetRowsPerTask)
	case o.Policy != "" && o.Policy != All && o.Policy != Tiered:
		return fmt.Errorf("%w: policy must be %q or %q, got %q", errkind.InvalidInput, All, Tiered, o.Policy)
	}
	return o.checkTiered()
}

// Name is the policy's name, All when unset.
func (o Options) Name() string { return cmp.Or(o.Policy, All) }

// Group assigns segments to tasks: as few tasks as segments_per_task (and
// target_rows_per_task) allow, every task with at least two segments,
// loads (bytes) balanced greedily, largest first. Deterministic: ties go
// to the lowest task id, and each task lists its segments in input order.
func Group(load, rows []uint64, opts Options) [][]int {
	n := len(load)
	spt := opts.SegmentsPerTask
	tasks := (n + spt - 1) / spt
	if opts.TargetRowsPerTask > 0 {
		var total uint64
		for _, r := range rows {
			total += r
		}
		tasks = max(tasks, int((total+uint64(opts.TargetRowsPerTask)-1)/uint64(opts.TargetRowsPerTask)))
	}
	tasks = max(1, min(tasks, n/2))
	capacity := max(spt, (n+tasks-1)/tasks)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return load[order[a]] > load[order[b]] })
	members := make([][]int, tasks)
	loads := make([]uint64, tasks)
	for k, i := range order {
		remaining := n - k
		need := 0
		for _, m := range members {
			need += max(0, 2-len(m))
		}
		best := -1
		for t := range members {
			if len(members[t]) >= capacity || (remaining <= need && len(members[t]) >= 2) {
				continue
			}
			if best < 0 || loads[t] < loads[best] {
				best = t
			}
		}
		members[best] = append(members[best], i)
		loads[best] += load[i]
	}
	for _, m := range members {
		sort.Ints(m)
	}
	sort.Slice(members, func(a, b int) bool { return members[a][0] < members[b][0] })
	return members
}
