package table

import (
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

func TestCumulativeOwn(t *testing.T) {
	tests := []struct {
		name   string
		claims [][]uint32
		want   [][]uint32
		ok     bool
	}{
		{"pylance 0.20 deltas", [][]uint32{{0}, {0, 1}, {0, 1, 2}}, [][]uint32{{0}, {1}, {2}}, true},
		{"a delta over several new fragments", [][]uint32{{0, 1}, {0, 1, 2, 3}}, [][]uint32{{0, 1}, {2, 3}}, true},
		{"disjoint: nothing to resolve", [][]uint32{{0}, {1}, {2}}, nil, false},
		{"meets without claiming all before", [][]uint32{{0}, {1}, {1, 2}}, nil, false},
		{"a claim with nothing of its own", [][]uint32{{0, 1}, {0, 1}}, nil, false},
		{"undecodable", nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cumulativeOwn(tc.claims)
			if ok != tc.ok || (ok && !slices.EqualFunc(got, tc.want, slices.Equal[[]uint32])) {
				t.Fatalf("got %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Entries are taken by dataset version, per index name; other indices and
// overlaps of another kind are left as written.
func TestResolveCumulativeCoverage(t *testing.T) {
	entry := func(name string, version uint64, frags ...uint32) *pb.IndexMetadata {
		bm, err := EncodeFragmentBitmap(frags)
		if err != nil {
			t.Fatal(err)
		}
		return &pb.IndexMetadata{Name: name, DatasetVersion: version, FragmentBitmap: bm}
	}
	indices := []*pb.IndexMetadata{
		entry("vec_idx", 4, 0, 1, 2), // manifest order need not be version order
		entry("vec_idx", 2, 0),
		entry("other", 2, 0),
		entry("vec_idx", 3, 0, 1),
		entry("bad", 2, 0),
		entry("bad", 3, 1, 2),
		entry("bad", 4, 2, 3),
	}
	resolveCumulativeCoverage(indices)
	want := [][]uint32{{2}, {0}, {0}, {1}, {0}, {1, 2}, {2, 3}}
	for i, im := range indices {
		got, _, err := DecodeFragmentBitmap(im.GetFragmentBitmap())
		if err != nil || !slices.Equal(got, want[i]) {
			t.Fatalf("entry %d (%s v%d): %v, want %v (%v)", i, im.GetName(), im.GetDatasetVersion(), got, want[i], err)
		}
	}
}
