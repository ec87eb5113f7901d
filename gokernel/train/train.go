// Package train trains the models of Lance vector indices on a sample of a
// dataset's vectors: IVF centroids (k-means), PQ codebooks (k-means per
// sub-vector: on residuals to the nearest centroid for l2 and cosine, on
// the raw vectors for dot), SQ bounds, and the RQ rotation in the form
// Lance stores it (fast rotation sign bits).
//
// Cosine models are trained on normalised vectors under L2, as Lance does;
// dot IVF assigns by the largest inner product.
package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"
)

// Params of a training run. Zero values take Lance's defaults.
type Params struct {
	IndexType     ivf.IndexType `json:"index_type"`
	Metric        encode.Metric `json:"metric"`
	NumPartitions int           `json:"num_partitions"`
	NumSubVectors int           `json:"num_sub_vectors"`
	NumBits       int           `json:"num_bits"`
	// SampleRate is the sample size per centroid: k-means sees
	// NumPartitions × SampleRate vectors (IVF) and 2^NumBits × SampleRate
	// (PQ). Default 256.
	SampleRate int `json:"sample_rate"`
	// MaxIters bounds k-means iterations. Default 50.
	MaxIters int `json:"max_iters"`
	// FragmentIDs restricts the sample; all fragments when empty.
	FragmentIDs []uint64 `json:"fragment_ids"`
	Seed        uint64   `json:"seed"`
	// Workers run k-means assignment in parallel. Default GOMAXPROCS.
	Workers int `json:"workers"`
}

func (p Params) withDefaults(dim int) Params {
	if p.SampleRate <= 0 {
		p.SampleRate = 256
	}
	if p.MaxIters <= 0 {
		p.MaxIters = 50
	}
	if p.Workers <= 0 {
		p.Workers = runtime.GOMAXPROCS(0)
	}
	switch p.IndexType {
	case ivf.IVFPQ:
		if p.NumBits == 0 {
			p.NumBits = 8
		}
		if p.NumSubVectors == 0 {
			switch {
			case dim%16 == 0:
				p.NumSubVectors = dim / 16
			case dim%8 == 0:
				p.NumSubVectors = dim / 8
			}
		}
	case ivf.IVFSQ:
		if p.NumBits == 0 {
			p.NumBits = 8
		}
	case ivf.IVFRQ:
		if p.NumBits == 0 {
			p.NumBits = 5 // pylance's build_rq_model default
		}
	}
	return p
}

// Stats describe a training run.
type Stats struct {
	SampleRows int     `json:"sample_rows"`
	IVFIters   int     `json:"ivf_iters"`
	IVFLoss    float64 `json:"ivf_loss"`
}

// Train samples the column's vectors and trains a model. errkind.InvalidInput
// for parameters that do not fit the data (more partitions than vectors, a
// sub-vector count that does not divide the dimension).
func Train(ctx context.Context, rd *vecdata.Reader, p Params) (*encode.Model, Stats, error) {
	var st Stats
	dim := rd.Column().Dim
	p = p.withDefaults(dim)
	if _, err := encode.ParseMetric(string(p.Metric)); err != nil {
		return nil, st, err
	}
	if p.NumPartitions <= 0 || p.NumPartitions > encode.MaxPartitions {
		return nil, st, fmt.Errorf("%w: train: num_partitions %d", errkind.InvalidInput, p.NumPartitions)
	}
	frags := p.FragmentIDs
	if len(frags) == 0 {
		frags = rd.FragmentIDs()
	}
	n := p.NumPartitions * p.SampleRate
	if p.IndexType == ivf.IVFPQ {
		n = max(n, (1<<p.NumBits)*p.SampleRate)
	}
	sample, err := rd.Sample(ctx, frags, n, p.Seed)
	if err != nil {
		return nil, st, err
	}
	m := &encode.Model{Type: p.IndexType, Metric: p.Metric, Dim: dim}
	// Prepare (cosine: normalise; Lance drops what does not normalise).
	data := sample.Vectors[:0:0]
	for i := 0; i < sample.Len(); i++ {
		v := sample.Vectors[i*dim : (i+1)*dim]
		if p.Metric == encode.Cosine {
			nrm := float32(math.Sqrt(float64(vecmath.Dot(v, v))))
			if nrm == 0 {
				continue
			}
			for j := range v {
				v[j] /= nrm
			}
		}
		data = append(data, v...)
	}
	rows := len(data) / dim
	st.SampleRows = rows
	if rows < p.NumPartitions {
		return nil, st, fmt.Errorf("%w: train: %d vectors cannot train %d partitions", errkind.InvalidInput, rows, p.NumPartitions)
	}
	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x5bd1e995))
	ivfMetric := encode.L2
	if p.Metric == encode.Dot {
		ivfMetric = encode.Dot
	}
	km, err := KMeans(ctx, data, rows, dim, p.NumPartitions, KMeansOptions{Metric: ivfMetric, MaxIters: p.MaxIters, Rng: rng, Workers: p.Workers})
	if err != nil {
		return nil, st, err
	}
	m.Centroids, st.IVFIters, st.IVFLoss = km.Centroids, km.Iters, km.Loss

	switch p.IndexType {
	case ivf.IVFFlat:
	case ivf.IVFSQ:
		if p.NumBits != 8 {
			return nil, st, fmt.Errorf("%w: train: %d-bit SQ (Lance builds 8-bit SQ only)", errkind.Unsupported, p.NumBits)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range data {
			lo, hi = min(lo, float64(x)), max(hi, float64(x))
		}
		m.SQ = &encode.SQParams{NumBits: 8, Lo: lo, Hi: hi}
	case ivf.IVFPQ:
		if p.NumSubVectors <= 0 || dim%p.NumSubVectors != 0 {
			return nil, st, fmt.Errorf("%w: train: num_sub_vectors %d does not divide dimension %d", errkind.InvalidInput, p.NumSubVectors, dim)
		}
		if p.NumBits != 4 && p.NumBits != 8 {
			return nil, st, fmt.Errorf("%w: train: PQ num_bits %d (want 4 or 8)", errkind.InvalidInput, p.NumBits)
		}
		x := data
		if p.Metric != encode.Dot { // residuals to the nearest centroid
			x = make([]float32, len(data))
			for i := 0; i < rows; i++ {
				v := data[i*dim : (i+1)*dim]
				c, _ := vecmath.NearestL2(v, m.Centroids, dim)
				cv := m.Centroids[c*dim : (c+1)*dim]
				for j := range v {
					x[i*dim+j] = v[j] - cv[j]
				}
			}
		}
		cb, err := trainPQ(ctx, x, rows, dim, p, rng)
		if err != nil {
			return nil, st, err
		}
		m.PQ = &encode.PQParams{NumSubVectors: p.NumSubVectors, NumBits: p.NumBits, Codebook: cb}
	case ivf.IVFRQ:
		signs := make([]byte, encode.FastRotationSignBytes(dim))
		for i := range signs {
			signs[i] = byte(rng.Uint32())
		}
		m.RQ = &encode.RQParams{NumBits: p.NumBits, Rotation: encode.RotationFast, Signs: signs, QueryEstimator: encode.RawQuery}
	default:
		return nil, st, fmt.Errorf("%w: train: index type %q", errkind.Unsupported, p.IndexType)
	}
	if err := m.Validate(); err != nil {
		return nil, st, err
	}
	return m, st, nil
}

// trainPQ trains one k-means codebook per sub-vector (L2) and lays them out
// in Lance's order: sub-vector, then centroid, then value.
func trainPQ(ctx context.Context, x []float32, rows, dim int, p Params, rng *rand.Rand) ([]float32, error) {
	nsub, k := p.NumSubVectors, 1<<p.NumBits
	sd := dim / nsub
	if rows < k {
		return nil, fmt.Errorf("%w: train: %d vectors cannot train %d PQ centroids", errkind.InvalidInput, rows, k)
	}
	out := make([]float32, 0, nsub*k*sd)
	sub := make([]float32, rows*sd)
	for s := 0; s < nsub; s++ {
		for i := 0; i < rows; i++ {
			copy(sub[i*sd:(i+1)*sd], x[i*dim+s*sd:i*dim+(s+1)*sd])
		}
		km, err := KMeans(ctx, sub, rows, sd, k, KMeansOptions{Metric: encode.L2, MaxIters: p.MaxIters, Rng: rng, Workers: p.Workers})
		if err != nil {
			return nil, err
		}
		out = append(out, km.Centroids...)
	}
	return out, nil
}

// KMeansOptions tune KMeans.
type KMeansOptions struct {
	Metric   encode.Metric // L2 or Dot
	MaxIters int
	// Tolerance stops when the loss improves by less than this fraction.
	// Default 1e-4.
	Tolerance float64
	Rng       *rand.Rand
	Workers   int
}

// KMeansResult is a trained clustering.
type KMeansResult struct {
	Centroids []float32
	Iters     int
	Loss      float64
}

// KMeans clusters n vectors of dim values into k clusters (Lloyd's
// algorithm from k distinct random rows; an empty cluster takes half of
// the largest one).
func KMeans(ctx context.Context, data []float32, n, dim, k int, o KMeansOptions) (*KMeansResult, error) {
	if k <= 0 || n < k {
		return nil, fmt.Errorf("%w: train: k-means of %d clusters over %d vectors", errkind.InvalidInput, k, n)
	}
	if o.Tolerance <= 0 {
		o.Tolerance = 1e-4
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.Rng == nil {
		o.Rng = rand.New(rand.NewPCG(1, 2))
	}
	cent := make([]float32, k*dim)
	for c, r := range o.Rng.Perm(n)[:k] {
		copy(cent[c*dim:(c+1)*dim], data[r*dim:(r+1)*dim])
	}
	assign := make([]int32, n)
	res := &KMeansResult{Centroids: cent, Loss: math.Inf(1)}
	sums := make([]float64, k*dim)
	counts := make([]int, k)
	for it := 0; it < max(1, o.MaxIters); it++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		loss := assignAll(data, n, dim, cent, k, o.Metric, assign, o.Workers)
		res.Iters = it + 1
		prev := res.Loss
		res.Loss = loss
		clear(sums)
		clear(counts)
		for i, c := range assign {
			counts[c]++
			s := sums[int(c)*dim : (int(c)+1)*dim]
			for j, x := range data[i*dim : (i+1)*dim] {
				s[j] += float64(x)
			}
		}
		for c := 0; c < k; c++ {
			if counts[c] == 0 {
				continue
			}
			for j := 0; j < dim; j++ {
				cent[c*dim+j] = float32(sums[c*dim+j] / float64(counts[c]))
			}
		}
		splitEmpty(cent, counts, dim, o.Rng)
		if !math.IsInf(prev, 1) && math.Abs(prev-loss) <= o.Tolerance*math.Abs(prev) {
			break
		}
	}
	return res, nil
}

// splitEmpty gives each empty cluster a perturbed copy of the largest one.
func splitEmpty(cent []float32, counts []int, dim int, rng *rand.Rand) {
	for c, n := range counts {
		if n > 0 {
			continue
		}
		big := 0
		for j, m := range counts {
			if m > counts[big] {
				big = j
			}
		}
		for j := 0; j < dim; j++ {
			v := cent[big*dim+j]
			eps := float32(1e-4) * (float32(rng.Float64()) - 0.5) * (abs32(v) + 1e-3)
			cent[c*dim+j] = v + eps
			cent[big*dim+j] = v - eps
		}
		counts[c], counts[big] = counts[big]/2, counts[big]-counts[big]/2
	}
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// assignAll assigns every vector to its nearest centroid and returns the
// total distance (squared L2, or 1 - dot).
func assignAll(data []float32, n, dim int, cent []float32, k int, metric encode.Metric, assign []int32, workers int) float64 {
	per := (n + workers - 1) / workers
	losses := make([]float64, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min(n, (w+1)*per)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l float64
			for i := lo; i < hi; i++ {
				v := data[i*dim : (i+1)*dim]
				var c int
				var d float32
				if metric == encode.Dot {
					c, d = vecmath.NearestDot(v, cent, dim)
					d = 1 - d
				} else {
					c, d = vecmath.NearestL2(v, cent, dim)
				}
				assign[i] = int32(c)
				l += float64(d)
			}
			losses[w] = l
		}()
	}
	wg.Wait()
	var total float64
	for _, l := range losses {
		total += l
	}
	return total
}
