package encode

import (
	"math"
	"slices"
)

// RaBitQ encoding of one rotated residual, as Lance 14 computes it: the sign
// bit of every rotated dimension, and for num_bits > 1 an "extended" code of
// ex_bits = num_bits-1 more bits per dimension, found by searching the
// rescaling factor that best aligns the quantized vector with the residual
// (extended RaBitQ), stored in the blocked layout of Lance's ex-dot kernels.
// Sums are float32 in dimension order, as Lance's are, so codes come out
// bit for bit the same.

const (
	exQuantEpsilon = float32(1.0e-5)
	rabitErrorEps  = float32(1.9)
	exBlockDims    = 64
	// f32Epsilon is Rust's f32::EPSILON (2^-23).
	f32Epsilon = float32(1.1920929e-07)
)

var exTightStart = [9]float32{0.0, 0.15, 0.20, 0.52, 0.59, 0.71, 0.75, 0.77, 0.81}

// RQCodeBytes is the width of the binary code column for dimension dim.
func RQCodeBytes(dim int) int { return (dim + 7) / 8 }

// BlockedExCodeBytes is the width of the __blocked_ex_codes column: whole
// 64-dimension blocks of exBits bits per dimension.
func BlockedExCodeBytes(dim, exBits int) int {
	return (dim + exBlockDims - 1) / exBlockDims * exBlockDims * exBits / 8
}

func signPositive(x float32) bool { return math.Float32bits(x)>>31 == 0 }

// packSignBits sets bit k (LSB first) of codes for every non-negative
// (sign bit clear) rotated value.
func packSignBits(codes []byte, rotated []float32) {
	clear(codes)
	for i, v := range rotated {
		if signPositive(v) {
			codes[i/8] |= 1 << (i % 8)
		}
	}
}

// exAbsNormalized returns |v_d| / ||v|| for every dimension, or nil for a
// zero or non-finite vector.
func exAbsNormalized(dst, rotated []float32) []float32 {
	var ns float32
	for _, v := range rotated {
		ns += float32(v * v)
	}
	if ns <= f32Epsilon || math.IsInf(float64(ns), 0) || math.IsNaN(float64(ns)) {
		return nil
	}
	norm := float32(math.Sqrt(float64(ns)))
	dst = dst[:len(rotated)]
	for i, v := range rotated {
		dst[i] = float32(math.Abs(float64(v))) / norm
	}
	return dst
}

// exScratch holds per-row working memory of the extended code search.
type exScratch struct {
	abs     []float32
	codes   []int
	events  []uint64
	sorted  []uint64
	bucket  []uint32
	count   []int32
	values  []byte
	blocked [exBlockDims]byte
}

// bestExRescale searches the rescaling factor t maximising the cosine
// between the quantized codes and the residual.
func bestExRescale(s *exScratch, abs []float32, exBits int) float32 {
	var maxV float32
	for _, v := range abs {
		if !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v)) && v > maxV {
			maxV = v
		}
	}
	if maxV <= 0 {
		return 0
	}
	maxCode := 1<<exBits - 1
	tEnd := float32(maxCode+10) / maxV
	tStart := float32(tEnd * exTightStart[exBits])

	s.codes = slices.Grow(s.codes[:0], len(abs))[:len(abs)]
	s.events = s.events[:0]
	sqDen := float32(len(abs)) * 0.25
	var num float32
	for i, v := range abs {
		if v <= 0 || math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			s.codes[i] = 0
			continue
		}
		cur := clampCode(float32(tStart*v)+exQuantEpsilon, maxCode)
		s.codes[i] = cur
		sqDen += float32(cur*cur + cur)
		num += float32((float32(cur) + 0.5) * v)
		for next := cur + 1; next <= maxCode; next++ {
			t := float32(next) / v
			if !(t < tEnd) {
				break // t grows with next (rounding is monotone)
			}
			// Positive floats order as their bits: (t, dimension) in one
			// key. Equal thresholds keep emission order (by dimension; one
			// dimension's thresholds strictly grow).
			s.events = append(s.events, uint64(math.Float32bits(t))<<32|uint64(i))
		}
	}
	events := sortEvents(s, tStart, tEnd)
	best := num / float32(math.Sqrt(float64(sqDen)))
	bestT := tStart
	for _, e := range events {
		idx := uint32(e)
		s.codes[idx]++
		u := s.codes[idx]
		sqDen += float32(2 * u)
		num += abs[idx]
		if ip := num / float32(math.Sqrt(float64(sqDen))); ip > best {
			best, bestT = ip, math.Float32frombits(uint32(e>>32))
		}
	}
	return bestT
}

// sortEvents orders s.events (threshold bits << 32 | dimension) as
// slices.Sort would, in linear time: a counting sort into buckets of
// equal width over [tStart, tEnd) (the bucket of t is monotone in t, so
// buckets are in order), then one insertion pass, which only reorders
// events within a bucket (about one each).
func sortEvents(s *exScratch, tStart, tEnd float32) []uint64 {
	n := len(s.events)
	if n < 64 {
		slices.Sort(s.events)
		return s.events
	}
	nb := n
	scale := float32(nb) / (tEnd - tStart)
	s.bucket = slices.Grow(s.bucket[:0], n)[:n]
	s.count = slices.Grow(s.count[:0], nb+1)[:nb+1]
	clear(s.count)
	for i, e := range s.events {
		b := int(float32(math.Float32frombits(uint32(e>>32))-tStart) * scale)
		b = min(max(b, 0), nb-1)
		s.bucket[i] = uint32(b)
		s.count[b+1]++
	}
	for b := 1; b <= nb; b++ {
		s.count[b] += s.count[b-1]
	}
	s.sorted = slices.Grow(s.sorted[:0], n)[:n]
	for i, e := range s.events {
		b := s.bucket[i]
		s.sorted[s.count[b]] = e
		s.count[b]++
	}
	// Buckets are in order; one insertion pass orders each bucket (an event
	// never moves past its bucket's start: everything before is smaller).
	a := s.sorted
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
	return a
}

// clampCode is floor(x) clamped to [0, maxCode], as Rust's saturating
// float-to-int cast after clamp.
func clampCode(x float32, maxCode int) int {
	f := math.Floor(float64(x))
	if !(f > 0) { // NaN or <= 0
		return 0
	}
	if f > float64(maxCode) {
		return maxCode
	}
	return int(f)
}

// quantizeEx writes the blocked ex codes of one rotated residual into dst,
// the per-dimension code values into values, and returns
// Σ_d rotated[d]·(full_code[d] + bias), full_code = sign<<exBits | ex.
func quantizeEx(s *exScratch, rotated []float32, exBits int, dst, values []byte) float32 {
	s.abs = slices.Grow(s.abs[:0], len(rotated))
	abs := exAbsNormalized(s.abs, rotated)
	if abs == nil {
		clear(dst)
		clear(values)
		return 0
	}
	t := bestExRescale(s, abs, exBits)
	maxCode := 1<<exBits - 1
	bias := -(float32(int(1)<<exBits) - 0.5)
	var dot float32
	for i, v := range rotated {
		c := byte(clampCode(float32(t*abs[i])+exQuantEpsilon, maxCode))
		if !signPositive(v) {
			c = ^c & byte(maxCode)
		}
		var sign uint32
		if signPositive(v) {
			sign = 1
		}
		full := sign<<exBits + uint32(c)
		dot += float32(v * (float32(full) + bias))
		values[i] = c
	}
	packBlockedRow(s, values, exBits, dst)
	return dot
}

// packBlockedRow lays one row of per-dimension ex codes out in Lance's
// blocked layout: 64-dimension blocks (the last zero-padded), bits
// interleaved so that the query kernels unpack dimensions in order.
func packBlockedRow(s *exScratch, values []byte, exBits int, out []byte) {
	blockBytes := exBlockDims * exBits / 8
	for b := 0; b*blockBytes < len(out); b++ {
		base := b * exBlockDims
		n := copy(s.blocked[:], values[base:min(len(values), base+exBlockDims)])
		clear(s.blocked[n:])
		packBlock(exBits, &s.blocked, out[b*blockBytes:(b+1)*blockBytes])
	}
}

// topPlane packs bit `bit` of 64 codes: dimension 16k+b goes to bit
// 8·(b%8) + 2k + b/8.
func topPlane(v *[exBlockDims]byte, bit int) uint64 {
	var p uint64
	for k := 0; k < 4; k++ {
		for b := 0; b < 16; b++ {
			p |= uint64(v[16*k+b]>>bit&1) << (8*(b%8) + 2*k + b/8)
		}
	}
	return p
}

func putLE64(out []byte, x uint64) {
	for i := 0; i < 8; i++ {
		out[i] = byte(x >> (8 * i))
	}
}

func packBlock(exBits int, v *[exBlockDims]byte, out []byte) {
	switch exBits {
	case 1:
		for b := 0; b < 8; b++ {
			var x byte
			for t := 0; t < 8; t++ {
				x |= (v[8*b+t] & 1) << t
			}
			out[b] = x
		}
	case 2, 3:
		for b := 0; b < 16; b++ {
			out[b] = v[b]&3 | (v[16+b]&3)<<2 | (v[32+b]&3)<<4 | (v[48+b]&3)<<6
		}
		if exBits == 3 {
			putLE64(out[16:24], topPlane(v, 2))
		}
	case 4:
		for u := 0; u < 4; u++ {
			for b := 0; b < 8; b++ {
				out[8*u+b] = v[16*u+b]&0x0f | (v[16*u+8+b]&0x0f)<<4
			}
		}
	case 5:
		for b := 0; b < 16; b++ {
			out[b] = v[b]&0x0f | (v[16+b]&0x0f)<<4
			out[16+b] = v[32+b]&0x0f | (v[48+b]&0x0f)<<4
		}
		putLE64(out[32:40], topPlane(v, 4))
	case 6, 7:
		for k := 0; k < 3; k++ {
			for b := 0; b < 16; b++ {
				out[16*k+b] = v[16*k+b]&0x3f | (v[48+b]>>(2*k)&3)<<6
			}
		}
		if exBits == 7 {
			putLE64(out[48:56], topPlane(v, 6))
		}
	case 8:
		copy(out[:64], v[:])
	}
}

// UnpackBlockedRow is the inverse of the blocked layout: the per-dimension
// ex codes of one row (for tests and verification).
func UnpackBlockedRow(codes []byte, exBits, dim int) []byte {
	out := make([]byte, 0, dim+exBlockDims)
	blockBytes := exBlockDims * exBits / 8
	for b := 0; b*blockBytes < len(codes); b++ {
		g := codes[b*blockBytes : (b+1)*blockBytes]
		var v [exBlockDims]byte
		top := func(off, bit int) {
			var p uint64
			for i := 0; i < 8; i++ {
				p |= uint64(g[off+i]) << (8 * i)
			}
			for k := 0; k < 4; k++ {
				for j := 0; j < 16; j++ {
					v[16*k+j] |= byte(p>>(8*(j%8)+2*k+j/8)&1) << bit
				}
			}
		}
		switch exBits {
		case 1:
			for i := 0; i < 64; i++ {
				v[i] = g[i/8] >> (i % 8) & 1
			}
		case 2, 3:
			for k := 0; k < 4; k++ {
				for j := 0; j < 16; j++ {
					v[16*k+j] = g[j] >> (2 * k) & 3
				}
			}
			if exBits == 3 {
				top(16, 2)
			}
		case 4:
			for u := 0; u < 4; u++ {
				for j := 0; j < 8; j++ {
					v[16*u+j] = g[8*u+j] & 0x0f
					v[16*u+8+j] = g[8*u+j] >> 4
				}
			}
		case 5:
			for j := 0; j < 16; j++ {
				v[j], v[16+j] = g[j]&0x0f, g[j]>>4
				v[32+j], v[48+j] = g[16+j]&0x0f, g[16+j]>>4
			}
			top(32, 4)
		case 6, 7:
			for k := 0; k < 3; k++ {
				for j := 0; j < 16; j++ {
					v[16*k+j] = g[16*k+j] & 0x3f
					v[48+j] |= g[16*k+j] >> 6 << (2 * k)
				}
			}
			if exBits == 7 {
				top(48, 6)
			}
		case 8:
			copy(v[:], g)
		}
		out = append(out, v[:]...)
	}
	return out[:dim]
}

// rqFactors are the per-row correction factors of the raw-query estimator.
type rqFactors struct{ add, scale, errf, exAdd, exScale float32 }

func ratio(num, den float32) float32 {
	if den == 0 {
		return 0
	}
	return num / den
}

// rawQueryFactors computes a row's factors from its rotated residual, its
// partition's rotated centroid, its ex codes and ‖residual‖² (normSq).
func rawQueryFactors(metric Metric, normSq float32, residual, centroid []float32, exValues []byte, exDot float32, exBits int) rqFactors {
	bias := -(float32(int(1)<<exBits) - 0.5)
	var binRes, binCent, exCent, resCent float32
	for d, r := range residual {
		c := centroid[d]
		var code uint32
		bf := float32(-0.5)
		if signPositive(r) {
			code, bf = 1, 0.5
		}
		binRes += float32(r * bf)
		binCent += float32(c * bf)
		if exValues != nil {
			ef := float32(code<<exBits+uint32(exValues[d])) + bias
			exCent += float32(c * ef)
		}
		resCent += float32(r * c)
	}
	binCorr := ratio(float32(normSq*binCent), binRes)
	exCorr := ratio(float32(normSq*exCent), exDot)
	errf := errorFactor(metric, normSq, binRes, len(residual))
	if metric == Dot {
		base := 1 - resCent
		return rqFactors{
			add:     base + binCorr,
			scale:   ratio(-normSq, binRes),
			errf:    errf,
			exAdd:   base + exCorr,
			exScale: ratio(-normSq, exDot),
		}
	}
	return rqFactors{
		add:     normSq + float32(2*binCorr),
		scale:   ratio(float32(-2*normSq), binRes),
		errf:    errf,
		exAdd:   normSq + float32(2*exCorr),
		exScale: ratio(float32(-2*normSq), exDot),
	}
}

func errorFactor(metric Metric, normSq, binRes float32, codeDim int) float32 {
	if codeDim <= 1 || normSq <= 0 || binRes == 0 {
		return 0
	}
	codeNormSq := float32(codeDim) * 0.25
	align := float32(normSq*codeNormSq) / float32(binRes*binRes)
	ang := float32(math.Sqrt(float64(max(align-1, 0) / float32(codeDim-1))))
	e := float32(float32(math.Sqrt(float64(normSq)))*rabitErrorEps) * ang
	if metric == Dot {
		return e
	}
	return 2 * e
}
