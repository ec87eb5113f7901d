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
