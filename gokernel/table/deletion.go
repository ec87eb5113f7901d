package table

import (
	"bytes"
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// DeletionsDir holds deletion files. Part of the format.
const DeletionsDir = "_deletions/"

// DeletionPath is where a fragment's deletion file lives:
// _deletions/<fragment id>-<read version>-<id>.<arrow|bin>. Part of the
// format.
func DeletionPath(fragID uint64, d *pb.DeletionFile) string {
	ext := "arrow"
	if d.GetFileType() == pb.DeletionFile_BITMAP {
		ext = "bin"
	}
	return fmt.Sprintf("%s%d-%d-%d.%s", DeletionsDir, fragID, d.GetReadVersion(), d.GetId(), ext)
}

// ReadDeletions returns the row offsets deleted from a fragment (nil when
// it has no deletion file). Lance writes small sets as an Arrow IPC file
// with one UInt32 column, larger ones as a serialised roaring bitmap.
func ReadDeletions(ctx context.Context, st storage.Store, f *pb.DataFragment) (*roaring.Bitmap, error) {
	d := f.GetDeletionFile()
	if d == nil {
		return nil, nil
	}
	if d.BaseId != nil {
		return nil, fmt.Errorf("%w: table: fragment %d's deletion file lives under base path %d (shallow clones are not supported)", errkind.Unsupported, f.GetId(), d.GetBaseId())
	}
	name := DeletionPath(f.GetId(), d)
	// A roaring bitmap of n offsets below 2^32 takes at most about 2 bytes
	// per offset plus 8 KiB per 64k-row container; an Arrow file 4 bytes
	// per offset plus its schema and footer.
	rows := max(f.GetPhysicalRows(), d.GetNumDeletedRows())
	limit := int64(1<<20 + 8*rows)
	b, err := storage.ReadAll(ctx, st, name, limit)
	if err != nil {
		return nil, fmt.Errorf("table: deletion file of fragment %d: %w", f.GetId(), err)
	}
	bm := roaring.New()
	switch d.GetFileType() {
	case pb.DeletionFile_BITMAP:
		if _, err := bm.ReadFrom(bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("%w: table: %s: %w", errkind.Corrupt, name, err)
		}
	default:
		r, err := ipc.NewFileReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%w: table: %s: %w", errkind.Corrupt, name, err)
		}
		defer r.Close()
		if s := r.Schema(); s.NumFields() != 1 || s.Field(0).Type.ID() != arrow.UINT32 {
			return nil, fmt.Errorf("%w: table: %s: expected one UInt32 column, got %s", errkind.Corrupt, name, s)
		}
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				return nil, fmt.Errorf("%w: table: %s: %w", errkind.Corrupt, name, err)
			}
			bm.AddMany(rec.Column(0).(*array.Uint32).Uint32Values())
		}
	}
	if n := bm.GetCardinality(); d.GetNumDeletedRows() != 0 && n != d.GetNumDeletedRows() {
		return nil, fmt.Errorf("%w: table: %s holds %d offsets, the manifest says %d", errkind.Corrupt, name, n, d.GetNumDeletedRows())
	}
	return bm, nil
}
