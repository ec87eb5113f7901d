//go:build goexperiment.simd && amd64

package hnsw

import "simd/archsimd"

func init() {
	if archsimd.X86.AVX2() {
		l2SqU8 = l2SqU8AVX2
	}
}

// l2SqU8AVX2 computes what vecmath.L2SqU8 does, 16 bytes at a time:
// widened to 16-bit lanes, subtracted, and squared and summed in pairs
// into 32-bit lanes (VPMADDWD). Exact, like the portable kernel: a lane
// sums at most len(a)/8 squares of at most 255².
func l2SqU8AVX2(a, b []byte) uint32 {
	b = b[:len(a)]
	var acc0, acc1 archsimd.Int32x8
	i := 0
	for ; i+32 <= len(a); i += 32 {
		x0 := archsimd.LoadUint8x16Slice(a[i:]).ExtendToUint16().AsInt16x16()
		y0 := archsimd.LoadUint8x16Slice(b[i:]).ExtendToUint16().AsInt16x16()
		x1 := archsimd.LoadUint8x16Slice(a[i+16:]).ExtendToUint16().AsInt16x16()
		y1 := archsimd.LoadUint8x16Slice(b[i+16:]).ExtendToUint16().AsInt16x16()
		d0, d1 := x0.Sub(y0), x1.Sub(y1)
		acc0 = acc0.Add(d0.DotProductPairs(d0))
		acc1 = acc1.Add(d1.DotProductPairs(d1))
	}
	for ; i+16 <= len(a); i += 16 {
		x := archsimd.LoadUint8x16Slice(a[i:]).ExtendToUint16().AsInt16x16()
		y := archsimd.LoadUint8x16Slice(b[i:]).ExtendToUint16().AsInt16x16()
		d := x.Sub(y)
		acc0 = acc0.Add(d.DotProductPairs(d))
	}
	var lanes [8]int32
	acc0.Add(acc1).Store(&lanes)
	var s uint32
	for _, v := range lanes {
		s += uint32(v)
	}
	for ; i < len(a); i++ {
		d := int32(a[i]) - int32(b[i])
		s += uint32(d * d)
	}
	return s
}
