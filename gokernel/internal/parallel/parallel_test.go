package parallel

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEach: every call runs (but for a sequential loop's, which stops at
// the first error), at most limit at once; the error returned is the
// lowest index's; a panic is an error.
func TestEach(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, limit int
		ran      int
		fail     map[int]bool
		panicAt  int
		wantErr  string
	}{
		{"none fails", 100, 8, 100, nil, -1, ""},
		{"sequential", 10, 1, 4, map[int]bool{3: true, 7: true}, -1, "step 3"},
		{"lowest of many", 100, 8, 100, map[int]bool{90: true, 41: true, 77: true}, -1, "step 41"},
		{"a panic", 50, 4, 50, map[int]bool{30: true}, 12, "panic in a worker goroutine: boom 12"},
		{"nothing to do", 0, 4, 0, nil, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran, running, most atomic.Int64
			err := Each(tc.n, tc.limit, func(i int) error {
				ran.Add(1)
				now := running.Add(1)
				defer running.Add(-1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				if i == tc.panicAt {
					panic(fmt.Sprintf("boom %d", i))
				}
				if tc.fail[i] {
					return fmt.Errorf("step %d: %w", i, errors.ErrUnsupported)
				}
				return nil
			})
			if ran.Load() != int64(tc.ran) || most.Load() > int64(max(tc.limit, 1)) {
				t.Fatalf("ran %d, want %d; %d at once (limit %d)", ran.Load(), tc.ran, most.Load(), tc.limit)
			}
			if got := fmt.Sprint(err); tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(got, tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
