package pybind

import (
	"context"
	"encoding/json"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/verify"
)

// IndexHealth measures the drift of a vector index at version (0 =
// latest) against today's data (verify.Health; optsJSON holds
// verify.HealthOptions) and returns the report as JSON. opID names the
// operation for Progress and Cancel.
func IndexHealth(opID, uri, optionsJSON string, version int, indexName, optsJSON string) (string, error) {
	return offThread(func() (string, error) { return indexHealth(opID, uri, optionsJSON, version, indexName, optsJSON) })
}

func indexHealth(opID, uri, optionsJSON string, version int, indexName, optsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx, _, done := beginOp(opID)
	defer done()
	var opts verify.HealthOptions
	if optsJSON != "" {
		if err := decodeArg("health options", optsJSON, &opts); err != nil {
			return "", err
		}
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	rep, err := verify.Health(ctx, st, snap, indexName, opts)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(rep)
	return string(b), tagged(err)
}

// SegmentProvenance returns, for every segment of an index at version (0
// = latest; "" = every index), the version whose commit first listed it
// and that commit's operation and transaction properties
// (segment.Provenances), as a JSON object keyed by segment uuid.
func SegmentProvenance(uri, optionsJSON string, version int, indexName string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	p, err := segment.IndexProvenances(ctx, st, snap, indexName)
	if err != nil {
		return "", tagged(err)
	}
	b, err := json.Marshal(p)
	return string(b), tagged(err)
}
