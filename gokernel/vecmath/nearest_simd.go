//go:build goexperiment.simd && amd64

package vecmath

import (
	"math"
	"simd/archsimd"
)

func init() {
	switch {
	case archsimd.X86.AVX512():
		scoreBlock = scoreBlockAVX512
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		scoreBlock = scoreBlockAVX2
	}
	if archsimd.X86.AVX2() {
		rowNorm = rowNormAVX2
	}
	switch {
	case archsimd.X86.AVX512():
		l2Sq16, dot16 = l2Sq16AVX512, dot16AVX512
	case archsimd.X86.AVX2():
		l2Sq16, dot16 = l2Sq16AVX2, dot16AVX2
	}
}

// scoreBlockAVX2 is scoreBlock with AVX2 fused multiply-adds over the
// packed layout: each block of 16 matrix rows is two 8-lane vectors per
// dimension; four vectors' values are broadcast against them, eight
// accumulators in registers. (Fused multiply-adds round once per step:
// within the bound Searcher.threshold assumes.)
func scoreBlockAVX2(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, lanes []float32) {
	dim := s.dim
	if rows < 4 {
		scoreBlockGeneric(s, x, stride, rows, j0, j1, out, ld, lanes)
		return
	}

	x0 := x[:dim]
	x1 := x[stride : stride+dim][:len(x0)]
	x2 := x[2*stride : 2*stride+dim][:len(x0)]
	x3 := x[3*stride : 3*stride+dim][:len(x0)]
	o0 := out[:j1-j0]
	o1 := out[ld : ld+j1-j0]
	o2 := out[2*ld : 2*ld+j1-j0]
	o3 := out[3*ld : 3*ld+j1-j0]
	for j := j0; j < j1; j += blockRows {
		p := s.packed[j*dim : (j+blockRows)*dim]
		var a0l, a0h, a1l, a1h, a2l, a2h, a3l, a3h archsimd.Float32x8
		for t, v0 := range x0 {
			q := (*[blockRows]float32)(p[t*blockRows:])
			cl := archsimd.LoadFloat32x8((*[8]float32)(q[:8]))
			ch := archsimd.LoadFloat32x8((*[8]float32)(q[8:]))
			b := archsimd.BroadcastFloat32x8(v0)
			a0l = cl.MulAdd(b, a0l)
			a0h = ch.MulAdd(b, a0h)
			b = archsimd.BroadcastFloat32x8(x1[t])
			a1l = cl.MulAdd(b, a1l)
			a1h = ch.MulAdd(b, a1h)
			b = archsimd.BroadcastFloat32x8(x2[t])
			a2l = cl.MulAdd(b, a2l)
			a2h = ch.MulAdd(b, a2h)
			b = archsimd.BroadcastFloat32x8(x3[t])
			a3l = cl.MulAdd(b, a3l)
			a3h = ch.MulAdd(b, a3h)
		}
		hl := archsimd.LoadFloat32x8((*[8]float32)(s.half[j : j+8]))
		hh := archsimd.LoadFloat32x8((*[8]float32)(s.half[j+8 : j+16]))
		o := j - j0
		// Scores stored, and folded into the lane minima in memory (live
		// registers across the loop would spill).
		store8(hl.Sub(a0l), o0[o:o+8], lanes[0:8])
		store8(hh.Sub(a0h), o0[o+8:o+16], lanes[8:16])
		store8(hl.Sub(a1l), o1[o:o+8], lanes[16:24])
		store8(hh.Sub(a1h), o1[o+8:o+16], lanes[24:32])
		store8(hl.Sub(a2l), o2[o:o+8], lanes[32:40])
		store8(hh.Sub(a2h), o2[o+8:o+16], lanes[40:48])
		store8(hl.Sub(a3l), o3[o:o+8], lanes[48:56])
		store8(hh.Sub(a3h), o3[o+8:o+16], lanes[56:64])
	}
	archsimd.ClearAVXUpperBits()
}

// store8 stores scores and lowers the lane minima lm to them. VMINPS
// returns its second operand when either is NaN, so NaN scores are
// skipped, as rowMinGeneric skips them.
func store8(v archsimd.Float32x8, dst, lm []float32) {
	v.Store((*[8]float32)(dst))
	m := (*[8]float32)(lm)
	v.Min(archsimd.LoadFloat32x8(m)).Store(m)
}

// store16 stores scores and folds them into the running lane minima m
// (NaN scores skipped, as in store8).
func store16(v archsimd.Float32x16, dst []float32, m archsimd.Float32x16) archsimd.Float32x16 {
	v.Store((*[16]float32)(dst))
	return v.Min(m)
}

// foldLanes16 lowers the lane minima of two vectors (lanes[0:16] and
// lanes[16:32]) to m0 and m1 where those are lower.
func foldLanes16(lanes []float32, m0, m1 archsimd.Float32x16) {
	d0 := (*[16]float32)(lanes[:16])
	m0.Min(archsimd.LoadFloat32x16(d0)).Store(d0)
	d1 := (*[16]float32)(lanes[16:32])
	m1.Min(archsimd.LoadFloat32x16(d1)).Store(d1)
}

// scoreBlockAVX512 is scoreBlock with 16-lane fused multiply-adds: two
// vectors against two blocks (32 matrix rows) at a time. (Wider tiles,
// four vectors or more blocks, and unrolled loops measured slower: the
// compiler spills their registers.)
func scoreBlockAVX512(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, lanes []float32) {
	dim := s.dim
	if dim == 8 {
		scoreBlockAVX512Dim8(s, x, stride, rows, j0, j1, out, ld, lanes)
		return
	}
	inf := archsimd.BroadcastFloat32x16(float32(math.Inf(1)))
	r := 0
	for ; r+2 <= rows; r += 2 {
		m0, m1 := inf, inf // lane minima, in registers (measured faster than in memory here)
		x0 := x[r*stride : r*stride+dim]
		x1 := x[(r+1)*stride : (r+1)*stride+dim][:len(x0)]
		o0 := out[r*ld : r*ld+j1-j0]
		o1 := out[(r+1)*ld : (r+1)*ld+j1-j0]
		j := j0
		for ; j+2*blockRows <= j1; j += 2 * blockRows {
			pa := s.packed[j*dim : (j+blockRows)*dim]
			pb := s.packed[(j+blockRows)*dim : (j+2*blockRows)*dim]
			var a0, b0, a1, b1 archsimd.Float32x16
			for t, v0 := range x0 {
				v := archsimd.BroadcastFloat32x16(v0)
				w := archsimd.BroadcastFloat32x16(x1[t])
				ca := archsimd.LoadFloat32x16((*[16]float32)(pa[t*blockRows:]))
				cb := archsimd.LoadFloat32x16((*[16]float32)(pb[t*blockRows:]))
				a0 = v.MulAdd(ca, a0)
				b0 = v.MulAdd(cb, b0)
				a1 = w.MulAdd(ca, a1)
				b1 = w.MulAdd(cb, b1)
			}
			ha := archsimd.LoadFloat32x16((*[16]float32)(s.half[j:]))
			hb := archsimd.LoadFloat32x16((*[16]float32)(s.half[j+16:]))
			o := j - j0
			m0 = store16(ha.Sub(a0), o0[o:o+16], m0)
			m0 = store16(hb.Sub(b0), o0[o+16:o+32], m0)
			m1 = store16(ha.Sub(a1), o1[o:o+16], m1)
			m1 = store16(hb.Sub(b1), o1[o+16:o+32], m1)
		}
		for ; j < j1; j += blockRows {
			p := s.packed[j*dim : (j+blockRows)*dim]
			var a0, a1 archsimd.Float32x16
			for t, v0 := range x0 {
				c := archsimd.LoadFloat32x16((*[16]float32)(p[t*blockRows:]))
				a0 = archsimd.BroadcastFloat32x16(v0).MulAdd(c, a0)
				a1 = archsimd.BroadcastFloat32x16(x1[t]).MulAdd(c, a1)
			}
			h := archsimd.LoadFloat32x16((*[16]float32)(s.half[j:]))
			o := j - j0
			m0 = store16(h.Sub(a0), o0[o:o+16], m0)
			m1 = store16(h.Sub(a1), o1[o:o+16], m1)
		}
		foldLanes16(lanes[r*16:], m0, m1)
	}
	archsimd.ClearAVXUpperBits()
	if r < rows {
		scoreBlockGeneric(s, x[r*stride:], stride, rows-r, j0, j1, out[r*ld:], ld, lanes[r*16:])
	}
}

// l2Sq16AVX512 is l2Sq16Generic with its 16 running sums in one register:
// each lane subtracts, squares (rounded) and adds (rounded) exactly as the
// scalar lane does; the tail and the final sum of the lanes stay scalar
// and sequential.
func l2Sq16AVX512(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		d := a[i] - b[i]
		tail += float32(d * d)
	}
	var acc archsimd.Float32x16
	for i := 0; i < whole; i += 16 {
		d := archsimd.LoadFloat32x16((*[16]float32)(a[i:])).Sub(archsimd.LoadFloat32x16((*[16]float32)(b[i:])))
		acc = acc.Add(d.Mul(d))
	}
	var s [16]float32
	acc.Store(&s)
	archsimd.ClearAVXUpperBits()
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}

func dot16AVX512(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		tail += float32(a[i] * b[i])
	}
	var acc archsimd.Float32x16
	for i := 0; i < whole; i += 16 {
		acc = acc.Add(archsimd.LoadFloat32x16((*[16]float32)(a[i:])).Mul(archsimd.LoadFloat32x16((*[16]float32)(b[i:]))))
	}
	var s [16]float32
	acc.Store(&s)
	archsimd.ClearAVXUpperBits()
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}

// l2Sq16AVX2 is l2Sq16AVX512 with the 16 sums in two 8-lane registers.
func l2Sq16AVX2(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		d := a[i] - b[i]
		tail += float32(d * d)
	}
	var lo, hi archsimd.Float32x8
	for i := 0; i < whole; i += 16 {
		dl := archsimd.LoadFloat32x8((*[8]float32)(a[i:])).Sub(archsimd.LoadFloat32x8((*[8]float32)(b[i:])))
		dh := archsimd.LoadFloat32x8((*[8]float32)(a[i+8:])).Sub(archsimd.LoadFloat32x8((*[8]float32)(b[i+8:])))
		lo = lo.Add(dl.Mul(dl))
		hi = hi.Add(dh.Mul(dh))
	}
	var s [16]float32
	lo.Store((*[8]float32)(s[:8]))
	hi.Store((*[8]float32)(s[8:]))
	archsimd.ClearAVXUpperBits()
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}

func dot16AVX2(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		tail += float32(a[i] * b[i])
	}
	var lo, hi archsimd.Float32x8
	for i := 0; i < whole; i += 16 {
		lo = lo.Add(archsimd.LoadFloat32x8((*[8]float32)(a[i:])).Mul(archsimd.LoadFloat32x8((*[8]float32)(b[i:]))))
		hi = hi.Add(archsimd.LoadFloat32x8((*[8]float32)(a[i+8:])).Mul(archsimd.LoadFloat32x8((*[8]float32)(b[i+8:]))))
	}
	var s [16]float32
	lo.Store((*[8]float32)(s[:8]))
	hi.Store((*[8]float32)(s[8:]))
	archsimd.ClearAVXUpperBits()
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}

// rowNormAVX2 is an upper bound of ‖v‖ from a float32 sum of squares in 8
// lanes, raised by the sum's worst relative error ((len+2)·2^-24, here
// doubled). Sums small enough for squares to underflow, and inputs that
// are not finite, go to the float64 path.
func rowNormAVX2(v []float32) float64 {
	var acc archsimd.Float32x8
	i := 0
	for ; i+8 <= len(v); i += 8 {
		x := archsimd.LoadFloat32x8((*[8]float32)(v[i:]))
		acc = acc.Add(x.Mul(x))
	}
	var s [8]float32
	acc.Store(&s)
	archsimd.ClearAVXUpperBits()
	var n2 float64
	for _, x := range s {
		n2 += float64(x)
	}
	for ; i < len(v); i++ {
		n2 += float64(v[i]) * float64(v[i])
	}
	if !(n2 >= 1e-30 && n2 <= 1e36) {
		return rowNormGeneric(v)
	}
	return math.Sqrt(n2 * (1 + 2*float64(len(v)+2)*unitRoundoff))
}

// scoreBlockAVX512Dim8 is scoreBlockAVX512 for 8 dimensions (PQ
// sub-vectors of 128-d vectors in 16 parts, the commonest codebook): the
// two vectors' values are broadcast once for all blocks rather than once
// per block, leaving the loop to loads and fused multiply-adds.
func scoreBlockAVX512Dim8(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, lanes []float32) {
	inf := archsimd.BroadcastFloat32x16(float32(math.Inf(1)))
	r := 0
	for ; r+2 <= rows; r += 2 {
		x0 := (*[8]float32)(x[r*stride:])
		x1 := (*[8]float32)(x[(r+1)*stride:])
		a0, a1, a2, a3 := archsimd.BroadcastFloat32x16(x0[0]), archsimd.BroadcastFloat32x16(x0[1]), archsimd.BroadcastFloat32x16(x0[2]), archsimd.BroadcastFloat32x16(x0[3])
		a4, a5, a6, a7 := archsimd.BroadcastFloat32x16(x0[4]), archsimd.BroadcastFloat32x16(x0[5]), archsimd.BroadcastFloat32x16(x0[6]), archsimd.BroadcastFloat32x16(x0[7])
		b0, b1, b2, b3 := archsimd.BroadcastFloat32x16(x1[0]), archsimd.BroadcastFloat32x16(x1[1]), archsimd.BroadcastFloat32x16(x1[2]), archsimd.BroadcastFloat32x16(x1[3])
		b4, b5, b6, b7 := archsimd.BroadcastFloat32x16(x1[4]), archsimd.BroadcastFloat32x16(x1[5]), archsimd.BroadcastFloat32x16(x1[6]), archsimd.BroadcastFloat32x16(x1[7])
		m0, m1 := inf, inf
		o0 := out[r*ld : r*ld+j1-j0]
		o1 := out[(r+1)*ld : (r+1)*ld+j1-j0]
		for j := j0; j < j1; j += blockRows {
			p := (*[8 * blockRows]float32)(s.packed[j*8:])
			c := archsimd.LoadFloat32x16((*[16]float32)(p[0:]))
			u, v := a0.Mul(c), b0.Mul(c)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[16:]))
			u, v = a1.MulAdd(c, u), b1.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[32:]))
			u, v = a2.MulAdd(c, u), b2.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[48:]))
			u, v = a3.MulAdd(c, u), b3.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[64:]))
			u, v = a4.MulAdd(c, u), b4.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[80:]))
			u, v = a5.MulAdd(c, u), b5.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[96:]))
			u, v = a6.MulAdd(c, u), b6.MulAdd(c, v)
			c = archsimd.LoadFloat32x16((*[16]float32)(p[112:]))
			u, v = a7.MulAdd(c, u), b7.MulAdd(c, v)
			h := archsimd.LoadFloat32x16((*[16]float32)(s.half[j:]))
			o := j - j0
			m0 = store16(h.Sub(u), o0[o:o+16], m0)
			m1 = store16(h.Sub(v), o1[o:o+16], m1)
		}
		foldLanes16(lanes[r*16:], m0, m1)
	}
	archsimd.ClearAVXUpperBits()
	if r < rows {
		scoreBlockGeneric(s, x[r*stride:], stride, rows-r, j0, j1, out[r*ld:], ld, lanes[r*16:])
	}
}
