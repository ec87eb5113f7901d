package segment

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Progress is a set of counters a long operation updates as it goes, read
// concurrently by whoever polls it (the Python driver). All fields are safe
// for concurrent use; a nil *Progress is valid and counts nothing.
type Progress struct {
	// Stage names what the operation does now ("validate", "merge" (or
	// "build_graph" for IVF_HNSW_*: partitions merge and their graphs
	// build together), "write_index", "commit", "done").
	stage atomic.Value
	// PartitionsTotal and PartitionsDone count IVF partitions (merge).
	PartitionsTotal atomic.Int64
	PartitionsDone  atomic.Int64
	// RowsRead counts input rows, RowsWritten rows in the output.
	RowsRead    atomic.Int64
	RowsWritten atomic.Int64
	// BytesWritten counts bytes of output files.
	BytesWritten atomic.Int64
	// GraphRowsInserted counts IVF_HNSW_* rows inserted into partition
	// graphs by search; GraphRowsReused rows kept from an input's graph;
	// GraphDistances the distances computed to build the graphs.
	GraphRowsInserted atomic.Int64
	GraphRowsReused   atomic.Int64
	GraphDistances    atomic.Int64

	notesMu sync.Mutex
	notes   []string
}

// Note records a remark about a choice the operation made on its own (for
// example re-quantizing IVF_SQ inputs), which the binding logs.
func (p *Progress) Note(s string) {
	if p == nil {
		return
	}
	p.notesMu.Lock()
	p.notes = append(p.notes, s)
	p.notesMu.Unlock()
}

// Notes returns a copy of the remarks recorded so far.
func (p *Progress) Notes() []string {
	if p == nil {
		return nil
	}
	p.notesMu.Lock()
	defer p.notesMu.Unlock()
	return append([]string(nil), p.notes...)
}

// SetStage records the current stage.
func (p *Progress) SetStage(s string) {
	if p != nil {
		p.stage.Store(s)
	}
}

// Stage returns the current stage ("" before the first).
func (p *Progress) Stage() string {
	if p == nil {
		return ""
	}
	s, _ := p.stage.Load().(string)
	return s
}

// Snapshot is a point-in-time copy of the counters.
type Snapshot struct {
	Stage           string `json:"stage"`
	PartitionsTotal int64  `json:"partitions_total"`
	PartitionsDone  int64  `json:"partitions_done"`
	RowsRead        int64  `json:"rows_read"`
	RowsWritten     int64  `json:"rows_written"`
	BytesWritten    int64  `json:"bytes_written"`
	// IVF_HNSW_* merges ("build_graph" stage).
	GraphRowsInserted int64 `json:"graph_rows_inserted"`
	GraphRowsReused   int64 `json:"graph_rows_reused"`
	GraphDistances    int64 `json:"graph_distances"`
}

// Snapshot copies the counters.
func (p *Progress) Snapshot() Snapshot {
	if p == nil {
		return Snapshot{}
	}
	return Snapshot{
		Stage:           p.Stage(),
		PartitionsTotal: p.PartitionsTotal.Load(),
		PartitionsDone:  p.PartitionsDone.Load(),
		RowsRead:        p.RowsRead.Load(),
		RowsWritten:     p.RowsWritten.Load(),
		BytesWritten:    p.BytesWritten.Load(),

		GraphRowsInserted: p.GraphRowsInserted.Load(),
		GraphRowsReused:   p.GraphRowsReused.Load(),
		GraphDistances:    p.GraphDistances.Load(),
	}
}

func (s Snapshot) String() string {
	out := fmt.Sprintf("%s: partitions %d/%d, rows read %d, written %d, %d bytes",
		s.Stage, s.PartitionsDone, s.PartitionsTotal, s.RowsRead, s.RowsWritten, s.BytesWritten)
	if s.GraphRowsInserted+s.GraphRowsReused > 0 {
		out += fmt.Sprintf("; graph rows inserted %d, reused %d, %d distances", s.GraphRowsInserted, s.GraphRowsReused, s.GraphDistances)
	}
	return out
}
