//go:build goexperiment.simd && amd64

package vecmath

import (
	"math"
	bits8 "math/bits"
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
		appendBelow = appendBelowAVX2
	}
}

// appendBelowAVX2 is appendBelow, 8 comparisons at a time; only lanes
// that pass are looked at (nearly always none).
func appendBelowAVX2(dst []candidate, v []float32, base int, thr float32) []candidate {
	t := archsimd.BroadcastFloat32x8(thr)
	i := 0
	for ; i+8 <= len(v); i += 8 {
		bits := archsimd.LoadFloat32x8((*[8]float32)(v[i:])).LessEqual(t).ToBits()
		for bits != 0 {
			j := i + bits8.TrailingZeros8(bits)
			dst = append(dst, candidate{int32(base + j), v[j]})
			bits &= bits - 1
		}
	}
	archsimd.ClearAVXUpperBits()
	return appendBelowGeneric(dst, v[i:], base+i, thr)
}

// scoreBlockAVX2 is scoreBlock with AVX2 fused multiply-adds over the
// packed layout: each block of 16 matrix rows is two 8-lane vectors per
// dimension; four vectors' values are broadcast against them, eight
// accumulators in registers. (Fused multiply-adds round once per step:
// within the bound Searcher.threshold assumes.)
func scoreBlockAVX2(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, mins []float32) {
	dim := s.dim
	if rows < 4 {
		scoreBlockGeneric(s, x, stride, rows, j0, j1, out, ld, mins)
		return
	}
	inf := archsimd.BroadcastFloat32x8(float32(math.Inf(1)))
	m0, m1, m2, m3 := inf, inf, inf, inf
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
		m0 = store8(hl.Sub(a0l), o0[o:o+8], m0)
		m0 = store8(hh.Sub(a0h), o0[o+8:o+16], m0)
		m1 = store8(hl.Sub(a1l), o1[o:o+8], m1)
		m1 = store8(hh.Sub(a1h), o1[o+8:o+16], m1)
		m2 = store8(hl.Sub(a2l), o2[o:o+8], m2)
		m2 = store8(hh.Sub(a2h), o2[o+8:o+16], m2)
		m3 = store8(hl.Sub(a3l), o3[o:o+8], m3)
		m3 = store8(hh.Sub(a3h), o3[o+8:o+16], m3)
	}
	var lanes [8]float32
	for r, m := range [4]archsimd.Float32x8{m0, m1, m2, m3} {
		m.Store(&lanes)
		mins[r] = min(mins[r], rowMinGeneric(lanes[:]))
	}
	archsimd.ClearAVXUpperBits()
}

// store8 stores scores and folds them into a running minimum. VMINPS
// returns its second operand when either is NaN, so NaN scores are
// skipped, as rowMinGeneric skips them.
func store8(v archsimd.Float32x8, dst []float32, m archsimd.Float32x8) archsimd.Float32x8 {
	v.Store((*[8]float32)(dst))
	return v.Min(m)
}

// store16 is store8 for 16 lanes.
func store16(v archsimd.Float32x16, dst []float32, m archsimd.Float32x16) archsimd.Float32x16 {
	v.Store((*[16]float32)(dst))
	return v.Min(m)
}

// scoreBlockAVX512 is scoreBlock with 16-lane fused multiply-adds: two
// vectors against two blocks (32 matrix rows) at a time. (Wider tiles,
// four vectors or more blocks, and unrolled loops measured slower: the
// compiler spills their registers.)
func scoreBlockAVX512(s *Searcher, x []float32, stride, rows, j0, j1 int, out []float32, ld int, mins []float32) {
	dim := s.dim
	inf := archsimd.BroadcastFloat32x16(float32(math.Inf(1)))
	var lanes [16]float32
	r := 0
	for ; r+2 <= rows; r += 2 {
		m0, m1 := inf, inf
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
		m0.Store(&lanes)
		mins[r] = min(mins[r], rowMinGeneric(lanes[:]))
		m1.Store(&lanes)
		mins[r+1] = min(mins[r+1], rowMinGeneric(lanes[:]))
	}
	archsimd.ClearAVXUpperBits()
	if r < rows {
		scoreBlockGeneric(s, x[r*stride:], stride, rows-r, j0, j1, out[r*ld:], ld, mins[r:])
	}
}
