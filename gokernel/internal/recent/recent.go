// Package recent keeps the last few values a process computed, by key:
// what several steps of one operation ask for again (a table's fragment
// reuse map, the statistics of a segment just written).
package recent

import (
	"slices"
	"sync"
)

// Cache holds at most its size of values, the oldest put dropped first.
// Values must not be modified once put. Safe for concurrent use.
type Cache[V any] struct {
	mu   sync.Mutex
	size int
	keys []string
	vals []V
}

// New returns a cache of at most size values.
func New[V any](size int) *Cache[V] { return &Cache[V]{size: size} }

// Get returns the value put under key, if it is still held.
func (c *Cache[V]) Get(key string) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.keys, key); i >= 0 {
		return c.vals[i], true
	}
	return v, false
}

// Put holds v under key, in place of what key held.
func (c *Cache[V]) Put(key string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.keys, key); i >= 0 {
		c.keys, c.vals = slices.Delete(c.keys, i, i+1), slices.Delete(c.vals, i, i+1)
	}
	if len(c.keys) >= c.size {
		c.keys, c.vals = c.keys[1:], c.vals[1:]
	}
	c.keys, c.vals = append(c.keys, key), append(c.vals, v)
}
