package encode

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// The fast rotation is orthonormal: it keeps norms and inner products.
func TestFastRotateIsOrthonormal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dim := range []int{8, 32, 128, 40, 200} {
		signs := make([]byte, FastRotationSignBytes(dim))
		for i := range signs {
			signs[i] = byte(rng.Uint32())
		}
		a, b := randVec(rng, dim), randVec(rng, dim)
		ra, rb := make([]float32, dim), make([]float32, dim)
		FastRotate(ra, a, signs)
		FastRotate(rb, b, signs)
		if math.Abs(norm(ra)-norm(a)) > 1e-4*norm(a) {
			t.Fatalf("dim %d: norm %v -> %v", dim, norm(a), norm(ra))
		}
		var d0, d1 float64
		for i := range a {
			d0 += float64(a[i]) * float64(b[i])
			d1 += float64(ra[i]) * float64(rb[i])
		}
		if math.Abs(d0-d1) > 1e-3*norm(a)*norm(b) {
			t.Fatalf("dim %d: dot %v -> %v", dim, d0, d1)
		}
	}
}

func TestBlockedExCodesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for ex := 1; ex <= 8; ex++ {
		for _, dim := range []int{8, 64, 72, 128} {
			vals := make([]byte, dim)
			for i := range vals {
				vals[i] = byte(rng.IntN(1 << ex))
			}
			out := make([]byte, BlockedExCodeBytes(dim, ex))
			packBlockedRow(&exScratch{}, vals, ex, out)
			if got := UnpackBlockedRow(out, ex, dim); !slices.Equal(got, vals) {
				t.Fatalf("ex_bits %d dim %d: %v != %v", ex, dim, got, vals)
			}
		}
	}
	if got := BlockedExCodeBytes(16, 3); got != 24 {
		t.Fatalf("BlockedExCodeBytes(16, 3) = %d, want 24", got)
	}
}

func TestSaturatingU8(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want byte
	}{{-3, 0}, {0, 0}, {0.99, 0}, {1, 1}, {254.9, 254}, {255, 255}, {1e9, 255}, {math.NaN(), 0}} {
		if got := saturatingU8(tc.in); got != tc.want {
			t.Errorf("saturatingU8(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func pqModel(bits int) *Model {
	dim, nsub := 4, 4
	cb := make([]float32, (1<<bits)*dim)
	// sub-vector s, centroid c has value c (sub-dim 1)
	for s := 0; s < nsub; s++ {
		for c := 0; c < 1<<bits; c++ {
			cb[s*(1<<bits)+c] = float32(c)
		}
	}
	return &Model{Type: ivf.IVFPQ, Metric: Dot, Dim: dim, Centroids: []float32{0, 0, 0, 0},
		PQ: &PQParams{NumSubVectors: nsub, NumBits: bits, Codebook: cb}}
}

func TestPQCodes(t *testing.T) {
	e, err := NewEncoder(pqModel(4))
	if err != nil {
		t.Fatal(err)
	}
	out := [][]byte{make([]byte, 2)}
	e.Encode(&Scratch{}, []float32{1.2, 14.6, 3, 0.4}, []int32{0}, out)
	// nearest entries 1, 15, 3, 0; two per byte, the even sub-vector low
	if want := []byte{1 | 15<<4, 3 | 0<<4}; !slices.Equal(out[0], want) {
		t.Fatalf("4-bit codes %v, want %v", out[0], want)
	}
	m := pqModel(4)
	m.PQ.DotByInnerProduct = true
	e, _ = NewEncoder(m)
	e.Encode(&Scratch{}, []float32{1.2, 14.6, 3, 0.4}, []int32{0}, out)
	// largest inner product: the largest entry for positive values
	if want := []byte{15 | 15<<4, 15 | 15<<4}; !slices.Equal(out[0], want) {
		t.Fatalf("inner-product codes %v, want %v", out[0], want)
	}
}

func TestCosineZeroVectorIsDropped(t *testing.T) {
	m := &Model{Type: ivf.IVFFlat, Metric: Cosine, Dim: 2, Centroids: []float32{1, 0, 0, 1}}
	e, err := NewEncoder(m)
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]int32, 2)
	out := [][]byte{make([]byte, 16)}
	e.Encode(&Scratch{}, []float32{0, 0, 0, 3}, parts, out)
	if parts[0] != -1 || parts[1] != 1 {
		t.Fatalf("parts %v", parts)
	}
}

func TestValidate(t *testing.T) {
	good := func() *Model { return pqModel(8) }
	cases := []struct {
		name string
		edit func(*Model)
		kind error
	}{
		{"ok", func(*Model) {}, nil},
		{"hnsw", func(m *Model) { m.Type = ivf.IVFHNSWPQ }, errkind.Unsupported},
		{"metric", func(m *Model) { m.Metric = "manhattan" }, errkind.InvalidInput},
		{"hamming", func(m *Model) { m.Metric = "hamming" }, errkind.Unsupported},
		{"centroids", func(m *Model) { m.Centroids = m.Centroids[:3] }, errkind.InvalidInput},
		{"nan", func(m *Model) { m.Centroids[0] = float32(math.NaN()) }, errkind.InvalidInput},
		{"bits", func(m *Model) { m.PQ.NumBits = 6 }, errkind.InvalidInput},
		{"nsub", func(m *Model) { m.PQ.NumSubVectors = 3 }, errkind.InvalidInput},
		{"codebook", func(m *Model) { m.PQ.Codebook = m.PQ.Codebook[:10] }, errkind.InvalidInput},
		{"missing pq", func(m *Model) { m.PQ = nil }, errkind.InvalidInput},
		{"extra sq", func(m *Model) { m.SQ = &SQParams{NumBits: 8} }, errkind.InvalidInput},
	}
	for _, tc := range cases {
		m := good()
		tc.edit(m)
		err := m.Validate()
		if tc.kind == nil && err != nil || tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.kind)
		}
	}
	rq := &Model{Type: ivf.IVFRQ, Metric: L2, Dim: 12, Centroids: make([]float32, 12),
		RQ: &RQParams{NumBits: 5, Rotation: RotationFast, Signs: make([]byte, 8), QueryEstimator: RawQuery}}
	if err := rq.Validate(); !errors.Is(err, errkind.InvalidInput) {
		t.Errorf("RQ with dimension 12: %v", err)
	}
}

// Every vector's RQ sign code is the sign of its rotated residual, and the
// extended codes reconstruct it better than the signs alone.
func TestRQCodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	dim := 64
	signs := make([]byte, FastRotationSignBytes(dim))
	for i := range signs {
		signs[i] = byte(rng.Uint32())
	}
	m := &Model{Type: ivf.IVFRQ, Metric: L2, Dim: dim, Centroids: randVec(rng, 2*dim),
		RQ: &RQParams{NumBits: 5, Rotation: RotationFast, Signs: signs, QueryEstimator: RawQuery}}
	e, err := NewEncoder(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Columns()) != 7 || e.Columns()[4].Width() != BlockedExCodeBytes(dim, 4) {
		t.Fatalf("columns %+v", e.Columns())
	}
	v := randVec(rng, dim)
	orig := slices.Clone(v)
	out := make([][]byte, 7)
	for c, col := range e.Columns() {
		out[c] = make([]byte, col.Width())
	}
	parts := []int32{0}
	e.Encode(&Scratch{}, v, parts, out)
	p := int(parts[0])
	res := make([]float32, dim)
	for j := range res {
		res[j] = orig[j] - m.Centroids[p*dim+j]
	}
	rot := make([]float32, dim)
	FastRotate(rot, res, signs)
	ex := UnpackBlockedRow(out[4], 4, dim)
	var dot1, dotEx, n1, nEx float64
	for j, r := range rot {
		bit := out[0][j/8] >> (j % 8) & 1
		if (bit == 1) != (r >= 0) {
			t.Fatalf("dim %d: sign bit %d for %v", j, bit, r)
		}
		s := float64(bit)*2 - 1
		full := float64(uint32(bit)<<4+uint32(ex[j])) - 15.5
		dot1 += s * float64(r)
		n1 += 1
		dotEx += full * float64(r)
		nEx += full * full
	}
	cos1 := dot1 / math.Sqrt(n1) / norm(rot)
	cosEx := dotEx / math.Sqrt(nEx) / norm(rot)
	if !(cosEx > cos1 && cosEx > 0.95) {
		t.Fatalf("extended codes align %v, signs alone %v", cosEx, cos1)
	}
}

// sortEvents orders events exactly as a comparison sort does, whatever
// their spread (clustered, equal thresholds, outside [tStart, tEnd)).
func TestSortEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 10, 64, 65, 500, 3000} {
		for _, spread := range []float32{1e-6, 0.1, 1, 3} {
			var s exScratch
			for i := 0; i < n; i++ {
				v := 2 + spread*float32(rng.Float64())
				if i%7 == 0 && i > 0 { // repeated thresholds
					v = math.Float32frombits(uint32(s.events[i-1] >> 32))
				}
				s.events = append(s.events, uint64(math.Float32bits(v))<<32|uint64(rng.IntN(1000)))
			}
			want := slices.Clone(s.events)
			slices.Sort(want)
			if got := sortEvents(&s, 2.2, 4); !slices.Equal(got, want) {
				t.Fatalf("n %d spread %v: not sorted like slices.Sort", n, spread)
			}
		}
	}
}

// fwht gives, bit for bit, what butterflies applied stage by stage give.
func TestFWHTMatchesStageByStage(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := 1; n <= 512; n *= 2 {
		v := randVec(rng, n)
		for i := range v {
			v[i] *= float32(math.Pow(10, float64(rng.IntN(9)-4))) // rounding shows
		}
		want := slices.Clone(v)
		for half := 1; half < n; half *= 2 {
			for i := 0; i < n; i += 2 * half {
				for j := i; j < i+half; j++ {
					x, y := want[j], want[j+half]
					want[j], want[j+half] = x+y, x-y
				}
			}
		}
		fwht(v)
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d: value %d is %v, want %v", n, i, v[i], want[i])
			}
		}
	}
}

// The prepared rotator gives FastRotate's bits.
func TestRotatorMatchesFastRotate(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dim := range []int{8, 16, 32, 64, 128, 256, 1024, 40, 72, 200} {
		signs := make([]byte, FastRotationSignBytes(dim))
		for i := range signs {
			signs[i] = byte(rng.Uint32())
		}
		r := newRotator(dim, signs)
		for rep := 0; rep < 10; rep++ {
			v := randVec(rng, dim)
			for i := range v {
				v[i] *= float32(math.Pow(10, float64(rng.IntN(9)-4)))
			}
			want, got := make([]float32, dim), make([]float32, dim)
			FastRotate(want, v, signs)
			r.rotate(got, v)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("dim %d: value %d is %v, want %v", dim, i, got[i], want[i])
				}
			}
		}
	}
}
