package pybind

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
)

// Long calls (merge, commit) run under an operation id chosen by Python:
// Progress(id) reads their counters and Cancel(id) cancels their context,
// both from another Python thread while the call blocks its own (gopy
// releases the GIL during Go calls). Go never calls back into Python.

type operation struct {
	cancel context.CancelFunc
	prog   *segment.Progress
}

var (
	opsMu sync.Mutex
	ops   = map[string]*operation{}
	// cancelledEarly remembers Cancel calls that arrived before the
	// operation began (the Python thread may not have entered Go yet).
	cancelledEarly = map[string]bool{}
)

// beginOp registers an operation; done unregisters it.
func beginOp(id string) (ctx context.Context, prog *segment.Progress, done func()) {
	ctx, cancel := context.WithCancel(context.Background())
	prog = &segment.Progress{}
	opsMu.Lock()
	if id != "" {
		ops[id] = &operation{cancel: cancel, prog: prog}
		if cancelledEarly[id] {
			delete(cancelledEarly, id)
			cancel()
		}
	}
	opsMu.Unlock()
	return ctx, prog, func() {
		opsMu.Lock()
		delete(ops, id)
		opsMu.Unlock()
		cancel()
	}
}

// Progress returns the counters of a running operation as JSON, or "" when
// no operation has that id (not started yet, or finished).
func Progress(opID string) string {
	opsMu.Lock()
	op := ops[opID]
	opsMu.Unlock()
	if op == nil {
		return ""
	}
	b, _ := json.Marshal(op.prog.Snapshot())
	return string(b)
}

// Cancel cancels a running operation; it stops at its next check and
// cleans up its partial output. Cancelling an id that has not started yet
// cancels it as soon as it does. Returns whether the operation was running.
func Cancel(opID string) bool {
	opsMu.Lock()
	defer opsMu.Unlock()
	if op := ops[opID]; op != nil {
		op.cancel()
		return true
	}
	if opID != "" {
		cancelledEarly[opID] = true
	}
	return false
}
