package verify

import (
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// TestDisown: rows nearer an appended centroid stay "earlier model" rows
// while their own centroid lies among them, and become misplaced when it
// lies far outside them (a damaged centroid), in either order.
func TestDisown(t *testing.T) {
	// Partition 0 holds rows around (0, 0) drawn to an appended centroid
	// beside them; partition 1's centroid is where the table says.
	rows := [][]float32{{0.1, 0.1}, {0.2, -0.1}, {-0.1, 0.2}, {0.1, 0.0}, {0.0, 0.1}}
	for _, tc := range []struct {
		name      string
		centroid0 []float32
		earlier   int
		misplaced int
	}{
		{"beside its rows", []float32{0, 0}, 5, 0},
		{"a little off", []float32{-0.1, -0.05}, 5, 0},
		{"far away", []float32{-40, -40}, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &encode.Model{Type: ivf.IVFFlat, Metric: encode.L2, Dim: 2,
				Centroids: append(append([]float32{}, tc.centroid0...), 20, 20, 0.05, 0.05)}
			cmp := &comparer{m: m}
			st := &codeStats{misplaced: map[int]int{}, earlier: map[int]int{}, drawn: map[int]*cloud{}, sampledIn: map[int]int{}}
			for _, v := range rows {
				st.sampledIn[0]++
				if !cmp.earlierModel(v, 0, 2) {
					t.Fatalf("%v: not an earlier-model row", v)
				}
				st.earlier[0]++
				st.drawnTo(0, 2).add(v)
			}
			st.disown(cmp)
			if st.earlier[0] != tc.earlier || st.misplaced[0] != tc.misplaced {
				t.Fatalf("earlier %d misplaced %d, want %d and %d", st.earlier[0], st.misplaced[0], tc.earlier, tc.misplaced)
			}
		})
	}
}
