package pybind

import (
	"fmt"
	"slices"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/modelio"
	"github.com/lance-segmerge/lance-segmerge/gokernel/train"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

// A training sample drawn on workers: each draws its fragments' share of
// the sample TrainModel would draw (SampleVectors), the driver
// concatenates the shares and trains on them (TrainModelOnSample). The
// shares are proportional to live rows, so the whole is a stratified
// uniform sample of the table.

// maxShares bounds the shares (sample tasks) a training sample may come
// in: each may round its share up by one row.
const maxShares = 1 << 16

// sampleRequest is SampleVectors' request.
type sampleRequest struct {
	Column      string       `json:"column"`
	FragmentIDs []uint64     `json:"fragment_ids"`
	Params      train.Params `json:"params"`
	// OfRows is the live rows of the whole table the sample is drawn
	// from: this task's share is its fragments' live rows over OfRows.
	OfRows uint64 `json:"of_rows"`
	Seed   uint64 `json:"seed"`
}

// SampleVectors draws one worker's share of a training sample from the
// fragments of requestJSON (sampleRequest) at a dataset version and
// exports it as a FixedSizeList<float32> array into the C structs whose
// addresses ptrsJSON holds ([array, schema]). Returns {"rows", "dim"}.
func SampleVectors(opID, uri, optionsJSON string, version int, requestJSON, ptrsJSON string) (string, error) {
	return offThread(func() (string, error) { return sampleVectors(opID, uri, optionsJSON, version, requestJSON, ptrsJSON) })
}

func sampleVectors(opID, uri, optionsJSON string, version int, requestJSON, ptrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, _, done := beginOp(opID)
	defer done()
	var req sampleRequest
	if err := decodeArg("sample request", requestJSON, &req); err != nil {
		return "", err
	}
	var ptrs [2]uint64
	if err := decodeArg("array pointers", ptrsJSON, &ptrs); err != nil {
		return "", err
	}
	if len(req.FragmentIDs) == 0 || req.OfRows == 0 {
		return "", tagged(fmt.Errorf("%w: sample: no fragments, or no rows to draw from", errkind.InvalidInput))
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	rd, err := vecdata.NewBuildReader(st, snap, req.Column)
	if err != nil {
		return "", tagged(err)
	}
	if err := rd.CheckFragments(req.FragmentIDs); err != nil {
		return "", tagged(err)
	}
	live, err := rd.CountRows(ctx, req.FragmentIDs)
	if err != nil {
		return "", tagged(err)
	}
	if live > req.OfRows {
		return "", tagged(fmt.Errorf("%w: sample: the fragments hold %d live rows, more than the %d of the table", errkind.InvalidInput, live, req.OfRows))
	}
	dim := rd.Column().Dim
	want := train.SampleRows(req.Params, dim)
	// ceil(want × live / of_rows), in floating point: want × live may
	// overflow 64 bits for a huge table
	n := int(float64(want)*float64(live)/float64(req.OfRows) + 0.999999)
	b, err := rd.Sample(ctx, req.FragmentIDs, min(n, want), req.Seed)
	if err != nil {
		return "", tagged(err)
	}
	rows := b.Len()
	if err := modelio.ExportMatrix(b.Vectors, rows, dim, uintptr(ptrs[0]), uintptr(ptrs[1])); err != nil {
		return "", tagged(err)
	}
	return jsonReply(map[string]int{"rows": rows, "dim": dim}, nil)
}

// TrainModelOnSample trains an index model (train.Params as paramsJSON) on
// the sample imported through the C structs ptrsJSON names ([array,
// schema]: the workers' SampleVectors arrays, concatenated) and returns it
// as TrainModel does, the arrays exported into the structs modelPtrsJSON
// names. A sample larger than the parameters ask for is refused before it
// is read.
func TrainModelOnSample(opID, paramsJSON, ptrsJSON, modelPtrsJSON string) (string, error) {
	return offThread(func() (string, error) { return trainModelOnSample(opID, paramsJSON, ptrsJSON, modelPtrsJSON) })
}

func trainModelOnSample(opID, paramsJSON, ptrsJSON, modelPtrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, _, done := beginOp(opID)
	defer done()
	p, mptrs, err := trainArgs(paramsJSON, modelPtrsJSON)
	if err != nil {
		return "", err
	}
	var ptrs [2]uint64
	if err := decodeArg("sample pointers", ptrsJSON, &ptrs); err != nil {
		return "", err
	}
	sample, err := modelio.ImportMatrix("sample", uintptr(ptrs[0]), uintptr(ptrs[1]), 0)
	if err != nil {
		return "", tagged(err)
	}
	defer sample.Release()
	// Each share rounds up: at most one row more per share.
	if want := train.SampleRows(p, sample.Cols); sample.Rows > want+maxShares {
		return "", tagged(fmt.Errorf("%w: a sample of %d vectors, where the parameters draw %d", errkind.InvalidInput, sample.Rows, want))
	}
	// Training normalises a cosine sample in place: never the exporter's
	// memory.
	m, stats, err := train.TrainOn(ctx, slices.Clone(sample.Values), sample.Cols, p)
	if err != nil {
		return "", tagged(err)
	}
	return trainedModel(m, stats, mptrs)
}
