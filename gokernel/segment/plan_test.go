package segment

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
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

func TestGroupSizes(t *testing.T) {
	load := []uint64{500, 10, 10, 10, 10, 10}
	rows := []uint64{50, 1, 1, 1, 1, 1}
	opts := PlanOptions{SegmentsPerTask: 4}
	got, err := GroupSizes(load, rows, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The same grouping PlanSegments uses (testdata/group, third case).
	if fmt.Sprint(got) != fmt.Sprint(group(load, rows, PlanOptions{IndexName: "idx", SegmentsPerTask: 4})) || fmt.Sprint(got) != "[[0 5] [1 2 3 4]]" {
		t.Fatalf("got %v", got)
	}
	if got, err := GroupSizes([]uint64{1}, []uint64{1}, opts); err != nil || len(got) != 0 {
		t.Fatalf("one segment: %v %v", got, err)
	}
	for _, tc := range []struct {
		load, rows []uint64
		opts       PlanOptions
	}{
		{[]uint64{1, 2}, []uint64{1}, opts},
		{[]uint64{1, 2}, []uint64{1, 2}, PlanOptions{SegmentsPerTask: 1}},
		{[]uint64{1, 2}, []uint64{1, 2}, PlanOptions{SegmentsPerTask: 2, TargetRowsPerTask: -1}},
		{make([]uint64, MaxGroupSizes+1), make([]uint64, MaxGroupSizes+1), opts},
	} {
		if _, err := GroupSizes(tc.load, tc.rows, tc.opts); !errors.Is(err, errkind.InvalidInput) {
			t.Fatalf("%d loads, %d rows, %+v: got %v, want invalid input", len(tc.load), len(tc.rows), tc.opts, err)
		}
	}
}
