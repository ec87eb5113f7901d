// Package errkind holds the few error kinds every layer of the kernel shares.
// Errors are wrapped with %w around one of these sentinels; callers test them
// with errors.Is, never by matching strings. Tag maps an error to the stable
// tag the Python binding puts in front of its message ("[not_found] ...").
//
// errkind is a leaf: it imports nothing of ours.
package errkind

import (
	"context"
	"errors"
)

// The kinds. Their text is part of error messages, their tags are part of the
// Python binding's contract: never rename a tag.
var (
	// NotFound: a dataset, version, index, segment or file does not exist.
	NotFound = errors.New("not found")
	// Conflict: lost a commit race, or a concurrent change invalidated the work.
	Conflict = errors.New("conflict")
	// Corrupt: stored bytes break the format.
	Corrupt = errors.New("corrupt")
	// InvalidInput: the caller's fault (bad argument, incompatible segments).
	InvalidInput = errors.New("invalid input")
	// Unsupported: valid but out of scope (an unknown feature flag, an index
	// type or layout we do not handle).
	Unsupported = errors.New("unsupported")
	// Cancelled: the operation's context was cancelled or timed out.
	Cancelled = errors.New("cancelled")
	// IO: the store failed (a disk error, an unreachable or failing object
	// store after retries): neither the data's fault nor the caller's.
	IO = errors.New("storage I/O error")
)

// Tag returns the stable binding tag of err: "not_found", "conflict",
// "corrupt", "invalid_input", "unsupported", "cancelled", "io", or
// "internal" for anything else. context.Canceled and context.DeadlineExceeded are
// "cancelled". When err wraps several kinds, the first in that order wins.
func Tag(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, Cancelled), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	case errors.Is(err, NotFound):
		return "not_found"
	case errors.Is(err, Conflict):
		return "conflict"
	case errors.Is(err, Corrupt):
		return "corrupt"
	case errors.Is(err, InvalidInput):
		return "invalid_input"
	case errors.Is(err, Unsupported):
		return "unsupported"
	case errors.Is(err, IO):
		return "io"
	default:
		return "internal"
	}
}
