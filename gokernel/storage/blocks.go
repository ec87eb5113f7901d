package storage

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Small reads of remote objects go through aligned blocks.
//
// A Lance file is read page by page, and a mini-block page by its chunk
// metadata (a few bytes) then its chunk data: a merge of 41 segments of
// 2048 partitions made 7000 ranged GETs of 4 bytes to 60 KiB, one after
// the other, and each paid the store's round trip (2 MB/s through a 20 ms
// proxy, against 113 MB/s without the delay). Reads below blockReadBelow
// bytes are served from blocks of blockBytes fetched whole; a read that
// goes on from the previous one (same or next block) starts fetching the
// next readAheadBlocks blocks, so a file read front to back (every merge
// input is, column by column) keeps 4 MiB of round trips in flight instead
// of one (20 ms proxy: 2 → 54 MB/s with 4 blocks, 100 MB/s with 16). Blocks live in one process-wide cache bounded
// by blockCacheBytes, least recently used first out. Larger reads go to
// the store directly.
const (
	blockBytes      = 256 << 10
	blockReadBelow  = 64 << 10
	readAheadBlocks = 16
	blockCacheBytes = 256 << 20
)

// blockSource is one opened remote object seen by the block cache: its
// size and how to read a range of it.
type blockSource struct {
	size int64
	read func(ctx context.Context, p []byte, off int64) error
	// last is one past the last block read (0: none yet): a read that
	// starts in that block or the one before reads on, and only such reads
	// fetch ahead (opening a file jumps between its footer and metadata).
	last atomic.Int64
}

// readAt fills p from off: small reads through the block cache, others
// directly (in concurrent parts when large).
func (b *blockSource) readAt(ctx context.Context, p []byte, off int64) error {
	if len(p) >= blockReadBelow {
		return splitRead(ctx, p, off, b.read)
	}
	first, last := off/blockBytes, (off+int64(len(p))-1)/blockBytes
	for k := first; k <= last; k++ {
		data, err := blocks.get(ctx, b, k)
		if err != nil {
			return err
		}
		lo := max(off, k*blockBytes)
		hi := min(off+int64(len(p)), (k+1)*blockBytes)
		copy(p[lo-off:hi-off], data[lo-k*blockBytes:hi-k*blockBytes])
	}
	if prev := b.last.Swap(last+1) - 1; prev >= 0 && (first == prev || first == prev+1) {
		for k := last + 1; k <= last+readAheadBlocks && k*blockBytes < b.size; k++ {
			blocks.prefetch(ctx, b, k)
		}
	}
	return nil
}

type blockKey struct {
	src *blockSource
	idx int64
}

// blockEntry is a block fetched or being fetched; done closes when data
// or err is set. Only fetched blocks are in the LRU list.
type blockEntry struct {
	done chan struct{}
	data []byte
	err  error
	elem *list.Element
}

type blockCache struct {
	mu    sync.Mutex
	m     map[blockKey]*blockEntry
	lru   *list.List // of blockKey, most recent at the front
	bytes int64
	limit int64
}

var blocks = &blockCache{m: map[blockKey]*blockEntry{}, lru: list.New(), limit: blockCacheBytes}

// get returns block k of src, fetching it (once, whoever asks) when it is
// not cached. A failed fetch is not kept: the next get tries again.
func (c *blockCache) get(ctx context.Context, src *blockSource, k int64) ([]byte, error) {
	for {
		e, fetch := c.entry(src, k)
		if fetch {
			c.fetch(ctx, src, k, e)
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err == nil {
			return e.data, nil
		}
		// A read-ahead started by a read whose context has ended fails
		// with that context's error: fetch again under ours.
		if ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
			continue
		}
		return nil, e.err
	}
}

// prefetch starts fetching block k of src unless it is cached or on its
// way. The fetch does not end with ctx: callers read through contexts that
// end with each window of a merge, and the blocks read ahead are for the
// next one. It ends with its one ranged read (retries included).
func (c *blockCache) prefetch(ctx context.Context, src *blockSource, k int64) {
	if e, fetch := c.entry(src, k); fetch {
		go c.fetch(context.WithoutCancel(ctx), src, k, e)
	}
}

// entry finds block k of src, or adds it (fetch: the caller fetches it).
func (c *blockCache) entry(src *blockSource, k int64) (e *blockEntry, fetch bool) {
	key := blockKey{src, k}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil {
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		return e, false
	}
	e = &blockEntry{done: make(chan struct{})}
	c.m[key] = e
	return e, true
}

func (c *blockCache) fetch(ctx context.Context, src *blockSource, k int64, e *blockEntry) {
	n := min(int64(blockBytes), src.size-k*blockBytes)
	buf := make([]byte, n)
	err := src.read(ctx, buf, k*blockBytes)
	key := blockKey{src, k}
	c.mu.Lock()
	if err != nil {
		e.err = err
		delete(c.m, key)
	} else {
		e.data = buf
		e.elem = c.lru.PushFront(key)
		c.bytes += n
		for c.bytes > c.limit && c.lru.Len() > 1 {
			old := c.lru.Back()
			ok := old.Value.(blockKey)
			c.lru.Remove(old)
			c.bytes -= int64(len(c.m[ok].data))
			delete(c.m, ok)
		}
	}
	c.mu.Unlock()
	close(e.done)
}
