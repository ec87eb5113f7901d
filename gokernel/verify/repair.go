package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// RepairOptions control Repair.
type RepairOptions struct {
	// OutputUUID names the rewritten segment (default: a new uuid).
	OutputUUID string `json:"output_uuid"`
	// SampleRows is the sample the rewrite is verified on (default 1024).
	SampleRows int    `json:"sample_rows"`
	Seed       uint64 `json:"seed"`
	// Progress receives the rewrite's counters.
	Progress *segment.Progress `json:"-"`
}

// Repair rewrites one segment whose stored codes had the layout applied
// depth times (what Verify found: SegmentReport.LayoutDepth) into a new,
// uncommitted segment with the layout applied once, and verifies the
// rewrite (files, structure, row ids, layout and codes on a sample). The
// rewrite is the merge of that one segment (segment.Merge with
// MergeOptions.Layouts): same coverage, stale rows dropped. When the
// rewrite does not verify it is removed and errkind.Corrupt returned.
func Repair(ctx context.Context, st storage.Store, snap *table.Snapshot, im *pb.IndexMetadata, depth int, opts RepairOptions) (*pb.IndexMetadata, *SegmentReport, error) {
	if depth < 0 || depth > maxDepth {
		return nil, nil, fmt.Errorf("%w: repair: the layout applied %d times (0 to %d)", errkind.InvalidInput, depth, maxDepth)
	}
	u := table.IndexUUID(im)
	out, err := segment.Merge(ctx, st, snap, []*pb.IndexMetadata{im}, segment.MergeOptions{
		IndexUUID: opts.OutputUUID, Layouts: map[string]int{u: depth}, Progress: opts.Progress,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("repair: rewrite of segment %s: %w", u, err)
	}
	if opts.Progress != nil {
		opts.Progress.SetStage("verify")
	}
	rep, err := CheckSegments(ctx, st, snap, []*pb.IndexMetadata{out}, Options{SampleRows: opts.SampleRows, Seed: opts.Seed})
	if err == nil && rep.Segments[0].Verdict != Clean {
		err = fmt.Errorf("%w: repair: the rewrite %s of segment %s does not verify: %s", errkind.Corrupt, table.IndexUUID(out), u, describe(rep.Segments[0]))
	}
	if err != nil {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		dir := table.IndexDir(out)
		for _, name := range []string{ivf.AuxiliaryFileName, ivf.IndexFileName} {
			_ = st.Delete(cleanup, dir+name)
		}
		return nil, nil, err
	}
	return out, rep.Segments[0], nil
}

// describe is a segment report's failed checks on one line.
func describe(s *SegmentReport) string {
	msg := ""
	for _, c := range s.Checks {
		if c.Verdict == Failed || c.Verdict == Skipped && c.Name != "recall" {
			if msg != "" {
				msg += "; "
			}
			msg += c.Name + ": " + c.Message
		}
	}
	if msg == "" {
		msg = s.Verdict
	}
	return msg
}
