package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/google/uuid"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Local is a Store over a directory of the local filesystem.
//
// Create writes to a temporary sibling ".tmp-<uuid>" and renames it over the
// final name on Finish. PutIfAbsent uses the hard-link trick that Lance's own
// local commit handler uses: write a temporary file, fsync it, link it to the
// final name (EEXIST means another writer won), remove the temporary, fsync
// the directory. A link never replaces an existing file, so two writers can
// never both believe they published the same name.
type Local struct {
	root string
	uri  string
}

// NewLocal returns the store rooted at the absolute directory root. uri is
// what the user called it (for messages).
func NewLocal(root, uri string) *Local { return &Local{root: root, uri: RedactURI(uri)} }

func (l *Local) URI() string { return l.uri }

func (l *Local) path(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return filepath.Join(l.root, filepath.FromSlash(name)), nil
}

// mapErr gives a filesystem error its kind. A path through a plain file
// (ENOTDIR: a file given as the dataset directory) is not found. Anything
// else the filesystem reports (ENOSPC, EIO, EACCES, EROFS, EFBIG, ...) is
// errkind.IO: neither the caller's input nor corrupt data.
func mapErr(op, name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: storage: %s %s", errkind.NotFound, op, name)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: storage: %s %s: a path component is a file, not a directory", errkind.NotFound, op, name)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: storage: %s %s: already exists", errkind.Conflict, op, name)
	default:
		return fmt.Errorf("%w: storage: %s %s: %w", errkind.IO, op, name, err)
	}
}

func (l *Local) Open(ctx context.Context, name string) (Object, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, mapErr("open", name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, mapErr("stat", name, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%w: storage: %s is a directory", errkind.NotFound, name)
	}
	return &localObject{f: f, name: name, size: st.Size(), id: localIdentity(p, st)}, nil
}

type localObject struct {
	f    *os.File
	name string
	size int64
	id   string
}

// localIdentity names a file's bytes: its path, device and inode, size,
// and modification and change times (nanoseconds): a file rewritten in
// place or replaced by a rename gets another.
func localIdentity(path string, fi os.FileInfo) string {
	id := fmt.Sprintf("file:%s|%d|%d", path, fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id += fmt.Sprintf("|%d|%d|%d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return id
}

func (o *localObject) Identity() string { return o.id }

func (o *localObject) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := readBounds(o.name, o.size, len(p), off); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := o.f.ReadAt(p, off); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: storage: read %s at %d: the file shrank below %d bytes while open", errkind.Corrupt, o.name, off, o.size)
		}
		return mapErr("read", fmt.Sprintf("%s at %d", o.name, off), err)
	}
	return nil
}

func (o *localObject) Size() int64  { return o.size }
func (o *localObject) Close() error { return o.f.Close() }

func (l *Local) Create(ctx context.Context, name string) (Writer, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, mapErr("mkdir for", name, err)
	}
	tmp := filepath.Join(filepath.Dir(p), TempPrefix+uuid.NewString())
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, mapErr("create", name, err)
	}
	return &localWriter{f: f, tmp: tmp, final: p, name: name}, nil
}

type localWriter struct {
	f          *os.File
	tmp, final string
	name       string
	done       bool
	// written bytes, of which the first flushed were handed to the
	// kernel's writeback.
	written, flushed int64
}

// writebackEvery is how many written bytes start their writeback.
const writebackEvery = 8 << 20

func (w *localWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if err != nil {
		return n, mapErr("write", w.name, err)
	}
	if w.written-w.flushed >= writebackEvery {
		startWriteback(w.f, w.flushed, w.written-w.flushed)
		w.flushed = w.written
	}
	return n, nil
}

func (w *localWriter) Finish() error {
	if w.done {
		return fmt.Errorf("storage: %s: Finish after Finish or Abort", w.name)
	}
	w.done = true
	if w.written > w.flushed {
		startWriteback(w.f, w.flushed, w.written-w.flushed)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.tmp)
		return mapErr("close", w.name, err)
	}
	if err := os.Rename(w.tmp, w.final); err != nil {
		os.Remove(w.tmp)
		return mapErr("publish", w.name, err)
	}
	return nil
}

// Sync makes objects written with Create durable: their data and their
// directory entries reach the disk. Create does not sync on Finish (a merge
// output may never be committed: intermediate levels of a tree, cancelled
// runs); the commit syncs what it is about to reference. A writer hands
// every 8 MiB it writes to the kernel's writeback as it goes (Linux:
// sync_file_range, which does not wait), so that the disk writes while the
// merge computes and the commit's fsync finds little left.
func (l *Local) Sync(ctx context.Context, names []string) error {
	dirs := map[string]bool{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, err := l.path(name)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return mapErr("sync", name, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return mapErr("sync", name, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func (w *localWriter) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	os.Remove(w.tmp)
}

func (l *Local) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return mapErr("mkdir for", name, err)
	}
	// The temporary name must not start with "d" nor end with "manifest":
	// Lance would take such a file in _versions/ for a manifest.
	tmp := filepath.Join(dir, TempPrefix+uuid.NewString())
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return mapErr("create", name, err)
	}
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return mapErr("write", name, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return mapErr("sync", name, err)
	}
	if err := f.Close(); err != nil {
		return mapErr("close", name, err)
	}
	if err := os.Link(tmp, p); err != nil {
		return mapErr("publish", name, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return mapErr("open directory", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return mapErr("sync directory", dir, err)
	}
	return nil
}

func (l *Local) List(ctx context.Context, prefix string) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Walk from the deepest directory named by prefix, then filter by the
	// full prefix (which may end in a partial name).
	dirPart := prefix
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirPart = prefix[:i]
	} else {
		dirPart = ""
	}
	start := l.root
	if dirPart != "" {
		p, err := l.path(dirPart)
		if err != nil {
			return nil, err
		}
		start = p
	}
	var out []Entry
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		out = append(out, Entry{Name: name, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, mapErr("list", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (l *Local) Stat(ctx context.Context, name string) (Entry, error) {
	p, err := l.path(name)
	if err != nil {
		return Entry{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return Entry{}, mapErr("stat", name, err)
	}
	if st.IsDir() {
		return Entry{}, fmt.Errorf("%w: storage: %s is a directory", errkind.NotFound, name)
	}
	return Entry{Name: name, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// PruneDir removes the directory named by prefix (a "dir/" prefix) if it
// is empty: a writer killed between creating a segment's directory and
// its first file leaves one, and Delete only prunes after a file.
func (l *Local) PruneDir(ctx context.Context, prefix string) error {
	p, err := l.path(strings.TrimSuffix(prefix, "/"))
	if err != nil {
		return err
	}
	if p == l.root {
		return nil
	}
	_ = os.Remove(p) // fails, as it should, when the directory is not empty
	return nil
}

func (l *Local) Delete(ctx context.Context, name string) error {
	p, err := l.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return mapErr("delete", name, err)
	}
	// Remove directories left empty, up to the root, so that a deleted
	// segment leaves no empty _indices/<uuid>/ behind.
	for dir := filepath.Dir(p); dir != l.root && strings.HasPrefix(dir, l.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}
