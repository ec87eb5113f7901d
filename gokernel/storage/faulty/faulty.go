// Package faulty wraps a storage.Store to inject the failures of a real
// store, for crash and fault tests: a disk that fills up after a budget of
// written bytes (ENOSPC, as the local backend reports it), or an operation
// that fails on its Nth call.
//
//	st := faulty.New(storage.NewMem(), faulty.Options{WriteBudget: 4096})
//	// writes and publishes beyond 4096 bytes fail with errkind.IO + syscall.ENOSPC
//
// Reads, listings and deletes are never charged: a full disk still lets a
// failed operation clean up after itself, which is what the tests check.
// A Store is safe for concurrent use.
package faulty

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Options choose the faults. The zero value injects none.
type Options struct {
	// WriteBudget, when positive, is how many bytes may be written (by
	// Create writers and PutIfAbsent together) before writes fail with
	// ENOSPC. The write that crosses the budget fails whole.
	WriteBudget int64
	// FailOp names an operation ("create", "write", "finish", "put", "sync")
	// whose FailAt-th call (1-based) fails with EIO.
	FailOp string
	FailAt int64
}

// Store is a storage.Store with injected faults.
type Store struct {
	storage.Store
	opts    Options
	written atomic.Int64
	mu      sync.Mutex
	calls   map[string]int64
	// Failures counts the faults injected so far.
	Failures atomic.Int64
}

// New wraps st.
func New(st storage.Store, opts Options) *Store {
	return &Store{Store: st, opts: opts, calls: map[string]int64{}}
}

// Written is how many bytes were written so far.
func (s *Store) Written() int64 { return s.written.Load() }

func (s *Store) op(name, object string) error {
	if s.opts.FailOp != name {
		return nil
	}
	s.mu.Lock()
	s.calls[name]++
	n := s.calls[name]
	s.mu.Unlock()
	if n == s.opts.FailAt {
		s.Failures.Add(1)
		return fmt.Errorf("%w: storage: %s %s: %w (injected)", errkind.IO, name, object, syscall.EIO)
	}
	return nil
}

// charge takes n bytes from the budget, or fails with ENOSPC.
func (s *Store) charge(object string, n int) error {
	if s.opts.WriteBudget <= 0 {
		s.written.Add(int64(n))
		return nil
	}
	if s.written.Add(int64(n)) > s.opts.WriteBudget {
		s.written.Add(-int64(n))
		s.Failures.Add(1)
		return fmt.Errorf("%w: storage: write %s: %w (injected after %d bytes)", errkind.IO, object, syscall.ENOSPC, s.opts.WriteBudget)
	}
	return nil
}

func (s *Store) Create(ctx context.Context, name string) (storage.Writer, error) {
	if err := s.op("create", name); err != nil {
		return nil, err
	}
	w, err := s.Store.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	return &writer{Writer: w, s: s, name: name}, nil
}

func (s *Store) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if err := s.op("put", name); err != nil {
		return err
	}
	if err := s.charge(name, len(data)); err != nil {
		return err
	}
	return s.Store.PutIfAbsent(ctx, name, data)
}

func (s *Store) Sync(ctx context.Context, names []string) error {
	if err := s.op("sync", fmt.Sprint(names)); err != nil {
		return err
	}
	return s.Store.Sync(ctx, names)
}

type writer struct {
	storage.Writer
	s    *Store
	name string
}

func (w *writer) Write(p []byte) (int, error) {
	if err := w.s.op("write", w.name); err != nil {
		return 0, err
	}
	if err := w.s.charge(w.name, len(p)); err != nil {
		return 0, err
	}
	return w.Writer.Write(p)
}

func (w *writer) Finish() error {
	if err := w.s.op("finish", w.name); err != nil {
		w.Writer.Abort()
		return err
	}
	return w.Writer.Finish()
}
