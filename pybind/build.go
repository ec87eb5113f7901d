package pybind

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/modelio"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/train"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
	"github.com/lance-segmerge/lance-segmerge/gokernel/verify"
)

// BuildSegment builds one uncommitted index segment over some fragments of
// a dataset version (0 = latest) with a model whose scalars are modelJSON
// (modelio.Spec) and whose arrays arrive through the Arrow C Data
// Interface (the addresses in the spec; they are taken over and released
// when the build ends). buildOptionsJSON holds segment.BuildOptions.
// Returns the segment's info JSON, with statistics. opID names the
// operation for Progress and Cancel.
func BuildSegment(opID, uri, optionsJSON string, version int, modelJSON, buildOptionsJSON string) (string, error) {
	return offThread(func() (string, error) {
		return buildSegment(opID, uri, optionsJSON, version, modelJSON, buildOptionsJSON)
	})
}

func buildSegment(opID, uri, optionsJSON string, version int, modelJSON, buildOptionsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	sp, err := modelio.ParseSpec(modelJSON)
	if err != nil {
		return "", tagged(err)
	}
	model, release, err := modelio.Import(sp)
	if err != nil {
		return "", tagged(err)
	}
	defer release()
	var opts segment.BuildOptions
	if err := decodeArg("build options", buildOptionsJSON, &opts); err != nil {
		return "", err
	}
	opts.Progress = prog
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	im, err := segment.Build(ctx, st, snap, model, opts)
	if err != nil {
		return "", tagged(err)
	}
	return jsonReply(segment.DescribeWithStats(ctx, st, im))
}

// jsonReply is v as JSON (a new segment's info, with statistics), or the
// tagged error of computing it.
func jsonReply(v any, err error) (string, error) {
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(v)
	return string(b), tagged(err)
}

// ReadIndexModel reads the model of an existing index at a dataset
// version from its newest segment (the greatest dataset_version, then the
// last in manifest order): maintain(retrain="auto") extends a model by
// appending centroids, and every segment built after an extension, by us
// or by pylance, carries the extended model, so the newest segment's model
// is the widest and the others' are its prefixes. The scalars are returned
// as modelio.Spec JSON, the arrays exported through the C Data Interface
// into the structs whose addresses ptrsJSON names (modelio.ArrayPtrs;
// "centroids" always, "codebook" or "rotation" when the model has one, as
// listed in the returned spec's arrays).
func ReadIndexModel(uri, optionsJSON string, version int, indexName, ptrsJSON string) (string, error) {
	return offThread(func() (string, error) { return readIndexModel(uri, optionsJSON, version, indexName, ptrsJSON) })
}

func readIndexModel(uri, optionsJSON string, version int, indexName, ptrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, ptrs, err := openForModel(ctx, uri, optionsJSON, version, ptrsJSON)
	if err != nil {
		return "", tagged(err)
	}
	newest := -1
	for i, im := range snap.Indices {
		if im.GetName() != indexName {
			continue
		}
		if err := segment.RequireVector(im); err != nil {
			return "", tagged(err)
		}
		if newest < 0 || im.GetDatasetVersion() >= snap.Indices[newest].GetDatasetVersion() {
			newest = i
		}
	}
	if newest < 0 {
		return "", tagged(fmt.Errorf("%w: the dataset has no index %q", errkind.NotFound, indexName))
	}
	m, err := modelio.FromSegment(ctx, st, snap.Indices[newest])
	if err != nil {
		return "", tagged(fmt.Errorf("index %q segment %s: %w", indexName, table.IndexUUID(snap.Indices[newest]), err))
	}
	return exportModel(m, ptrs)
}

// openForModel opens a dataset version and decodes the C struct addresses
// a model is exported into.
func openForModel(ctx context.Context, uri, optionsJSON string, version int, ptrsJSON string) (storage.Store, *table.Snapshot, modelio.ArrayPtrs, error) {
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return nil, nil, nil, err
	}
	var ptrs modelio.ArrayPtrs
	if err := json.Unmarshal([]byte(ptrsJSON), &ptrs); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: array pointers: %w", errkind.InvalidInput, err)
	}
	return st, snap, ptrs, nil
}

// exportModel returns a model's scalars as modelio.Spec JSON and exports
// its arrays into the C structs ptrs names (see ReadIndexModel).
func exportModel(m *encode.Model, ptrs modelio.ArrayPtrs) (string, error) {
	sp := modelio.SpecOf(m)
	sp.Arrays = modelio.ArrayPtrs{}
	names := []string{"centroids"}
	if m.PQ != nil {
		names = append(names, "codebook")
	}
	if m.RQ != nil && m.RQ.Matrix != nil {
		names = append(names, "rotation")
	}
	for _, n := range names {
		sp.Arrays[n] = ptrs[n]
	}
	if err := modelio.Export(m, sp.Arrays); err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(sp)
	return string(b), tagged(err)
}

// ReadSegmentModel reads the model of one segment, committed or not (a
// JSON segment info: a resumed reindex reads the model from an output it
// built before a crash), as ReadIndexModel returns it.
func ReadSegmentModel(uri, optionsJSON string, version int, segmentJSON, ptrsJSON string) (string, error) {
	return offThread(func() (string, error) { return readSegmentModel(uri, optionsJSON, version, segmentJSON, ptrsJSON) })
}

func readSegmentModel(uri, optionsJSON string, version int, segmentJSON, ptrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, ptrs, err := openForModel(ctx, uri, optionsJSON, version, ptrsJSON)
	if err != nil {
		return "", tagged(err)
	}
	im, err := segment.ParseSegment([]byte(segmentJSON), snap)
	if err != nil {
		return "", tagged(err)
	}
	m, err := modelio.FromSegment(ctx, st, im)
	if err != nil {
		return "", tagged(fmt.Errorf("segment %s: %w", table.IndexUUID(im), err))
	}
	return exportModel(m, ptrs)
}

// VerifyBuildOutput checks a build output a run journal recorded (see
// verify.VerifyBuild): fragmentsJSON lists the fragments it covers,
// filesJSON its recorded files ("" when unknown). Returns the output's
// segment info, with statistics, as JSON.
func VerifyBuildOutput(uri, optionsJSON string, version int, indexName, column, fragmentsJSON, output, filesJSON string) (string, error) {
	return offThread(func() (string, error) {
		return verifyBuildOutput(uri, optionsJSON, version, indexName, column, fragmentsJSON, output, filesJSON)
	})
}

func verifyBuildOutput(uri, optionsJSON string, version int, indexName, column, fragmentsJSON, output, filesJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	var frags []uint64
	if err := decodeArg("fragments JSON", fragmentsJSON, &frags); err != nil {
		return "", err
	}
	var want []segment.File
	if filesJSON != "" {
		if err := decodeArg("files JSON", filesJSON, &want); err != nil {
			return "", err
		}
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	im, err := verify.VerifyBuild(ctx, st, snap, indexName, column, frags, output, want)
	if err != nil {
		return "", tagged(err)
	}
	info, err := segment.DescribeWithStats(ctx, st, im)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(info)
	return string(b), tagged(err)
}

// TrainModel samples a column's vectors at a dataset version and trains an
// index model (train.Params as paramsJSON, with the column). The scalars
// come back as modelio.Spec JSON (plus "stats"), the arrays are exported
// into the C structs ptrsJSON names (see ReadIndexModel).
func TrainModel(opID, uri, optionsJSON string, version int, column, paramsJSON, ptrsJSON string) (string, error) {
	return offThread(func() (string, error) {
		return trainModel(opID, uri, optionsJSON, version, column, paramsJSON, ptrsJSON)
	})
}

func trainModel(opID, uri, optionsJSON string, version int, column, paramsJSON, ptrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, _, done := beginOp(opID)
	defer done()
	p, ptrs, err := trainArgs(paramsJSON, ptrsJSON)
	if err != nil {
		return "", err
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	rd, err := vecdata.NewBuildReader(st, snap, column)
	if err != nil {
		return "", tagged(err)
	}
	m, stats, err := train.Train(ctx, rd, p)
	if err != nil {
		return "", tagged(err)
	}
	return trainedModel(m, stats, ptrs)
}

// trainArgs decodes a training call's parameters (train.Params) and the
// addresses of the C structs its model's arrays are exported into.
func trainArgs(paramsJSON, ptrsJSON string) (train.Params, modelio.ArrayPtrs, error) {
	var p train.Params
	var ptrs modelio.ArrayPtrs
	if err := decodeArg("training parameters", paramsJSON, &p); err != nil {
		return p, nil, err
	}
	return p, ptrs, decodeArg("array pointers", ptrsJSON, &ptrs)
}

// trainedModel returns a trained model's scalars as modelio.Spec JSON plus
// "stats", and exports its arrays into the C structs ptrs names.
func trainedModel(m *encode.Model, stats train.Stats, ptrs modelio.ArrayPtrs) (string, error) {
	sp := modelio.SpecOf(m)
	sp.Arrays = modelio.ArrayPtrs{"centroids": ptrs["centroids"]}
	if m.PQ != nil {
		sp.Arrays["codebook"] = ptrs["codebook"]
	}
	if err := modelio.Export(m, sp.Arrays); err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(struct {
		*modelio.Spec
		Stats train.Stats `json:"stats"`
	}{sp, stats})
	return string(b), tagged(err)
}

// CoveredFragments returns, as a JSON list, the fragments the segments of
// an index cover as merges see them (fragments a compaction with
// defer_index_remap rewrote count as the ones that replaced them).
func CoveredFragments(uri, optionsJSON string, version int, indexName string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	ids, err := segment.CoveredFragments(ctx, st, snap, indexName)
	if err != nil {
		return "", tagged(err)
	}
	if ids == nil {
		ids = []uint32{}
	}
	return jsonReply(ids, nil)
}

// FragmentRows lists the fragments of a dataset version: JSON
// [[id, live rows], ...] in id order.
func FragmentRows(uri, optionsJSON string, version int) (string, error) {
	return offThread(func() (string, error) { return fragmentRows(uri, optionsJSON, version) })
}

func fragmentRows(uri, optionsJSON string, version int) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	_, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	rows := [][2]uint64{}
	for _, f := range snap.Manifest.GetFragments() {
		n := f.GetPhysicalRows()
		n -= min(n, f.GetDeletionFile().GetNumDeletedRows())
		rows = append(rows, [2]uint64{f.GetId(), n})
	}
	b, err := json.Marshal(rows)
	return string(b), tagged(err)
}

// BuildScalarSegment builds one uncommitted scalar or full-text segment over
// some fragments of a dataset version (0 = latest) from the column's data;
// buildOptionsJSON holds segment.ScalarBuildOptions. Returns the
// segment's info JSON, with statistics. opID names the operation for
// Progress and Cancel.
func BuildScalarSegment(opID, uri, optionsJSON string, version int, buildOptionsJSON string) (string, error) {
	return offThread(func() (string, error) { return buildScalarSegment(opID, uri, optionsJSON, version, buildOptionsJSON) })
}

func buildScalarSegment(opID, uri, optionsJSON string, version int, buildOptionsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	var opts segment.ScalarBuildOptions
	if err := decodeArg("build options", buildOptionsJSON, &opts); err != nil {
		return "", err
	}
	opts.Progress = prog
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	im, err := segment.BuildScalar(ctx, st, snap, opts)
	if err != nil {
		return "", tagged(err)
	}
	return jsonReply(segment.DescribeWithStats(ctx, st, im))
}
