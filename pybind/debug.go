package pybind

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Diagnostics over single Lance files: what the kernel reads from a file
// (for cross-checks against pylance's LanceFileReader, and for people
// debugging an index file).

type arrayJSON struct {
	Type         string     `json:"type"`
	Len          int        `json:"len"`
	Values       []byte     `json:"values,omitempty"`
	Validity     []byte     `json:"validity,omitempty"`
	ItemValidity []byte     `json:"item_validity,omitempty"`
	Offsets      []int64    `json:"offsets,omitempty"`
	Items        *arrayJSON `json:"items,omitempty"`
}

func toArrayJSON(a *lancefile.Array) *arrayJSON {
	if a == nil {
		return nil
	}
	return &arrayJSON{Type: a.Type.String(), Len: a.Len, Values: a.Values, Validity: a.Validity,
		ItemValidity: a.ItemValidity, Offsets: a.Offsets, Items: toArrayJSON(a.Items)}
}

type fieldJSON struct {
	Name     string       `json:"name"`
	ID       int32        `json:"id"`
	Type     string       `json:"type"`
	Nullable bool         `json:"nullable"`
	Children []*fieldJSON `json:"children,omitempty"`
}

func toFieldJSON(f *lancefile.Field) *fieldJSON {
	out := &fieldJSON{Name: f.Name, ID: f.ID, Type: f.Type.String(), Nullable: f.Nullable}
	for _, c := range f.Children {
		out.Children = append(out.Children, toFieldJSON(c))
	}
	return out
}

func openLocalFile(ctx context.Context, path string) (storage.Object, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errkind.InvalidInput, path, err)
	}
	st := storage.NewLocal(filepath.Dir(abs), filepath.Dir(abs))
	return st.Open(ctx, filepath.Base(abs))
}

// InspectFile reads a Lance file and returns its schema, metadata, global
// buffer sizes and the rows [start, end) of the named columns (all columns
// when columnsJSON is ""; end < 0 means the last row) as JSON, bytes in
// base64.
func InspectFile(path string, start, end int, columnsJSON string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	obj, err := openLocalFile(ctx, path)
	if err != nil {
		return "", tagged(err)
	}
	defer obj.Close()
	r, err := lancefile.Open(ctx, obj, path, lancefile.Options{})
	if err != nil {
		return "", tagged(err)
	}
	var names []string
	if columnsJSON != "" {
		if err := json.Unmarshal([]byte(columnsJSON), &names); err != nil {
			return "", tagged(fmt.Errorf("%w: columns: %w", errkind.InvalidInput, err))
		}
	} else {
		for _, f := range r.Fields() {
			names = append(names, f.Name)
		}
	}
	if end < 0 {
		end = int(r.NumRows())
	}
	if start < 0 || start > end {
		return "", tagged(fmt.Errorf("%w: rows [%d,%d)", errkind.InvalidInput, start, end))
	}
	res := struct {
		Version       string                `json:"version"`
		NumRows       uint64                `json:"num_rows"`
		Fields        []*fieldJSON          `json:"fields"`
		Metadata      map[string][]byte     `json:"metadata"`
		GlobalBuffers [][]byte              `json:"global_buffers"`
		Columns       map[string]*arrayJSON `json:"columns"`
	}{Version: r.Version().String(), NumRows: r.NumRows(), Metadata: r.Metadata(), Columns: map[string]*arrayJSON{}}
	for _, f := range r.Fields() {
		res.Fields = append(res.Fields, toFieldJSON(f))
	}
	for i := 1; i < r.NumGlobalBuffers(); i++ {
		b, err := r.GlobalBuffer(ctx, i)
		if err != nil {
			return "", tagged(err)
		}
		res.GlobalBuffers = append(res.GlobalBuffers, b)
	}
	for _, n := range names {
		a, err := r.Read(ctx, n, uint64(start), uint64(end))
		if err != nil {
			return "", tagged(err)
		}
		res.Columns[n] = toArrayJSON(a)
	}
	b, err := json.Marshal(res)
	return string(b), tagged(err)
}

// DescribeIVF returns the IVF message of a Lance index file (the global
// buffer its "lance:ivf" metadata names) as JSON: lengths, offsets and the
// centroids' shape.
func DescribeIVF(path string) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	obj, err := openLocalFile(ctx, path)
	if err != nil {
		return "", tagged(err)
	}
	defer obj.Close()
	r, err := lancefile.Open(ctx, obj, path, lancefile.Options{})
	if err != nil {
		return "", tagged(err)
	}
	m, err := ivf.ReadModel(ctx, r, path)
	if err != nil {
		return "", tagged(err)
	}
	res := map[string]any{"lengths": m.Lengths, "offsets": m.Offsets}
	if m.Centroids != nil {
		res["centroids_shape"] = m.Centroids.Shape
	}
	b, err := json.Marshal(res)
	return string(b), tagged(err)
}
