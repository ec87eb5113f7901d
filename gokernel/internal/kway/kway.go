// Package kway holds the heap of a k-way merge: the scalar merges keep one
// cursor per input in a min-heap by their current rows.
package kway

// SiftDown restores the min-heap order (by less) below i. Hand-written
// rather than container/heap, whose interface calls cost on every row.
func SiftDown[T any](h []T, i int, less func(a, b T) bool) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && less(h[r], h[l]) {
			j = r
		}
		if !less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// Heapify orders h as a min-heap by less.
func Heapify[T any](h []T, less func(a, b T) bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		SiftDown(h, i, less)
	}
}
