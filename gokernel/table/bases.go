package table

import (
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// BaseStore returns the store holding files whose base_id is id: st (the
// dataset's own root) when id is nil.
func (s *Snapshot) BaseStore(st storage.Store, id *uint32) (storage.Store, error) {
	if id == nil {
		return st, nil
	}
	return nil, fmt.Errorf("%w: table: files under base path %d (shallow clones) are not supported", errkind.Unsupported, *id)
}
