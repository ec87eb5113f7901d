// Package encode turns float vectors into the rows of a Lance vector index
// segment with a given model: IVF partition assignment, then the codes of
// the index type (IVF_FLAT: the vector, IVF_SQ: 8-bit scalar codes, IVF_PQ:
// 4- or 8-bit product codes, IVF_RQ: RaBitQ sign and extra-bit codes with
// their correction factors), exactly as pylance 14's builder computes them
// for the same model.
//
// Metrics follow Lance: cosine vectors are normalised (and the zero vector,
// whose normalisation is not finite, dropped) and then indexed under L2;
// dot assigns partitions by the largest inner product and encodes PQ on the
// raw vectors, while L2 and cosine PQ encode residuals to the centroid; RQ
// always encodes residuals.
//
// The package is the one place that knows how a model maps a vector to its
// stored row, so that builds, and later verification, agree with each other
// and with pylance.
package encode

import (
	"fmt"
	"math"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// Metric is a distance type, spelled as Lance stores it.
type Metric string

// The metrics an IVF index is built for.
const (
	L2     Metric = "l2"
	Cosine Metric = "cosine"
	Dot    Metric = "dot"
)

// ParseMetric accepts l2 (also euclidean), cosine and dot, in any case.
func ParseMetric(s string) (Metric, error) {
	switch strings.ToLower(s) {
	case "l2", "euclidean":
		return L2, nil
	case "cosine":
		return Cosine, nil
	case "dot":
		return Dot, nil
	case "hamming":
		return "", fmt.Errorf("%w: encode: the hamming metric (binary vectors) is not supported", errkind.Unsupported)
	}
	return "", fmt.Errorf("%w: encode: unknown metric %q (want l2, cosine or dot)", errkind.InvalidInput, s)
}

// indexMetric is the metric the IVF and quantizers use once vectors are
// prepared: cosine becomes L2 on normalised vectors.
func (m Metric) indexMetric() Metric {
	if m == Cosine {
		return L2
	}
	return m
}

// Model is everything a build needs besides the vectors: trained once and
// shared by every segment of an index, so that the segments stay mergeable.
type Model struct {
	Type   ivf.IndexType
	Metric Metric
	Dim    int
	// Centroids holds NumPartitions() rows of Dim values, row-major.
	Centroids []float32
	PQ        *PQParams
	SQ        *SQParams
	RQ        *RQParams
}

// PQParams is a product quantizer.
type PQParams struct {
	NumSubVectors int
	NumBits       int // 4 or 8
	// Codebook holds, for each sub-vector in turn, 2^NumBits centroids of
	// Dim/NumSubVectors values: NumSubVectors × 2^NumBits × subDim floats,
	// the order of Lance's codebook buffer (and of pylance's PqModel
	// codebook flattened).
	Codebook []float32
	// DotByInnerProduct, for the dot metric only, assigns each sub-vector
	// the codebook entry of largest inner product, as pylance 14's
	// create_index_uncommitted does with an injected codebook. By default
	// (false) the nearest entry in L2 is taken, as pylance's create_index
	// does with the codebook it trains: on raw, unnormalised vectors, the
	// inner product favours the entries of largest norm and recall falls
	// (0.04 against 0.42 at recall@10 on the clustered test data).
	DotByInnerProduct bool
}

// SQParams is an 8-bit scalar quantizer over [Lo, Hi].
type SQParams struct {
	NumBits int
	Lo, Hi  float64
}

// Rotation types of RQ, as Lance names them.
const (
	RotationFast   = "fast"
	RotationMatrix = "matrix"
)

// Query estimators of RQ, as Lance names them.
const (
	RawQuery      = "raw_query"
	ResidualQuery = "residual_query"
)

// RQParams is a RaBitQ quantizer.
type RQParams struct {
	// NumBits per dimension: 1 sign bit plus NumBits-1 extra bits (1..9).
	NumBits  int
	Rotation string
	// Signs are the fast rotation's random sign flips: 4 rounds of
	// ceil(Dim/8) bytes.
	Signs []byte
	// Matrix is the Dim×Dim rotation of the matrix rotation, row-major:
	// rotated[i] = Σ_j Matrix[i·Dim+j]·v[j].
	Matrix         []float32
	QueryEstimator string
}

// NumPartitions is the number of IVF partitions.
func (m *Model) NumPartitions() int {
	if m.Dim <= 0 {
		return 0
	}
	return len(m.Centroids) / m.Dim
}

// Limits on models: Lance's own (partitions, PQ bits) and what a segment
// can index.
const (
	MaxDim        = 1 << 16
	MaxPartitions = 1 << 20
)

// Validate checks the model's shapes and parameters. errkind.InvalidInput
// for a model that cannot be, errkind.Unsupported for one this package does
// not build.
func (m *Model) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: encode: model: "+format, append([]any{errkind.InvalidInput}, args...)...)
	}
	switch m.Type {
	case ivf.IVFFlat, ivf.IVFSQ, ivf.IVFPQ, ivf.IVFRQ:
	case ivf.IVFHNSWFlat, ivf.IVFHNSWSQ, ivf.IVFHNSWPQ:
		return fmt.Errorf("%w: encode: building %s segments (the HNSW graph) is not supported", errkind.Unsupported, m.Type)
	default:
		return bad("unknown index type %q", m.Type)
	}
	if _, err := ParseMetric(string(m.Metric)); err != nil {
		return err
	}
	if m.Dim <= 0 || m.Dim > MaxDim {
		return bad("dimension %d outside [1, %d]", m.Dim, MaxDim)
	}
	if len(m.Centroids) == 0 || len(m.Centroids)%m.Dim != 0 {
		return bad("%d centroid values do not make rows of dimension %d", len(m.Centroids), m.Dim)
	}
	if k := m.NumPartitions(); k > MaxPartitions {
		return bad("%d partitions, above %d", k, MaxPartitions)
	}
	if !allFinite(m.Centroids) {
		return bad("centroids hold NaN or infinite values")
	}
	want := map[ivf.IndexType]string{ivf.IVFPQ: "pq", ivf.IVFSQ: "sq", ivf.IVFRQ: "rq"}[m.Type]
	has := map[string]bool{"pq": m.PQ != nil, "sq": m.SQ != nil, "rq": m.RQ != nil}
	for q, ok := range has {
		if ok && q != want {
			return bad("a %s model carries %s parameters", m.Type, strings.ToUpper(q))
		}
	}
	if want != "" && !has[want] {
		return bad("a %s model needs %s parameters", m.Type, strings.ToUpper(want))
	}
	switch {
	case m.PQ != nil:
		p := m.PQ
		if p.NumBits != 4 && p.NumBits != 8 {
			return bad("PQ num_bits %d (want 4 or 8)", p.NumBits)
		}
		if p.NumSubVectors <= 0 || m.Dim%p.NumSubVectors != 0 {
			return bad("PQ num_sub_vectors %d does not divide dimension %d", p.NumSubVectors, m.Dim)
		}
		if p.NumBits == 4 && p.NumSubVectors%2 != 0 {
			return bad("4-bit PQ needs an even num_sub_vectors, got %d", p.NumSubVectors)
		}
		if want := (1 << p.NumBits) * m.Dim; len(p.Codebook) != want {
			return bad("PQ codebook of %d values, want 2^%d × %d = %d", len(p.Codebook), p.NumBits, m.Dim, want)
		}
		if !allFinite(p.Codebook) {
			return bad("PQ codebook holds NaN or infinite values")
		}
	case m.SQ != nil:
		s := m.SQ
		if s.NumBits != 8 {
			return fmt.Errorf("%w: encode: %d-bit SQ (Lance builds 8-bit SQ only)", errkind.Unsupported, s.NumBits)
		}
		if math.IsNaN(s.Lo) || math.IsNaN(s.Hi) || math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) || s.Lo > s.Hi {
			return bad("SQ bounds [%v, %v]", s.Lo, s.Hi)
		}
	case m.RQ != nil:
		r := m.RQ
		if r.NumBits < 1 || r.NumBits > 9 {
			return bad("RQ num_bits %d outside [1, 9]", r.NumBits)
		}
		if m.Dim%8 != 0 {
			return bad("IVF_RQ needs a dimension divisible by 8, got %d", m.Dim)
		}
		switch r.QueryEstimator {
		case RawQuery, ResidualQuery:
		default:
			return bad("RQ query_estimator %q", r.QueryEstimator)
		}
		switch r.Rotation {
		case RotationFast:
			if want := FastRotationSignBytes(m.Dim); len(r.Signs) != want {
				return bad("RQ fast rotation has %d sign bytes, want %d for dimension %d", len(r.Signs), want, m.Dim)
			}
		case RotationMatrix:
			if len(r.Matrix) != m.Dim*m.Dim {
				return bad("RQ rotation matrix of %d values, want %d×%d", len(r.Matrix), m.Dim, m.Dim)
			}
			if !allFinite(r.Matrix) {
				return bad("RQ rotation matrix holds NaN or infinite values")
			}
		default:
			return bad("RQ rotation_type %q", r.Rotation)
		}
	}
	return nil
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return false
		}
	}
	return true
}

// Compatible reports why a model cannot encode vectors of a column of
// dimension dim for an index of the given type and metric ("" if it can).
func (m *Model) Compatible(t ivf.IndexType, metric Metric, dim int) string {
	switch {
	case m.Type != t:
		return fmt.Sprintf("the model is for %s, the build is %s", m.Type, t)
	case m.Metric != metric:
		return fmt.Sprintf("the model is for the %s metric, the build uses %s", m.Metric, metric)
	case m.Dim != dim:
		return fmt.Sprintf("the model is for %d-d vectors, the column holds %d-d vectors", m.Dim, dim)
	}
	return ""
}
