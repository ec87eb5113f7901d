package fts

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPostingRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	numTokens := make([]uint32, 50000)
	for i := range numTokens {
		numTokens[i] = 1 + uint32(rng.IntN(300))
	}
	for _, n := range []int{1, 127, 128, 129, 256, 4096 + 77, 9000} {
		var p Posting
		doc := uint32(rng.IntN(5))
		for i := 0; i < n; i++ {
			p.Docs = append(p.Docs, doc)
			p.Freqs = append(p.Freqs, 1+uint32(rng.IntN(1<<uint(rng.IntN(12)))))
			doc += 1 + uint32(rng.IntN(5))
		}
		e, _ := encodePosting(&p, numTokens, docNorms(numTokens, 150), idfScale(n, len(numTokens)), false, nil)
		blocks := (n + BlockSize - 1) / BlockSize
		if len(e.blocks) != blocks || len(e.impacts) != blocks+(blocks+31)/32 {
			t.Fatalf("n=%d: %d blocks, %d impact entries", n, len(e.blocks), len(e.impacts))
		}
		var got Posting
		if err := DecodePosting(e.blocks, n, &got); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !slices.Equal(got.Docs, p.Docs) || !slices.Equal(got.Freqs, p.Freqs) {
			t.Fatalf("n=%d: round trip differs", n)
		}
		if err := DecodePosting(e.blocks, n+1, &got); err == nil && n%BlockSize != 0 {
			t.Fatalf("n=%d: a wrong length decoded", n)
		}
		// Positions: a run per block, deltas back as they went in.
		var deltas []uint32
		for _, f := range p.Freqs {
			for k := uint32(0); k < f; k++ {
				deltas = append(deltas, uint32(rng.IntN(1000)))
			}
		}
		at := 0
		for lo := 0; lo < n; lo += BlockSize {
			fs := p.Freqs[lo:min(lo+BlockSize, n)]
			m := 0
			for _, f := range fs {
				m += int(f)
			}
			run := appendPositionRun(nil, deltas[at:at+m])
			back, err := decodePositionRun(run, fs, nil)
			if err != nil || !slices.Equal(back, deltas[at:at+m]) {
				t.Fatalf("n=%d block %d: positions differ (%v)", n, lo/BlockSize, err)
			}
			if _, err := decodePositionRun(run[:len(run)-1], fs, nil); err == nil {
				t.Fatalf("n=%d: a truncated run decoded", n)
			}
			at += m
		}
	}
}

// Impact entries as pylance 14.0.2 wrote them for real blocks (decoded
// with the documents' lengths: see python/tests/test_fts.py for the end
// to end check): the frontier keeps, per frequency, the shortest length.
func TestImpactFrontier(t *testing.T) {
	numTokens := []uint32{5, 3, 9, 3, 40, 2}
	docs := []uint32{0, 1, 2, 3, 4, 5}
	freqs := []uint32{1, 1, 2, 3, 3, 1}
	got := appendImpact(nil, docs, freqs, numTokens, &impactScratch{})
	// last doc 5; pairs (1, len 2), (3, len 3): freq 2's shortest (9) is
	// beaten by freq 3's (3).
	want := []byte{5, 2, 0<<1 | 1, 2, 1 << 1}
	if !slices.Equal(got, want) {
		t.Fatalf("impact %v, want %v", got, want)
	}
	if q := quantizeLen(1000); q != uint8((1000>>6)&7|7<<3) {
		t.Fatalf("quantize 1000 = %d", q)
	}
}
