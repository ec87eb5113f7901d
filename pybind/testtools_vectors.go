//go:build segmerge_testtools

package pybind

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/vecdata"
)

func decodeFragments(fragmentsJSON string) ([]uint64, error) {
	if fragmentsJSON == "" || fragmentsJSON == "null" {
		return nil, nil
	}
	var ids []uint64
	if err := json.Unmarshal([]byte(fragmentsJSON), &ids); err != nil {
		return nil, fmt.Errorf("%w: fragment_ids must be a JSON list of non-negative integers: %w", errkind.InvalidInput, err)
	}
	if ids == nil {
		ids = []uint64{}
	}
	return ids, nil
}

// ReadVectors reads the valid vectors of a column (deleted rows, nulls and
// non-finite vectors skipped) from the given fragments (a JSON list; every
// fragment when "") of a dataset version, or, when sample > 0, about that
// many drawn at random with seed. Returns JSON: row_ids, dim, vectors
// (little-endian float32, base64) and skipped. For tests and inspection;
// the build reads the same way.
func ReadVectors(uri, optionsJSON string, version int, column, fragmentsJSON string, sample int, seed int) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	ids, err := decodeFragments(fragmentsJSON)
	if err != nil {
		return "", tagged(err)
	}
	rd, err := vecdata.NewReader(st, snap, column)
	if err != nil {
		return "", tagged(err)
	}
	if ids == nil {
		ids = rd.FragmentIDs()
	}
	all := &vecdata.Batch{}
	if sample > 0 {
		if all, err = rd.Sample(ctx, ids, sample, uint64(seed)); err != nil {
			return "", tagged(err)
		}
	} else {
		err = rd.Scan(ctx, ids, 0, func(b *vecdata.Batch) error {
			all.RowIDs = append(all.RowIDs, b.RowIDs...)
			all.Vectors = append(all.Vectors, b.Vectors...)
			all.Skipped += b.Skipped
			return nil
		})
		if err != nil {
			return "", tagged(err)
		}
	}
	res := struct {
		RowIDs  []uint64 `json:"row_ids"`
		Dim     int      `json:"dim"`
		Vectors []byte   `json:"vectors"`
		Skipped int      `json:"skipped"`
	}{RowIDs: all.RowIDs, Dim: rd.Column().Dim, Vectors: float32Bytes(all.Vectors), Skipped: all.Skipped}
	if res.RowIDs == nil {
		res.RowIDs = []uint64{}
	}
	b, err := json.Marshal(res)
	return string(b), tagged(err)
}

func float32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}
