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

// docNorm is K1·(1 - B + B·dl/avgdl), the part of a document's BM25
// weight that depends on its length: computed once per document.
func docNorm(dl uint32, avgdl float32) float32 {
	bdl := float32(bm25B * float32(dl))
	return float32(bm25K1 * float32((1-bm25B)+float32(bdl/avgdl)))
}

// docNorms are docNorm of every document.
func docNorms(numTokens []uint32, avgdl float32) []float32 {
	out := make([]float32, len(numTokens))
	for d, n := range numTokens {
		out[d] = docNorm(n, avgdl)
	}
	return out
}

// docWeight is f/(f + norm), norm the document's docNorm.
func docWeight(f uint32, norm float32) float32 {
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

// impactScratch is appendImpact's reused state.
type impactScratch struct {
	small [64]uint32 // shortest length + 1 of each small frequency, 0 when unseen
	big   map[uint32]uint32
	fs    []uint32
}

type impactPair struct {
	freq uint32
	norm uint8
}

// appendImpact appends one impact entry over documents docs[i] (ascending)
// with frequencies freqs[i]: the last document, then the frontier of
// (frequency, shortest quantized length) pairs no other pair beats on both.
func appendImpact(out []byte, docs, freqs []uint32, numTokens []uint32, sc *impactScratch) []byte {
	// the shortest length of each frequency: small ones in an array, the
	// rest (rare) in a map
	sc.fs = sc.fs[:0]
	clear(sc.big)
	for i, d := range docs {
		f, l := freqs[i], min(numTokens[d], math.MaxUint32-1) // l+1 below must not wrap
		if f < uint32(len(sc.small)) {
			if sc.small[f] == 0 {
				sc.fs = append(sc.fs, f)
				sc.small[f] = l + 1 // 0: unseen
			} else if l+1 < sc.small[f] {
				sc.small[f] = l + 1
			}
			continue
		}
		if sc.big == nil {
			sc.big = map[uint32]uint32{}
		}
		if m, ok := sc.big[f]; !ok || l < m {
			if !ok {
				sc.fs = append(sc.fs, f)
			}
			sc.big[f] = l
		}
	}
	slices.Sort(sc.fs)
	fs := sc.fs
	minLen := func(f uint32) uint32 {
		if f < uint32(len(sc.small)) {
			return sc.small[f] - 1
		}
		return sc.big[f]
	}
	defer func() {
		for _, f := range fs {
			if f < uint32(len(sc.small)) {
				sc.small[f] = 0
			}
		}
	}()
	var raw []impactPair
	best := uint32(math.MaxUint32)
	rawLens := make([]uint32, 0, len(fs))
	for i := len(fs) - 1; i >= 0; i-- {
		if l := minLen(fs[i]); l < best {
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
// documents (see DecodePosting; the last one as format 1 lays it out when
// fixedTail is set), each led by its best document weight
// times scale (idfScale of the list's length over the partition's
// documents), with one impact entry per block and one per 32 blocks. The
// returned blocks alias buf's bytes from its old length on.
func encodePosting(p *Posting, numTokens []uint32, norms []float32, scale float32, fixedTail bool, buf []byte) (encoded, []byte) {
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
			best = max(best, docWeight(p.Freqs[i], norms[p.Docs[i]]))
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
		if fixedTail { // FTS format 1
			buf = appendTailFixed32(buf, p.Docs[lo:hi], p.Freqs[lo:hi])
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
	var scratch impactScratch
	var imp []byte
	var ends []int
	for lo := 0; lo < n; lo += BlockSize {
		hi := min(lo+BlockSize, n)
		imp = appendImpact(imp, p.Docs[lo:hi], p.Freqs[lo:hi], numTokens, &scratch)
		ends = append(ends, len(imp))
	}
	for lo := 0; lo < n; lo += 32 * BlockSize {
		hi := min(lo+32*BlockSize, n)
		imp = appendImpact(imp, p.Docs[lo:hi], p.Freqs[lo:hi], numTokens, &scratch)
		ends = append(ends, len(imp))
	}
	prev := 0
	for _, end := range ends {
		e.impacts = append(e.impacts, imp[prev:end])
		prev = end
	}
	return e, buf
}
