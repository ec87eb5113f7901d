// Package bufpool recycles large byte buffers between the operations of
// one process (a worker merges task after task), by power-of-two size
// class, up to a byte limit.
//
// Unlike sync.Pool, which the garbage collector empties every cycle (and a
// merge allocates fast enough to run cycles constantly), what is pooled
// here stays until reused, so a steady stream of merges stops allocating
// and zeroing fresh memory for every window and page. The limit bounds what
// an idle process keeps.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool is a bounded free list of byte buffers. The zero value is not
// usable; use New.
type Pool struct {
	mu      sync.Mutex
	classes [48][][]byte // by log2 of the capacity
	held    int          // bytes held
	limit   int
}

// Default is the process-wide pool that the file writer (page buffers), the
// file reader (mini-block chunk spans) and the merge (window buffers) share.
// 256 MiB bounds what an idle worker keeps: a few windows' read buffers
// and a few writers' pages.
var Default = New(256 << 20)

// New returns a pool that holds at most limit bytes.
func New(limit int) *Pool { return &Pool{limit: limit} }

// minClass is the smallest class pooled (4 KiB). Not larger: a merge of
// many small segments holds a buffer per input and column, and rounding a
// 1000-row delta's 8 KiB up to a large class multiplied what it held (a
// 200-delta merge faulted in 200 MB of fresh memory for 5 MB of rows).
const minClass = 12

func classOf(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// Get returns an empty buffer with capacity at least n.
func (p *Pool) Get(n int) []byte {
	c := classOf(n)
	if c >= len(p.classes) {
		return make([]byte, 0, n)
	}
	p.mu.Lock()
	if l := len(p.classes[c]); l > 0 {
		b := p.classes[c][l-1]
		p.classes[c] = p.classes[c][:l-1]
		p.held -= cap(b)
		p.mu.Unlock()
		return b[:0]
	}
	p.mu.Unlock()
	return make([]byte, 0, 1<<c)
}

// Put hands b back; b must not be used afterwards. Buffers that are not
// exactly a class size (not from Get), or that would exceed the limit, are
// left to the garbage collector.
func (p *Pool) Put(b []byte) {
	n := cap(b)
	if n < 1<<minClass || n&(n-1) != 0 {
		return
	}
	c := bits.Len(uint(n)) - 1
	if c >= len(p.classes) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held+n > p.limit {
		return
	}
	p.classes[c] = append(p.classes[c], b[:0])
	p.held += n
}

// Held reports the bytes the pool holds.
func (p *Pool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}
