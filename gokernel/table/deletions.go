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

// DeletionsDir holds the deletion files of fragments. Part of the format.
const DeletionsDir = "_deletions/"

// DeletionFileName is the path of a fragment's deletion file, relative to
// the root that holds it: _deletions/{fragment}-{read_version}-{id}.{ext},
// ext "arrow" (an Arrow IPC file of one 32-bit column of deleted row
// offsets) or "bin" (a portable 32-bit RoaringBitmap of them). Part of the
// format.
func DeletionFileName(fragID uint64, df *pb.DeletionFile) string {
	ext := "arrow"
	if df.GetFileType() == pb.DeletionFile_BITMAP {
		ext = "bin"
	}
	return fmt.Sprintf("%s%d-%d-%d.%s", DeletionsDir, fragID, df.GetReadVersion(), df.GetId(), ext)
}

// DeletedRows reads the deletion file of a fragment: the offsets of its
// deleted rows, or nil when it has none. The file must agree with the
// manifest (as many offsets as num_deleted_rows, each below physical_rows).
func (s *Snapshot) DeletedRows(ctx context.Context, st storage.Store, frag *pb.DataFragment) (*roaring.Bitmap, error) {
	df := frag.GetDeletionFile()
	if df == nil {
		return nil, nil
	}
	rows := frag.GetPhysicalRows()
	if rows > maxFragmentRows {
		return nil, fmt.Errorf("%w: fragment %d has %d rows", errkind.Corrupt, frag.GetId(), rows)
	}
	dst, err := s.BaseStore(ctx, st, df.BaseId)
	if err != nil {
		return nil, fmt.Errorf("fragment %d deletion file: %w", frag.GetId(), err)
	}
	name := DeletionFileName(frag.GetId(), df)
	// An Arrow array of n int32 offsets, or a roaring bitmap of them, is at
	// most a few bytes per row plus framing.
	data, err := storage.ReadAll(ctx, dst, name, int64(min(4*rows+1<<20, 1<<34)))
	if err != nil {
		return nil, fmt.Errorf("table: fragment %d deletion file: %w", frag.GetId(), err)
	}
	var del *roaring.Bitmap
	if df.GetFileType() == pb.DeletionFile_BITMAP {
		del, err = decodeDeletionBitmap(data)
	} else {
		del, err = decodeDeletionArrow(data)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: fragment %d deletion file %s: %w", errkind.Corrupt, frag.GetId(), name, err)
	}
	if n := del.GetCardinality(); df.GetNumDeletedRows() != 0 && n != df.GetNumDeletedRows() {
		return nil, fmt.Errorf("%w: fragment %d deletion file %s holds %d offsets, the manifest says %d", errkind.Corrupt, frag.GetId(), name, n, df.GetNumDeletedRows())
	}
	if !del.IsEmpty() && uint64(del.Maximum()) >= rows {
		return nil, fmt.Errorf("%w: fragment %d deletion file %s deletes offset %d of %d rows", errkind.Corrupt, frag.GetId(), name, del.Maximum(), rows)
	}
	return del, nil
}

func decodeDeletionBitmap(data []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("roaring bitmap: %v", r)
		}
	}()
	bm = roaring.New()
	n, err := bm.ReadFrom(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("roaring bitmap: %w", err)
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("roaring bitmap has %d trailing bytes", int64(len(data))-n)
	}
	if err := bm.Validate(); err != nil {
		return nil, fmt.Errorf("roaring bitmap: %w", err)
	}
	return bm, nil
}

func decodeDeletionArrow(data []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("arrow file: %v", r)
		}
	}()
	rd, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("arrow file: %w", err)
	}
	defer rd.Close()
	if rd.Schema().NumFields() != 1 {
		return nil, fmt.Errorf("arrow file has %d columns, want 1", rd.Schema().NumFields())
	}
	bm = roaring.New()
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.RecordBatch(i)
		if err != nil {
			return nil, fmt.Errorf("arrow file batch %d: %w", i, err)
		}
		col := rec.Column(0)
		if col.NullN() > 0 {
			return nil, fmt.Errorf("arrow file has null offsets")
		}
		switch a := col.(type) {
		case *array.Int32:
			for _, v := range a.Int32Values() {
				if v < 0 {
					return nil, fmt.Errorf("negative row offset %d", v)
				}
				bm.Add(uint32(v))
			}
		case *array.Uint32:
			bm.AddMany(a.Uint32Values())
		default:
			return nil, fmt.Errorf("arrow file column is %s, want %s", col.DataType(), arrow.PrimitiveTypes.Int32)
		}
	}
	return bm, nil
}
