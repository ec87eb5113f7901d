package errkind

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestTag(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"plain", errors.New("boom"), "internal"},
		{"not_found", fmt.Errorf("%w: table: no manifest", NotFound), "not_found"},
		{"conflict", fmt.Errorf("x: %w", fmt.Errorf("%w: lost race", Conflict)), "conflict"},
		{"corrupt", fmt.Errorf("%w: bad magic", Corrupt), "corrupt"},
		{"invalid", fmt.Errorf("%w: k<0", InvalidInput), "invalid_input"},
		{"unsupported", fmt.Errorf("%w: flag", Unsupported), "unsupported"},
		{"cancelled", fmt.Errorf("%w", Cancelled), "cancelled"},
		{"io", fmt.Errorf("%w: disk on fire", IO), "io"},
		{"ctx", fmt.Errorf("merge: %w", context.Canceled), "cancelled"},
		{"deadline", context.DeadlineExceeded, "cancelled"},
		{"cancel wins", fmt.Errorf("%w: %w", Corrupt, context.Canceled), "cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tag(tc.err); got != tc.want {
				t.Fatalf("Tag(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
