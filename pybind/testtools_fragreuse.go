//go:build segmerge_testtools

package pybind

import (
	"context"
	"encoding/json"

	"github.com/lance-segmerge/lance-segmerge/gokernel/fragreuse"
)

// RemapRowAddresses reads the fragment reuse index of a dataset version
// (inline in the manifest or in its file) and maps each row address of a
// JSON list through it: a JSON list of the new addresses, null for a row
// its compactions dropped. With it a test compares the map as we read it
// with where pylance's compaction put every row.
func RemapRowAddresses(uri, optionsJSON string, version int, addrsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	var addrs []uint64
	if err := decodeArg("row addresses", addrsJSON, &addrs); err != nil {
		return "", tagged(err)
	}
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	m, err := fragreuse.Load(ctx, st, snap)
	if err != nil {
		return "", tagged(err)
	}
	got := make([]*uint64, len(addrs))
	for i, a := range addrs {
		if n, ok := m.Remap(a); ok {
			got[i] = &n
		}
	}
	b, err := json.Marshal(got)
	return string(b), tagged(err)
}
