// Package storage is the object-store boundary of the kernel: ranged reads,
// streaming writes, create-if-absent, list and delete, over names that are
// slash-separated paths relative to a dataset root ("_versions/1.manifest").
//
// Backends: Local (a directory on the local filesystem), Mem (in memory,
// for tests), S3, GCS and Azure (object stores, rest.go for the last two). The interface is shaped for object stores such as S3: reads are
// ranged and stateless, a write becomes visible only when Finish returns, and
// PutIfAbsent is the only primitive that arbitrates between concurrent
// writers.
//
//	st, err := storage.Open(ctx, "/data/t.lance", nil)
//	obj, err := st.Open(ctx, "_versions/1.manifest") // then: defer obj.Close()
//	err = obj.ReadAt(ctx, buf, obj.Size()-16)
//
// Concurrency: a Store and an Object are safe for concurrent use. A Writer is
// not; exactly one of Finish or Abort must be called on it.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
)

// Store is an object store rooted at a dataset directory.
type Store interface {
	// Open opens an existing object for ranged reads. errkind.NotFound if the
	// object does not exist.
	Open(ctx context.Context, name string) (Object, error)
	// Create starts writing an object. The object becomes visible under name
	// only when Writer.Finish returns nil; Abort leaves no trace. An existing
	// object of that name is replaced on Finish. Durability may need Sync.
	Create(ctx context.Context, name string) (Writer, error)
	// Sync makes objects written with Create durable. Object stores whose
	// writes are durable when they return (S3) do nothing.
	Sync(ctx context.Context, names []string) error
	// PutIfAbsent publishes data under name atomically, and fails with
	// errkind.Conflict when name already exists. Readers never see a partial
	// object.
	PutIfAbsent(ctx context.Context, name string, data []byte) error
	// List returns every object whose name starts with prefix, recursively,
	// sorted by name. A missing prefix gives an empty list, not an error.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Stat describes one object. errkind.NotFound if it does not exist.
	Stat(ctx context.Context, name string) (Entry, error)
	// Delete removes an object. Deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error
	// URI is the root of the store, as the user gave it, with any
	// userinfo masked (RedactURI): for messages.
	URI() string
}

// Object is an open, immutable object.
type Object interface {
	// ReadAt fills p with the bytes at off, or fails: there are no partial
	// reads. Reading past Size is errkind.Corrupt (the caller trusted a
	// length that the object does not have). Safe for concurrent use.
	ReadAt(ctx context.Context, p []byte, off int64) error
	// Size is the object's length in bytes.
	Size() int64
	Close() error
}

// Writer streams a new object.
type Writer interface {
	io.Writer
	// Finish makes the object durable and visible under its name.
	Finish() error
	// Abort discards everything written. Safe to call after Finish (no-op).
	Abort()
}

// CountingWriter counts the bytes written through it (a file's size as
// it is written, for the manifest's file list).
type CountingWriter struct {
	W io.Writer
	N int64
}

func (c *CountingWriter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

// DirPruner is a store with real directories (local files): PruneDir
// removes the directory of a "dir/" prefix when it holds nothing.
type DirPruner interface {
	PruneDir(ctx context.Context, prefix string) error
}

// TempPrefix starts the names of the temporary objects a backend writes
// before publishing (a crashed writer can leave them behind). List returns
// them, so that cleanup can remove them; IsTemp tells them apart.
const TempPrefix = ".tmp-"

// IsTemp reports whether an object name is a backend's temporary object.
func IsTemp(name string) bool {
	return strings.HasPrefix(name[strings.LastIndex(name, "/")+1:], TempPrefix)
}

// Entry describes a stored object.
type Entry struct {
	Name    string
	Size    int64
	ModTime time.Time
	// ETag is the object store's version tag of the object (S3 and Azure
	// ETag, GCS generation), when Stat returns one; "" otherwise.
	ETag string
}

// Open returns the store for a dataset URI: a local path, a file:// URI,
// s3://, gs://, az://, or memory://name (a process-wide in-memory store, for
// tests). options holds backend settings (the storage_options of pylance);
// local and memory stores take none.
func Open(ctx context.Context, uri string, options map[string]string) (Store, error) {
	if uri == "" {
		return nil, fmt.Errorf("%w: storage: empty dataset URI", errkind.InvalidInput)
	}
	shown := RedactURI(uri) // what messages and Store.URI show
	scheme, rest := "", uri
	if i := strings.Index(uri, "://"); i > 0 {
		scheme, rest = strings.ToLower(uri[:i]), uri[i+3:]
	}
	switch scheme {
	case "", "file":
		if scheme == "file" {
			u, err := url.Parse(uri)
			if err != nil {
				return nil, fmt.Errorf("%w: storage: bad URI %q", errkind.InvalidInput, shown)
			}
			rest = u.Path
		}
		abs, err := filepath.Abs(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: storage: %q: %w", errkind.InvalidInput, shown, err)
		}
		return NewLocal(abs, shown), nil
	case "memory":
		return memStore(rest), nil
	case "s3", "s3a":
		cfg, err := ParseS3Options(options)
		if err != nil {
			return nil, err
		}
		return NewS3(uri, cfg)
	case "gs":
		cfg, err := ParseGCSOptions(options)
		if err != nil {
			return nil, err
		}
		return NewGCS(uri, cfg)
	case "az":
		cfg, err := ParseAzureOptions(options)
		if err != nil {
			return nil, err
		}
		return NewAzure(uri, cfg)
	case "abfs", "abfss", "azure", "adl":
		return nil, fmt.Errorf("%w: storage: %s:// URIs are not opened by pylance either; write az://container/path "+
			"or az://container@account.dfs.core.windows.net/path", errkind.Unsupported, scheme)
	case "gcs":
		return nil, fmt.Errorf("%w: storage: gcs:// URIs are not opened by pylance either; write gs://bucket/path", errkind.Unsupported)
	case "s3+ddb":
		return nil, fmt.Errorf("%w: storage: %s is committed through an external manifest store (DynamoDB), which lance-segmerge does not write to: "+
			"a version published without it would be missed by, or collide with, pylance's writers. Plan and merge on the dataset's plain s3:// URI, "+
			"then commit the merged segments with pylance on the s3+ddb:// URI: "+
			"lance.dataset(uri).commit_existing_index_segments(index, column, [seg.to_lance_index() for seg in merged])",
			errkind.Unsupported, uri)
	default:
		return nil, fmt.Errorf("%w: storage: unknown URI scheme %q in %q", errkind.InvalidInput, scheme, shown)
	}
}

// RedactURI masks the userinfo of a URI ("s3://KEY:SECRET@bucket/t.lance"
// is "s3://***@bucket/t.lance"), for every message, log and plan that
// names a dataset: a URI may carry credentials, which must not leak.
// Anything without userinfo is returned unchanged.
func RedactURI(uri string) string {
	i := strings.Index(uri, "://")
	if i < 0 {
		return uri
	}
	rest := uri[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return uri
	}
	return uri[:i+3] + "***" + rest[at:]
}

// ReadAll reads a whole small object (a manifest, a transaction file). limit
// bounds the size accepted, so a corrupt or hostile store cannot make us
// allocate without bound.
func ReadAll(ctx context.Context, st Store, name string, limit int64) ([]byte, error) {
	obj, err := st.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	if obj.Size() > limit {
		return nil, fmt.Errorf("%w: storage: %s is %d bytes, above the %d-byte limit", errkind.Corrupt, name, obj.Size(), limit)
	}
	buf := make([]byte, obj.Size())
	if err := obj.ReadAt(ctx, buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// Put writes a whole object (replacing any existing one) through Create.
func Put(ctx context.Context, st Store, name string, data []byte) error {
	w, err := st.Create(ctx, name)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return err
	}
	return w.Finish()
}

// joinErrors reports every problem found in a set of options at once; each
// keeps its kind.
func joinErrors(errs []error) error { return errors.Join(errs...) }

func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") {
		return fmt.Errorf("%w: storage: bad object name %q", errkind.InvalidInput, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." || part == "." {
			return fmt.Errorf("%w: storage: bad object name %q", errkind.InvalidInput, name)
		}
	}
	return nil
}

func readBounds(name string, size int64, n int, off int64) error {
	if off < 0 || off+int64(n) > size {
		return fmt.Errorf("%w: storage: %s: read [%d,+%d) outside object of %d bytes", errkind.Corrupt, name, off, n, size)
	}
	return nil
}

// Identified is implemented by objects that can name the exact version of
// their bytes: an opened object whose Identity equals another's holds the
// same bytes (a local file's path, device, inode, size and modification
// and change times; an object store's endpoint, bucket, key and ETag or
// generation). Caches of what was decoded from a file (ivf's segment
// cache) key on it, so that a file replaced under the same name is never
// served from an old entry.
type Identified interface {
	// Identity is "" when the backend cannot tell (then nothing is cached).
	Identity() string
}

// ObjectIdentity returns o's Identity, or "" when o does not have one
// (wrappers, test doubles): callers must then not cache by it.
func ObjectIdentity(o Object) string {
	if id, ok := o.(Identified); ok {
		return id.Identity()
	}
	return ""
}

// Concurrent is implemented by stores that say how many requests a
// caller should keep in flight to use them well: a local disk serves a
// few reads at a time from the page cache or its queue; an object store
// answers each request after a round trip, so throughput comes from many
// requests at once (Lance keeps 64 in flight for cloud stores).
type Concurrent interface {
	Concurrency() int
}

// Concurrency is st's hint (see Concurrent), or def when it has none.
func Concurrency(st Store, def int) int {
	if c, ok := st.(Concurrent); ok && c.Concurrency() > 0 {
		return c.Concurrency()
	}
	return def
}

// RemoteConcurrency is the requests in flight the object stores (S3, GCS,
// Azure) ask for, as Lance does for cloud stores.
const RemoteConcurrency = 64

// remotePartBytes splits a large ranged read of an object store into
// concurrent requests of about this size: one request's throughput is
// bound by one connection (and, through a proxy or across regions, by its
// round trip), several in flight are not.
const remotePartBytes = 8 << 20

// maxPartsInFlight bounds the concurrent requests of one split read.
const maxPartsInFlight = 8

// splitRead fills p from off with read, in concurrent parts of at most
// remotePartBytes when p is larger than that.
func splitRead(ctx context.Context, p []byte, off int64, read func(ctx context.Context, p []byte, off int64) error) error {
	if len(p) <= remotePartBytes {
		return read(ctx, p, off)
	}
	n := (len(p) + remotePartBytes - 1) / remotePartBytes
	part := (len(p) + n - 1) / n
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, maxPartsInFlight)
	errs := make(chan error, n)
	for lo := 0; lo < len(p); lo += part {
		hi := min(lo+part, len(p))
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := read(ctx, p[lo:hi], off+int64(lo))
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return first
}
