package fts

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A token dictionary pylance 14.0.2 wrote (12 stemmed tokens, ids in order
// of first appearance); the same bytes the fst crate's own builder gives.
const pylanceFST = "0300000000000000000000000000000000108bccc4c70010" +
	"97c40010aac4021082d2cb001089d0d30010" + "8a0010880600" + "01047a6e1102c51f1087c2001081c6c40010a7cac8d309108bc2d0d7c23b1082e7c4090a050104000803020b0701060d13181c2b3035393d747371706d6c6a696664621" +
	"10b0c00000000000000740000000000000055" + "1c4287"

func TestFSTReadsPylance(t *testing.T) {
	b, err := hex.DecodeString(pylanceFST)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := fstTokens(b, 12, 53)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"brown": 7, "dog": 11, "fox": 2, "index": 3, "jump": 8, "lanc": 0, "lazi": 6, "merg": 4, "post": 1, "quick": 5, "segment": 10, "token": 9}
	for tok, id := range want {
		if toks[id] != tok {
			t.Errorf("id %d = %q, want %q", id, toks[id], tok)
		}
	}
	for _, c := range []struct {
		n     int
		total uint64
	}{{11, 53}, {12, 52}} {
		if _, err := fstTokens(b, c.n, c.total); err == nil {
			t.Errorf("%d tokens of %d bytes accepted", c.n, c.total)
		}
	}
	bad := slices.Clone(b)
	bad[40] ^= 1
	if _, err := fstTokens(bad, 12, 53); err == nil {
		t.Error("a flipped byte passed the checksum")
	}
}

func buildFST(t *testing.T, keys []string) []byte {
	t.Helper()
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	id := map[string]int{}
	for i, k := range keys {
		id[k] = i
	}
	b := newFSTBuilder()
	for _, k := range sorted {
		if err := b.add([]byte(k), uint64(id[k])); err != nil {
			t.Fatal(err)
		}
	}
	return b.finish()
}

func TestFSTRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := map[string][]string{
		"empty":    {},
		"one":      {"a"},
		"prefixes": {"a", "ab", "abc", "abd", "b"},
		"wide":     nil, // > 32 and 256 transitions from one node
		"random":   nil,
	}
	for c := 0; c < 256; c++ {
		cases["wide"] = append(cases["wide"], string([]byte{byte(c)}), string([]byte{byte(c), 'x'}))
	}
	seen := map[string]bool{}
	for len(cases["random"]) < 5000 {
		k := make([]byte, 1+rng.IntN(12))
		for i := range k {
			k[i] = byte('a' + rng.IntN(26))
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			cases["random"] = append(cases["random"], string(k))
		}
	}
	for name, keys := range cases {
		t.Run(name, func(t *testing.T) {
			var total uint64
			for _, k := range keys {
				total += uint64(len(k))
			}
			got, err := fstTokens(buildFST(t, keys), len(keys), total)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, keys) {
				t.Fatalf("round trip: %d tokens differ", len(keys))
			}
		})
	}
	b := newFSTBuilder()
	_ = b.add([]byte("b"), 0)
	if err := b.add([]byte("a"), 1); err == nil {
		t.Fatal("keys out of order accepted")
	}
}

func FuzzFSTTokens(f *testing.F) {
	b, _ := hex.DecodeString(pylanceFST)
	f.Add(b, 12, uint64(53))
	f.Fuzz(func(t *testing.T, b []byte, n int, total uint64) {
		if n < 0 || n > 1<<16 {
			return
		}
		toks, err := fstTokens(b, n, total)
		if err == nil && len(toks) != n {
			t.Fatal(fmt.Sprintf("%d tokens for %d", len(toks), n))
		}
	})
}
