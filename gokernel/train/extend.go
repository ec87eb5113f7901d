package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// ExtendOptions tunes Extend. Zero values take the defaults.
type ExtendOptions struct {
	Metric encode.Metric `json:"metric"`
	// Threshold: the model is extended when the new rows' mean squared
	// distance to their nearest centroid exceeds the reference rows' by
	// this factor (default 1.1).
	Threshold float64 `json:"threshold"`
	// MinRowsPerCentroid bounds the new centroids by the misfit rows
	// sampled (default 32): a centroid stands for a cluster, not a row.
	// On bench/drift.py, 16 gave the same recall with twice the
	// partitions, whose merges cost 30% more.
	MinRowsPerCentroid int `json:"min_rows_per_centroid"`
	// MaxNew caps the centroids added (0: no cap beyond the rows').
	MaxNew  int    `json:"max_new"`
	MaxIter int    `json:"max_iters"`
	Seed    uint64 `json:"seed"`
	Workers int    `json:"workers"`
}

func (o ExtendOptions) withDefaults() ExtendOptions {
	if o.Threshold <= 0 {
		o.Threshold = 1.1
	}
	if o.MinRowsPerCentroid <= 0 {
		o.MinRowsPerCentroid = 32
	}
	if o.MaxIter <= 0 {
		o.MaxIter = 25
	}
	o.MaxIter = min(o.MaxIter, 1000) // a request's, bounded
	o.MaxNew = max(o.MaxNew, 0)
	if o.Workers <= 0 {
		o.Workers = 1
	}
	return o
}

// ExtendResult is what Extend measured and the centroids it adds.
type ExtendResult struct {
	// Centroids are the new centroids only (rows × dim), to be appended
	// after the model's: nil when the model still fits.
	Centroids []float32 `json:"-"`
	Added     int       `json:"added"`
	// RefResidual and NewResidual are the mean squared distances of the
	// reference and new rows to their nearest centroid; FittedResidual is
	// the new rows' with the added centroids.
	RefResidual    float64 `json:"ref_residual"`
	NewResidual    float64 `json:"new_residual"`
	FittedResidual float64 `json:"fitted_residual"`
	// Misfit is the share of new rows farther from their centroid than
	// 95% of the reference rows are.
	Misfit  float64 `json:"misfit"`
	RefRows int     `json:"ref_rows"`
	NewRows int     `json:"new_rows"`
}

// Extend decides whether a trained IVF model still fits new rows and, when
// it does not, trains centroids where those rows went: k-means over the
// misfit rows (farther from their centroid than 95% of the reference
// rows are) with the fewest centroids (doubling) that bring those rows'
// mean residual down to the reference rows' (the rows the model fits), at
// most one per MinRowsPerCentroid misfit rows. Rows are compared by squared L2 distance (cosine models
// take normalised rows; dot-product models are not extended).
//
// An extended model keeps every centroid it had, in order, so segments
// encoded with it before stay valid segments of the extended model, and
// its PQ codebook, SQ bounds or RQ rotation are kept: the new rows'
// residuals to the new centroids are of the size the codebook was trained
// on, which is what keeps their codes accurate. Re-encoding only the new
// rows is the whole cost; a full retrain re-encodes every row.
func Extend(ctx context.Context, centroids []float32, dim int, ref, fresh []float32, o ExtendOptions) (*ExtendResult, error) {
	o = o.withDefaults()
	switch {
	case dim <= 0 || len(centroids) == 0 || len(centroids)%dim != 0:
		return nil, fmt.Errorf("%w: extend: %d centroid values of dimension %d", errkind.InvalidInput, len(centroids), dim)
	case len(ref)%dim != 0 || len(fresh)%dim != 0:
		return nil, fmt.Errorf("%w: extend: sample values not a multiple of dimension %d", errkind.InvalidInput, dim)
	case o.Metric == encode.Dot:
		return nil, fmt.Errorf("%w: extend: a dot-product model (its partitions are not regions of space a centroid can be added to)", errkind.Unsupported)
	}
	if o.Metric == encode.Cosine {
		ref, fresh = normalized(ref, dim), normalized(fresh, dim)
	}
	res := &ExtendResult{RefRows: len(ref) / dim, NewRows: len(fresh) / dim}
	if res.RefRows == 0 || res.NewRows == 0 {
		return res, nil
	}
	refDist := nearestDist(ref, dim, centroids, o.Workers)
	newDist := nearestDist(fresh, dim, centroids, o.Workers)
	res.RefResidual, res.NewResidual = mean32(refDist), mean32(newDist)
	res.FittedResidual = res.NewResidual
	cut := quantile(refDist, 0.95)
	var misfit []float32
	var misDist []float32
	for i, d := range newDist {
		if d > cut {
			misfit = append(misfit, fresh[i*dim:(i+1)*dim]...)
			misDist = append(misDist, d)
		}
	}
	res.Misfit = float64(len(misDist)) / float64(res.NewRows)
	if res.NewResidual <= o.Threshold*res.RefResidual || len(misDist) == 0 {
		return res, nil
	}
	n := len(misDist)
	limit := max(1, n/o.MinRowsPerCentroid)
	if o.MaxNew > 0 {
		limit = min(limit, o.MaxNew)
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b9))
	// Enough: every misfit row fits, on average, as well as an indexed row
	// does (its residual is then of the size the codebook was trained on,
	// which is what keeps its code accurate). A target on the mean of all
	// new rows stops too early: measured on bench/drift.py, it added a
	// centroid or two where the moved rows needed one per cluster, and
	// recall lagged a fresh build by up to 0.09. k doubles from a
	// sixteenth of the limit (no stop on small gains: rows that moved
	// around many clusters gain little until there is one per cluster).
	var best []float32
	for k := max(1, limit/16); ; k = min(2*k, limit) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		km, err := KMeans(ctx, misfit, n, dim, k, KMeansOptions{Metric: encode.L2, MaxIters: o.MaxIter, Rng: rng, Workers: o.Workers})
		if err != nil {
			return nil, err
		}
		fitted := nearestDist(misfit, dim, km.Centroids, o.Workers)
		var sum float64
		for i, d := range fitted {
			sum += float64(min(d, misDist[i]))
		}
		// The new rows' residual with the added centroids: the misfit
		// rows' refit, the others as they were.
		r := res.NewResidual + (sum-sum32(misDist))/float64(res.NewRows)
		best, res.FittedResidual = km.Centroids, r
		if sum/float64(n) <= res.RefResidual || k >= limit {
			break
		}
	}
	res.Centroids, res.Added = best, len(best)/dim
	return res, nil
}

// nearestDist returns each row's squared L2 distance to its nearest
// centroid (computed exactly, after the search's pick).
func nearestDist(data []float32, dim int, cent []float32, workers int) []float32 {
	n := len(data) / dim
	a := newAssigner(data, n, dim, workers)
	a.assign(cent, encode.L2)
	out := make([]float32, n)
	for i, c := range a.idx {
		if c < 0 {
			out[i] = float32(math.Inf(1))
			continue
		}
		out[i] = vecmath.L2Sq16(data[i*dim:(i+1)*dim], cent[int(c)*dim:(int(c)+1)*dim])
	}
	return out
}

func normalized(data []float32, dim int) []float32 {
	out := make([]float32, 0, len(data))
	for i := 0; i+dim <= len(data); i += dim {
		v := data[i : i+dim]
		nrm := float32(math.Sqrt(float64(vecmath.Dot(v, v))))
		if nrm == 0 {
			continue
		}
		for _, x := range v {
			out = append(out, x/nrm)
		}
	}
	return out
}

func sum32(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s
}

func mean32(v []float32) float64 { return sum32(v) / float64(max(1, len(v))) }

func quantile(v []float32, q float64) float32 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
