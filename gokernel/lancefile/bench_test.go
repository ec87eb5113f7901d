package lancefile

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// A PQ auxiliary file of 1M rows: _rowid (fragment << 32 | offset, as Lance
// assigns them) and 16-byte PQ codes, in 256 IVF partitions.
const (
	benchRows       = 1 << 20
	benchCodeBytes  = 16
	benchPartitions = 256
)

func benchBatch() []*Array {
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]byte, 8*benchRows)
	for i := 0; i < benchRows; i++ {
		binary.LittleEndian.PutUint64(ids[8*i:], uint64(i/100_000)<<32|uint64(i%100_000))
	}
	codes := make([]byte, benchCodeBytes*benchRows)
	for i := range codes {
		codes[i] = byte(r.Uint32())
	}
	return []*Array{
		{Type: Primitive(KindUint64), Len: benchRows, Values: ids},
		{Type: FixedSizeList(KindUint8, benchCodeBytes), Len: benchRows, Values: codes},
	}
}

func benchFields() []*Field {
	return []*Field{NewField("_rowid", Primitive(KindUint64), true), NewField("__pq_code", FixedSizeList(KindUint8, benchCodeBytes), true)}
}

func writeBenchFile(b *testing.B, st storage.Store, name string, batch []*Array, v Version) int64 {
	ctx := context.Background()
	sw, err := st.Create(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(sw, benchFields(), WriterOptions{Version: v})
	if err != nil {
		b.Fatal(err)
	}
	// Partition-sized batches, as the merge writes them.
	per := benchRows / benchPartitions
	for lo := 0; lo < benchRows; lo += per {
		if err := w.Write([]*Array{batch[0].Slice(lo, lo+per), batch[1].Slice(lo, lo+per)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		b.Fatal(err)
	}
	if err := sw.Finish(); err != nil {
		b.Fatal(err)
	}
	e, err := st.Stat(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	return e.Size
}

func BenchmarkWritePQAux(b *testing.B) {
	for _, v := range []Version{V2_0, V2_2} {
		b.Run(v.String(), func(b *testing.B) {
			dir := b.TempDir()
			st := storage.NewLocal(dir, dir)
			batch := benchBatch()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				size := writeBenchFile(b, st, "aux.idx", batch, v)
				b.SetBytes(size)
			}
		})
	}
}

func BenchmarkReadPQAux(b *testing.B) {
	ctx := context.Background()
	for _, v := range []Version{V2_0, V2_2} {
		dir := b.TempDir()
		st := storage.NewLocal(dir, dir)
		size := writeBenchFile(b, st, "aux.idx", benchBatch(), v)
		for _, mode := range []string{"whole", "partitions"} {
			b.Run(v.String()+"/"+mode, func(b *testing.B) {
				b.SetBytes(size)
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					obj, err := st.Open(ctx, "aux.idx")
					if err != nil {
						b.Fatal(err)
					}
					r, err := Open(ctx, obj, "aux.idx", Options{})
					if err != nil {
						b.Fatal(err)
					}
					step := uint64(benchRows)
					if mode == "partitions" {
						step = benchRows / benchPartitions
					}
					for lo := uint64(0); lo < benchRows; lo += step {
						for _, col := range []string{"_rowid", "__pq_code"} {
							if _, err := r.Read(ctx, col, lo, lo+step); err != nil {
								b.Fatal(err)
							}
						}
					}
					obj.Close()
				}
			})
		}
	}
}

// BenchmarkCopyFloor reads and writes the same bytes with a plain file
// copy: the floor any reader/writer pair is measured against.
func BenchmarkCopyFloor(b *testing.B) {
	dir := b.TempDir()
	st := storage.NewLocal(dir, dir)
	size := writeBenchFile(b, st, "aux.idx", benchBatch(), V2_2)
	b.SetBytes(size)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		src, err := os.Open(filepath.Join(dir, "aux.idx"))
		if err != nil {
			b.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(dir, "copy.idx"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			b.Fatal(err)
		}
		if err := dst.Sync(); err != nil {
			b.Fatal(err)
		}
		src.Close()
		dst.Close()
	}
}
