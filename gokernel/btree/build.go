package btree

import (
	"context"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/keysort"
	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// BuildOptions tune Build.
type BuildOptions struct {
	// Dir is the output segment's directory (_indices/<uuid>/). Required.
	Dir string
	// KeyType is the indexed column's type (the "values" column's).
	KeyType lancefile.DataType
	// BatchSize is the rows of a page (DefaultBatchSize when <= 0): the
	// index's existing segments' when it has some, so that they merge.
	BatchSize int
	// Version is the file format (the dataset's, as pylance writes index
	// files).
	Version lancefile.Version
}

// Build writes a BTREE segment of the (key, row address) pairs s holds,
// in the layout pylance's create_index_uncommitted writes: one sorted run
// (nulls first) in pages of BatchSize rows, and their lookup. Memory is
// the sorter's budget and one page.
func Build(ctx context.Context, st storage.Store, s *keysort.Sorter, opts BuildOptions) (*Result, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.BatchSize > maxBatchSize {
		return nil, fmt.Errorf("%w: btree build: pages of %d rows (at most %d)", errkind.InvalidInput, opts.BatchSize, maxBatchSize)
	}
	w, err := newPageWriter(ctx, st, opts.Dir, opts.KeyType, opts.BatchSize, opts.Version)
	if err != nil {
		return nil, err
	}
	defer w.abort()
	err = s.Sort(ctx, func(valid bool, value []byte, row uint64) error {
		return w.add(ctx, !valid, value, row)
	})
	if err != nil {
		return nil, err
	}
	files, err := w.finish(ctx)
	if err != nil {
		return nil, err
	}
	return &Result{Files: files, RowsRead: s.Rows(), RowsWritten: w.rows, Pages: w.pages}, nil
}
