// Package pybind is the only package gopy sees. Its exported functions take
// and return plain values only: strings, ints and bools, with structured
// values as JSON strings and bytes as base64 inside the JSON (gopy cannot
// pass Python lists, dicts or bytes without handles, and a handle does not
// survive a pickle).
//
// Every export recovers panics (a Go panic would abort the interpreter) and
// returns errors as "[tag] message", where tag is errkind.Tag of the error;
// the Python facade maps tags to exception classes.
package pybind

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/segment"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// KernelVersion is the version of the Go kernel: the writer version our
// manifests record, and the Python package's version (test_version.py
// holds the two equal).
const KernelVersion = segment.WriterVersion

func init() {
	// The kernel allocates in large, short-lived blocks (partition
	// windows); collecting at twice the live heap instead of at once more
	// halves the GC work of a merge for a peak that stays bounded by the
	// window. A GOGC the user set wins (and GOMEMLIMIT, which the runtime
	// reads itself, caps the heap either way).
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(200)
	}
}

// Version returns the kernel version.
func Version() string { return KernelVersion }

// recoverTo turns a panic into an "[internal]" error. Use as the first
// deferred call of every export.
func recoverTo(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("[internal] lance-segmerge kernel panic: %v\n%s", r, debug.Stack())
	}
}

// tagged prefixes an error with its stable kind tag.
func tagged(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("[%s] %w", errkind.Tag(err), err)
}

// decodeArg decodes a JSON argument from Python into v: a tagged
// InvalidInput error naming what it is when it does not decode.
func decodeArg(what, s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return tagged(fmt.Errorf("%w: %s: %w", errkind.InvalidInput, what, err))
	}
	return nil
}

func decodeOptions(optionsJSON string) (map[string]string, error) {
	if optionsJSON == "" {
		return nil, nil
	}
	var opts map[string]string
	if err := json.Unmarshal([]byte(optionsJSON), &opts); err != nil {
		return nil, fmt.Errorf("%w: storage_options must be a JSON object of strings: %w", errkind.InvalidInput, err)
	}
	return opts, nil
}

func openSnapshot(ctx context.Context, uri, optionsJSON string, version int) (storage.Store, *table.Snapshot, error) {
	opts, err := decodeOptions(optionsJSON)
	if err != nil {
		return nil, nil, err
	}
	if version < 0 {
		return nil, nil, fmt.Errorf("%w: version %d is negative", errkind.InvalidInput, version)
	}
	st, err := storage.Open(ctx, uri, opts)
	if err != nil {
		return nil, nil, err
	}
	snap, err := table.Open(ctx, st, uint64(version))
	if err != nil {
		return nil, nil, err
	}
	// Base paths (shallow clones) open with the dataset's own options.
	snap.SetOpener(func(ctx context.Context, uri string) (storage.Store, error) { return storage.Open(ctx, uri, opts) })
	return st, snap, nil
}

type datasetInfo struct {
	URI                string   `json:"uri"`
	Version            uint64   `json:"version"`
	LatestVersion      uint64   `json:"latest_version"`
	ManifestScheme     string   `json:"manifest_scheme"`
	NumFragments       int      `json:"num_fragments"`
	DataStorageVersion string   `json:"data_storage_version"`
	IndexNames         []string `json:"index_names"`
	WriterLibrary      string   `json:"writer_library"`
	WriterVersion      string   `json:"writer_version"`
	// NumRows is the rows of the version: physical rows less deleted ones.
	NumRows uint64 `json:"num_rows"`
	// IndexSegments counts the segments (manifest entries) of each index.
	IndexSegments map[string]int `json:"index_segments"`
}

// DatasetInfo opens a dataset version (0 = latest) and returns a JSON
// summary of it.
func DatasetInfo(uri, optionsJSON string, version int) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	refs, err := table.ListVersions(ctx, st)
	if err != nil {
		return "", tagged(err)
	}
	m := snap.Manifest
	info := datasetInfo{
		URI:                storage.RedactURI(uri),
		Version:            snap.Ref.Version,
		LatestVersion:      refs[len(refs)-1].Version,
		ManifestScheme:     snap.Ref.Scheme.String(),
		NumFragments:       len(m.GetFragments()),
		DataStorageVersion: m.GetDataFormat().GetVersion(),
		IndexNames:         segment.IndexNames(snap),
		WriterLibrary:      m.GetWriterVersion().GetLibrary(),
		WriterVersion:      m.GetWriterVersion().GetVersion(),
		IndexSegments:      map[string]int{},
	}
	for _, f := range m.GetFragments() {
		info.NumRows += f.GetPhysicalRows() - min(f.GetPhysicalRows(), f.GetDeletionFile().GetNumDeletedRows())
	}
	for _, im := range snap.Indices {
		info.IndexSegments[im.GetName()]++
	}
	b, err := json.Marshal(info)
	return string(b), tagged(err)
}

// ListSegments lists the segments of the vector index indexName ("" = every
// vector index) at a dataset version (0 = latest), with statistics read from
// the index files unless skipStats. Returns a JSON list of segment.Info.
func ListSegments(uri, optionsJSON string, version int, indexName string, skipStats bool) (string, error) {
	return offThread(func() (string, error) { return listSegments(uri, optionsJSON, version, indexName, skipStats) })
}

func listSegments(uri, optionsJSON string, version int, indexName string, skipStats bool) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	st, snap, err := openSnapshot(ctx, uri, optionsJSON, version)
	if err != nil {
		return "", tagged(err)
	}
	infos, err := segment.List(ctx, st, snap, segment.Options{IndexName: indexName, SkipStats: skipStats})
	if err != nil {
		return "", tagged(err)
	}
	if infos == nil {
		infos = []*segment.Info{}
	}
	b, err := json.Marshal(infos)
	return string(b), tagged(err)
}

// DescribeSegment completes a segment given as JSON (the plain fields of a
// pylance Index, or of our IndexSegment without its metadata bytes): it
// rebuilds the IndexMetadata and, when withStats, reads the statistics from
// the segment's files in the dataset. Returns the segment.Info JSON.
func DescribeSegment(uri, optionsJSON, segmentJSON string, withStats bool) (out string, err error) {
	defer recoverTo(&err)
	ctx := context.Background()
	im, err := segment.ParseSegment([]byte(segmentJSON), nil)
	if err != nil {
		return "", tagged(err)
	}
	info, err := segment.Describe(im)
	if err != nil {
		return "", tagged(err)
	}
	if withStats {
		opts, err := decodeOptions(optionsJSON)
		if err != nil {
			return "", tagged(err)
		}
		st, err := storage.Open(ctx, uri, opts)
		if err != nil {
			return "", tagged(err)
		}
		if im.BaseId != nil {
			// The segment lives under a base path of the latest version.
			_, snap, err := openSnapshot(ctx, uri, optionsJSON, 0)
			if err != nil {
				return "", tagged(err)
			}
			if st, err = snap.IndexStore(ctx, st, im); err != nil {
				return "", tagged(err)
			}
		}
		if info.Stats, err = segment.ReadStats(ctx, st, im); err != nil {
			return "", tagged(err)
		}
	}
	b, err := json.Marshal(info)
	return string(b), tagged(err)
}
