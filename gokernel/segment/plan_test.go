package segment

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/policy"
)

func TestGroupSizes(t *testing.T) {
	load := []uint64{500, 10, 10, 10, 10, 10}
	rows := []uint64{50, 1, 1, 1, 1, 1}
	opts := PlanOptions{Options: policy.Options{SegmentsPerTask: 4}}
	got, err := GroupSizes(load, rows, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The same grouping PlanSegments uses (testdata/group, third case).
	if fmt.Sprint(got) != fmt.Sprint(policy.Group(load, rows, policy.Options{SegmentsPerTask: 4})) || fmt.Sprint(got) != "[[0 5] [1 2 3 4]]" {
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
		{[]uint64{1, 2}, []uint64{1, 2}, PlanOptions{Options: policy.Options{SegmentsPerTask: 1}}},
		{[]uint64{1, 2}, []uint64{1, 2}, PlanOptions{Options: policy.Options{SegmentsPerTask: 2, TargetRowsPerTask: -1}}},
		{make([]uint64, MaxGroupSizes+1), make([]uint64, MaxGroupSizes+1), opts},
	} {
		if _, err := GroupSizes(tc.load, tc.rows, tc.opts); !errors.Is(err, errkind.InvalidInput) {
			t.Fatalf("%d loads, %d rows, %+v: got %v, want invalid input", len(tc.load), len(tc.rows), tc.opts, err)
		}
	}
}
