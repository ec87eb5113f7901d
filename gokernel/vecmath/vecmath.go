package vecmath

import "math"

// L2Sq returns the squared Euclidean distance between a and b[:len(a)].
func L2Sq(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		d0 := a[i] - b[i]
		d1 := a[i+1] - b[i+1]
		d2 := a[i+2] - b[i+2]
		d3 := a[i+3] - b[i+3]
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	for ; i < len(a); i++ {
		d := a[i] - b[i]
		s0 += d * d
	}
	return (s0 + s1) + (s2 + s3)
}

// Dot returns the inner product of a and b[:len(a)].
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Norm returns the Euclidean norm of a.
func Norm(a []float32) float32 { return float32(math.Sqrt(float64(Dot(a, a)))) }

// Normalize scales a in place to unit norm and returns its former norm. A
// zero vector is left as it is.
func Normalize(a []float32) float32 {
	n := Norm(a)
	if n == 0 {
		return 0
	}
	inv := 1 / n
	for i := range a {
		a[i] *= inv
	}
	return n
}

// NearestL2 returns the row of the row-major matrix m (rows of dim values)
// nearest to v in squared L2 distance, and that distance. Ties go to the
// lower row. It returns -1 for an empty matrix.
func NearestL2(v, m []float32, dim int) (int, float32) {
	best, bestD := -1, float32(math.Inf(1))
	for r, off := 0, 0; off+dim <= len(m); r, off = r+1, off+dim {
		if d := L2Sq(v, m[off:off+dim]); d < bestD {
			best, bestD = r, d
		}
	}
	return best, bestD
}

// NearestDot returns the row of m with the largest inner product with v
// (the nearest under Lance's dot distance, 1 - dot), and that product.
// Ties go to the lower row. It returns -1 for an empty matrix.
func NearestDot(v, m []float32, dim int) (int, float32) {
	best, bestD := -1, float32(math.Inf(-1))
	for r, off := 0, 0; off+dim <= len(m); r, off = r+1, off+dim {
		if d := Dot(v, m[off:off+dim]); d > bestD {
			best, bestD = r, d
		}
	}
	return best, bestD
}

// HalfToFloat32 widens an IEEE 754 binary16 value.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Float32ToHalf rounds f to the nearest IEEE 754 binary16 value (ties to
// even, as Rust's half crate and numpy convert): overflow gives infinity,
// tiny values subnormals or zero, NaN a quiet NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	frac := b & 0x7fffff
	switch {
	case exp == 0xff: // infinity or NaN
		if frac != 0 {
			return sign | 0x7e00 | uint16(frac>>13)
		}
		return sign | 0x7c00
	case exp > 127+15: // too large: infinity
		return sign | 0x7c00
	case exp >= 127-14: // normal half (may round up into the next binade or to infinity)
		h := uint32(exp-127+15)<<10 | frac>>13
		rest := frac & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	case exp >= 127-25: // subnormal half
		m := frac | 0x800000
		shift := uint(126 - 14 - exp + 13 + 1) // 0x800000 >> shift is the subnormal mantissa
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	return sign // rounds to zero
}

// RoundToHalf rounds every value of v to the nearest float16, in place
// (the values a float16 column or float16 arithmetic would hold).
func RoundToHalf(v []float32) {
	for i, x := range v {
		v[i] = HalfToFloat32(Float32ToHalf(x))
	}
}
