package keysort

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// pair is what the reference sort orders.
type pair struct {
	valid bool
	v     []byte
	row   uint64
}

// column makes n values of kind k (every 7th null) as one Array, and the
// pairs it holds.
func column(k lancefile.Kind, n int, rng *rand.Rand) (*lancefile.Array, []pair) {
	t := lancefile.Primitive(k)
	if k == lancefile.KindBinary {
		t = lancefile.DataType{Kind: lancefile.KindBinary, Logical: "string"}
	}
	a := &lancefile.Array{Type: t, Len: n, Validity: make([]byte, (n+7)/8)}
	if k == lancefile.KindBinary {
		a.Offsets = []int64{0}
	}
	ps := make([]pair, n)
	for i := range n {
		var v []byte
		switch k {
		case lancefile.KindInt64:
			v = binary.LittleEndian.AppendUint64(nil, uint64(rng.Int64N(50)-25))
		case lancefile.KindFloat64:
			f := []float64{math.NaN(), math.Inf(-1), math.Inf(1), -0.0, 0, rng.NormFloat64()}[rng.IntN(6)]
			v = binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))
		case lancefile.KindBinary:
			// shared 8-byte prefixes, so ties on the prefix key compare bytes
			v = fmt.Appendf(nil, "prefix--%d", rng.IntN(300))
		}
		valid := i%7 != 3
		if valid {
			a.Validity[i/8] |= 1 << (i % 8)
		}
		if k == lancefile.KindBinary {
			if valid {
				a.Values = append(a.Values, v...)
			}
			a.Offsets = append(a.Offsets, int64(len(a.Values)))
		} else {
			a.Values = append(a.Values, v...)
		}
		ps[i] = pair{valid: valid, row: uint64(rng.Uint32()) << 8}
		if valid {
			ps[i].v = v
		}
	}
	return a, ps
}

func reference(k lancefile.Kind, ps []pair) []pair {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b pair) int {
		if a.valid != b.valid {
			if !a.valid {
				return -1
			}
			return 1
		}
		if a.valid {
			var c int
			if k == lancefile.KindBinary {
				c = bytes.Compare(a.v, b.v)
			} else {
				c = cmp.Compare(lancefile.SortKey(k, a.v), lancefile.SortKey(k, b.v))
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(a.row, b.row)
	})
	return out
}

func TestSortMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   lancefile.Kind
		n      int
		memory int
		runs   bool
	}{
		{"int64 in memory", lancefile.KindInt64, 5000, 0, false},
		{"int64 spilled", lancefile.KindInt64, 5000, 4096, true},
		{"float64 total order spilled", lancefile.KindFloat64, 3000, 2048, true},
		{"strings in memory", lancefile.KindBinary, 4000, 0, false},
		{"strings spilled", lancefile.KindBinary, 4000, 8192, true},
		{"empty", lancefile.KindInt64, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.n), 7))
			a, ps := column(tc.kind, tc.n, rng)
			dir := t.TempDir()
			s, err := New(a.Type, Options{MemoryBytes: tc.memory, TempDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range ps {
				if err := s.Add(a, i, ps[i].row); err != nil {
					t.Fatal(err)
				}
			}
			if (s.Runs() > 0) != tc.runs {
				t.Fatalf("spilled %d runs, want spilling %v", s.Runs(), tc.runs)
			}
			var got []pair
			err = s.Sort(context.Background(), func(valid bool, v []byte, row uint64) error {
				got = append(got, pair{valid, slices.Clone(v), row})
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := reference(tc.kind, ps)
			if len(got) != len(want) {
				t.Fatalf("%d pairs back, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].valid != want[i].valid || got[i].row != want[i].row || !bytes.Equal(got[i].v, want[i].v) {
					t.Fatalf("pair %d: got %+v, want %+v", i, got[i], want[i])
				}
			}
			s.Close()
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Fatalf("Close left %v", left)
			}
		})
	}
}

func TestRefusalsAndCancel(t *testing.T) {
	if _, err := New(lancefile.ListType(), Options{}); !errors.Is(err, errkind.Unsupported) {
		t.Fatalf("list keys: %v, want Unsupported", err)
	}
	a, ps := column(lancefile.KindInt64, 2000, rand.New(rand.NewPCG(1, 2)))
	s, err := New(a.Type, Options{MemoryBytes: 4096, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range ps {
		if err := s.Add(a, i, ps[i].row); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Sort(ctx, func(bool, []byte, uint64) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sort: %v", err)
	}
}

func TestTruncatedRunIsAnError(t *testing.T) {
	a, ps := column(lancefile.KindBinary, 500, rand.New(rand.NewPCG(3, 4)))
	s, err := New(a.Type, Options{MemoryBytes: 2048, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range ps {
		if err := s.Add(a, i, ps[i].row); err != nil {
			t.Fatal(err)
		}
	}
	// A run cut short (a disk that lost its tail) must not read as a
	// shorter sorted stream.
	if err := os.Truncate(s.runs[0].Name(), 13); err != nil {
		t.Fatal(err)
	}
	if err := s.Sort(context.Background(), func(bool, []byte, uint64) error { return nil }); err == nil {
		t.Fatal("a truncated run sorted without an error")
	}
}
