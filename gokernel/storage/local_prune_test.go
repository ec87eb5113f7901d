package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestPruneDirRemovesOnlyEmptyDirectories(t *testing.T) {
	root := t.TempDir()
	l := NewLocal(root, root)
	ctx := context.Background()
	empty := filepath.Join(root, "_indices", "a")
	full := filepath.Join(root, "_indices", "b")
	for _, d := range []string{empty, full} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(full, "index.idx"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"_indices/a/", "_indices/b/", "_indices/missing/"} {
		if err := l.PruneDir(ctx, p); err != nil {
			t.Fatalf("PruneDir(%q): %v", p, err)
		}
	}
	if err := l.PruneDir(ctx, ""); err == nil {
		t.Error("PruneDir of the root's empty name was accepted")
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("the empty directory is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(full, "index.idx")); err != nil {
		t.Errorf("a directory with a file was touched: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the root went: %v", err)
	}
}
