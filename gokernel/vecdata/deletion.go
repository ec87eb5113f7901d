package vecdata

import (
	"bytes"
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// DeletionsDir holds the deletion files of a dataset. Part of the format.
const DeletionsDir = "_deletions/"

// maxDeletionFileBytes bounds a deletion file: a 4-byte offset for each of
// 2^32 rows is 16 GiB, but a real fragment holds millions of rows at most.
const maxDeletionFileBytes = 1 << 30

// DeletionPath is the path of a fragment's deletion file, relative to the
// dataset root: _deletions/{fragment}-{read_version}-{id}.{arrow|bin}, all
// three numbers in decimal. Part of the format.
func DeletionPath(fragmentID uint64, df *pb.DeletionFile) string {
	ext := "arrow"
	if df.GetFileType() == pb.DeletionFile_BITMAP {
		ext = "bin"
	}
	return fmt.Sprintf("%s%d-%d-%d.%s", DeletionsDir, fragmentID, df.GetReadVersion(), df.GetId(), ext)
}

// ReadDeletions reads the deleted row offsets of a fragment. A fragment
// without a deletion file has none (nil). Lance writes two forms, which
// pylance 14 chooses between by size: an Arrow IPC file holding one UInt32
// column of offsets (small sets), and a portable 32-bit RoaringBitmap
// (large sets).
func ReadDeletions(ctx context.Context, st storage.Store, fragmentID uint64, df *pb.DeletionFile) (*roaring.Bitmap, error) {
	if df == nil {
		return nil, nil
	}
	if df.BaseId != nil {
		return nil, fmt.Errorf("%w: the deletion file of fragment %d lives under base path %d (shallow clones are not supported)", errkind.Unsupported, fragmentID, df.GetBaseId())
	}
	name := DeletionPath(fragmentID, df)
	data, err := storage.ReadAll(ctx, st, name, maxDeletionFileBytes)
	if err != nil {
		return nil, fmt.Errorf("vecdata: deletion file of fragment %d: %w", fragmentID, err)
	}
	var bm *roaring.Bitmap
	switch df.GetFileType() {
	case pb.DeletionFile_BITMAP:
		bm, err = decodeBitmap(data)
	case pb.DeletionFile_ARROW_ARRAY:
		bm, err = decodeArrowOffsets(data)
	default:
		err = fmt.Errorf("%w: deletion file type %d", errkind.Unsupported, df.GetFileType())
	}
	if err != nil {
		return nil, fmt.Errorf("vecdata: %s: %w", name, err)
	}
	if n := df.GetNumDeletedRows(); n != 0 && n != bm.GetCardinality() {
		return nil, fmt.Errorf("%w: vecdata: %s holds %d deleted rows, the manifest says %d", errkind.Corrupt, name, bm.GetCardinality(), n)
	}
	return bm, nil
}

func decodeBitmap(data []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		// roaring validates what it reads, but hostile bytes must never
		// take the process down.
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("%w: deletion bitmap: %v", errkind.Corrupt, r)
		}
	}()
	bm = roaring.New()
	n, err := bm.ReadFrom(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: deletion bitmap: %w", errkind.Corrupt, err)
	}
	if n != int64(len(data)) {
		return nil, fmt.Errorf("%w: deletion bitmap has %d trailing bytes", errkind.Corrupt, int64(len(data))-n)
	}
	if err := bm.Validate(); err != nil {
		return nil, fmt.Errorf("%w: deletion bitmap: %w", errkind.Corrupt, err)
	}
	return bm, nil
}

// decodeArrowOffsets reads an Arrow IPC file whose batches hold one
// unsigned (or, in older writers, signed) 32-bit column of row offsets.
func decodeArrowOffsets(data []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("%w: deletion file: %v", errkind.Corrupt, r)
		}
	}()
	rd, err := ipc.NewFileReader(bytes.NewReader(data), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("%w: not an Arrow IPC file: %w", errkind.Corrupt, err)
	}
	defer rd.Close()
	if rd.Schema().NumFields() != 1 {
		return nil, fmt.Errorf("%w: %d columns, want 1", errkind.Corrupt, rd.Schema().NumFields())
	}
	bm = roaring.New()
	for i := 0; i < rd.NumRecords(); i++ {
		rec, err := rd.Record(i)
		if err != nil {
			return nil, fmt.Errorf("%w: batch %d: %w", errkind.Corrupt, i, err)
		}
		col := rec.Column(0)
		if col.NullN() > 0 {
			return nil, fmt.Errorf("%w: null row offsets", errkind.Corrupt)
		}
		switch c := col.(type) {
		case *array.Uint32:
			bm.AddMany(c.Uint32Values())
		case *array.Int32:
			for _, v := range c.Int32Values() {
				if v < 0 {
					return nil, fmt.Errorf("%w: negative row offset %d", errkind.Corrupt, v)
				}
				bm.Add(uint32(v))
			}
		default:
			return nil, fmt.Errorf("%w: row offsets of type %s", errkind.Corrupt, col.DataType())
		}
	}
	return bm, nil
}
