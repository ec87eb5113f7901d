package segment

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestGroup drives the task grouping from testdata/group:
//
//	group segments_per_task=2 [target_rows_per_task=N]
//	a 100 10      <- name, bytes, rows
//	----
//	task 0: a c (110 bytes, 11 rows)
func TestGroup(t *testing.T) {
	datadriven.RunTest(t, "testdata/group", func(t *testing.T, d *datadriven.TestData) string {
		opts := PlanOptions{IndexName: "idx"}
		for _, arg := range d.CmdArgs {
			v, _ := strconv.Atoi(arg.Vals[0])
			switch arg.Key {
			case "segments_per_task":
				opts.SegmentsPerTask = v
			case "target_rows_per_task":
				opts.TargetRowsPerTask = int64(v)
			default:
				t.Fatalf("unknown argument %s", arg.Key)
			}
		}
		var names []string
		var load, rows []uint64
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line == "" {
				continue
			}
			var name string
			var b, r uint64
			if _, err := fmt.Sscan(line, &name, &b, &r); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			names, load, rows = append(names, name), append(load, b), append(rows, r)
		}
		if err := opts.check(); err != nil && opts.SegmentsPerTask < 2 {
			return "error: " + err.Error() + "\n"
		}
		if len(names) < 2 {
			return "no tasks\n"
		}
		var out strings.Builder
		for ti, members := range group(load, rows, opts) {
			var bytes, rs uint64
			var ns []string
			for _, i := range members {
				ns = append(ns, names[i])
				bytes += load[i]
				rs += rows[i]
			}
			fmt.Fprintf(&out, "task %d: %s (%d bytes, %d rows)\n", ti, strings.Join(ns, " "), bytes, rs)
		}
		return out.String()
	})
}

// TestTiered drives the tiered policy from testdata/tiered:
//
//	tiered [segments_per_tier=N] [max_segment_rows=N] [floor_rows=N] [deletes_pct_allowed=F] [segments_per_task=N]
//	a 100 5      <- name, rows, stale rows (input order = merge order, oldest first)
//	----
//	task 0: a c: reason
func TestTiered(t *testing.T) {
	datadriven.RunTest(t, "testdata/tiered", func(t *testing.T, d *datadriven.TestData) string {
		opts := PlanOptions{IndexName: "idx", Policy: PolicyTiered, SegmentsPerTask: 32}
		for _, arg := range d.CmdArgs {
			switch arg.Key {
			case "deletes_pct_allowed":
				f, err := strconv.ParseFloat(arg.Vals[0], 64)
				if err != nil {
					t.Fatal(err)
				}
				opts.DeletesPctAllowed = &f
				continue
			case "max_segments_to_merge":
				opts.MaxSegmentsToMerge, _ = strconv.Atoi(arg.Vals[0])
				continue
			}
			v, err := strconv.ParseInt(arg.Vals[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			switch arg.Key {
			case "segments_per_tier":
				opts.SegmentsPerTier = int(v)
			case "max_segment_rows":
				opts.MaxSegmentRows = v
			case "floor_rows":
				opts.FloorRows = v
			case "segments_per_task":
				opts.SegmentsPerTask = int(v)
			default:
				t.Fatalf("unknown argument %s", arg.Key)
			}
		}
		if err := opts.check(); err != nil {
			return "error: " + err.Error() + "\n"
		}
		var names []string
		var segs []tierSeg
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			if line == "" {
				continue
			}
			var name string
			var rows, stale uint64
			if _, err := fmt.Sscan(line, &name, &rows, &stale); err != nil {
				t.Fatalf("bad line %q: %v", line, err)
			}
			names, segs = append(names, name), append(segs, tierSeg{Rows: rows, Stale: stale, Bytes: rows * 24})
		}
		tasks, summary := planTiered(segs, opts.tiered())
		again, _ := planTiered(segs, opts.tiered())
		if fmt.Sprint(again) != fmt.Sprint(tasks) {
			t.Fatalf("not deterministic: %v then %v", tasks, again)
		}
		var out strings.Builder
		fmt.Fprintln(&out, summary)
		for ti, task := range tasks {
			var ns []string
			for _, i := range task.members {
				ns = append(ns, names[i])
			}
			fmt.Fprintf(&out, "task %d: %s: %s\n", ti, strings.Join(ns, " "), task.reason)
		}
		return out.String()
	})
}
