package pybind

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/verify"
)

// decodeFloat32s decodes little-endian float32 values.
func decodeFloat32s(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: %d bytes are not float32 values", errkind.InvalidInput, len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// SearchSegment searches one segment of an index alone, as Lance's IVF
// search does: queriesJSON is {"vectors": base64 little-endian float32,
// "k": k, "nprobes": n}. Returns JSON {"row_ids": [[...]...], "distances":
// [[...]...]}, one list per query, nearest first.
func SearchSegment(uri, optionsJSON string, version int, indexName, segUUID, queriesJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	var req struct {
		Vectors []byte `json:"vectors"`
		K       int    `json:"k"`
		NProbes int    `json:"nprobes"`
	}
	if err := decodeArg("queries JSON", queriesJSON, &req); err != nil {
		return "", err
	}
	qs, err := decodeFloat32s(req.Vectors)
	if err != nil {
		return "", tagged(err)
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	hits, err := verify.SearchSegment(ctx, st, snap, indexName, segUUID, qs, req.K, req.NProbes)
	if err != nil {
		return "", tagged(err)
	}
	res := struct {
		RowIDs    [][]uint64  `json:"row_ids"`
		Distances [][]float64 `json:"distances"`
	}{RowIDs: [][]uint64{}, Distances: [][]float64{}}
	for _, hs := range hits {
		ids, ds := []uint64{}, []float64{}
		for _, h := range hs {
			ids = append(ids, h.RowID)
			ds = append(ds, float64(h.Dist))
		}
		res.RowIDs = append(res.RowIDs, ids)
		res.Distances = append(res.Distances, ds)
	}
	b, err := json.Marshal(res)
	return string(b), tagged(err)
}

func decodeVerifyOptions(optsJSON string) (verify.Options, error) {
	var opts verify.Options
	if optsJSON != "" {
		if err := json.Unmarshal([]byte(optsJSON), &opts); err != nil {
			return opts, fmt.Errorf("%w: verify options: %w", errkind.InvalidInput, err)
		}
	}
	return opts, nil
}

// VerifyIndex checks every segment of a vector index at a dataset version
// (0 = latest) against its data (see package verify) and returns the
// report as JSON. optsJSON holds verify.Options. opID names the operation
// for Progress and Cancel.
func VerifyIndex(opID, uri, optionsJSON string, version int, indexName, optsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	opts, err := decodeVerifyOptions(optsJSON)
	if err != nil {
		return "", tagged(err)
	}
	opts.Progress = prog
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	rep, err := verify.Verify(ctx, st, snap, indexName, opts)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(rep)
	return string(b), tagged(err)
}

// CheckSegments checks segments that need not be committed yet (merge
// outputs, a JSON list of segment infos) against a dataset version and
// returns the report as JSON (verify.CheckSegments).
func CheckSegments(opID, uri, optionsJSON string, version int, segmentsJSON, optsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	opts, err := decodeVerifyOptions(optsJSON)
	if err != nil {
		return "", tagged(err)
	}
	opts.Progress = prog
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	metas, err := segment.ParseSegments([]byte(segmentsJSON), snap)
	if err != nil {
		return "", tagged(err)
	}
	rep, err := verify.CheckSegments(ctx, st, snap, metas, opts)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(rep)
	return string(b), tagged(err)
}

// RepairSegment rewrites one committed segment of an index whose codes had
// their layout applied depth times into a new uncommitted segment with the
// layout applied once, verifies it (verify.Repair), and returns JSON
// {"segment": the new segment's info with statistics, "report": its
// verification}. repairJSON holds verify.RepairOptions.
func RepairSegment(opID, uri, optionsJSON string, version int, indexName, segUUID string, depth int, repairJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, prog, done := beginOp(opID)
	defer done()
	var opts verify.RepairOptions
	if repairJSON != "" {
		if err := decodeArg("repair options", repairJSON, &opts); err != nil {
			return "", err
		}
	}
	opts.Progress = prog
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	im, err := verify.FindSegment(snap, indexName, segUUID)
	if err != nil {
		return "", tagged(err)
	}
	seg, rep, err := verify.Repair(ctx, st, snap, im, depth, opts)
	if err != nil {
		return "", tagged(err)
	}
	info, err := segment.DescribeWithStats(ctx, st, seg)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(struct {
		Segment *segment.Info         `json:"segment"`
		Report  *verify.SegmentReport `json:"report"`
	}{info, rep})
	return string(b), tagged(err)
}
