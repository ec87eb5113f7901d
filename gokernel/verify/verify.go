// Package verify checks a vector index against its data, segment by
// segment, and repairs what can be rescued.
//
// No Lance tool checks an index against the vectors it indexes; a segment
// whose codes were scrambled (the chained-merge bug applied the PQ
// transposition or the RQ packing twice) opens and answers queries with a
// fraction of its recall. Each segment gets:
//
//   - structure: the files the manifest lists exist with their recorded
//     sizes and parse (footers, schemas, index metadata, IVF), the columns
//     have the widths the model implies, the partitions hold the file's
//     rows, row ids are unique and belong to fragments the segment covers
//     (with Deep, to rows the fragments have), and its model agrees with
//     the index's other segments;
//   - layout and codes: a sample of rows is read back from the data files,
//     assigned and encoded with the segment's own model (package encode,
//     bit for bit as pylance), and compared with the stored partition and
//     codes, under the declared layout and under the known wrong ones
//     (applied twice, or not at all), so that layout damage is named;
//   - recall: queries sampled from the data are searched over the segment
//     alone as Lance searches it (package search) and compared with brute
//     force over the segment's rows, next to the recall of the same model
//     encoding the same rows afresh.
//
// Repair rewrites segments whose only damage is an invertible layout error
// (segment.Merge with MergeOptions.Layouts) and verifies the rewrite.
package verify

import (
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
)

// Verdicts of a check and of a segment.
const (
	OK      = "ok"
	Failed  = "failed"
	Warning = "warning"
	Skipped = "skipped"

	Clean      = "clean"
	Damaged    = "damaged"
	Unverified = "unverified"
)

// Names of the damage a check finds. Part of the report's format.
const (
	DamageMissingFile     = "missing_file"
	DamageTruncated       = "truncated_file"
	DamageFileSize        = "file_size"
	DamageUnreadable      = "unreadable"
	DamageColumns         = "bad_columns"
	DamageDuplicateRowIDs = "duplicate_row_ids"
	DamageForeignRowIDs   = "foreign_row_ids"
	DamageDanglingRowIDs  = "dangling_row_ids"
	DamageModel           = "model_mismatch"
	DamagePQTwice         = "pq_transposed_twice"
	DamageRQTwice         = "rq_packed_twice"
	DamageFlagLies        = "layout_flag_lies"
	DamageWrongPartition  = "wrong_partition"
	DamageCodes           = "codes_mismatch"
	DamageLowRecall       = "low_recall"
)

// invertible lists the damage a repair can undo: a layout error.
var invertible = map[string]bool{DamagePQTwice: true, DamageRQTwice: true, DamageFlagLies: true}

// Check is the outcome of one check of one segment.
type Check struct {
	// Name: "files", "structure", "row_ids", "model", "layout", "codes",
	// "recall".
	Name    string `json:"name"`
	Verdict string `json:"verdict"`
	// Damage names what a failed check found ("" otherwise).
	Damage  string             `json:"damage,omitempty"`
	Message string             `json:"message"`
	Numbers map[string]float64 `json:"numbers,omitempty"`
}

// SegmentReport is the verification of one segment.
type SegmentReport struct {
	UUID        string   `json:"uuid"`
	IndexType   string   `json:"index_type"`
	NumRows     uint64   `json:"num_rows"`
	FragmentIDs []uint32 `json:"fragment_ids"`
	// Verdict: "clean", "damaged", or "unverified" (a check could not
	// run, and none failed).
	Verdict string   `json:"verdict"`
	Damage  []string `json:"damage"`
	// Rescuable: every damage found is an invertible layout error; a
	// repair rewrites the segment with the layout applied once.
	Rescuable bool `json:"rescuable"`
	// LayoutDepth is how many times the layout was found applied to the
	// stored codes (-1 when unknown).
	LayoutDepth int     `json:"layout_depth"`
	Advice      string  `json:"advice"`
	Checks      []Check `json:"checks"`
	// The recall check's numbers, repeated for tables (-1 when not run).
	Recall      float64 `json:"recall"`
	FreshRecall float64 `json:"fresh_recall"`
	// CodesMismatch is the fraction of sampled rows whose codes disagree
	// with their data under the declared layout (-1 when not run).
	CodesMismatch float64 `json:"codes_mismatch"`
}

// Report is the verification of an index.
type Report struct {
	IndexName string `json:"index_name"`
	// Column is the indexed column.
	Column     string           `json:"column"`
	Version    uint64           `json:"version"`
	IndexType  string           `json:"index_type"`
	Metric     string           `json:"metric"`
	Deep       bool             `json:"deep"`
	SampleRows int              `json:"sample_rows"`
	Queries    int              `json:"queries"`
	K          int              `json:"k"`
	NProbes    int              `json:"nprobes"`
	Clean      bool             `json:"clean"`
	Segments   []*SegmentReport `json:"segments"`
}

// add records a check, and folds it into the segment's verdict.
func (s *SegmentReport) add(c Check) {
	s.Checks = append(s.Checks, c)
	if c.Verdict == Failed && c.Damage != "" {
		for _, d := range s.Damage {
			if d == c.Damage {
				return
			}
		}
		s.Damage = append(s.Damage, c.Damage)
	}
}

// finish settles the segment's verdict, rescue and advice.
func (s *SegmentReport) finish(indexName, column string) {
	failed, unverified := false, false
	for _, c := range s.Checks {
		switch c.Verdict {
		case Failed:
			failed = true
		case Skipped:
			if c.Name != "recall" {
				unverified = true
			}
		}
	}
	switch {
	case failed:
		s.Verdict = Damaged
	case unverified:
		s.Verdict = Unverified
	default:
		s.Verdict = Clean
	}
	if s.Damage == nil {
		s.Damage = []string{}
	}
	if !failed {
		s.LayoutDepth, s.Rescuable, s.Advice = -1, false, ""
		return
	}
	s.Rescuable = s.LayoutDepth >= 0
	for _, c := range s.Checks {
		// A low recall explained by the layout goes away with it.
		if c.Verdict == Failed && !invertible[c.Damage] && c.Damage != DamageLowRecall {
			s.Rescuable = false
		}
	}
	if s.Rescuable {
		s.Advice = fmt.Sprintf("rescuable: repair_index rewrites it with the layout applied once (lance-segmerge repair URI --index %s --apply)", indexName)
		return
	}
	if segment.MergeableTypes[s.IndexType] { // scalar: pylance rebuilds it
		s.Advice = fmt.Sprintf("rebuild the index: pylance's create_scalar_index(%q, %q, name=%q, replace=True)", column, s.IndexType, indexName)
		return
	}
	s.Advice = fmt.Sprintf("rebuild this segment: build_index_segment(uri, %q, %q, fragment_ids=%v, read_index_model(uri, %q)) and commit it with replaces=[%q], or drop and recreate the index with pylance",
		column, s.IndexType, s.FragmentIDs, indexName, s.UUID)
}
