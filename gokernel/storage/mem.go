package storage

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Mem is an in-memory Store, for tests. Stores opened with the same
// memory://name URI share their contents within the process.
type Mem struct {
	uri  string
	mu   sync.Mutex
	objs map[string]memObj
}

type memObj struct {
	data []byte
	mod  time.Time
	gen  uint64 // unique per write, process-wide
}

// memGen numbers the writes of every Mem store.
var memGen atomic.Uint64

var (
	memMu     sync.Mutex
	memByName = map[string]*Mem{}
)

func memStore(name string) *Mem {
	memMu.Lock()
	defer memMu.Unlock()
	if m, ok := memByName[name]; ok {
		return m
	}
	m := NewMem("memory://" + name)
	memByName[name] = m
	return m
}

// NewMem returns an empty, private in-memory store.
func NewMem(uri string) *Mem { return &Mem{uri: RedactURI(uri), objs: map[string]memObj{}} }

func (m *Mem) URI() string { return m.uri }

func (m *Mem) Open(ctx context.Context, name string) (Object, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[name]
	if !ok {
		return nil, fmt.Errorf("%w: storage: open %s", errkind.NotFound, name)
	}
	return &memObject{name: name, data: o.data, id: fmt.Sprintf("mem:%s|%d", name, o.gen)}, nil
}

type memObject struct {
	name string
	data []byte // never mutated: writers replace the slice
	id   string
}

func (o *memObject) Identity() string { return o.id }

func (o *memObject) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := readBounds(o.name, int64(len(o.data)), len(p), off); err != nil {
		return err
	}
	copy(p, o.data[off:])
	return ctx.Err()
}
func (o *memObject) Size() int64  { return int64(len(o.data)) }
func (o *memObject) Close() error { return nil }

func (m *Mem) Create(ctx context.Context, name string) (Writer, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return &memWriter{m: m, name: name}, nil
}

type memWriter struct {
	m    *Mem
	name string
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }
func (w *memWriter) Finish() error {
	if w.done {
		return fmt.Errorf("storage: %s: Finish after Finish or Abort", w.name)
	}
	w.done = true
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.m.objs[w.name] = memObj{data: bytes.Clone(w.buf.Bytes()), mod: time.Now(), gen: memGen.Add(1)}
	return nil
}
func (w *memWriter) Abort() { w.done = true }

func (m *Mem) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objs[name]; ok {
		return fmt.Errorf("%w: storage: publish %s: already exists", errkind.Conflict, name)
	}
	m.objs[name] = memObj{data: bytes.Clone(data), mod: time.Now(), gen: memGen.Add(1)}
	return nil
}

func (m *Mem) List(ctx context.Context, prefix string) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	for name, o := range m.objs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, Entry{Name: name, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *Mem) Stat(ctx context.Context, name string) (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[name]
	if !ok {
		return Entry{}, fmt.Errorf("%w: storage: stat %s", errkind.NotFound, name)
	}
	return Entry{Name: name, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

func (m *Mem) Delete(ctx context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, name)
	return nil
}

// Sync does nothing: memory is as durable as it gets.
func (m *Mem) Sync(ctx context.Context, names []string) error { return nil }
