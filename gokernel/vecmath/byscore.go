package vecmath

import "math"

// infLanes resets the lane minima of four vectors.
var infLanes = func() (l [4 * blockRows]float32) {
	for i := range l {
		l[i] = float32(math.Inf(1))
	}
	return l
}()

// NearestByScore is Nearest without its guarantee: the row of the smallest
// computed score (the lowest such row when scores are equal), the one
// Lance would pick for every vector but those whose two nearest rows are
// within rounding of each other. It skips the error bound, the candidate
// list and the Lance-order distances, which at a few dimensions cost more
// than the scores themselves: k-means training uses it, where the
// assignment of a near tie does not matter and speed does.
//
// dist[i] (if dist is not nil) is the distance recovered from the score
// (‖x‖² + 2·score, at least 0, for L2; 1 + score for dot), in float32.
// Vectors without a finite smallest score are measured exactly, as
// Nearest measures them.
func (s *Searcher) NearestByScore(x []float32, stride, n int, idx []int32, dist []float32, sc *SearchScratch) {
	scores, kc, done := s.begin(x, stride, n, idx, dist, sc)
	if done {
		return
	}
	inf := float32(math.Inf(1))
	var low [4]float32
	var best [4]int32
	var lanes [4 * blockRows]float32
	for i0 := 0; i0 < n; i0 += 4 {
		rows := min(4, n-i0)
		xb := x[i0*stride:]
		for r := 0; r < rows; r++ {
			low[r], best[r] = inf, -1
		}
		for j0 := 0; j0 < len(s.half); j0 += kc {
			j1 := min(j0+kc, len(s.half))
			lanes = infLanes
			scoreBlock(s, xb, stride, rows, j0, j1, scores, kc, lanes[:])
			for r := 0; r < rows; r++ {
				lm := (*[blockRows]float32)(lanes[r*blockRows:])
				m := lm[0] // lanes hold no NaN: the branch-free min is the minimum
				for _, v := range lm[1:] {
					m = min(m, v)
				}
				if !(m < low[r]) { // an earlier chunk keeps a tie
					continue
				}
				row := scores[r*kc : r*kc+(min(j1, s.k)-j0)]
				first := len(row)
				for l, v := range lm {
					if v != m {
						continue
					}
					for jj := l; jj < first; jj += blockRows {
						if row[jj] == m {
							first = jj
							break
						}
					}
				}
				if first < len(row) {
					low[r], best[r] = m, int32(j0+first)
				}
			}
		}
		for r := 0; r < rows; r++ {
			i := i0 + r
			v := x[i*stride : i*stride+s.dim]
			if best[r] < 0 || math.IsInf(float64(low[r]), 0) {
				s.scanRow(v, i, idx, dist)
				sc.scans++
				continue
			}
			idx[i] = best[r]
			if dist == nil {
				continue
			}
			if s.dist == DistDot {
				dist[i] = 1 + low[r]
				continue
			}
			var x2 float32
			for _, t := range v {
				x2 += t * t
			}
			dist[i] = max(0, x2+2*low[r])
		}
	}
}
