package encode

import "math"

// fastRotationRounds is the number of sign-flip + Hadamard rounds of
// Lance's fast RQ rotation.
const fastRotationRounds = 4

// FastRotationSignBytes is the length of a fast rotation's sign vector for
// dimension dim: one bit per dimension and round.
func FastRotationSignBytes(dim int) int { return fastRotationRounds * ((dim + 7) / 8) }

// fwht is an in-place, unnormalised fast Walsh–Hadamard transform of a
// power-of-two-long slice: log2(n) stages of butterflies (x+y, x-y) over
// pairs half apart, half = 1, 2, 4, .... The three first stages run on 8
// values at a time in registers; every butterfly is the same float32
// operation on the same inputs as in a stage-by-stage loop, so the result
// is bit for bit Lance's.
func fwht(v []float32) {
	n := len(v)
	if n < 8 {
		for half := 1; half < n; half *= 2 {
			for i := 0; i < n; i += 2 * half {
				for j := i; j < i+half; j++ {
					x, y := v[j], v[j+half]
					v[j], v[j+half] = x+y, x-y
				}
			}
		}
		return
	}
	for i := 0; i+8 <= n; i += 8 {
		p := (*[8]float32)(v[i : i+8])
		a0, a1 := p[0]+p[1], p[0]-p[1]
		a2, a3 := p[2]+p[3], p[2]-p[3]
		a4, a5 := p[4]+p[5], p[4]-p[5]
		a6, a7 := p[6]+p[7], p[6]-p[7]
		b0, b2 := a0+a2, a0-a2
		b1, b3 := a1+a3, a1-a3
		b4, b6 := a4+a6, a4-a6
		b5, b7 := a5+a7, a5-a7
		p[0], p[4] = b0+b4, b0-b4
		p[1], p[5] = b1+b5, b1-b5
		p[2], p[6] = b2+b6, b2-b6
		p[3], p[7] = b3+b7, b3-b7
	}
	for half := 8; half < n; half *= 2 {
		for i := 0; i < n; i += 2 * half {
			a, b := v[i:i+half], v[i+half:i+2*half]
			for j, x := range a {
				y := b[j]
				a[j], b[j] = x+y, x-y
			}
		}
	}
}

func flipSigns(v []float32, signs []byte) {
	for i := range v {
		bit := uint32(signs[i/8]>>(i%8)) & 1
		v[i] = math.Float32frombits(math.Float32bits(v[i]) ^ bit<<31)
	}
}

func rescale(v []float32, f float32) {
	for i := range v {
		v[i] *= f
	}
}

// kacsWalk mixes the two halves of v (one step of a Kac random walk).
func kacsWalk(v []float32) {
	half := len(v) / 2
	for i := 0; i < half; i++ {
		x, y := v[i], v[i+half]
		v[i], v[i+half] = x+y, x-y
	}
}

// FastRotate applies Lance's fast RQ rotation (the FhtKac rotator of the
// RaBitQ library) to in, writing len(out) = dim values: per round, flip the
// signs of the round's bits, then a normalised Hadamard transform (over the
// whole vector when dim is a power of two; otherwise alternately over the
// leading and trailing power-of-two block, each round followed by a Kac
// walk step, and a final scaling by 1/4).
func FastRotate(out, in []float32, signs []byte) {
	dim := len(out)
	copy(out, in)
	if dim == 0 {
		return
	}
	bytesPerRound := (dim + 7) / 8
	trunc := 1
	for trunc*2 <= dim {
		trunc *= 2
	}
	scale := 1 / float32(math.Sqrt(float64(trunc)))
	if trunc == dim {
		for r := 0; r < fastRotationRounds; r++ {
			flipSigns(out, signs[r*bytesPerRound:(r+1)*bytesPerRound])
			fwht(out)
			rescale(out, scale)
		}
		return
	}
	start := dim - trunc
	for r := 0; r < fastRotationRounds; r++ {
		flipSigns(out, signs[r*bytesPerRound:(r+1)*bytesPerRound])
		if r%2 == 0 {
			fwht(out[:trunc])
			rescale(out[:trunc], scale)
		} else {
			fwht(out[start:])
			rescale(out[start:], scale)
		}
		kacsWalk(out)
	}
	rescale(out, 0.25)
}

// matrixRotate writes rotated = m · v for a dim×dim row-major matrix.
func matrixRotate(out, v, m []float32) {
	dim := len(v)
	for i := range out {
		row := m[i*dim : (i+1)*dim]
		var s float32
		for j, x := range v {
			s += row[j] * x
		}
		out[i] = s
	}
}

// rotator is FastRotate prepared for one sign vector: the sign flips as
// XOR masks, and for power-of-two dimensions each round fused into three
// passes (sign flips with the first three butterfly stages, the other
// stages, the scaling with the last stage). Every value goes through the
// same float32 operations as in FastRotate, so the result is the same
// bits.
type rotator struct {
	dim   int
	pow2  bool
	scale float32
	masks []uint32 // fastRotationRounds × dim: 1<<31 where the sign flips
	signs []byte
}

func newRotator(dim int, signs []byte) *rotator {
	r := &rotator{dim: dim, signs: signs, masks: make([]uint32, fastRotationRounds*dim)}
	trunc := 1
	for trunc*2 <= dim {
		trunc *= 2
	}
	r.pow2 = trunc == dim && dim >= 8
	r.scale = 1 / float32(math.Sqrt(float64(trunc)))
	per := (dim + 7) / 8
	for round := 0; round < fastRotationRounds; round++ {
		sg := signs[round*per : (round+1)*per]
		for i := 0; i < dim; i++ {
			r.masks[round*dim+i] = uint32(sg[i/8]>>(i%8)&1) << 31
		}
	}
	return r
}

// rotate writes the rotation of in to out (len dim each).
func (r *rotator) rotate(out, in []float32) {
	if !r.pow2 {
		FastRotate(out, in, r.signs)
		return
	}
	copy(out, in)
	for round := 0; round < fastRotationRounds; round++ {
		hadamardRound(out, r.masks[round*r.dim:(round+1)*r.dim], r.scale)
	}
}

// hadamardRound is, for a power-of-two length of at least 8, flipSigns by
// the masks, fwht, then rescale by scale: the first three stages in
// registers with the flips on load, the later stages by hadamardStages.
func hadamardRound(v []float32, mask []uint32, scale float32) {
	n := len(v)
	mask = mask[:n]
	for i := 0; i+8 <= n; i += 8 {
		p := (*[8]float32)(v[i : i+8])
		m := (*[8]uint32)(mask[i : i+8])
		var x [8]float32
		for l := range x {
			x[l] = math.Float32frombits(math.Float32bits(p[l]) ^ m[l])
		}
		a0, a1 := x[0]+x[1], x[0]-x[1]
		a2, a3 := x[2]+x[3], x[2]-x[3]
		a4, a5 := x[4]+x[5], x[4]-x[5]
		a6, a7 := x[6]+x[7], x[6]-x[7]
		b0, b2 := a0+a2, a0-a2
		b1, b3 := a1+a3, a1-a3
		b4, b6 := a4+a6, a4-a6
		b5, b7 := a5+a7, a5-a7
		p[0], p[4] = b0+b4, b0-b4
		p[1], p[5] = b1+b5, b1-b5
		p[2], p[6] = b2+b6, b2-b6
		p[3], p[7] = b3+b7, b3-b7
	}
	if n == 8 {
		rescale(v, scale)
		return
	}
	hadamardStages(v, scale)
}

// hadamardStages runs the butterfly stages of half 8, 16, ... of a
// power-of-two slice longer than 8, the last one scaling its results
// ((x+y)·scale: the sum rounded, then the product, as a separate rescale
// would). The SIMD build replaces it.
var hadamardStages = hadamardStagesGeneric

func hadamardStagesGeneric(v []float32, scale float32) {
	n := len(v)
	for half := 8; half < n; half *= 2 {
		last := 2*half == n
		for i := 0; i < n; i += 2 * half {
			a, b := v[i:i+half], v[i+half:i+2*half]
			b = b[:len(a)]
			if last {
				for j, x := range a {
					y := b[j]
					a[j], b[j] = (x+y)*scale, (x-y)*scale
				}
				continue
			}
			for j, x := range a {
				y := b[j]
				a[j], b[j] = x+y, x-y
			}
		}
	}
}
