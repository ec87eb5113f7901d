//go:build segmerge_testtools

package pybind

import (
	"context"

	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
	"github.com/lance-segmerge/lance-segmerge/gokernel/verify"
)

// DamageSegment damages one segment of an index for tests and drills
// (verify.Damage; specJSON holds verify.DamageSpec) and returns the
// damaged segment's uuid. Never run it on data you care about.
func DamageSegment(uri, optionsJSON, indexName, segUUID, specJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	var spec verify.DamageSpec
	if err := decodeArg("damage spec", specJSON, &spec); err != nil {
		return "", err
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, 0)
	if err != nil {
		return "", tagged(err)
	}
	im, err := verify.Damage(ctx, st, snap, indexName, segUUID, spec)
	if err != nil {
		return "", tagged(err)
	}
	return table.IndexUUID(im), nil
}
