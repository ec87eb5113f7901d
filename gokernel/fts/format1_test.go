package fts

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// Format 1 positions: a document's positions written as format 1
// binaries decode to the same positions, for counts around the 128-value
// groups; damaged binaries are Corrupt.
func TestPositions1RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 127, 128, 129, 256, 300} {
		deltas := make([]uint32, n)
		want := make([]uint32, n)
		var x uint32
		for i := range deltas {
			deltas[i] = uint32(r.IntN(1000))
			if i == 0 || deltas[i] == 0 {
				deltas[i]++
			}
			x += deltas[i]
			want[i] = x
		}
		bins := emptyList(largeBinary).Items
		_, bins = appendPositions1(bins, deltas, nil)
		wantBins := 1 + n/BlockSize
		if n%BlockSize > 0 {
			wantBins++
		}
		if bins.Len != wantBins {
			t.Fatalf("%d positions in %d binaries, want %d", n, bins.Len, wantBins)
		}
		got, err := decodePositions1(bins, 0, int64(bins.Len), nil)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%d positions: %v, %v", n, err, got)
		}
		if _, err := decodePositions1(bins, 0, int64(bins.Len-1), nil); !errors.Is(err, errkind.Corrupt) {
			t.Fatalf("%d positions, a binary short: %v", n, err)
		}
	}
	bad := emptyList(largeBinary).Items
	appendBinaryList(&lancefile.Array{Type: lancefile.ListType(), Offsets: []int64{0}, Items: bad}, [][]byte{binary.LittleEndian.AppendUint32(nil, 3), {1, 0, 0, 0}})
	if _, err := decodePositions1(bad, 0, 2, nil); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("3 positions in 4 bytes: %v", err)
	}
}

// A posting list encoded with a fixed32 tail reads, after
// tailsFromFixed32, as the list it was; a tail of the wrong size is
// Corrupt.
func TestFixed32TailsReadAsVarint(t *testing.T) {
	for _, n := range []int{1, 100, 128, 129, 300} {
		p := Posting{}
		for i := 0; i < n; i++ {
			p.Docs = append(p.Docs, uint32(3*i+1))
			p.Freqs = append(p.Freqs, uint32(1+i%4))
		}
		numTokens := make([]uint32, 3*n+2)
		for i := range numTokens {
			numTokens[i] = 10
		}
		e, _ := encodePosting(&p, numTokens, docNorms(numTokens, 10), 1, true, nil)
		v := &Invert{Postings: emptyList(largeBinary), Length: []uint32{uint32(n)}}
		appendBinaryList(v.Postings, e.blocks)
		if err := v.tailsFromFixed32(); err != nil {
			t.Fatal(err)
		}
		var got Posting
		if err := DecodePosting(v.Blocks(0), n, &got); err != nil || !slices.Equal(got.Docs, p.Docs) || !slices.Equal(got.Freqs, p.Freqs) {
			t.Fatalf("%d documents: %v", n, err)
		}
		if n%BlockSize == 0 {
			continue
		}
		v = &Invert{Postings: emptyList(largeBinary), Length: []uint32{uint32(n + 1)}}
		appendBinaryList(v.Postings, e.blocks)
		if err := v.tailsFromFixed32(); !errors.Is(err, errkind.Corrupt) {
			t.Fatalf("%d documents read as %d: %v", n, n+1, err)
		}
	}
}
