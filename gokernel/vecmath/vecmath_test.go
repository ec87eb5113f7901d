package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

func naiveL2(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return s
}

func naiveDot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestKernelsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dim := range []int{0, 1, 3, 4, 7, 8, 16, 31, 128, 769} {
		a, b := randVec(r, dim), randVec(r, dim+3) // b longer: only b[:len(a)] counts
		tol := 1e-4 * float64(dim+1)
		if got, want := float64(L2Sq(a, b)), naiveL2(a, b[:dim]); math.Abs(got-want) > tol {
			t.Errorf("dim %d: L2Sq = %v, want %v", dim, got, want)
		}
		if got, want := float64(Dot(a, b)), naiveDot(a, b[:dim]); math.Abs(got-want) > tol {
			t.Errorf("dim %d: Dot = %v, want %v", dim, got, want)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		in       []float32
		wantNorm float32
		want     []float32
	}{
		{[]float32{3, 4}, 5, []float32{0.6, 0.8}},
		{[]float32{0, 0, 0}, 0, []float32{0, 0, 0}},
		{[]float32{-2}, 2, []float32{-1}},
	}
	for _, tc := range tests {
		v := append([]float32(nil), tc.in...)
		if n := Normalize(v); n != tc.wantNorm {
			t.Errorf("Normalize(%v) norm = %v, want %v", tc.in, n, tc.wantNorm)
		}
		for i := range v {
			if math.Abs(float64(v[i]-tc.want[i])) > 1e-6 {
				t.Errorf("Normalize(%v) = %v, want %v", tc.in, v, tc.want)
				break
			}
		}
	}
}

func TestNearest(t *testing.T) {
	m := []float32{
		0, 0,
		10, 0,
		0, 10,
		10, 0, // duplicate of row 1: ties go to the lower row
	}
	tests := []struct {
		v           []float32
		l2, dot     int
		l2d, dotVal float32
	}{
		{[]float32{1, 1}, 0, 1, 2, 10},
		{[]float32{9, 1}, 1, 1, 2, 90},
		{[]float32{1, 9}, 2, 2, 2, 90},
	}
	for _, tc := range tests {
		if i, d := NearestL2(tc.v, m, 2); i != tc.l2 || d != tc.l2d {
			t.Errorf("NearestL2(%v) = %d, %v; want %d, %v", tc.v, i, d, tc.l2, tc.l2d)
		}
		if i, d := NearestDot(tc.v, m, 2); i != tc.dot || d != tc.dotVal {
			t.Errorf("NearestDot(%v) = %d, %v; want %d, %v", tc.v, i, d, tc.dot, tc.dotVal)
		}
	}
	if i, _ := NearestL2([]float32{1}, nil, 1); i != -1 {
		t.Errorf("NearestL2 on an empty matrix = %d, want -1", i)
	}
}

func TestFloat32ToHalf(t *testing.T) {
	// Every half value comes back unchanged (NaNs stay NaN).
	for h := 0; h < 1<<16; h++ {
		f := HalfToFloat32(uint16(h))
		got := Float32ToHalf(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(HalfToFloat32(got))) {
				t.Fatalf("NaN %#04x -> %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("half %#04x (%v) -> %#04x", h, f, got)
		}
	}
	// Any float32 rounds to the nearest half, ties to even.
	r := rand.New(rand.NewPCG(3, 4))
	halves := make([]float64, 0, 1<<16)
	for h := 0; h < 0x7c00; h++ {
		halves = append(halves, float64(HalfToFloat32(uint16(h))))
	}
	for i := 0; i < 200000; i++ {
		f := math.Float32frombits(r.Uint32() & 0x7fffffff)
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		got := Float32ToHalf(f)
		x := float64(f)
		if x >= 65520 { // half's largest value is 65504; from 65520 up it rounds to infinity
			if got != 0x7c00 {
				t.Fatalf("%v -> %#04x, want infinity", f, got)
			}
			continue
		}
		// nearest by bisection on the sorted non-negative halves
		lo := 0
		for hi := len(halves) - 1; hi-lo > 1; {
			mid := (lo + hi) / 2
			if halves[mid] <= x {
				lo = mid
			} else {
				hi = mid
			}
		}
		want := lo
		if lo+1 < len(halves) {
			dl, dh := x-halves[lo], halves[lo+1]-x
			if dh < dl || dh == dl && (lo+1)%2 == 0 {
				want = lo + 1
			}
		}
		if got != uint16(want) {
			t.Fatalf("%v (%#08x) -> %#04x (%v), want %#04x (%v)", f, math.Float32bits(f), got, HalfToFloat32(got), want, halves[want])
		}
		if neg := Float32ToHalf(-f); neg != got|0x8000 {
			t.Fatalf("-%v -> %#04x", f, neg)
		}
	}
}

func TestHalfToFloat32Values(t *testing.T) {
	for _, tc := range []struct {
		h    uint16
		want float32
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x0000, 0}, {0x7bff, 65504}, {0x0001, 5.9604645e-08}, {0x3555, 0.33325195},
	} {
		if got := HalfToFloat32(tc.h); got != tc.want {
			t.Fatalf("half %#x = %v, want %v", tc.h, got, tc.want)
		}
	}
}
