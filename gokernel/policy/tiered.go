package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Tiered-policy defaults, used when the option is zero.
const (
	// DefaultSegmentsPerTier is Lucene's segsPerTier and maxMergeAtOnce.
	DefaultSegmentsPerTier = 10
	// DefaultMaxSegmentRows bounds what one merge writes: about 10M rows
	// is 1-2 s of single-worker merge time (0.155 µs per row in
	// bench/results/cost-IVF_RQ-20261130-013445.md) and 240 MiB of 16-byte
	// PQ codes plus row ids, so no pass rewrites a huge segment for a few
	// small ones.
	DefaultMaxSegmentRows = 10_000_000
	// DefaultFloorRows: segments smaller than this count as this large
	// when tiers are sized and merges scored, so that small deltas are
	// merged eagerly instead of forming tiers of their own. Lucene's
	// floorSegmentBytes is 2 MB; 100k rows of 16-byte PQ codes and 8-byte
	// row ids are 2.4 MB. A vector query pays per segment searched (its
	// partitions are probed separately), so a small segment costs about
	// what a floor-sized one does: TestTieredIngestion shows a 1000-row
	// floor letting 21 segments accumulate where this one keeps 10, for
	// 2.5 rather than 1.7 rewrites per row.
	DefaultFloorRows = 100_000
	// DefaultDeletesPctAllowed: a segment at or above MaxSegmentRows is
	// rewritten alone once more than this share of its rows is deleted or
	// stale (Lucene's deletesPctAllowed, 33% before Lucene 9).
	DefaultDeletesPctAllowed = 33.0
)

// Segment is one candidate of a plan, as the policies see it.
type Segment struct {
	Rows  uint64 // rows in its files
	Stale uint64 // rows deleted or of fragments no longer in the dataset (≤ Rows)
	Bytes uint64 // size of its files
}

func (s Segment) live() uint64 { return s.Rows - min(s.Stale, s.Rows) }

func (s Segment) stalePct() float64 {
	if s.Rows == 0 {
		return 0
	}
	return 100 * float64(min(s.Stale, s.Rows)) / float64(s.Rows)
}

// Task is one merge chosen by the tiered policy: indices into the
// candidates, in input order, and why it was chosen.
type Task struct {
	Members []int
	Reason  string
}

// tieredSettings are the policy's options with defaults applied.
type tieredSettings struct {
	perTier, atOnce   int
	maxSegments       int // 0: no cap
	perTask           int // most inputs of one merge (segments_per_task)
	maxRows, floor    uint64
	deletesPctAllowed float64
}

func (o Options) tiered() tieredSettings {
	s := tieredSettings{
		perTier:           cmp.Or(o.SegmentsPerTier, DefaultSegmentsPerTier),
		maxRows:           uint64(cmp.Or(o.MaxSegmentRows, DefaultMaxSegmentRows)),
		floor:             uint64(cmp.Or(o.FloorRows, DefaultFloorRows)),
		deletesPctAllowed: DefaultDeletesPctAllowed,
		maxSegments:       o.MaxSegments,
		perTask:           max(2, cmp.Or(o.SegmentsPerTask, 32)),
	}
	if o.DeletesPctAllowed != nil {
		s.deletesPctAllowed = *o.DeletesPctAllowed
	}
	// A task merges at most a tier's worth of segments, and never more than
	// segments_per_task.
	s.atOnce = max(2, min(s.perTier, o.SegmentsPerTask))
	if o.FloorRows == 0 && s.floor > s.maxRows {
		s.floor = s.maxRows
	}
	return s
}

func (o Options) checkTiered() error {
	switch {
	case o.Policy != Tiered:
		if o.SegmentsPerTier != 0 || o.MaxSegmentRows != 0 || o.FloorRows != 0 || o.DeletesPctAllowed != nil || o.MaxSegments != 0 {
			return fmt.Errorf("%w: segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed and max_segments need policy %q", errkind.InvalidInput, Tiered)
		}
		return nil
	case o.SegmentsPerTier < 0 || o.SegmentsPerTier == 1:
		return fmt.Errorf("%w: segments_per_tier must be at least 2, got %d", errkind.InvalidInput, o.SegmentsPerTier)
	case o.MaxSegmentRows < 0:
		return fmt.Errorf("%w: max_segment_rows must be positive, got %d", errkind.InvalidInput, o.MaxSegmentRows)
	case o.MaxSegments < 0:
		return fmt.Errorf("%w: max_segments must be positive, got %d", errkind.InvalidInput, o.MaxSegments)
	case o.FloorRows < 0:
		return fmt.Errorf("%w: floor_rows must be positive, got %d", errkind.InvalidInput, o.FloorRows)
	case o.DeletesPctAllowed != nil && !(*o.DeletesPctAllowed >= 0 && *o.DeletesPctAllowed <= 100):
		return fmt.Errorf("%w: deletes_pct_allowed must be a percentage in [0, 100], got %v", errkind.InvalidInput, *o.DeletesPctAllowed)
	case o.MaxSegmentsToMerge != 0 || o.TargetRowsPerTask != 0:
		return fmt.Errorf("%w: max_segments_to_merge and target_rows_per_task do not apply to policy %q (it chooses the segments itself)", errkind.InvalidInput, Tiered)
	}
	if s := o.tiered(); s.floor > s.maxRows {
		return fmt.Errorf("%w: floor_rows (%d) is above max_segment_rows (%d)", errkind.InvalidInput, s.floor, s.maxRows)
	}
	return nil
}

// ChooseTiered chooses the merges worth running now among segs (in merge
// order: oldest first), after Lucene's TieredMergePolicy, with rows in
// place of bytes:
//
//  1. A segment's size is its live rows (what a merge would write). A
//     segment at or above maxRows is never merged with others; once more
//     than deletesPctAllowed of its rows are deleted or stale it is
//     rewritten alone, which drops them ("reclaim").
//  2. The other segments may number at most an allowed count: tiers of
//     perTier segments, the smallest tier sized by the smallest segment
//     (at least floor rows), each next tier atOnce times larger, until
//     the rows are accounted for.
//  3. While there are more segments (counting each chosen merge as the one
//     segment it will become), the best-scoring merge of up to atOnce
//     segments adjacent in size order, at most maxRows in all, is chosen.
//     Score (lower is better) = skew × size^0.05 × (live/rows)²: skew is
//     the largest member's share of the merge (floored sizes), so similar
//     sizes win; the small size exponent prefers smaller merges a little;
//     the last factor prefers merges that reclaim the most.
//  4. With a cap (maxSegments) and more segments left than it allows,
//     the smallest of what is left (segments and chosen merges alike) are
//     merged into one, so that at most maxSegments remain.
//  5. Segments that stay but carry more than deletesPctAllowed stale rows
//     are rewritten alone.
//
// Deterministic: ties go to the earlier candidate in size order, and
// segments of equal size are ordered by their input position.
func ChooseTiered(segs []Segment, opts Options) ([]Task, string) {
	return chooseTiered(segs, opts.tiered())
}

func chooseTiered(segs []Segment, s tieredSettings) ([]Task, string) {
	var tasks []Task
	var eligible []int // not too large
	large := 0
	for i, sg := range segs {
		if sg.live() >= s.maxRows {
			large++
			if sg.stalePct() > s.deletesPctAllowed {
				tasks = append(tasks, Task{[]int{i}, fmt.Sprintf(
					"reclaim: %.0f%% of its %d rows are deleted or stale (> deletes_pct_allowed %.0f%%); at or above max_segment_rows %d, so rewritten alone",
					sg.stalePct(), sg.Rows, s.deletesPctAllowed, s.maxRows)})
			}
			continue
		}
		eligible = append(eligible, i)
	}
	floored := func(i int) uint64 { return max(segs[i].live(), s.floor) }
	// Largest first; input order among equals.
	slices.SortStableFunc(eligible, func(a, b int) int { return cmp.Compare(segs[b].live(), segs[a].live()) })

	allowed := allowedSegments(segs, eligible, s)
	merging := map[int]bool{}
	chosen := 0
	for {
		remaining := len(eligible) - len(merging) + chosen
		if remaining <= allowed {
			break
		}
		best, bestScore, bestReason := []int(nil), math.Inf(1), ""
		var free []int
		for _, i := range eligible {
			if !merging[i] {
				free = append(free, i)
			}
		}
		for start := range free {
			var cand []int
			var total, rows, flTotal, flMax uint64
			hitMax := false
			for _, i := range free[start:] {
				if len(cand) >= s.atOnce {
					break
				}
				if total+segs[i].live() > s.maxRows {
					hitMax = true // try the smaller ones that still fit
					continue
				}
				cand = append(cand, i)
				total += segs[i].live()
				rows += segs[i].Rows
				flTotal += floored(i)
				flMax = max(flMax, floored(i))
			}
			if len(cand) < 2 {
				continue
			}
			skew := float64(flMax) / float64(flTotal)
			if hitMax {
				// A merge the maximum cut short is as good as a balanced
				// one (Lucene does the same), else the largest tiers
				// would never merge.
				skew = 1 / float64(s.atOnce)
			}
			liveRatio := 1.0
			if rows > 0 {
				liveRatio = float64(total) / float64(rows)
			}
			score := skew * math.Pow(float64(max(total, 1)), 0.05) * liveRatio * liveRatio
			if score < bestScore {
				best, bestScore = cand, score
				bestReason = fmt.Sprintf(
					"tier: %d segments over the %d allowed; these %d are the best merge (score %.3f: largest is %.0f%% of %d live rows, %d stale rows reclaimed%s)",
					remaining, allowed, len(cand), score, 100*skew, total, rows-total, map[bool]string{true: ", cut at max_segment_rows", false: ""}[hitMax])
			}
		}
		if best == nil {
			break
		}
		for _, i := range best {
			merging[i] = true
		}
		chosen++
		slices.Sort(best)
		tasks = append(tasks, Task{best, bestReason})
	}
	if s.maxSegments > 0 {
		tasks = capSegments(segs, eligible, tasks, merging, large, s.maxSegments, s.perTask)
	}
	for _, i := range eligible {
		if !merging[i] && segs[i].stalePct() > s.deletesPctAllowed {
			tasks = append(tasks, Task{[]int{i}, fmt.Sprintf(
				"reclaim: %.0f%% of its %d rows are deleted or stale (> deletes_pct_allowed %.0f%%), rewritten alone",
				segs[i].stalePct(), segs[i].Rows, s.deletesPctAllowed)})
		}
	}
	// Tasks in the order of their first member.
	slices.SortStableFunc(tasks, func(a, b Task) int { return cmp.Compare(a.Members[0], b.Members[0]) })
	var sum strings.Builder
	fmt.Fprintf(&sum, "tiered: %d segments (%d at or above max_segment_rows %d), %d allowed (segments_per_tier %d, floor_rows %d",
		len(segs), large, s.maxRows, allowed, s.perTier, s.floor)
	if s.maxSegments > 0 {
		fmt.Fprintf(&sum, ", max_segments %d", s.maxSegments)
	}
	fmt.Fprintf(&sum, "); %d merges chosen", len(tasks))
	return tasks, sum.String()
}

// capSegments applies the latency-first cap to a tiered choice: tasks are
// the merges chosen (those of segments at or above the maximum too),
// merging the eligible segments they take. While the pass would leave
// more than maxSegments segments, the smallest units left (a free
// eligible segment, or a chosen merge by what it writes) are merged into
// one task: all the units needed at once, so each row is rewritten once
// per pass, and the next larger ones too while that rewrites less over
// the passes to come (see below). Segments at or above the maximum count
// but are never merged. The merge takes at most perTask inputs (a merge
// opens every input at once) beyond its two smallest units: when more are
// needed, the pass leaves more than maxSegments and the next one goes on.
func capSegments(segs []Segment, eligible []int, tasks []Task, merging map[int]bool, large, maxSegments, perTask int) []Task {
	type unit struct {
		Members []int
		rows    uint64
		task    int // index into tasks, -1 for a free segment
	}
	var units []unit
	for ti, t := range tasks {
		if len(t.Members) == 1 {
			// A large segment rewritten alone: tier merges take at least
			// two, and eligible segments' reclaims come after the cap.
			continue
		}
		var rows uint64
		for _, m := range t.Members {
			rows += segs[m].live()
		}
		units = append(units, unit{t.Members, rows, ti})
	}
	for _, i := range eligible {
		if !merging[i] {
			units = append(units, unit{[]int{i}, segs[i].live(), -1})
		}
	}
	over := large + len(units) - maxSegments
	if over <= 0 || len(units) < 2 {
		return tasks
	}
	// Smallest first; ties to the older (members are sorted: the first
	// is the oldest).
	slices.SortStableFunc(units, func(a, b unit) int {
		return cmp.Or(cmp.Compare(a.rows, b.rows), cmp.Compare(a.Members[0], b.Members[0]))
	})
	take := units[:min(len(units), over+1)]
	var rows uint64
	for _, u := range take {
		rows += u.rows
	}
	// Fold on into the next larger unit while this merge has grown to
	// sqrt(2 × that unit × fresh rows): with fresh rows D arriving per
	// pass, keeping a unit M apart costs rewriting it every pass, folding
	// it costs rewriting the larger one B once, and over a cycle the rows
	// rewritten per row ingested are least when M reaches sqrt(2·B·D).
	// The fresh rows are estimated as the merge less its largest unit
	// (at a cap, the deltas since the last pass join the smallest unit).
	fresh := max(rows-take[len(take)-1].rows, units[0].rows)
	for len(take) < len(units) {
		next := units[len(take)].rows
		if float64(rows) < math.Sqrt(2*float64(next)*float64(fresh)) {
			break
		}
		take = units[:len(take)+1]
		rows += next
	}
	inputs, keep := 0, 0
	for ; keep < len(take); keep++ {
		n := len(take[keep].Members)
		if keep >= 2 && inputs+n > perTask {
			break
		}
		inputs += n
	}
	limited := ""
	if keep < len(take) {
		take = take[:keep]
		rows = 0
		for _, u := range take {
			rows += u.rows
		}
		limited = fmt.Sprintf(" (at most %d inputs per merge, segments_per_task: the next pass goes on)", perTask)
	}
	var members []int
	drop := map[int]bool{}
	for _, u := range take {
		members = append(members, u.Members...)
		if u.task >= 0 {
			drop[u.task] = true
		}
		for _, m := range u.Members {
			merging[m] = true
		}
	}
	slices.Sort(members)
	var out []Task
	for ti, t := range tasks {
		if !drop[ti] {
			out = append(out, t)
		}
	}
	left := large + len(units) - len(take) + 1
	folded := ""
	if n := len(take) - min(len(units), over+1); n > 0 {
		folded = fmt.Sprintf(", %d of them folded in early to rewrite less later", n)
	}
	return append(out, Task{members, fmt.Sprintf(
		"cap: %d segments would remain, over max_segments %d; the %d smallest (%d live rows) merged into one%s, leaving %d%s",
		large+len(units), maxSegments, len(take), rows, folded, left, limited)})
}

// allowedSegments is how many of the eligible segments (sorted largest
// first) the index may hold: perTier per tier, tiers growing by atOnce
// from the smallest segment's floored size.
func allowedSegments(segs []Segment, eligible []int, s tieredSettings) int {
	if len(eligible) == 0 {
		return 0
	}
	var left float64
	for _, i := range eligible {
		left += float64(segs[i].live())
	}
	level := float64(max(segs[eligible[len(eligible)-1]].live(), s.floor))
	allowed := 0.0
	for {
		perLevel := left / level
		if perLevel < float64(s.perTier) || level >= float64(s.maxRows) {
			allowed += math.Ceil(perLevel)
			break
		}
		allowed += float64(s.perTier)
		left -= float64(s.perTier) * level
		level = min(float64(s.maxRows), level*float64(s.atOnce))
	}
	return max(int(allowed), s.perTier)
}
