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
	// finished keeps the last counters of operations that ended, until
	// Progress reads them once (at most maxFinished, oldest dropped first),
	// so that the caller sees the final counts.
	finished      = map[string]segment.Snapshot{}
	finishedOrder []string
)

const maxFinished = 256

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
		if id != "" {
			finished[id] = prog.Snapshot()
			finishedOrder = append(finishedOrder, id)
			if len(finishedOrder) > maxFinished {
				delete(finished, finishedOrder[0])
				finishedOrder = finishedOrder[1:]
			}
		}
		opsMu.Unlock()
		cancel()
	}
}

// Progress returns the counters of a running operation as JSON; for an
// operation that ended, its final counters, once; "" when no operation has
// that id (not started yet, or finished and already read).
func Progress(opID string) string {
	opsMu.Lock()
	op := ops[opID]
	last, ended := finished[opID]
	if op == nil && ended {
		delete(finished, opID) // its order entry ages out
	}
	opsMu.Unlock()
	var snap segment.Snapshot
	switch {
	case op != nil:
		snap = op.prog.Snapshot()
	case ended:
		snap = last
	default:
		return ""
	}
	b, _ := json.Marshal(snap)
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

// offThread runs f on a goroutine of its own and waits for it. A call
// from Python runs on a goroutine locked to the calling thread, so every
// time that goroutine blocks (on a channel of the decoders it waits for,
// say) and wakes, the thread itself sleeps and is woken by the kernel;
// a free goroutine switches in the Go scheduler instead (the optimize of
// a BTREE of a thousand segments, 100M rows, three runs alternating:
// 6.3-6.9 s on the calling goroutine, 4.9-6.6 s off it, with a third
// fewer context switches). f recovers its own panics (recoverTo).
func offThread[T any](f func() (T, error)) (out T, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err = f()
	}()
	<-done
	return out, err
}
