package radix

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrderIsAStableSort: the packed words give the keys in order, equal
// keys in their input order, for spans of one key to a full word (which
// does not pack with an index: ok false), with the buffers reused.
func TestOrderIsAStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Sorter
	for _, tc := range []struct {
		name string
		n    int
		key  func() uint64
	}{
		{"one key", 500, func() uint64 { return 42 }},
		{"a few bits", 3000, func() uint64 { return 1000 + rng.Uint64N(8) }},
		{"two passes", 5000, func() uint64 { return 1<<40 + rng.Uint64N(1<<27) }},
		{"many passes", 5000, func() uint64 { return rng.Uint64N(1 << 50) }},
		{"a full word", 100, func() uint64 { return rng.Uint64() | 1<<63 }},
	} {
		keys := make([]uint64, tc.n)
		for i := range keys {
			keys[i] = tc.key()
		}
		keys[0] = min(keys[0], math.MaxUint64>>1) // a full word spans 63 bits at least
		lo, hi := slices.Min(keys), slices.Max(keys)
		for round := range 2 {
			sorted, ib, ok := s.Order(keys, lo, hi)
			if tc.name == "a full word" {
				if ok {
					t.Fatalf("%s: packed a 64-bit span with an index", tc.name)
				}
				continue
			}
			if !ok || len(sorted) != tc.n {
				t.Fatalf("%s: ok %v, %d words", tc.name, ok, len(sorted))
			}
			mask := uint64(1)<<ib - 1
			for p := 1; p < len(sorted); p++ {
				a, b := sorted[p-1]&mask, sorted[p]&mask
				if keys[a] > keys[b] || keys[a] == keys[b] && a > b || sorted[p]>>ib != keys[b]-lo {
					t.Fatalf("%s, round %d: word %d (key %d, index %d) after key %d, index %d", tc.name, round, p, keys[b], b, keys[a], a)
				}
			}
		}
	}
}
