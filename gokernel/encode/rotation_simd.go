//go:build goexperiment.simd && amd64

package encode

import "simd/archsimd"

func init() {
	if archsimd.X86.AVX2() {
		hadamardStages = hadamardStagesAVX2
	}
}

// hadamardStagesAVX2 is hadamardStagesGeneric eight butterflies at a time
// (the same additions, subtractions and products, lane by lane).
func hadamardStagesAVX2(v []float32, scale float32) {
	n := len(v)
	sc := archsimd.BroadcastFloat32x8(scale)
	for half := 8; half < n; half *= 2 {
		last := 2*half == n
		for i := 0; i < n; i += 2 * half {
			a, b := v[i:i+half], v[i+half:i+2*half]
			b = b[:len(a)]
			for j := 0; j+8 <= len(a); j += 8 {
				pa, pb := (*[8]float32)(a[j:]), (*[8]float32)(b[j:])
				x, y := archsimd.LoadFloat32x8(pa), archsimd.LoadFloat32x8(pb)
				s, d := x.Add(y), x.Sub(y)
				if last {
					s, d = s.Mul(sc), d.Mul(sc)
				}
				s.Store(pa)
				d.Store(pb)
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}
