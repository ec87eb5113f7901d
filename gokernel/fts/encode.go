package fts

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// BM25 constants of Lance's scorer.
const (
	bm25K1 = float32(1.2)
	bm25B  = float32(0.75)
)

// idfScale is idf(n, N)·(K1+1) as Lance computes it in float32. Explicit
// conversions keep every product rounded on its own (no fused
// multiply-add), so the bits equal Lance's.
func idfScale(n, docs int) float32 {
	nf, N := float32(n), float32(docs)
	x := float32(float32(N-nf+0.5)/float32(nf+0.5)) + 1
	idf := float32(math.Log(float64(x)))
	return float32(idf * (bm25K1 + 1))
}

// docWeight is f/(f + K1·(1 - B + B·dl/avgdl)).
func docWeight(f, dl uint32, avgdl float32) float32 {
	bdl := float32(bm25B * float32(dl))
	norm := float32(bm25K1 * float32((1-bm25B)+float32(bdl/avgdl)))
	ff := float32(f)
	return float32(ff / float32(ff+norm))
}

// quantizeLen maps a document length to Lance's u8 impact norm: small
// lengths as they are, larger ones as 3 mantissa bits and a shift.
func quantizeLen(v uint32) uint8 {
	nb := bits.Len32(v)
	if nb < 4 {
		return uint8(v)
	}
	s := nb - 4
	return uint8((v>>s)&7 | uint32(s+1)<<3)
}

type impactPair struct {
	freq uint32
	norm uint8
}

// appendImpact appends one impact entry over documents docs[i] (ascending)
// with frequencies freqs[i]: the last document, then the frontier of
// (frequency, shortest quantized length) pairs no other pair beats on both.
func appendImpact(out []byte, docs, freqs []uint32, numTokens []uint32, scratch map[uint32]uint32) []byte {
	clear(scratch)
	for i, d := range docs {
		l := numTokens[d]
		if m, ok := scratch[freqs[i]]; !ok || l < m {
			scratch[freqs[i]] = l
		}
	}
	fs := make([]uint32, 0, len(scratch))
	for f := range scratch {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	var raw []impactPair
	best := uint32(math.MaxUint32)
	rawLens := make([]uint32, 0, len(fs))
	for i := len(fs) - 1; i >= 0; i-- {
		if l := scratch[fs[i]]; l < best {
			raw = append(raw, impactPair{freq: fs[i]})
			rawLens = append(rawLens, l)
			best = l
		}
	}
	var front []impactPair
	for i := len(raw) - 1; i >= 0; i-- {
		q := quantizeLen(rawLens[i])
		if n := len(front); n > 0 && front[n-1].norm == q {
			front[n-1].freq = raw[i].freq
			continue
		}
		front = append(front, impactPair{freq: raw[i].freq, norm: q})
	}
	out = binary.AppendUvarint(out, uint64(docs[len(docs)-1]))
	out = binary.AppendUvarint(out, uint64(len(front)))
	var pf uint32
	var pn uint8
	for _, p := range front {
		nd := p.norm - pn
		explicit := uint64(0)
		if nd != 1 {
			explicit = 1
		}
		out = binary.AppendUvarint(out, uint64(p.freq-pf-1)<<1|explicit)
		if explicit == 1 {
			out = append(out, nd)
		}
		pf, pn = p.freq, p.norm
	}
	return out
}

// encoded is one token's posting list as written.
type encoded struct {
	blocks   [][]byte
	maxScore float32
	impacts  [][]byte
}

// encodePosting appends a posting list to buf as blocks of BlockSize
// documents (see DecodePosting), each led by its best document weight
// times scale (idfScale of the list's length over the partition's
// documents), with one impact entry per block and one per 32 blocks. The
// returned blocks alias buf's bytes from its old length on.
func encodePosting(p *Posting, numTokens []uint32, avgdl, scale float32, buf []byte) (encoded, []byte) {
	var e encoded
	n := p.Len()
	starts := make([]int, 0, n/BlockSize+2)
	var vals [BlockSize]uint32
	e.maxScore = float32(math.Inf(-1))
	for lo := 0; lo < n; lo += BlockSize {
		hi := min(lo+BlockSize, n)
		starts = append(starts, len(buf))
		best := float32(-math.MaxFloat32)
		for i := lo; i < hi; i++ {
			best = max(best, docWeight(p.Freqs[i], numTokens[p.Docs[i]], avgdl))
		}
		score := float32(best * scale)
		e.maxScore = max(e.maxScore, score)
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(score))
		if hi-lo == BlockSize {
			buf = binary.LittleEndian.AppendUint32(buf, p.Docs[lo])
			vals[0] = 0
			for i := 1; i < BlockSize; i++ {
				vals[i] = p.Docs[lo+i] - p.Docs[lo+i-1]
			}
			w := widthOf(&vals)
			buf = pack4x(append(buf, byte(w)), &vals, w)
			copy(vals[:], p.Freqs[lo:hi])
			w = widthOf(&vals)
			buf = pack4x(append(buf, byte(w)), &vals, w)
			continue
		}
		prev := uint32(0)
		for i := lo; i < hi; i++ {
			buf = binary.AppendUvarint(buf, uint64(p.Docs[i]-prev))
			prev = p.Docs[i]
		}
		for i := lo; i < hi; i++ {
			buf = binary.AppendUvarint(buf, uint64(p.Freqs[i]))
		}
	}
	starts = append(starts, len(buf))
	for i := 0; i+1 < len(starts); i++ {
		e.blocks = append(e.blocks, buf[starts[i]:starts[i+1]])
	}
	scratch := map[uint32]uint32{}
	var imp []byte
	var ends []int
	for lo := 0; lo < n; lo += BlockSize {
		hi := min(lo+BlockSize, n)
		imp = appendImpact(imp, p.Docs[lo:hi], p.Freqs[lo:hi], numTokens, scratch)
		ends = append(ends, len(imp))
	}
	for lo := 0; lo < n; lo += 32 * BlockSize {
		hi := min(lo+32*BlockSize, n)
		imp = appendImpact(imp, p.Docs[lo:hi], p.Freqs[lo:hi], numTokens, scratch)
		ends = append(ends, len(imp))
	}
	prev := 0
	for _, end := range ends {
		e.impacts = append(e.impacts, imp[prev:end])
		prev = end
	}
	return e, buf
}
