package train

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
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

// On skewed data (a few dense clusters and many sparse ones), hierarchical
// k-means shares its clusters by size, as pylance 14's proportional tree
// does: every vector's nearest centroid leaves partitions of about n/k
// vectors, far more even than a tree that splits the largest cluster.
func TestKMeansHierarchicalBalancedOnSkew(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const dim, k, groups = 16, 512, 64
	centres := make([]float32, groups*dim)
	for i := range centres {
		centres[i] = float32(rng.NormFloat64()) * 4
	}
	var data []float32
	for g := 0; g < groups; g++ {
		size := 40 // most groups sparse
		if g < 4 {
			size = 5000 // four dense ones hold most of the vectors
		}
		for i := 0; i < size; i++ {
			for j := 0; j < dim; j++ {
				data = append(data, centres[g*dim+j]+float32(rng.NormFloat64()))
			}
		}
	}
	n := len(data) / dim
	res, err := KMeans(context.Background(), data, n, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: 20, Rng: rand.New(rand.NewPCG(1, 1)), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Centroids) != k*dim {
		t.Fatalf("%d centroid values, want %d", len(res.Centroids), k*dim)
	}
	a := newAssigner(data, n, dim, 2)
	loss := a.assign(res.Centroids, encode.L2)
	sizes := make([]float64, k)
	for _, c := range a.idx {
		sizes[c]++
	}
	mean := float64(n) / k
	var v float64
	for _, s := range sizes {
		v += (s - mean) * (s - mean)
	}
	cv := math.Sqrt(v/k) / mean
	// Measured 0.17 here; the tree that split the largest cluster first
	// (before pylance 14) gave 0.91 on this data.
	if cv > 0.4 {
		t.Fatalf("partition sizes vary by %.2f of their mean", cv)
	}
	if res.Loss < loss*(1-1e-6) {
		t.Fatalf("reported loss %v below the nearest-centroid loss %v", res.Loss, loss)
	}
	t.Logf("partition size CV %.2f, loss %.0f (nearest centroid %.0f)", cv, res.Loss, loss)
}

func TestAllocateQuotas(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		q     int
		want  []int
	}{
		{[]int{10, 10, 10, 10}, 4, []int{1, 1, 1, 1}},
		{[]int{60, 30, 10}, 10, []int{6, 3, 1}},
		{[]int{50, 25, 25}, 2, []int{1, 1, 0}}, // remainders tie: larger part first, then the first
		{[]int{1000, 1}, 2, []int{2, 0}},
		{[]int{3, 1, 0}, 4, []int{3, 1, 0}},
		{[]int{1, 1}, 5, []int{1, 1}}, // never more clusters than vectors
		{[]int{0, 0}, 3, []int{0, 0}},
	} {
		got := allocateQuotas(tc.sizes, tc.q)
		if !slices.Equal(got, tc.want) {
			t.Errorf("allocateQuotas(%v, %d) = %v, want %v", tc.sizes, tc.q, got, tc.want)
		}
	}
}
