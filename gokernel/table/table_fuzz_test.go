package table

import (
	"os"
	"path/filepath"
	"testing"
)

func FuzzDecodeManifestFile(f *testing.F) {
	matches, _ := filepath.Glob(filepath.Join(compatDir(f), "*", "*", "_versions", "*.manifest"))
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("LANC"))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := DecodeManifestFile(b)
		if err != nil {
			return
		}
		for _, im := range snap.Indices {
			_, _, _ = DecodeFragmentBitmap(im.GetFragmentBitmap())
		}
	})
}

// FuzzDecodeFragmentBitmap: any bytes, any dataset bound: an error, or
// ids within the bound and MaxCoveredFragments that re-encode to the same
// set. The seeds include bombs (one full run per container).
func FuzzDecodeFragmentBitmap(f *testing.F) {
	for _, ids := range [][]uint32{{}, {1, 2, 3}, {0, 70000}} {
		b, _ := EncodeFragmentBitmap(ids)
		f.Add(b, uint32(100000))
	}
	f.Add([]byte{0x3b, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00}, uint32(9))
	f.Add(bitmapBomb(f, 1<<20), uint32(1<<20-1))
	f.Add(bitmapBomb(f, 1<<28), uint32(1<<32-1))
	f.Fuzz(func(t *testing.T, b []byte, maxID uint32) {
		ids, ok, err := DecodeFragmentBitmapUpTo(b, maxID)
		if err != nil || !ok {
			return
		}
		if len(ids) > MaxCoveredFragments || (len(ids) > 0 && ids[len(ids)-1] > maxID) {
			t.Fatalf("%d ids up to %d accepted under bound %d", len(ids), ids[len(ids)-1], maxID)
		}
		// What decodes must re-encode to the same set.
		again, err := EncodeFragmentBitmap(ids)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := DecodeFragmentBitmapUpTo(again, maxID)
		if err != nil || len(back) != len(ids) {
			t.Fatalf("re-encode of %d ids: %d %v", len(ids), len(back), err)
		}
	})
}
