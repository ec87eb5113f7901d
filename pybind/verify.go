package pybind

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
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
	if err := json.Unmarshal([]byte(queriesJSON), &req); err != nil {
		return "", tagged(fmt.Errorf("%w: queries JSON: %w", errkind.InvalidInput, err))
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
