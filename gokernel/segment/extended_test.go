package segment

import (
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// extSource is a source whose files hold only an IVF table: rows per
// partition and the centroids (2-d, values given).
func extSource(typ ivf.IndexType, lengths []uint32, cent ...float32) *source {
	offsets := make([]uint64, len(lengths))
	var total uint64
	for i, n := range lengths {
		offsets[i] = total
		total += uint64(n)
	}
	return &source{uuid: "s", files: &ivf.Files{Type: typ,
		IVF: &ivf.Model{Centroids: ivf.Float32Tensor(len(cent)/2, 2, cent), Lengths: lengths, Offsets: offsets}}}
}

func TestExtendedModels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   *source
		shared bool
	}{
		{"same", extSource(ivf.IVFPQ, []uint32{1, 2}, 0, 0, 1, 1), extSource(ivf.IVFPQ, []uint32{3, 0}, 0, 0, 1, 1), true},
		{"b extends a", extSource(ivf.IVFPQ, []uint32{1, 2}, 0, 0, 1, 1), extSource(ivf.IVFPQ, []uint32{3, 0, 4}, 0, 0, 1, 1, 9, 9), true},
		{"a extends b", extSource(ivf.IVFPQ, []uint32{3, 0, 4}, 0, 0, 1, 1, 9, 9), extSource(ivf.IVFPQ, []uint32{1, 2}, 0, 0, 1, 1), true},
		{"not a prefix", extSource(ivf.IVFPQ, []uint32{1, 2}, 0, 0, 1, 1), extSource(ivf.IVFPQ, []uint32{3, 0, 4}, 0, 0, 2, 2, 9, 9), false},
		{"a graph's model is never extended", extSource(ivf.IVFHNSWPQ, []uint32{1, 2}, 0, 0, 1, 1), extSource(ivf.IVFHNSWPQ, []uint32{3, 0, 4}, 0, 0, 1, 1, 9, 9), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameCentroids(tc.a, tc.b)
			if (err == nil) != tc.shared {
				t.Fatalf("sameCentroids: %v", err)
			}
			if !tc.shared {
				return
			}
			ra, rb := tc.a.files.IVF.TotalRows(), tc.b.files.IVF.TotalRows()
			cent, n := widen([]*source{tc.a, tc.b})
			if want := max(tc.a.files.Centroids().Rows(), tc.b.files.Centroids().Rows()); n != want || cent.Rows() != want {
				t.Fatalf("widened to %d partitions (%d centroids), want %d", n, cent.Rows(), want)
			}
			for _, s := range []*source{tc.a, tc.b} {
				iv := s.files.IVF
				if len(iv.Lengths) != n || len(iv.Offsets) != n || s.files.Centroids().Rows() != n {
					t.Fatalf("a source kept %d partitions", len(iv.Lengths))
				}
				for p := 1; p < n; p++ {
					if iv.Offsets[p] != iv.Offsets[p-1]+uint64(iv.Lengths[p-1]) {
						t.Fatalf("offsets %v for lengths %v", iv.Offsets, iv.Lengths)
					}
				}
			}
			if tc.a.files.IVF.TotalRows() != ra || tc.b.files.IVF.TotalRows() != rb {
				t.Fatal("widening changed a source's rows")
			}
		})
	}
}
