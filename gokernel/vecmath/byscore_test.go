package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// NearestByScore must find a nearest row: exactly Nearest's row, or one
// whose distance is within rounding of it, and its distance to within
// rounding; non-finite vectors take the exact path.
func TestNearestByScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		name   string
		dim, k int
		dist   Distance
	}{
		{"pq-l2", 8, 256, DistL2},
		{"pq-dot", 8, 256, DistDot},
		{"ivf-l2", 32, 1000, DistL2},
		{"ivf-dot", 32, 3000, DistDot},
		{"odd", 5, 17, DistL2},
		{"one", 3, 1, DistDot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := make([]float32, tc.k*tc.dim)
			for i := range m {
				m[i] = float32(rng.NormFloat64())
			}
			n := 1001
			x := make([]float32, n*tc.dim)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 2)
			}
			// a NaN vector, an infinite one, and one equal to a row
			x[3*tc.dim] = float32(math.NaN())
			x[5*tc.dim+1] = float32(math.Inf(-1))
			copy(x[7*tc.dim:8*tc.dim], m[(tc.k-1)*tc.dim:])
			s := NewSearcher(m, tc.dim, tc.dist)
			want, wantD := make([]int32, n), make([]float32, n)
			got, gotD := make([]int32, n), make([]float32, n)
			var a, b SearchScratch
			s.Nearest(x, tc.dim, n, want, wantD, &a)
			s.NearestByScore(x, tc.dim, n, got, gotD, &b)
			same := 0
			for i := 0; i < n; i++ {
				if want[i] < 0 || got[i] < 0 {
					if want[i] != got[i] {
						t.Fatalf("vector %d: got %d, want %d", i, got[i], want[i])
					}
					continue
				}
				if got[i] == want[i] {
					same++
				}
				v := x[i*tc.dim : (i+1)*tc.dim]
				dg := float64(s.exactDist(v, int(got[i])))
				dw := float64(wantD[i])
				tol := 1e-5 * (1 + math.Abs(dw) + norm2(v))
				if math.Abs(dg-dw) > tol {
					t.Fatalf("vector %d: row %d at %v, Nearest's row %d at %v", i, got[i], dg, want[i], dw)
				}
				if math.Abs(float64(gotD[i])-dg) > tol {
					t.Fatalf("vector %d: distance %v, measured %v", i, gotD[i], dg)
				}
			}
			if same < n-3-n/100 {
				t.Fatalf("only %d of %d rows are Nearest's", same, n)
			}
		})
	}
}

func norm2(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}
