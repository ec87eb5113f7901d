package encode

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkSortEvents sorts the threshold events of 64 RaBitQ rows (5 bits,
// 128-d normal residuals) per op.
func BenchmarkSortEvents(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rows [][]uint64
	var starts, ends []float32
	var s exScratch
	for r := 0; r < 64; r++ {
		v := randVec(rng, 128)
		abs := exAbsNormalized(make([]float32, 128), v)
		bestExRescale(&s, abs, 4)
		rows = append(rows, slices.Clone(s.events))
		maxV := slices.Max(abs)
		tEnd := float32(15+10) / maxV
		starts, ends = append(starts, tEnd*exTightStart[4]), append(ends, tEnd)
	}
	b.Run("buckets", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for r, ev := range rows {
				s.events = append(s.events[:0], ev...)
				sortEvents(&s, starts[r], ends[r])
			}
		}
	})
	b.Run("slices.Sort", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, ev := range rows {
				s.events = append(s.events[:0], ev...)
				slices.Sort(s.events)
			}
		}
	})
}
