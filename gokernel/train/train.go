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
	"slices"
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

// SampleRows is how many vectors Train samples for p on a column of dim
// dimensions: NumPartitions × SampleRate, or 2^NumBits × SampleRate for a
// PQ codebook when that is more.
func SampleRows(p Params, dim int) int {
	p = p.withDefaults(dim)
	n := p.NumPartitions * p.SampleRate
	if p.IndexType == ivf.IVFPQ {
		n = max(n, (1<<p.NumBits)*p.SampleRate)
	}
	return n
}

func (p Params) check() error {
	if _, err := encode.ParseMetric(string(p.Metric)); err != nil {
		return err
	}
	if p.NumPartitions <= 0 || p.NumPartitions > encode.MaxPartitions {
		return fmt.Errorf("%w: train: num_partitions %d", errkind.InvalidInput, p.NumPartitions)
	}
	if p.SampleRate > maxSampleRate {
		return fmt.Errorf("%w: train: sample_rate %d (at most %d)", errkind.InvalidInput, p.SampleRate, maxSampleRate)
	}
	return nil
}

// maxSampleRate bounds the sample a caller may ask for (Lance's default is
// 256 vectors per centroid).
const maxSampleRate = 1 << 16

// Train samples the column's vectors and trains a model. errkind.InvalidInput
// for parameters that do not fit the data (more partitions than vectors, a
// sub-vector count that does not divide the dimension).
func Train(ctx context.Context, rd *vecdata.Reader, p Params) (*encode.Model, Stats, error) {
	dim := rd.Column().Dim
	p = p.withDefaults(dim)
	if err := p.check(); err != nil {
		return nil, Stats{}, err
	}
	frags := p.FragmentIDs
	if len(frags) == 0 {
		frags = rd.FragmentIDs()
	}
	sample, err := rd.Sample(ctx, frags, SampleRows(p, dim), p.Seed)
	if err != nil {
		return nil, Stats{}, err
	}
	return TrainOn(ctx, sample.Vectors, dim, p)
}

// TrainOn trains a model on vectors sampled beforehand (dim values each),
// for example the samples workers drew from their fragments, concatenated.
// It may change vectors (a cosine model normalises them in place).
func TrainOn(ctx context.Context, vectors []float32, dim int, p Params) (*encode.Model, Stats, error) {
	var st Stats
	p = p.withDefaults(dim)
	if err := p.check(); err != nil {
		return nil, st, err
	}
	if dim <= 0 || len(vectors)%dim != 0 {
		return nil, st, fmt.Errorf("%w: train: %d values are not vectors of %d dimensions", errkind.InvalidInput, len(vectors), dim)
	}
	m := &encode.Model{Type: p.IndexType, Metric: p.Metric, Dim: dim}
	// Prepare (cosine: normalise; Lance drops what does not normalise).
	data := vectors
	if p.Metric == encode.Cosine { // normalised in place, zero vectors dropped
		data = data[:0]
		for i := 0; i < len(vectors)/dim; i++ {
			v := vectors[i*dim : (i+1)*dim]
			nrm := float32(math.Sqrt(float64(vecmath.Dot(v, v))))
			if nrm == 0 {
				continue
			}
			for j := range v {
				v[j] /= nrm
			}
			data = append(data, v...) // never past v: in place
		}
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
	// IVF trains on NumPartitions × SampleRate vectors (a random subset
	// when the PQ sample drew more), as Lance's sample sizes are.
	ivfData, ivfRows := subsample(rng, data, rows, dim, p.NumPartitions*p.SampleRate)
	km, err := KMeans(ctx, ivfData, ivfRows, dim, p.NumPartitions, KMeansOptions{Metric: ivfMetric, MaxIters: p.MaxIters, Rng: rng, Workers: p.Workers})
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
		// PQ trains on 2^bits × SampleRate vectors (a random subset when
		// the IVF sample drew more), as Lance's PQ sample is.
		x, pqRows := subsample(rng, data, rows, dim, (1<<p.NumBits)*p.SampleRate)
		if p.Metric != encode.Dot { // residuals to the nearest centroid
			src := x
			x = make([]float32, len(src))
			a := newAssigner(src, pqRows, dim, p.Workers)
			a.assign(m.Centroids, encode.L2)
			for i, c := range a.idx {
				v := src[i*dim : (i+1)*dim]
				cv := m.Centroids[int(c)*dim : (int(c)+1)*dim]
				for j := range v {
					x[i*dim+j] = v[j] - cv[j]
				}
			}
		}
		cb, err := trainPQ(ctx, x, pqRows, dim, p, rng)
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

// subsample returns want of the rows of data (dim values each) drawn at
// random, in their order, or data itself when it holds no more.
func subsample(rng *rand.Rand, data []float32, rows, dim, want int) ([]float32, int) {
	if rows <= want {
		return data, rows
	}
	pick := rng.Perm(rows)[:want]
	slices.Sort(pick)
	out := make([]float32, 0, want*dim)
	for _, r := range pick {
		out = append(out, data[r*dim:(r+1)*dim]...)
	}
	return out, want
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
	// HierarchicalK: above 256 clusters, k-means is a tree of k-means
	// runs of up to HierarchicalK parts each (see kmeansHierarchical).
	// Default 16 (Lance's); 1 trains all k clusters at once.
	HierarchicalK int
}

// KMeansResult is a trained clustering.
type KMeansResult struct {
	Centroids []float32
	Iters     int
	Loss      float64
}

// maxRowsPerCluster caps the vectors one k-means run trains on, as Lance
// does (k·512 rows, the first of its sample).
const maxRowsPerCluster = 512

// hierarchicalAbove is the cluster count above which k-means is
// hierarchical (Lance's threshold).
const hierarchicalAbove = 256

// KMeans clusters n vectors of dim values into k clusters: Lloyd's
// algorithm from k distinct random rows (an empty cluster takes half of
// the largest one), on at most k·512 of the vectors; above 256 clusters,
// hierarchically (see KMeansOptions.HierarchicalK). Assignment runs on
// o.Workers goroutines with vecmath's batch search.
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
	if o.HierarchicalK == 0 {
		o.HierarchicalK = 16
	}
	if k > hierarchicalAbove && o.HierarchicalK > 1 {
		return kmeansHierarchical(ctx, data, n, dim, k, o)
	}
	return kmeansFlat(ctx, data, n, dim, k, o)
}

func kmeansFlat(ctx context.Context, data []float32, n, dim, k int, o KMeansOptions) (*KMeansResult, error) {
	if limit := k * maxRowsPerCluster; n > limit {
		// A random subset (Lance takes the first rows of its sample; ours
		// may be in row order, and a cluster's rows are).
		pick := o.Rng.Perm(n)[:limit]
		slices.Sort(pick)
		sub := make([]float32, limit*dim)
		for i, r := range pick {
			copy(sub[i*dim:(i+1)*dim], data[r*dim:(r+1)*dim])
		}
		data, n = sub, limit
	}
	data = data[:n*dim]
	cent := make([]float32, k*dim)
	for c, r := range o.Rng.Perm(n)[:k] {
		copy(cent[c*dim:(c+1)*dim], data[r*dim:(r+1)*dim])
	}
	a := newAssigner(data, n, dim, o.Workers)
	res := &KMeansResult{Centroids: cent, Loss: math.Inf(1)}
	sums := make([]float64, k*dim)
	counts := make([]int, k)
	for it := 0; it < max(1, o.MaxIters); it++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		loss := a.assign(cent, o.Metric)
		res.Iters = it + 1
		prev := res.Loss
		res.Loss = loss
		clear(sums)
		clear(counts)
		for i, c := range a.idx {
			if c < 0 {
				continue
			}
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
			inv := 1 / float64(counts[c])
			for j := 0; j < dim; j++ {
				cent[c*dim+j] = float32(sums[c*dim+j] * inv)
			}
		}
		splitEmpty(cent, counts, dim, o.Rng)
		if !math.IsInf(prev, 1) && math.Abs(prev-loss) <= o.Tolerance*math.Abs(prev) {
			break
		}
	}
	return res, nil
}

// kmeansHierarchical builds a tree of k-means runs whose leaves are the k
// clusters, as pylance 14's proportional hierarchical k-means does: a node
// holding q clusters' worth of vectors clusters them into up to
// HierarchicalK parts and hands each part a share of q proportional to its
// vectors (largest remainder), so every leaf holds about n/k vectors
// however skewed the data is. A part whose share rounds to zero joins its
// nearest sibling; a node whose vectors do not split (duplicates) ends as
// one leaf, and the clusters it could not make are split off the largest
// leaves at the end. A leaf's centroid is the mean of its vectors; the
// loss is every vector's distance to its own leaf's centroid.
func kmeansHierarchical(ctx context.Context, data []float32, n, dim, k int, o KMeansOptions) (*KMeansResult, error) {
	res := &KMeansResult{Centroids: make([]float32, 0, k*dim)}
	counts := make([]int, 0, k)
	dist := vecmath.L2Sq
	if o.Metric == encode.Dot {
		dist = func(a, b []float32) float32 { return 1 - vecmath.Dot(a, b) }
	}
	leaf := func(rows []int32) {
		c := make([]float64, dim)
		for _, r := range rows {
			for j, x := range data[int(r)*dim : (int(r)+1)*dim] {
				c[j] += float64(x)
			}
		}
		at := len(res.Centroids)
		for _, x := range c {
			res.Centroids = append(res.Centroids, float32(x/float64(len(rows))))
		}
		cent := res.Centroids[at:]
		for _, r := range rows {
			res.Loss += float64(dist(data[int(r)*dim:(int(r)+1)*dim], cent))
		}
		counts = append(counts, len(rows))
	}
	var buf []float32 // a node's vectors, reused from node to node
	var node func(rows []int32, quota int) error
	node = func(rows []int32, quota int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		quota = min(quota, len(rows))
		if quota == 0 { // no vectors (only rows that assign nowhere can leave a part empty)
			return nil
		}
		if quota == 1 {
			leaf(rows)
			return nil
		}
		buf = slices.Grow(buf[:0], len(rows)*dim)[:len(rows)*dim]
		for i, r := range rows {
			copy(buf[i*dim:(i+1)*dim], data[int(r)*dim:(int(r)+1)*dim])
		}
		parts := min(o.HierarchicalK, quota)
		km, err := kmeansFlat(ctx, buf, len(rows), dim, parts, o)
		if err != nil {
			return err
		}
		res.Iters += km.Iters
		a := newAssigner(buf, len(rows), dim, o.Workers)
		a.assign(km.Centroids, o.Metric)
		members := make([][]int32, parts)
		for i, c := range a.idx {
			if c >= 0 {
				members[c] = append(members[c], rows[i])
			}
		}
		sizes := make([]int, parts)
		for c, m := range members {
			sizes[c] = len(m)
		}
		quotas := allocateQuotas(sizes, quota)
		// Parts without a cluster join the nearest part that has one.
		for c, q := range quotas {
			if q > 0 || len(members[c]) == 0 {
				continue
			}
			best, bestD := -1, float32(math.Inf(1))
			for d, qd := range quotas {
				if qd == 0 {
					continue
				}
				if dd := vecmath.L2Sq(km.Centroids[c*dim:(c+1)*dim], km.Centroids[d*dim:(d+1)*dim]); dd < bestD {
					best, bestD = d, dd
				}
			}
			members[best] = append(members[best], members[c]...)
			members[c] = nil
		}
		if nonEmpty := slices.IndexFunc(quotas, func(q int) bool { return q > 0 }); nonEmpty >= 0 && len(members[nonEmpty]) == len(rows) {
			leaf(rows) // nothing split: duplicates
			return nil
		}
		for c, q := range quotas {
			if q > 0 {
				if err := node(members[c], q); err != nil {
					return err
				}
			}
		}
		return nil
	}
	all := make([]int32, n)
	for i := range all {
		all[i] = int32(i)
	}
	if err := node(all, k); err != nil {
		return nil, err
	}
	// Nodes that could not split leave clusters missing: split them off
	// the largest leaves, as flat k-means does with empty clusters.
	for len(counts) < k {
		res.Centroids = append(res.Centroids, make([]float32, dim)...)
		counts = append(counts, 0)
	}
	splitEmpty(res.Centroids, counts, dim, o.Rng)
	return res, nil
}

// allocateQuotas shares q clusters among parts in proportion to their
// sizes: each gets the floor of its share, and the clusters left go to the
// largest remainders (ties to the larger part, then the first). A part
// never gets more clusters than it has vectors.
func allocateQuotas(sizes []int, q int) []int {
	total := 0
	for _, s := range sizes {
		total += s
	}
	out := make([]int, len(sizes))
	if total == 0 {
		return out
	}
	left := q
	rem := make([]int, len(sizes)) // remainder numerators, over total
	for i, s := range sizes {
		out[i] = min(s, s*q/total)
		rem[i] = s*q - out[i]*total
		left -= out[i]
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if rem[a] != rem[b] {
			return rem[b] - rem[a]
		}
		return sizes[b] - sizes[a]
	})
	for _, i := range order {
		if left == 0 {
			break
		}
		if out[i] < sizes[i] {
			out[i]++
			left--
		}
	}
	return out
}

// assigner assigns rows of data to their nearest centroid on several
// goroutines.
type assigner struct {
	data    []float32
	n, dim  int
	workers int
	idx     []int32
	dist    []float32
	scratch []vecmath.SearchScratch
}

func newAssigner(data []float32, n, dim, workers int) *assigner {
	workers = max(1, min(workers, n/256))
	return &assigner{data: data, n: n, dim: dim, workers: workers,
		idx: make([]int32, n), dist: make([]float32, n), scratch: make([]vecmath.SearchScratch, workers)}
}

// assign sets a.idx to every row's nearest centroid (-1 for none) and
// returns the total distance (squared L2, or 1 - dot). Training needs a
// nearest centroid, not Lance's pick among near ties, so it takes the
// smallest computed score (vecmath's NearestByScore: at 8 dimensions,
// twice as fast as the exact search).
func (a *assigner) assign(cent []float32, metric encode.Metric) float64 {
	dist := vecmath.DistL2
	if metric == encode.Dot {
		dist = vecmath.DistDot
	}
	s := vecmath.NewSearcher(cent, a.dim, dist)
	per := (a.n + a.workers - 1) / a.workers
	losses := make([]float64, a.workers)
	var wg sync.WaitGroup
	for w := 0; w < a.workers; w++ {
		lo, hi := w*per, min(a.n, (w+1)*per)
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.NearestByScore(a.data[lo*a.dim:], a.dim, hi-lo, a.idx[lo:hi], a.dist[lo:hi], &a.scratch[w])
			var l float64
			for i, d := range a.dist[lo:hi] {
				if a.idx[lo+i] >= 0 {
					l += float64(d)
				}
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
