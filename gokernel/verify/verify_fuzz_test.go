package verify

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// compatFiles reads a testdata/lance-compat dataset into memory.
func compatFiles(f *testing.F, name string) map[string][]byte {
	_, file, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "lance-compat", name)
	out := map[string][]byte{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		f.Fatal(err)
	}
	return out
}

// FuzzVerifyHostileSegment verifies an index whose files were patched or
// cut by the fuzzer: Verify must return (a report or an error), never
// panic or hang.
func FuzzVerifyHostileSegment(f *testing.F) {
	files := compatFiles(f, "v0.27.1/pq_in_schema")
	var aux, idx string
	for name := range files {
		switch {
		case strings.HasSuffix(name, "auxiliary.idx"):
			aux = name
		case strings.HasSuffix(name, "index.idx"):
			idx = name
		}
	}
	f.Add(uint8(0), uint32(100), []byte{0xff, 0xff})
	f.Add(uint8(1), uint32(0), []byte{})
	f.Add(uint8(2), uint32(uint32(len(files[aux])-40)), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint8(3), uint32(len(files[idx])-16), []byte{0, 0, 0, 0})
	f.Add(uint8(0), uint32(len(files[aux])/2), []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, which uint8, off uint32, patch []byte) {
		st := storage.NewMem("mem://fuzz")
		ctx := context.Background()
		for name, b := range files {
			target := aux
			if which&2 != 0 {
				target = idx
			}
			if name == target {
				b = append([]byte(nil), b...)
				if which&1 != 0 { // cut
					b = b[:int(off)%(len(b)+1)]
				} else if len(b) > 0 {
					for i, x := range patch {
						b[(int(off)+i)%len(b)] ^= x
					}
				}
			}
			if err := storage.Put(ctx, st, name, b); err != nil {
				t.Fatal(err)
			}
		}
		snap, err := table.Open(ctx, st, 0)
		if err != nil {
			t.Fatal(err)
		}
		name := snap.Indices[0].GetName()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = Verify(ctx, st, snap, name, Options{SampleRows: 32, Queries: 2, NProbes: 2, Deep: true})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("Verify hung on a hostile segment")
		}
	})
}
