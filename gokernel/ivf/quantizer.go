package ivf

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// IndexType is the "type" of a segment's lance:index metadata.
type IndexType string

// The vector index types. Part of the format.
const (
	IVFFlat     IndexType = "IVF_FLAT"
	IVFSQ       IndexType = "IVF_SQ"
	IVFPQ       IndexType = "IVF_PQ"
	IVFRQ       IndexType = "IVF_RQ"
	IVFHNSWFlat IndexType = "IVF_HNSW_FLAT"
	IVFHNSWSQ   IndexType = "IVF_HNSW_SQ"
	IVFHNSWPQ   IndexType = "IVF_HNSW_PQ"
)

// Quantizer names the storage of a type: "flat", "sq", "pq" or "rq".
func (t IndexType) Quantizer() string {
	switch t {
	case IVFFlat, IVFHNSWFlat:
		return "flat"
	case IVFSQ, IVFHNSWSQ:
		return "sq"
	case IVFPQ, IVFHNSWPQ:
		return "pq"
	case IVFRQ:
		return "rq"
	}
	return ""
}

// HNSW reports whether the sub-index is an HNSW graph.
func (t IndexType) HNSW() bool { return strings.HasPrefix(string(t), "IVF_HNSW_") }

// Known reports whether t is one of the vector index types above.
func (t IndexType) Known() bool { return t.Quantizer() != "" }

// Schema metadata keys. Part of the format.
const (
	KeyIndex           = "lance:index"
	KeyIVF             = "lance:ivf"
	KeyFlat            = "lance:flat"
	KeyHNSW            = "lance:hnsw"
	KeyDistanceType    = "distance_type"
	KeyStorageMetadata = "storage_metadata"
	KeyPQ              = "lance:pq"
	KeySQ              = "lance:sq"
	KeyRQ              = "lance:rabit"
)

// quantizerKey is the type-specific metadata key of a quantizer.
func quantizerKey(q string) string {
	switch q {
	case "pq":
		return KeyPQ
	case "sq":
		return KeySQ
	case "rq":
		return KeyRQ
	}
	return ""
}

// IndexMeta is the JSON of lance:index.
type IndexMeta struct {
	Type         IndexType `json:"type"`
	DistanceType string    `json:"distance_type"`
}

// QuantizerMeta is the quantizer metadata JSON of an auxiliary file (element
// 0 of storage_metadata). Raw keeps every key as written, so a rewrite can
// carry keys we do not interpret.
type QuantizerMeta struct {
	Raw map[string]json.RawMessage

	// FLAT, SQ
	Dim int `json:"dim"`
	// SQ
	SQBounds *struct {
		Start float64 `json:"start"`
		End   float64 `json:"end"`
	} `json:"bounds"`
	// PQ
	CodebookPosition int   `json:"codebook_position"`
	NBits            int   `json:"nbits"`
	NumSubVectors    int   `json:"num_sub_vectors"`
	Dimension        int   `json:"dimension"`
	Transposed       *bool `json:"transposed"`
	// SQ and RQ
	NumBits int `json:"num_bits"`
	// RQ
	RotateMatPosition *int    `json:"rotate_mat_position"`
	FastRotationSigns []int   `json:"fast_rotation_signs"`
	RotationType      string  `json:"rotation_type"`
	CodeDim           int     `json:"code_dim"`
	Packed            *bool   `json:"packed"`
	QueryEstimator    string  `json:"query_estimator"`
	RowLayout         *string `json:"row_layout"`
}

// ParseQuantizerMeta parses one quantizer metadata JSON object.
func ParseQuantizerMeta(s string) (*QuantizerMeta, error) {
	if q := parsedQuant.get(s); q != nil {
		return q, nil
	}
	q, err := parseQuantizerMeta(s)
	if err != nil {
		return nil, err
	}
	parsedQuant.put(s, q)
	return q, nil
}

// parsedQuant holds parsed quantizer metadata by its JSON text: the
// segments of one index carry the same text (an IVF_RQ one has kilobytes of
// fast rotation signs), so a plan over a thousand deltas parses it once.
// The entries are shared; nothing modifies a QuantizerMeta once parsed.
var parsedQuant = &quantCache{m: map[string]*QuantizerMeta{}}

// quantCacheMax bounds the texts kept: when full, the cache starts over.
const quantCacheMax = 64

type quantCache struct {
	mu sync.Mutex
	m  map[string]*QuantizerMeta
}

func (c *quantCache) get(s string) *QuantizerMeta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[s]
}

func (c *quantCache) put(s string, q *QuantizerMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= quantCacheMax {
		clear(c.m)
	}
	c.m[s] = q
}

func parseQuantizerMeta(s string) (*QuantizerMeta, error) {
	q := &QuantizerMeta{}
	if err := json.Unmarshal([]byte(s), &q.Raw); err != nil {
		return nil, fmt.Errorf("%w: ivf: quantizer metadata %q: %w", errkind.Corrupt, truncate(s, 200), err)
	}
	if err := json.Unmarshal([]byte(s), q); err != nil {
		return nil, fmt.Errorf("%w: ivf: quantizer metadata %q: %w", errkind.Corrupt, truncate(s, 200), err)
	}
	// Lance: a missing rotation_type means the matrix rotation, a missing
	// query_estimator the residual query (indexes older than those keys).
	if q.RotationType == "" {
		q.RotationType = "matrix"
	}
	if q.QueryEstimator == "" {
		q.QueryEstimator = "residual_query"
	}
	// Lance 0.23 named the PQ bit width num_bits (seen in IVF_HNSW_PQ
	// written by pylance 0.23.2); later releases write nbits. The key
	// stays as written in Raw, so a merge keeps the writer's spelling.
	if _, ok := q.Raw["nbits"]; !ok && q.NumSubVectors > 0 {
		q.NBits = q.NumBits
	}
	return q, nil
}

// parseStorageMetadata unwraps storage_metadata: a JSON list whose first
// element is a JSON string holding the quantizer metadata.
func parseStorageMetadata(s string) (string, error) {
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return "", fmt.Errorf("%w: ivf: storage_metadata %q is not a JSON list of strings: %w", errkind.Corrupt, truncate(s, 200), err)
	}
	if len(list) == 0 {
		return "", fmt.Errorf("%w: ivf: storage_metadata is an empty list", errkind.Corrupt)
	}
	return list[0], nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
