package vecmath

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// lanes16 is an independent transcription of Lance's order: element i goes
// to lane i%16 unless it lies past the last whole group of 16 (the tail,
// summed first); lanes are added in order, then tail + lanes.
func lanes16(a, b []float32, dot bool) float32 {
	whole := len(a) / 16 * 16
	var lanes [16]float32
	var tail float32
	for i := range a {
		var p float32
		if dot {
			p = float32(a[i] * b[i])
		} else {
			d := a[i] - b[i]
			p = float32(d * d)
		}
		if i < whole {
			lanes[i%16] += p
		} else {
			tail += p
		}
	}
	var s float32
	for _, v := range lanes {
		s += v
	}
	return tail + s
}

func TestL2Sq16Dot16Order(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, dim := range []int{0, 1, 8, 15, 16, 17, 32, 40, 100, 128, 769} {
		for rep := 0; rep < 20; rep++ {
			a, b := randVec(r, dim), randVec(r, dim+2)
			for i := range a { // mixed magnitudes make the order show
				a[i] *= float32(math.Pow(10, float64(r.IntN(7)-3)))
			}
			if got, want := L2Sq16(a, b), lanes16(a, b[:dim], false); got != want {
				t.Fatalf("dim %d: L2Sq16 = %v, want %v", dim, got, want)
			}
			if got, want := Dot16(a, b), lanes16(a, b[:dim], true); got != want {
				t.Fatalf("dim %d: Dot16 = %v, want %v", dim, got, want)
			}
		}
	}
}

// bruteNearest is the definition: the first minimum of the exact distance.
func bruteNearest(v, m []float32, dim int, dist Distance) (int32, float32) {
	best, bestD := int32(-1), float32(math.Inf(1))
	for j := 0; j*dim < len(m); j++ {
		c := m[j*dim : (j+1)*dim]
		d := L2Sq16(v, c)
		if dist == DistDot {
			d = 1 - Dot16(v, c)
		}
		if d < bestD {
			best, bestD = int32(j), d
		}
	}
	return best, bestD
}

type searchCase struct {
	name      string
	n, k, dim int
	stride    int
	gen       func(r *rand.Rand, m, x []float32)
	scans     bool // some vectors are measured against every row
}

func searchCases() []searchCase {
	normal := func(r *rand.Rand, m, x []float32) {
		for i := range m {
			m[i] = float32(r.NormFloat64())
		}
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
	}
	return []searchCase{
		{"normal", 203, 100, 32, 32, normal, false},
		{"ivf-like", 64, 1024, 128, 128, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			dim := 128
			for i := 0; i < len(x)/dim; i++ { // near a row
				c := r.IntN(len(m) / dim)
				for t := 0; t < dim; t++ {
					x[i*dim+t] = m[c*dim+t] + 0.05*float32(r.NormFloat64())
				}
			}
		}, false},
		{"pq-sub-vectors", 77, 256, 8, 128, normal, false}, // strided: sub-vectors of longer rows
		{"pq-4bit", 50, 16, 2, 16, normal, false},
		{"duplicate rows (ties)", 90, 40, 16, 16, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			for j := 20; j < 40; j++ {
				copy(m[j*16:(j+1)*16], m[(j-20)*16:(j-19)*16])
			}
			copy(x[:16], m[3*16:4*16]) // exactly on a duplicated row
		}, false},
		{"far from the origin", 60, 64, 24, 24, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			for i := range m {
				m[i] = 1000 + m[i]*0.01
			}
			for i := range x {
				x[i] = 1000 + x[i]*0.01
			}
		}, false},
		{"tiny values", 40, 30, 12, 12, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			for i := range m {
				m[i] *= 1e-21
			}
			for i := range x {
				x[i] *= 1e-21
			}
		}, false},
		{"huge values", 20, 20, 8, 8, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			for i := range m {
				m[i] *= 1e18
			}
			for i := range x {
				x[i] *= 1e18
			}
		}, true},
		{"NaN and Inf vectors", 30, 20, 8, 8, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			x[3] = float32(math.NaN())
			for t := 8; t < 16; t++ {
				x[t] = float32(math.NaN())
			}
			x[20] = float32(math.Inf(1))
		}, true},
		{"near ties (rows one ulp apart)", 200, 48, 16, 16, func(r *rand.Rand, m, x []float32) {
			normal(r, m, x)
			for j := 1; j < 48; j++ {
				copy(m[j*16:(j+1)*16], m[:16])
				t := r.IntN(16)
				m[j*16+t] = math.Nextafter32(m[j*16+t], float32(math.Inf(r.IntN(2)*2-1)))
			}
			for i := 0; i < 200; i++ {
				for t := 0; t < 16; t++ {
					x[i*16+t] = m[t] + float32(r.NormFloat64())*1e-3
				}
			}
		}, false},
		{"more rows than a chunk", 9, 5000, 4, 4, normal, false},
		{"integer grid (many exact ties)", 100, 64, 4, 4, func(r *rand.Rand, m, x []float32) {
			for i := range m {
				m[i] = float32(r.IntN(3))
			}
			for i := range x {
				x[i] = float32(r.IntN(3))
			}
		}, false},
	}
}

// Nearest returns exactly the brute-force answer (row and distance bits)
// for both distances, on data made to stress the bound.
func TestSearcherIsExact(t *testing.T) {
	for _, tc := range searchCases() {
		for _, dist := range []Distance{DistL2, DistDot} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, dist), func(t *testing.T) {
				checkSearcher(t, tc, dist)
			})
		}
	}
}

func checkSearcher(t *testing.T, tc searchCase, dist Distance) {
	r := rand.New(rand.NewPCG(uint64(tc.k), uint64(tc.n)))
	m := make([]float32, tc.k*tc.dim)
	x := make([]float32, (tc.n-1)*tc.stride+tc.dim)
	tc.gen(r, m, x)
	s := NewSearcher(m, tc.dim, dist)
	idx := make([]int32, tc.n)
	d := make([]float32, tc.n)
	var sc SearchScratch
	s.Nearest(x, tc.stride, tc.n, idx, d, &sc)
	if (sc.scans > 0) != tc.scans {
		t.Errorf("%d of %d vectors scanned every row", sc.scans, tc.n)
	}
	for i := 0; i < tc.n; i++ {
		v := x[i*tc.stride : i*tc.stride+tc.dim]
		wi, wd := bruteNearest(v, m, tc.dim, dist)
		if idx[i] != wi || math.Float32bits(d[i]) != math.Float32bits(wd) && !(math.IsInf(float64(wd), 1) && wi < 0) {
			t.Fatalf("vector %d: got row %d (%v), want %d (%v)", i, idx[i], d[i], wi, wd)
		}
	}
}
