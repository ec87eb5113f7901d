//go:build goexperiment.simd && amd64

package vecmath

import "simd/archsimd"

func init() {
	switch {
	case archsimd.X86.AVX512():
		scoreBlock = scoreBlockAVX512
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		scoreBlock = scoreBlockAVX2
	}
}

// scoreBlockAVX2 is scoreBlock with AVX2 fused multiply-adds over the
// packed layout: each block of 16 matrix rows is two 8-lane vectors per
// dimension; four vectors' values are broadcast against them, eight
// accumulators in registers. (Fused multiply-adds round once per step:
// within the bound Searcher.threshold assumes.)
func scoreBlockAVX2(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int) {
	dim := s.dim
	if rows < 4 {
		scoreBlockGeneric(s, x, stride, rows, j0, j1, out, ld)
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
		hl.Sub(a0l).Store((*[8]float32)(o0[o : o+8]))
		hh.Sub(a0h).Store((*[8]float32)(o0[o+8 : o+16]))
		hl.Sub(a1l).Store((*[8]float32)(o1[o : o+8]))
		hh.Sub(a1h).Store((*[8]float32)(o1[o+8 : o+16]))
		hl.Sub(a2l).Store((*[8]float32)(o2[o : o+8]))
		hh.Sub(a2h).Store((*[8]float32)(o2[o+8 : o+16]))
		hl.Sub(a3l).Store((*[8]float32)(o3[o : o+8]))
		hh.Sub(a3h).Store((*[8]float32)(o3[o+8 : o+16]))
	}
	archsimd.ClearAVXUpperBits()
}

// scoreBlockAVX512 is scoreBlock with 16-lane fused multiply-adds: four
// vectors against two blocks (32 matrix rows) at a time.
func scoreBlockAVX512(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int) {
	dim := s.dim
	if rows < 4 {
		scoreBlockGeneric(s, x, stride, rows, j0, j1, out, ld)
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
	j := j0
	for ; j+2*blockRows <= j1; j += 2 * blockRows {
		p := s.packed[j*dim : (j+2*blockRows)*dim]
		pa, pb := p[:dim*blockRows], p[dim*blockRows:]
		var a0, b0, a1, b1, a2, b2, a3, b3 archsimd.Float32x16
		for t, v0 := range x0 {
			ca := archsimd.LoadFloat32x16((*[16]float32)(pa[t*blockRows:]))
			cb := archsimd.LoadFloat32x16((*[16]float32)(pb[t*blockRows:]))
			v := archsimd.BroadcastFloat32x16(v0)
			a0 = ca.MulAdd(v, a0)
			b0 = cb.MulAdd(v, b0)
			v = archsimd.BroadcastFloat32x16(x1[t])
			a1 = ca.MulAdd(v, a1)
			b1 = cb.MulAdd(v, b1)
			v = archsimd.BroadcastFloat32x16(x2[t])
			a2 = ca.MulAdd(v, a2)
			b2 = cb.MulAdd(v, b2)
			v = archsimd.BroadcastFloat32x16(x3[t])
			a3 = ca.MulAdd(v, a3)
			b3 = cb.MulAdd(v, b3)
		}
		ha := archsimd.LoadFloat32x16((*[16]float32)(s.half[j:]))
		hb := archsimd.LoadFloat32x16((*[16]float32)(s.half[j+16:]))
		o := j - j0
		ha.Sub(a0).Store((*[16]float32)(o0[o:]))
		hb.Sub(b0).Store((*[16]float32)(o0[o+16:]))
		ha.Sub(a1).Store((*[16]float32)(o1[o:]))
		hb.Sub(b1).Store((*[16]float32)(o1[o+16:]))
		ha.Sub(a2).Store((*[16]float32)(o2[o:]))
		hb.Sub(b2).Store((*[16]float32)(o2[o+16:]))
		ha.Sub(a3).Store((*[16]float32)(o3[o:]))
		hb.Sub(b3).Store((*[16]float32)(o3[o+16:]))
	}
	for ; j < j1; j += blockRows {
		p := s.packed[j*dim : (j+blockRows)*dim]
		var a0, a1, a2, a3 archsimd.Float32x16
		for t, v0 := range x0 {
			c := archsimd.LoadFloat32x16((*[16]float32)(p[t*blockRows:]))
			a0 = c.MulAdd(archsimd.BroadcastFloat32x16(v0), a0)
			a1 = c.MulAdd(archsimd.BroadcastFloat32x16(x1[t]), a1)
			a2 = c.MulAdd(archsimd.BroadcastFloat32x16(x2[t]), a2)
			a3 = c.MulAdd(archsimd.BroadcastFloat32x16(x3[t]), a3)
		}
		h := archsimd.LoadFloat32x16((*[16]float32)(s.half[j:]))
		o := j - j0
		h.Sub(a0).Store((*[16]float32)(o0[o:]))
		h.Sub(a1).Store((*[16]float32)(o1[o:]))
		h.Sub(a2).Store((*[16]float32)(o2[o:]))
		h.Sub(a3).Store((*[16]float32)(o3[o:]))
	}
	archsimd.ClearAVXUpperBits()
}
