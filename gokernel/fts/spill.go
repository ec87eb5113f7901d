package fts

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// A merge never holds its inputs' posting lists whole. The output tokens
// are cut into buckets (runs of output token ids) of about MemoryBytes
// of stored postings each. A first pass streams every input's invert
// file in row windows and appends each token's row, as stored, to its
// bucket; a second pass loads one bucket at a time and merges its
// tokens. When everything fits one bucket, the bucket stays in memory;
// otherwise the buckets live in one temporary file, unlinked at once so
// that nothing is left behind whatever happens to the process.

// Default budget of MergeOptions.MemoryBytes, and bounds on buckets.
const (
	DefaultMemoryBytes = 64 << 20
	scatterWindow      = 4 << 20 // stored bytes per window of an invert file
	maxBuckets         = 1 << 16
)

// spill holds the buckets of a merge.
type spill struct {
	mu     sync.Mutex
	f      *os.File // nil: one bucket, in memory
	mem    []byte
	size   int64
	chunks [][]spillChunk // per bucket: where its bytes are in f
	sizes  []uint64       // per bucket: bytes so far
}

type spillChunk struct {
	off int64
	n   int
}

// newSpill makes room for buckets; estimate is the expected bytes of the
// single in-memory bucket.
func newSpill(buckets int, estimate int64, dir string) (*spill, error) {
	s := &spill{chunks: make([][]spillChunk, buckets), sizes: make([]uint64, buckets)}
	if buckets == 1 {
		s.mem = make([]byte, 0, estimate+estimate/8)
		return s, nil
	}
	f, err := os.CreateTemp(dir, "lance-segmerge-fts-*.spill")
	if err != nil {
		return nil, fmt.Errorf("%w: fts merge: spill file: %w", errkind.IO, err)
	}
	// Unlinked while open: the file goes when it is closed, or when the
	// process dies.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: fts merge: spill file: %w", errkind.IO, err)
	}
	s.f = f
	return s, nil
}

// add appends p to bucket w and returns where p starts in the bucket.
func (s *spill) add(w int, p []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.sizes[w]
	if at+uint64(len(p)) > math.MaxUint32 {
		return 0, fmt.Errorf("%w: fts merge: a bucket of tokens holds more than 4 GiB of postings", errkind.Unsupported)
	}
	if s.f == nil {
		s.mem = append(s.mem, p...)
	} else {
		if _, err := s.f.Write(p); err != nil {
			return 0, fmt.Errorf("%w: fts merge: spill file: %w", errkind.IO, err)
		}
		s.chunks[w] = append(s.chunks[w], spillChunk{s.size, len(p)})
		s.size += int64(len(p))
	}
	s.sizes[w] += uint64(len(p))
	return at, nil
}

// load returns bucket w's bytes, read into buf when spilled.
func (s *spill) load(w int, buf []byte) ([]byte, error) {
	if s.f == nil {
		return s.mem, nil
	}
	if uint64(cap(buf)) < s.sizes[w] {
		// One buffer, of the largest bucket, serves every bucket.
		buf = make([]byte, slices.Max(s.sizes))
	}
	buf = buf[:0]
	for _, c := range s.chunks[w] {
		n := len(buf)
		buf = buf[:n+c.n]
		if _, err := s.f.ReadAt(buf[n:], c.off); err != nil {
			return nil, fmt.Errorf("%w: fts merge: spill file: %w", errkind.IO, err)
		}
	}
	return buf, nil
}

func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
	}
	s.mem = nil
}

// A record is one input token's row as stored, little-endian:
// documents, block count, each block's length, the blocks; with
// positions, the run count, each run's start, the stream's length and
// the stream.

// appendRecord appends row t of v.
func appendRecord(dst []byte, v *Invert, t int, withPos bool) []byte {
	le := binary.LittleEndian
	po, it := v.Postings, v.Postings.Items
	lo, hi := po.Offsets[t], po.Offsets[t+1]
	dst = le.AppendUint32(dst, v.Length[t])
	dst = le.AppendUint32(dst, uint32(hi-lo))
	for i := lo; i < hi; i++ {
		dst = le.AppendUint32(dst, uint32(it.Offsets[i+1]-it.Offsets[i]))
	}
	dst = append(dst, it.Values[it.Offsets[lo]:it.Offsets[hi]]...)
	if withPos {
		pb := v.PosBlocks
		a, b := pb.Offsets[t], pb.Offsets[t+1]
		dst = le.AppendUint32(dst, uint32(b-a))
		dst = append(dst, pb.Items.Values[4*a:4*b]...)
		stream := v.Positions.Values[v.Positions.Offsets[t]:v.Positions.Offsets[t+1]]
		dst = le.AppendUint32(dst, uint32(len(stream)))
		dst = append(dst, stream...)
	}
	return dst
}

// record is a parsed record; its slices point into the bucket.
type record struct {
	length int
	blocks [][]byte
	runs   []byte // little-endian uint32 starts
	stream []byte
}

var errShortRecord = fmt.Errorf("%w: fts merge: a spilled posting list is cut short", errkind.Corrupt)

// parseRecord parses the record at the start of b, reusing blocks.
func parseRecord(b []byte, withPos bool, blocks [][]byte) (record, error) {
	r := record{blocks: blocks[:0]}
	at := 0
	u32 := func() (int, bool) {
		if len(b)-at < 4 {
			return 0, false
		}
		v := binary.LittleEndian.Uint32(b[at:])
		at += 4
		return int(v), true
	}
	n, ok1 := u32()
	nb, ok2 := u32()
	if !ok1 || !ok2 || nb > (len(b)-at)/4 {
		return r, errShortRecord
	}
	lens := b[at : at+4*nb]
	at += 4 * nb
	for i := 0; i < nb; i++ {
		l := int(binary.LittleEndian.Uint32(lens[4*i:]))
		if l > len(b)-at {
			return r, errShortRecord
		}
		r.blocks = append(r.blocks, b[at:at+l])
		at += l
	}
	r.length = n
	if withPos {
		nr, ok := u32()
		if !ok || nr > (len(b)-at)/4 {
			return r, errShortRecord
		}
		r.runs = b[at : at+4*nr]
		at += 4 * nr
		sl, ok := u32()
		if !ok || sl > len(b)-at {
			return r, errShortRecord
		}
		r.stream = b[at : at+sl]
	}
	return r, nil
}

// windowRows is how many rows of an invert file of rows rows and size
// bytes make a window of about scatterWindow stored bytes.
func windowRows(rows uint64, size int64) uint64 {
	if size <= 0 {
		return max(1, rows)
	}
	return max(1, rows*scatterWindow/uint64(size))
}

// scatter streams every input partition's invert file in windows and
// appends each token row to its output token's bucket, noting where in
// u.sources.
func (sp *spill) scatter(ctx context.Context, loads []load, parts []*part, u *tokenUnion, bucketOf []int32, withPos bool) error {
	return parallel(ctx, len(loads), func(i int) error {
		l, pt := loads[i], parts[i]
		r, closeFn, err := l.seg.open(ctx, InvertFile(l.p))
		if err != nil {
			return err
		}
		defer closeFn()
		rows := uint64(len(pt.lengths))
		if r.NumRows() != rows {
			return fmt.Errorf("%w: %s: %d rows, then %d", errkind.Corrupt, InvertFile(l.p), rows, r.NumRows())
		}
		step := windowRows(rows, r.Size())
		staged := map[int32][]byte{}
		type placed struct {
			slot int32
			w    int32
			off  uint32
		}
		var where []placed
		for lo := uint64(0); lo < rows; lo += step {
			if err := ctx.Err(); err != nil {
				return err
			}
			hi := min(lo+step, rows)
			v, err := readInvertRange(ctx, r, lo, hi, l.seg.Meta.layout(), false)
			if err != nil {
				return fmt.Errorf("%s: %w", InvertFile(l.p), err)
			}
			where = where[:0]
			for t := range v.Length {
				id := int(lo) + t
				if v.Length[t] != pt.lengths[id] {
					return fmt.Errorf("%w: %s: token %d has %d documents, then %d", errkind.Corrupt, InvertFile(l.p), id, pt.lengths[id], v.Length[t])
				}
				k := u.start[i] + int32(id)
				w := bucketOf[u.cOf[k]]
				buf := staged[w]
				where = append(where, placed{u.slot[k], w, uint32(len(buf))})
				staged[w] = appendRecord(buf, v, t, withPos)
			}
			base := map[int32]uint64{}
			for w, buf := range staged {
				if len(buf) == 0 {
					continue
				}
				at, err := sp.add(int(w), buf)
				if err != nil {
					return err
				}
				base[w] = at
				staged[w] = buf[:0]
			}
			for _, p := range where {
				u.sources[p.slot].loc = uint32(base[p.w] + uint64(p.off))
			}
		}
		return nil
	})
}
