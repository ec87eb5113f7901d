//go:build segmerge_testtools

package pybind

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
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
		if err := decodeArg("columns", columnsJSON, &names); err != nil {
			return "", err
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

type writeColumnSpec struct {
	Name         string `json:"name"`
	Type         string `json:"type"`
	ItemType     string `json:"item_type"`
	Nullable     bool   `json:"nullable"`
	ItemNullable bool   `json:"item_nullable"`
	Len          int    `json:"len"`
	ValuesPath   string `json:"values_path"`
	ValidityPath string `json:"validity_path"`
	OffsetsPath  string `json:"offsets_path"`
	ItemValidity string `json:"item_validity_path"`
}

type writeFileSpec struct {
	Version       string            `json:"version"`
	MaxPageBytes  int               `json:"max_page_bytes"`
	BatchRows     int               `json:"batch_rows"`
	Metadata      map[string]string `json:"metadata"`
	GlobalBuffers [][]byte          `json:"global_buffers"`
	Columns       []writeColumnSpec `json:"columns"`
}

func readRaw(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errkind.InvalidInput, err)
	}
	return b, nil
}

// WriteTestFile writes a Lance file with the kernel's writer from raw column
// buffers in files (values little-endian, validity LSB-first bitmaps, list
// offsets as int64), so that tests can have pylance read what Go writes.
func WriteTestFile(path, specJSON string) (err error) {
	defer recoverTo(&err)
	var spec writeFileSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return tagged(fmt.Errorf("%w: spec: %w", errkind.InvalidInput, err))
	}
	v, err := lancefile.ParseVersion(spec.Version)
	if err != nil {
		return tagged(err)
	}
	parseType := func(s string) (lancefile.DataType, error) {
		t := lancefile.ParseLogicalType(s)
		if t.Kind == lancefile.KindUnknown {
			return t, fmt.Errorf("%w: type %q", errkind.InvalidInput, s)
		}
		return t, nil
	}
	var fields []*lancefile.Field
	var cols []*lancefile.Array
	for _, c := range spec.Columns {
		t, err := parseType(c.Type)
		if err != nil {
			return tagged(err)
		}
		a := &lancefile.Array{Type: t, Len: c.Len}
		if a.Validity, err = readRaw(c.ValidityPath); err != nil {
			return tagged(err)
		}
		values, err := readRaw(c.ValuesPath)
		if err != nil {
			return tagged(err)
		}
		if t.Kind == lancefile.KindList {
			it, err := parseType(c.ItemType)
			if err != nil {
				return tagged(err)
			}
			offs, err := readRaw(c.OffsetsPath)
			if err != nil {
				return tagged(err)
			}
			for i := 0; i+8 <= len(offs); i += 8 {
				a.Offsets = append(a.Offsets, int64(binary.LittleEndian.Uint64(offs[i:])))
			}
			if len(a.Offsets) != c.Len+1 {
				return tagged(fmt.Errorf("%w: %d offsets for %d rows", errkind.InvalidInput, len(a.Offsets), c.Len))
			}
			a.Items = &lancefile.Array{Type: it, Len: int(a.Offsets[c.Len]), Values: values}
			if a.Items.Validity, err = readRaw(c.ItemValidity); err != nil {
				return tagged(err)
			}
			fields = append(fields, lancefile.NewListField(c.Name, it, c.Nullable, c.ItemNullable))
		} else if t.Kind == lancefile.KindBinary {
			offs, err := readRaw(c.OffsetsPath)
			if err != nil {
				return tagged(err)
			}
			for i := 0; i+8 <= len(offs); i += 8 {
				a.Offsets = append(a.Offsets, int64(binary.LittleEndian.Uint64(offs[i:])))
			}
			a.Values = values
			if a.Values == nil {
				a.Values = []byte{}
			}
			fields = append(fields, lancefile.NewField(c.Name, t, c.Nullable))
		} else {
			a.Values = values
			fields = append(fields, lancefile.NewField(c.Name, t, c.Nullable))
		}
		cols = append(cols, a)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return tagged(fmt.Errorf("%w: %w", errkind.InvalidInput, err))
	}
	st := storage.NewLocal(filepath.Dir(abs), filepath.Dir(abs))
	ctx := context.Background()
	sw, err := st.Create(ctx, filepath.Base(abs))
	if err != nil {
		return tagged(err)
	}
	defer sw.Abort()
	w, err := lancefile.NewWriter(sw, fields, lancefile.WriterOptions{Version: v, MaxPageBytes: spec.MaxPageBytes})
	if err != nil {
		return tagged(err)
	}
	for _, g := range spec.GlobalBuffers {
		if _, err := w.AddGlobalBuffer(g); err != nil {
			return tagged(err)
		}
	}
	for k, val := range spec.Metadata {
		w.SetMetadata(k, []byte(val))
	}
	n := 0
	if len(cols) > 0 {
		n = cols[0].Len
	}
	step := spec.BatchRows
	if step <= 0 {
		step = max(n, 1)
	}
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		batch := make([]*lancefile.Array, len(cols))
		for i, c := range cols {
			batch[i] = c.Slice(lo, hi)
		}
		if err := w.Write(batch); err != nil {
			return tagged(err)
		}
	}
	if err := w.Finish(); err != nil {
		return tagged(err)
	}
	return tagged(sw.Finish())
}
