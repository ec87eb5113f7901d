package kway

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHeapPopsInOrder(t *testing.T) {
	less := func(a, b int) bool { return a < b }
	for _, n := range []int{0, 1, 2, 7, 100} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		h := make([]int, n)
		for i := range h {
			h[i] = rng.IntN(20)
		}
		want := slices.Sorted(slices.Values(h))
		Heapify(h, less)
		var got []int
		for len(h) > 0 {
			got = append(got, h[0])
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
			SiftDown(h, 0, less)
		}
		if !slices.Equal(got, want) && n > 0 {
			t.Fatalf("n=%d: popped %v, want %v", n, got, want)
		}
	}
}
