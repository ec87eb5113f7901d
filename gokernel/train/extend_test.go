package train

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// blobs draws n rows of dim values around k centres (spread 3), each
// moved by shift in every coordinate, with unit noise.
func blobs(rng *rand.Rand, centres []float32, n, dim int, shift float32) []float32 {
	k := len(centres) / dim
	out := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		c := rng.IntN(k)
		for j := 0; j < dim; j++ {
			out[i*dim+j] = centres[c*dim+j] + shift + float32(rng.NormFloat64())
		}
	}
	return out
}

func TestExtend(t *testing.T) {
	const dim, k = 16, 8
	rng := rand.New(rand.NewPCG(1, 2))
	centres := make([]float32, k*dim)
	for i := range centres {
		centres[i] = 3 * float32(rng.NormFloat64())
	}
	ref := blobs(rng, centres, 4000, dim, 0)
	km, err := KMeans(context.Background(), ref, 4000, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: 30, Rng: rng})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		shift float32
		grows bool
	}{
		{"same distribution", 0, false},
		{"slightly moved", 0.05, false},
		{"moved away", 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := blobs(rng, centres, 2000, dim, tc.shift)
			res, err := Extend(context.Background(), km.Centroids, dim, ref, fresh, ExtendOptions{Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			if res.RefRows != 4000 || res.NewRows != 2000 {
				t.Fatalf("rows %d/%d", res.RefRows, res.NewRows)
			}
			if grew := res.Added > 0; grew != tc.grows {
				t.Fatalf("added %d centroids (residual %.2f vs reference %.2f)", res.Added, res.NewResidual, res.RefResidual)
			}
			if len(res.Centroids) != res.Added*dim {
				t.Fatalf("%d centroid values for %d centroids", len(res.Centroids), res.Added)
			}
			if !tc.grows {
				if res.Centroids != nil || res.FittedResidual != res.NewResidual {
					t.Fatalf("a model that fits changed: %+v", res)
				}
				return
			}
			// The moved rows fit the extended model about as well as the
			// reference rows fit the old one, and the new centroids sit
			// where the rows went.
			all := append(append([]float32{}, km.Centroids...), res.Centroids...)
			after := mean32(nearestDist(fresh, dim, all, 1))
			if after > 1.1*res.RefResidual || after >= res.NewResidual/2 {
				t.Fatalf("residual %.2f -> %.2f, reference %.2f", res.NewResidual, after, res.RefResidual)
			}
			if res.Added > 2000/32 {
				t.Fatalf("%d centroids for 2000 rows", res.Added)
			}
		})
	}
}

func TestExtendRefuses(t *testing.T) {
	cent := []float32{0, 0, 1, 1}
	for _, tc := range []struct {
		name       string
		cent       []float32
		dim        int
		ref, fresh []float32
		metric     encode.Metric
		kind       error
	}{
		{"no centroids", nil, 2, []float32{0, 0}, []float32{0, 0}, encode.L2, errkind.InvalidInput},
		{"ragged centroids", []float32{0, 0, 1}, 2, []float32{0, 0}, []float32{0, 0}, encode.L2, errkind.InvalidInput},
		{"ragged sample", cent, 2, []float32{0}, []float32{0, 0}, encode.L2, errkind.InvalidInput},
		{"dot product", cent, 2, []float32{0, 0}, []float32{0, 0}, encode.Dot, errkind.Unsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Extend(context.Background(), tc.cent, tc.dim, tc.ref, tc.fresh, ExtendOptions{Metric: tc.metric})
			if !errors.Is(err, tc.kind) {
				t.Fatalf("got %v, want %v", err, tc.kind)
			}
		})
	}
}
