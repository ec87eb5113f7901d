package ivf

import (
	"bytes"
	"container/list"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// The segment cache: what OpenFiles decodes from a segment's two files
// (the Lance files' metadata, both IVF messages with their centroids, the
// quantizer metadata, and once asked for, the PQ codebook or RQ rotation)
// is kept per process, keyed by the exact bytes of both files (their
// storage identity: path, inode, size and times of a local file; endpoint,
// bucket, key and ETag or generation of an object), so that listing,
// planning, merging and committing decode each segment's model once, not
// once per step (a 2048-partition, 128-d IVF message is 1 MiB of
// centroids). A file rewritten or replaced under the same name has another
// identity and is decoded afresh; the key includes the full path or URL,
// so entries are safe across datasets and stores. Objects without an
// identity (wrappers, test doubles) are never cached.
//
// The cache is bounded in bytes (least recently used entries are dropped
// first). Tensors (centroids, codebooks, rotations) are interned: the
// segments of one index share one model, so a thousand delta segments hold
// one copy of their centroids, not a thousand.
//
// Everything a cached entry holds is immutable once inserted: Files built
// from it share its Readers' metadata and its models; callers must never
// modify a Files' IVF, IndexIVF, Quant or tensors.

// DefaultCacheBytes is the default bound of the segment cache.
const DefaultCacheBytes = 128 << 20

var cache = newSegmentCache(DefaultCacheBytes)

// SetCacheLimit bounds the segment cache to limit bytes (0 disables it and
// drops what it holds) and returns the previous bound.
func SetCacheLimit(limit int64) int64 {
	c := cache
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.limit
	c.limit = max(0, limit)
	c.evict()
	return old
}

// CacheStats are the segment cache's counters.
type CacheStats struct {
	Hits, Misses int64
	Entries      int
	Bytes        int64 // entries and distinct tensors
	Tensors      int   // distinct tensors held
}

// ReadCacheStats returns the segment cache's counters.
func ReadCacheStats() CacheStats {
	c := cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: c.lru.Len(), Bytes: c.bytes, Tensors: len(c.byTensor)}
}

// segMeta is what a segment's two files decode to: shared by every Files
// opened on the same bytes. Only the quantizer buffers are filled later,
// under mu.
type segMeta struct {
	index, aux *lancefile.Reader // metadata only: Reopen them on objects
	typ        IndexType
	distance   string
	ivf        *Model
	indexIVF   *Model
	quant      *QuantizerMeta
	quantJSON  string

	mu       sync.Mutex
	loaded   bool    // codebook and rotation read
	codebook *Tensor // PQ
	rotation *Tensor // RQ, matrix rotation
	entry    *cacheEntry
}

type cacheEntry struct {
	key     string
	meta    *segMeta
	bytes   int64 // own bytes, interned tensors not included
	tensors []*internedTensor
	elem    *list.Element
}

type internedTensor struct {
	t    *Tensor
	refs int
}

type segmentCache struct {
	mu    sync.Mutex
	limit int64
	bytes int64
	lru   *list.List // *cacheEntry, most recently used first
	byKey map[string]*cacheEntry
	// The distinct tensors held, by identity and by their data's length
	// (the tensors an equal one could be).
	byTensor map[*Tensor]*internedTensor
	bySize   map[int][]*internedTensor
	hits     atomic.Int64
	misses   atomic.Int64
}

func newSegmentCache(limit int64) *segmentCache {
	return &segmentCache{limit: limit, lru: list.New(), byKey: map[string]*cacheEntry{},
		byTensor: map[*Tensor]*internedTensor{}, bySize: map[int][]*internedTensor{}}
}

// cacheKey names the bytes of a segment's two files and the options they
// were opened with, or "" when either file has no identity.
func cacheKey(index, aux storage.Object, opts lancefile.Options) string {
	a, b := storage.ObjectIdentity(index), storage.ObjectIdentity(aux)
	if a == "" || b == "" {
		return ""
	}
	return fmt.Sprintf("%s\x00%s\x00%+v", a, b, opts)
}

func (c *segmentCache) get(key string) *segMeta {
	if key == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[key]
	if e == nil {
		c.misses.Add(1)
		return nil
	}
	c.hits.Add(1)
	c.lru.MoveToFront(e.elem)
	return e.meta
}

// put inserts a freshly decoded segment (not yet shared with anyone, so its
// tensors can be swapped for interned ones) and returns the meta to use:
// the one already cached under key when another goroutine got there first.
func (c *segmentCache) put(key string, m *segMeta) *segMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	if key == "" || c.limit == 0 {
		return m
	}
	if e := c.byKey[key]; e != nil {
		c.lru.MoveToFront(e.elem)
		return e.meta
	}
	e := &cacheEntry{key: key, meta: m, bytes: m.ownBytes()}
	for _, t := range []**Tensor{centroidsOf(m.ivf), centroidsOf(m.indexIVF)} {
		if t != nil && *t != nil {
			*t = c.intern(e, *t)
		}
	}
	m.entry = e
	e.elem = c.lru.PushFront(e)
	c.byKey[key] = e
	c.bytes += e.bytes
	c.evict()
	return m
}

func centroidsOf(m *Model) **Tensor {
	if m == nil {
		return nil
	}
	return &m.Centroids
}

// addTensors interns the quantizer buffers read after the entry was
// inserted (codebook, rotation); called with m.mu held.
func (c *segmentCache) addTensors(m *segMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := m.entry
	if e == nil || c.byKey[e.key] != e {
		return // not cached, or evicted meanwhile
	}
	for _, t := range []**Tensor{&m.codebook, &m.rotation} {
		if *t != nil {
			*t = c.intern(e, *t)
		}
	}
	c.evict()
}

// find returns a cached tensor equal to t, or nil. t may alias memory the
// caller reuses: nothing of it is kept.
func (c *segmentCache) find(t *Tensor) *Tensor {
	c.mu.Lock()
	if c.limit == 0 {
		c.mu.Unlock()
		return nil
	}
	// Compared outside the lock (tensors are immutable), from a copy of the
	// list: eviction edits it in place.
	same := slices.Clone(c.bySize[len(t.Data)])
	c.mu.Unlock()
	for _, it := range same {
		if equalTensors(it.t, t) {
			return it.t
		}
	}
	return nil
}

func equalTensors(a, b *Tensor) bool {
	return a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && bytes.Equal(a.Data, b.Data)
}

// intern returns the cached tensor equal to t (or t, now cached), and
// records that e references it. Called with c.mu held.
func (c *segmentCache) intern(e *cacheEntry, t *Tensor) *Tensor {
	it := c.byTensor[t] // find gave t out
	if it == nil {
		for _, held := range c.bySize[len(t.Data)] {
			if equalTensors(held.t, t) {
				it = held
				break
			}
		}
	}
	if it == nil {
		it = &internedTensor{t: t}
		c.byTensor[t] = it
		c.bySize[len(t.Data)] = append(c.bySize[len(t.Data)], it)
		c.bytes += tensorBytes(t)
	}
	it.refs++
	e.tensors = append(e.tensors, it)
	return it.t
}

func tensorBytes(t *Tensor) int64 { return int64(len(t.Data)) + 4*int64(len(t.Shape)) + 64 }

// evict drops least recently used entries until the cache fits its limit.
// Called with c.mu held.
func (c *segmentCache) evict() {
	for c.bytes > c.limit && c.lru.Len() > 0 {
		e := c.lru.Back().Value.(*cacheEntry)
		c.lru.Remove(e.elem)
		delete(c.byKey, e.key)
		c.bytes -= e.bytes
		for _, it := range e.tensors {
			if it.refs--; it.refs == 0 {
				delete(c.byTensor, it.t)
				n := len(it.t.Data)
				if c.bySize[n] = slices.DeleteFunc(c.bySize[n], func(x *internedTensor) bool { return x == it }); len(c.bySize[n]) == 0 {
					delete(c.bySize, n)
				}
				c.bytes -= tensorBytes(it.t)
			}
		}
		e.tensors = nil
	}
}

// ownBytes estimates what an entry holds besides its tensors: the decoded
// metadata of both files (a few times their stored size), the partition
// lengths and offsets, the quantizer JSON.
func (m *segMeta) ownBytes() int64 {
	n := int64(1024) + 3*(m.index.MetadataBytes()+m.aux.MetadataBytes()) + 2*int64(len(m.quantJSON))
	for _, iv := range []*Model{m.ivf, m.indexIVF} {
		if iv != nil {
			n += 12 * int64(len(iv.Lengths))
		}
	}
	return n
}
