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
