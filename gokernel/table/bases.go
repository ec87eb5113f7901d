package table

import (
	"context"
	"fmt"
	"sync"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Base paths. A manifest may list other roots (Manifest.base_paths) that
// hold some of its files: a shallow clone (pylance's shallow_clone) points
// every data file, deletion file and index segment of the source version
// at the source dataset's root (a base path with is_dataset_root set) and
// writes only new files under its own root. A file or index entry with a
// base_id lives under that base; without one, under the dataset's root.

// Opener opens the store of another root (a base path's URI) with the same
// settings (storage options) as the dataset's own store.
type Opener func(ctx context.Context, uri string) (storage.Store, error)

// bases caches the stores of a snapshot's base paths.
type bases struct {
	mu     sync.Mutex
	open   Opener
	stores map[uint32]storage.Store
}

// SetOpener sets how base paths are opened (the default opens them with no
// storage options). Set it before the snapshot is shared between
// goroutines.
func (s *Snapshot) SetOpener(open Opener) {
	s.bases = &bases{open: open}
}

// basePath returns the base path with the given id.
func (s *Snapshot) basePath(id uint32) (*pb.BasePath, error) {
	for _, bp := range s.Manifest.GetBasePaths() {
		if bp.GetId() == id {
			return bp, nil
		}
	}
	return nil, fmt.Errorf("%w: table: version %d refers to base path %d, which its manifest does not list", errkind.Corrupt, s.Ref.Version, id)
}

// BaseStore returns the store of the root that holds files whose base_id is
// id: st (the dataset's own root) when id is nil; else the base path's
// root, which must be a dataset root (a base path that is a bare file
// directory holds imported data files only).
func (s *Snapshot) BaseStore(ctx context.Context, st storage.Store, id *uint32) (storage.Store, error) {
	if id == nil {
		return st, nil
	}
	bp, err := s.basePath(*id)
	if err != nil {
		return nil, err
	}
	if !bp.GetIsDatasetRoot() {
		return nil, fmt.Errorf("%w: table: base path %d (%s) is a file directory, not a dataset root", errkind.Unsupported, *id, bp.GetPath())
	}
	return s.baseStore(ctx, *id, bp.GetPath())
}

func (s *Snapshot) baseStore(ctx context.Context, id uint32, uri string) (storage.Store, error) {
	if s.bases == nil {
		s.bases = &bases{}
	}
	b := s.bases
	b.mu.Lock()
	defer b.mu.Unlock()
	if st, ok := b.stores[id]; ok {
		return st, nil
	}
	open := b.open
	if open == nil {
		open = func(ctx context.Context, uri string) (storage.Store, error) { return storage.Open(ctx, uri, nil) }
	}
	st, err := open(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("table: base path %d (%s): %w", id, uri, err)
	}
	if b.stores == nil {
		b.stores = map[uint32]storage.Store{}
	}
	b.stores[id] = st
	return st, nil
}

// DataFileStore returns the store and the name of a fragment's data file:
// data/<path> under the dataset root or its base path, or <path> directly
// under a base path that is a file directory.
func (s *Snapshot) DataFileStore(ctx context.Context, st storage.Store, df *pb.DataFile) (storage.Store, string, error) {
	if df.BaseId == nil {
		return st, DataDir + df.GetPath(), nil
	}
	bp, err := s.basePath(df.GetBaseId())
	if err != nil {
		return nil, "", err
	}
	bst, err := s.baseStore(ctx, df.GetBaseId(), bp.GetPath())
	if err != nil {
		return nil, "", err
	}
	if bp.GetIsDatasetRoot() {
		return bst, DataDir + df.GetPath(), nil
	}
	return bst, df.GetPath(), nil
}

// IndexStore returns the store that holds an index segment's directory
// (IndexDir): the dataset's own root, or the base path the entry names.
func (s *Snapshot) IndexStore(ctx context.Context, st storage.Store, im *pb.IndexMetadata) (storage.Store, error) {
	st, err := s.BaseStore(ctx, st, im.BaseId)
	if err != nil {
		return nil, fmt.Errorf("segment %s: %w", IndexUUID(im), err)
	}
	return st, nil
}
