// Package rowset holds a set of row addresses (fragment id << 32 |
// offset) for the checks that find a row listed twice: a bit test per row
// where pylance's layouts put them, bounded memory whatever a hostile
// file holds.
package rowset

import "github.com/RoaringBitmap/roaring/v2/roaring64"

// Set finds repeated row addresses at a bit test per row: one bitset per
// fragment of the offsets seen, for fragment ids and offsets that a real
// segment has (the bitsets together hold at most a word per 16 rows of the
// segment, plus 1 MiB), and a roaring bitmap for the rest, which a hostile
// file cannot make large.
type Set struct {
	dense   [][]uint64 // by fragment id
	words   int        // words the dense bitsets may still take
	sparse  *roaring64.Bitmap
	nsparse int
}

const (
	maxDenseFragment = 1 << 16
	maxDenseOffset   = 1 << 26
)

// New is a Set for a segment of about rows rows.
func New(rows uint64) *Set {
	return &Set{words: int(min(rows/16, 1<<30)) + 1<<17, sparse: roaring64.New()}
}

// Add adds a row address and reports whether it was new.
func (s *Set) Add(id uint64) bool {
	frag, off := id>>32, id&(1<<32-1)
	if frag < maxDenseFragment && off < maxDenseOffset {
		if int(frag) >= len(s.dense) {
			s.dense = append(s.dense, make([][]uint64, int(frag)+1-len(s.dense))...)
		}
		b := s.dense[frag]
		w := int(off / 64)
		if w >= len(b) {
			grow := max(w+1, 2*len(b)) - len(b)
			if grow <= s.words {
				s.words -= grow
				b = append(b, make([]uint64, grow)...)
				s.dense[frag] = b
			}
		}
		if w < len(b) {
			bit := uint64(1) << (off % 64)
			if b[w]&bit != 0 {
				return false
			}
			b[w] |= bit
			// an id may have gone sparse before its bitset grew
			return s.nsparse == 0 || !s.sparse.Contains(id)
		}
	}
	if s.sparse.CheckedAdd(id) {
		s.nsparse++
		return true
	}
	return false
}
