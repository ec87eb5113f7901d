package hnsw

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Limits on what a graph's metadata may claim, checked before anything is
// allocated from it. Lance's defaults are max_level 7, m 20 and
// ef_construction 150; a level count above 32 would need more than 4^32
// nodes to be populated (levels shrink by a factor m ≥ 4 each); a graph
// takes 8·(2m+1) bytes per node on level 0, 8 KiB at m = 512 (HNSW uses
// m of 8 to 64).
const (
	maxLevels         = 32
	maxM              = 512
	maxEfConstruction = 1 << 20
)

// Params are the HNSW build parameters Lance records with every partition's
// graph (the "params" object of its metadata). Raw keeps the object as
// written, so that a merge writes it back with keys we do not interpret.
type Params struct {
	// MaxLevel is the number of levels a graph may have (Lance's
	// max_level: levels 0 … MaxLevel-1).
	MaxLevel int `json:"max_level"`
	// M is the number of neighbours a node keeps on levels ≥ 1; level 0
	// keeps up to 2·M.
	M int `json:"m"`
	// EfConstruction is the beam width of the searches that insert a node.
	EfConstruction int `json:"ef_construction"`
	// PrefetchDistance is a search hint (null or a number).
	PrefetchDistance *int `json:"prefetch_distance"`

	Raw json.RawMessage `json:"-"`
}

// DefaultParams are Lance's defaults (used when no input has a graph).
func DefaultParams() Params {
	two := 2
	p := Params{MaxLevel: 7, M: 20, EfConstruction: 150, PrefetchDistance: &two}
	p.Raw, _ = json.Marshal(p)
	return p
}

// Equal reports whether two parameter sets build the same graphs (the
// four keys Lance compares; other keys are ignored).
func (p Params) Equal(q Params) bool {
	pp, qp := -1, -1
	if p.PrefetchDistance != nil {
		pp = *p.PrefetchDistance
	}
	if q.PrefetchDistance != nil {
		qp = *q.PrefetchDistance
	}
	return p.MaxLevel == q.MaxLevel && p.M == q.M && p.EfConstruction == q.EfConstruction && pp == qp
}

func (p Params) String() string {
	pd := "null"
	if p.PrefetchDistance != nil {
		pd = fmt.Sprint(*p.PrefetchDistance)
	}
	return fmt.Sprintf("max_level=%d m=%d ef_construction=%d prefetch_distance=%s", p.MaxLevel, p.M, p.EfConstruction, pd)
}

func (p Params) check() error {
	switch {
	case p.MaxLevel < 1 || p.MaxLevel > maxLevels:
		return fmt.Errorf("%w: hnsw: max_level %d is outside [1, %d]", errkind.Corrupt, p.MaxLevel, maxLevels)
	case p.M < 2 || p.M > maxM:
		return fmt.Errorf("%w: hnsw: m %d is outside [2, %d]", errkind.Corrupt, p.M, maxM)
	case p.EfConstruction < 1 || p.EfConstruction > maxEfConstruction:
		return fmt.Errorf("%w: hnsw: ef_construction %d is outside [1, %d]", errkind.Corrupt, p.EfConstruction, maxEfConstruction)
	}
	return nil
}

// Metadata is the JSON Lance stores for one partition's graph: one element
// of the index.idx "lance:hnsw" list. Field order is Lance's.
//
// Invariants of a valid entry (checked by ParseMetadata):
//  1. LevelOffsets has Params.MaxLevel+1 entries (Lance pads the levels
//     above the graph's height with repeated offsets), starts at 0 and
//     never decreases: level l's rows are [LevelOffsets[l],
//     LevelOffsets[l+1]) of the partition's rows in index.idx.
//  2. LevelOffsets[1] is the node count; every upper level has at most as
//     many rows as the level below it.
//  3. EntryPoint is a node id (< node count) when the graph has nodes.
type Metadata struct {
	EntryPoint   uint32 `json:"entry_point"`
	Params       Params `json:"params"`
	LevelOffsets []int  `json:"level_offsets"`
}

type metadataJSON struct {
	EntryPoint   uint32          `json:"entry_point"`
	Params       json.RawMessage `json:"params"`
	LevelOffsets []int           `json:"level_offsets"`
}

// Nodes is the number of nodes of the graph (its level-0 rows).
func (m *Metadata) Nodes() int {
	if len(m.LevelOffsets) < 2 {
		return 0
	}
	return m.LevelOffsets[1] - m.LevelOffsets[0]
}

// Rows is the number of index.idx rows of the graph (all levels).
func (m *Metadata) Rows() int {
	if len(m.LevelOffsets) == 0 {
		return 0
	}
	return m.LevelOffsets[len(m.LevelOffsets)-1]
}

// FitRows reconciles the level offsets with the partition's rows in
// index.idx and reports whether they fit. Lance releases before 0.31 (seen
// in 0.23.2 to 0.30.0) wrote every level above 0 with its entry-point row first
// and left that row out of level_offsets, so the partition holds one row
// per upper level more than the offsets count; such offsets are rewritten
// to count every row (the layout later releases write) and legacy is true.
func (m *Metadata) FitRows(rows int) (fits, legacy bool) {
	lo := m.LevelOffsets
	if m.Rows() == rows {
		return true, false
	}
	if len(lo) <= 2 || m.Rows()+len(lo)-2 != rows {
		return false, false
	}
	fixed := make([]int, len(lo))
	for l := range lo {
		fixed[l] = lo[l] + max(0, l-1)
	}
	m.LevelOffsets = fixed
	return true, true
}

// Levels is the number of non-empty levels.
func (m *Metadata) Levels() int {
	n := 0
	for l := 0; l+1 < len(m.LevelOffsets); l++ {
		if m.LevelOffsets[l+1] > m.LevelOffsets[l] {
			n = l + 1
		}
	}
	return n
}

// ParseMetadata parses and checks one partition's entry. An empty string
// (Lance writes it for an empty partition) gives nil.
func ParseMetadata(s string) (*Metadata, error) {
	if s == "" {
		return nil, nil
	}
	var raw metadataJSON
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("%w: hnsw: graph metadata %q: %w", errkind.Corrupt, truncate(s, 200), err)
	}
	m := &Metadata{EntryPoint: raw.EntryPoint, LevelOffsets: raw.LevelOffsets}
	if len(raw.Params) == 0 || bytes.Equal(raw.Params, []byte("null")) {
		return nil, fmt.Errorf("%w: hnsw: graph metadata %q has no params", errkind.Corrupt, truncate(s, 200))
	}
	if err := json.Unmarshal(raw.Params, &m.Params); err != nil {
		return nil, fmt.Errorf("%w: hnsw: graph params %q: %w", errkind.Corrupt, truncate(string(raw.Params), 200), err)
	}
	m.Params.Raw = append(json.RawMessage(nil), raw.Params...)
	if err := m.Params.check(); err != nil {
		return nil, err
	}
	lo := m.LevelOffsets
	if len(lo) < 2 || len(lo) > maxLevels+1 {
		return nil, fmt.Errorf("%w: hnsw: %d level offsets (max_level %d)", errkind.Corrupt, len(lo), m.Params.MaxLevel)
	}
	if lo[0] != 0 {
		return nil, fmt.Errorf("%w: hnsw: level offsets start at %d, not 0", errkind.Corrupt, lo[0])
	}
	for l := 1; l < len(lo); l++ {
		if lo[l] < lo[l-1] {
			return nil, fmt.Errorf("%w: hnsw: level offsets %v decrease", errkind.Corrupt, lo)
		}
		if l >= 2 && lo[l]-lo[l-1] > lo[l-1]-lo[l-2] {
			return nil, fmt.Errorf("%w: hnsw: level %d has %d rows, more than the %d of the level below (offsets %v)",
				errkind.Corrupt, l-1, lo[l]-lo[l-1], lo[l-1]-lo[l-2], lo)
		}
	}
	if n := m.Nodes(); n > 0 && int(m.EntryPoint) >= n {
		return nil, fmt.Errorf("%w: hnsw: entry point %d of a graph of %d nodes", errkind.Corrupt, m.EntryPoint, n)
	}
	return m, nil
}

// ParseList parses an index.idx "lance:hnsw" value: a JSON list of strings,
// one per partition, each a Metadata JSON or "" for an empty partition.
func ParseList(s string) ([]*Metadata, error) {
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return nil, fmt.Errorf("%w: hnsw: lance:hnsw %q is not a JSON list of strings: %w", errkind.Corrupt, truncate(s, 200), err)
	}
	out := make([]*Metadata, len(list))
	for i, e := range list {
		m, err := ParseMetadata(e)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
		out[i] = m
	}
	return out, nil
}

// Marshal encodes the entry as Lance writes it, the params object as read
// (or as encoded, when Raw is empty).
func (m *Metadata) Marshal() ([]byte, error) {
	params := m.Params.Raw
	if len(params) == 0 {
		var err error
		if params, err = json.Marshal(m.Params); err != nil {
			return nil, err
		}
	}
	return json.Marshal(metadataJSON{EntryPoint: m.EntryPoint, Params: params, LevelOffsets: m.LevelOffsets})
}

// MarshalList encodes the "lance:hnsw" value: one string per partition, ""
// for a partition without a graph (nil).
func MarshalList(ms []*Metadata) ([]byte, error) {
	list := make([]string, len(ms))
	for i, m := range ms {
		if m == nil {
			continue
		}
		b, err := m.Marshal()
		if err != nil {
			return nil, err
		}
		list[i] = string(b)
	}
	return json.Marshal(list)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
