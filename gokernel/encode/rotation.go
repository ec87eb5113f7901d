package encode

import "math"

// fastRotationRounds is the number of sign-flip + Hadamard rounds of
// Lance's fast RQ rotation.
const fastRotationRounds = 4

// FastRotationSignBytes is the length of a fast rotation's sign vector for
// dimension dim: one bit per dimension and round.
func FastRotationSignBytes(dim int) int { return fastRotationRounds * ((dim + 7) / 8) }

// fwht is an in-place, unnormalised fast Walsh–Hadamard transform of a
// power-of-two-long slice, butterflies in Lance's order.
func fwht(v []float32) {
	for half := 1; half < len(v); half *= 2 {
		for i := 0; i < len(v); i += 2 * half {
			for j := i; j < i+half; j++ {
				x, y := v[j], v[j+half]
				v[j], v[j+half] = x+y, x-y
			}
		}
	}
}

func flipSigns(v []float32, signs []byte) {
	for i := range v {
		if signs[i/8]>>(i%8)&1 == 1 {
			v[i] = -v[i]
		}
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
