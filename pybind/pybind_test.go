package pybind

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

func fixture(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "lance-compat", "v0.27.1", "pq_in_schema")
}

func TestRecoverTo(t *testing.T) {
	f := func() (err error) {
		defer recoverTo(&err)
		var m map[string]int
		m["x"] = 1 // nil map write: a runtime panic
		return nil
	}
	err := f()
	if err == nil || !strings.HasPrefix(err.Error(), "[internal] lance-segmerge kernel panic: ") {
		t.Fatalf("panic not recovered into an internal error: %v", err)
	}
}

func TestTagged(t *testing.T) {
	for _, tc := range []struct {
		call func() (string, error)
		tag  string
	}{
		{func() (string, error) { return DatasetInfo("/nonexistent/dir", "", 0) }, "[not_found] "},
		{func() (string, error) { return DatasetInfo(fixture(t), "", 7) }, "[not_found] "},
		{func() (string, error) { return DatasetInfo(fixture(t), "{bad", 0) }, "[invalid_input] "},
		{func() (string, error) { return DatasetInfo(fixture(t), "", -1) }, "[invalid_input] "},
		{func() (string, error) { return DatasetInfo("abfss://c@a.dfs.core.windows.net/t", "", 0) }, "[unsupported] "},
		{func() (string, error) { return ListSegments(fixture(t), "", 0, "nope", false) }, "[not_found] "},
		{func() (string, error) { return DescribeSegment("", "", "[]", false) }, "[invalid_input] "},
	} {
		_, err := tc.call()
		if err == nil || !strings.HasPrefix(err.Error(), tc.tag) {
			t.Fatalf("got %v, want tag %s", err, tc.tag)
		}
		if errors.Unwrap(err) == nil {
			t.Fatalf("tagged error does not wrap its cause: %v", err)
		}
	}
}

func TestListSegmentsJSON(t *testing.T) {
	out, err := ListSegments(fixture(t), "", 0, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var segs []map[string]any
	if err := json.Unmarshal([]byte(out), &segs); err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 || segs[0]["uuid"] != "14a2a13d-1c6f-400c-b59c-8e2d10b9b68b" {
		t.Fatalf("%s", out)
	}
	stats := segs[0]["stats"].(map[string]any)
	if stats["index_type"] != "IVF_PQ" || stats["num_rows"].(float64) != 512 {
		t.Fatalf("stats %v", stats)
	}
	// The metadata bytes round-trip through DescribeSegment.
	again, err := DescribeSegment(fixture(t), "", out[1:len(out)-1], true)
	if err != nil {
		t.Fatal(err)
	}
	var seg map[string]any
	json.Unmarshal([]byte(again), &seg)
	if seg["metadata"] != segs[0]["metadata"] {
		t.Fatal("metadata bytes changed")
	}
}

func TestDatasetInfoCounts(t *testing.T) {
	out, err := DatasetInfo(fixture(t), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var info datasetInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	// 512 rows in one fragment, one index of one segment (test_list checks
	// the same fixture through pylance).
	if info.NumRows != 512 || len(info.IndexSegments) != 1 || info.IndexSegments[info.IndexNames[0]] != 1 {
		t.Fatalf("%s", out)
	}
}

func TestGroupSizesJSON(t *testing.T) {
	out, err := GroupSizes(`{"bytes": [500, 10, 10, 10, 10, 10], "rows": [50, 1, 1, 1, 1, 1], "segments_per_task": 4}`)
	if err != nil || out != "[[0,5],[1,2,3,4]]" {
		t.Fatalf("%s %v", out, err)
	}
	for _, bad := range []string{`{`, `{"bytes": [1, 2], "rows": [1], "segments_per_task": 2}`, `{"bytes": [1, 2], "rows": [1, 2]}`} {
		if _, err := GroupSizes(bad); err == nil || !strings.HasPrefix(err.Error(), "[invalid_input] ") {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}

// The collector's target is 200% unless GOGC is set: the test binary runs
// itself again with GOGC=50 and without it, and each reports the percent
// its init left.
func TestGCPercentYieldsToGOGC(t *testing.T) {
	if os.Getenv("SEGMERGE_GC_PROBE") != "" {
		fmt.Printf("gc=%d\n", debug.SetGCPercent(-1))
		return
	}
	for _, c := range []struct {
		env  []string
		want string
	}{{nil, "gc=200"}, {[]string{"GOGC=50"}, "gc=50"}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestGCPercentYieldsToGOGC$", "-test.v")
		cmd.Env = append(append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "GOGC=") }),
			"SEGMERGE_GC_PROBE=1"), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Fatalf("%v: %v\n%s", c.env, err, out)
		}
	}
}
