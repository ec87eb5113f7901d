package train

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
)

// k-means finds well separated clusters.
func TestKMeansSeparated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const dim, k, per = 4, 5, 200
	centers := make([]float32, k*dim)
	for i := range centers {
		centers[i] = float32(rng.IntN(100)) * 10
	}
	var data []float32
	for c := 0; c < k; c++ {
		for i := 0; i < per; i++ {
			for j := 0; j < dim; j++ {
				data = append(data, centers[c*dim+j]+float32(rng.NormFloat64()*0.1))
			}
		}
	}
	res, err := KMeans(context.Background(), data, k*per, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: 50, Rng: rng, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < k; c++ {
		best := math.Inf(1)
		for r := 0; r < k; r++ {
			var d float64
			for j := 0; j < dim; j++ {
				x := float64(centers[c*dim+j] - res.Centroids[r*dim+j])
				d += x * x
			}
			best = min(best, d)
		}
		if best > 1 {
			t.Fatalf("center %d not found (nearest centroid at squared distance %v)", c, best)
		}
	}
	if res.Loss > float64(k*per*dim)*0.02 {
		t.Fatalf("loss %v", res.Loss)
	}
}

func TestKMeansRefusesTooFewVectors(t *testing.T) {
	if _, err := KMeans(context.Background(), make([]float32, 8), 2, 4, 3, KMeansOptions{}); err == nil {
		t.Fatal("3 clusters of 2 vectors")
	}
}

// Hierarchical k-means (above 256 clusters) gives k centroids that cover
// the data about as well as flat k-means does.
func TestKMeansHierarchical(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	const n, k, dim = 300 * 20, 300, 8
	data := clustered(rng, n, 40, dim)
	flat, err := KMeans(context.Background(), data, n, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: 20, Rng: rand.New(rand.NewPCG(1, 1)), Workers: 2, HierarchicalK: 1})
	if err != nil {
		t.Fatal(err)
	}
	hier, err := KMeans(context.Background(), data, n, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: 20, Rng: rand.New(rand.NewPCG(1, 1)), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(hier.Centroids) != k*dim {
		t.Fatalf("%d centroid values, want %d", len(hier.Centroids), k*dim)
	}
	if hier.Loss > 1.25*flat.Loss {
		t.Fatalf("hierarchical loss %v, flat %v", hier.Loss, flat.Loss)
	}
	t.Logf("loss: hierarchical %.1f, flat %.1f", hier.Loss, flat.Loss)
}
