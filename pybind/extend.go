package pybind

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/modelio"
	"github.com/lance-segmerge/lance-segmerge/gokernel/train"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/verify"
)

// extendRequest is ExtendIndexModel's request: the segment whose model is
// extended, the fragments whose rows the model fits (the reference) and
// the fragments whose rows are checked, with the sample drawn from each.
type extendRequest struct {
	Index    string              `json:"index"`
	Column   string              `json:"column"`
	Segment  string              `json:"segment"`
	Fitted   []uint64            `json:"fitted_fragments"`
	New      []uint64            `json:"new_fragments"`
	RefRows  int                 `json:"ref_rows"`
	NewRows  int                 `json:"new_rows"`
	Options  train.ExtendOptions `json:"options"`
	MaxParts int                 `json:"max_partitions"`
}

// maxExtendSample bounds each sample (rows): the decision and the new
// centroids need the shape of the new rows, not all of them.
const maxExtendSample = 1 << 17

// ExtendIndexModel measures whether an index's model still fits the rows
// of some fragments (train.Extend, on bounded samples) and returns the
// model, extended with centroids where those rows went when it does not,
// as ReadIndexModel returns a model, plus {"extend": train.ExtendResult}.
// With max_partitions > 0, an extension that would pass it adds nothing
// and says so ("capped": true).
func ExtendIndexModel(opID, uri, optionsJSON string, version int, requestJSON, ptrsJSON string) (string, error) {
	return offThread(func() (string, error) {
		return extendIndexModel(opID, uri, optionsJSON, version, requestJSON, ptrsJSON)
	})
}

func extendIndexModel(opID, uri, optionsJSON string, version int, requestJSON, ptrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, _, done := beginOp(opID)
	defer done()
	var req extendRequest
	if err := decodeArg("extend request", requestJSON, &req); err != nil {
		return "", err
	}
	if req.RefRows <= 0 || req.RefRows > maxExtendSample || req.NewRows <= 0 || req.NewRows > maxExtendSample {
		return "", tagged(fmt.Errorf("%w: extend: samples of %d and %d rows (1 to %d each)", errkind.InvalidInput, req.RefRows, req.NewRows, maxExtendSample))
	}
	st, snap, ptrs, err := openForModel(ctx, uri, optionsJSON, version, ptrsJSON)
	if err != nil {
		return "", tagged(err)
	}
	im, err := verify.FindSegment(snap, req.Index, req.Segment) // a vector index's
	if err != nil {
		return "", tagged(err)
	}
	m, err := modelio.FromSegment(ctx, st, im)
	if err != nil {
		return "", tagged(fmt.Errorf("index %q segment %s: %w", req.Index, req.Segment, err))
	}
	if req.Column == "" && len(im.GetFields()) > 0 {
		req.Column = snap.FieldPath(im.GetFields()[0])
	}
	rd, err := vecdata.NewReader(st, snap, req.Column)
	if err != nil {
		return "", tagged(err)
	}
	// A segment may still name fragments a compaction removed: only
	// the live ones have rows to sample.
	live := map[uint64]bool{}
	for _, id := range snap.FragmentIDs() {
		live[id] = true
	}
	keep := func(ids []uint64) []uint64 {
		return slices.DeleteFunc(slices.Clone(ids), func(id uint64) bool { return !live[id] })
	}
	req.Fitted, req.New = keep(req.Fitted), keep(req.New)
	ref, err := rd.Sample(ctx, req.Fitted, req.RefRows, req.Options.Seed)
	if err != nil {
		return "", tagged(err)
	}
	fresh, err := rd.Sample(ctx, req.New, req.NewRows, req.Options.Seed+1)
	if err != nil {
		return "", tagged(err)
	}
	o := req.Options
	o.Metric = m.Metric
	res, err := train.Extend(ctx, m.Centroids, m.Dim, ref.Vectors, fresh.Vectors, o)
	if err != nil {
		return "", tagged(err)
	}
	parts := len(m.Centroids) / m.Dim
	capped := req.MaxParts > 0 && parts+res.Added > req.MaxParts
	if res.Added > 0 && !capped {
		m.Centroids = append(m.Centroids, res.Centroids...)
		if err := m.Validate(); err != nil {
			return "", tagged(err)
		}
	}
	spec, err := exportModel(m, ptrs)
	if err != nil {
		return "", err
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(spec), &body); err != nil {
		return "", tagged(err)
	}
	body["extend"] = res
	body["capped"] = capped
	body["column"] = req.Column
	b, err := json.Marshal(body)
	return string(b), tagged(err)
}
