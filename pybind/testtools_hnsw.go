//go:build segmerge_testtools

package pybind

import (
	"context"
	"encoding/json"
	"path/filepath"

	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// InspectHNSW decodes the partition graphs of the IVF_HNSW_* segment in
// the local directory dir (a dataset's _indices/<uuid>) and returns, per
// partition, what the kernel reads (a JSON list of segment.GraphInfo),
// with its own distances recomputed against the stored ones.
func InspectHNSW(dir string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", tagged(err)
	}
	parent := filepath.Dir(abs)
	st := storage.NewLocal(parent, parent)
	infos, err := segment.InspectHNSW(ctx, st, filepath.Base(abs)+"/")
	if err != nil {
		return "", tagged(err)
	}
	if infos == nil {
		infos = []segment.GraphInfo{}
	}
	b, err := json.Marshal(infos)
	return string(b), tagged(err)
}
