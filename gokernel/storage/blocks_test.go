package storage

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// countingSource is an object in memory that counts (and can fail) reads.
func countingSource(data []byte, calls *atomic.Int64, fail *atomic.Bool) *blockSource {
	return &blockSource{size: int64(len(data)), read: func(ctx context.Context, p []byte, off int64) error {
		calls.Add(1)
		if err := ctx.Err(); err != nil {
			return err
		}
		if fail != nil && fail.Load() {
			return errors.New("injected")
		}
		copy(p, data[off:])
		return nil
	}}
}

// Small reads come back byte for byte, across block boundaries and at the
// end of the object, from whichever goroutine; large ones go direct.
func TestBlockReadsAreExact(t *testing.T) {
	data := randomBytes(5*blockBytes+12345, 1)
	var calls atomic.Int64
	src := countingSource(data, &calls, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < 500; i++ {
				n := 1 + r.IntN(blockReadBelow-1)
				if i%50 == 0 {
					n = blockReadBelow + r.IntN(blockBytes) // direct
				}
				off := r.Int64N(int64(len(data) - n + 1))
				if i%7 == 0 { // straddle a block boundary
					off = max(0, min(int64(len(data)-n), int64(1+r.IntN(5))*blockBytes-int64(n/2)))
				}
				p := make([]byte, n)
				if err := src.readAt(ctx, p, off); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p, data[off:off+int64(n)]) {
					t.Errorf("read [%d,+%d) differs", off, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	if c := calls.Load(); c > 4000/2 {
		t.Fatalf("%d store reads for 4000 reads: the blocks saved nothing", c)
	}
}

// A file read front to back in small pieces costs one store read per
// block (read-ahead included), not one per piece.
func TestBlockReadAhead(t *testing.T) {
	data := randomBytes(20*blockBytes, 2)
	var calls atomic.Int64
	src := countingSource(data, &calls, nil)
	p := make([]byte, 100)
	for off := int64(0); off+100 <= int64(len(data)); off += 4096 {
		if err := src.readAt(context.Background(), p, off); err != nil {
			t.Fatal(err)
		}
	}
	if c := calls.Load(); c > 20+readAheadBlocks {
		t.Fatalf("%d store reads for a %d-block file", c, 20)
	}
}

// A failed read is not cached: the next read of the block tries again.
func TestBlockErrorsAreNotCached(t *testing.T) {
	data := randomBytes(3*blockBytes, 3)
	var calls atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	src := countingSource(data, &calls, &fail)
	p := make([]byte, 10)
	if err := src.readAt(context.Background(), p, 2*blockBytes+5); err == nil {
		t.Fatal("read through a failing store succeeded")
	}
	fail.Store(false)
	if err := src.readAt(context.Background(), p, 2*blockBytes+5); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[2*blockBytes+5:][:10]) {
		t.Fatal("wrong bytes after a retry")
	}
	// a cancelled reader gets its own error, and leaves nothing behind
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := src.readAt(ctx, p, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	if err := src.readAt(context.Background(), p, 5); err != nil || !bytes.Equal(p, data[5:15]) {
		t.Fatalf("read after a cancelled one: %v", err)
	}
}

// The cache holds at most its limit.
func TestBlockCacheIsBounded(t *testing.T) {
	data := randomBytes(blockCacheBytes/blockBytes*blockBytes+8*blockBytes, 4)
	var calls atomic.Int64
	src := countingSource(data, &calls, nil)
	p := make([]byte, 8)
	for off := int64(0); off < int64(len(data)); off += blockBytes {
		if err := src.readAt(context.Background(), p, off); err != nil {
			t.Fatal(err)
		}
	}
	blocks.mu.Lock()
	b := blocks.bytes
	blocks.mu.Unlock()
	if b > blockCacheBytes {
		t.Fatalf("cache holds %d bytes, limit %d", b, blockCacheBytes)
	}
}
