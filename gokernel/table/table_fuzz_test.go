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

func FuzzDecodeFragmentBitmap(f *testing.F) {
	for _, ids := range [][]uint32{{}, {1, 2, 3}, {0, 70000}} {
		b, _ := EncodeFragmentBitmap(ids)
		f.Add(b)
	}
	f.Add([]byte{0x3b, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, ok, err := DecodeFragmentBitmap(b)
		if err != nil || !ok {
			return
		}
		// What decodes must re-encode to the same set.
		again, err := EncodeFragmentBitmap(ids)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := DecodeFragmentBitmap(again)
		if err != nil || len(back) != len(ids) {
			t.Fatalf("re-encode of %v: %v %v", ids, back, err)
		}
	})
}
