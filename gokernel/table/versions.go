package table

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Scheme is a manifest naming scheme.
type Scheme int

const (
	// SchemeV1 names version v "_versions/{v}.manifest".
	SchemeV1 Scheme = 1
	// SchemeV2 names version v "_versions/{2^64-1-v, 20 digits}.manifest".
	SchemeV2 Scheme = 2
)

func (s Scheme) String() string {
	switch s {
	case SchemeV1:
		return "V1"
	case SchemeV2:
		return "V2"
	}
	return fmt.Sprintf("Scheme(%d)", int(s))
}

// VersionsDir is where manifests live. Part of the format.
const VersionsDir = "_versions/"

// v2NameLen is 20 digits + ".manifest". Part of the format.
const v2NameLen = 20 + len(".manifest")

// ManifestName is the object name of version v under scheme s.
func ManifestName(s Scheme, v uint64) string {
	if s == SchemeV2 {
		return fmt.Sprintf("%s%020d.manifest", VersionsDir, math.MaxUint64-v)
	}
	return fmt.Sprintf("%s%d.manifest", VersionsDir, v)
}

// ParseManifestName parses the base name of a file in _versions/. ok is false
// for anything that is not a lineage manifest (detached versions, temporary
// files, the version hint).
func ParseManifestName(base string) (v uint64, s Scheme, ok bool) {
	if !strings.HasSuffix(base, ".manifest") || strings.HasPrefix(base, "d") {
		return 0, 0, false
	}
	digits := strings.TrimSuffix(base, ".manifest")
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || digits == "" || digits[0] == '+' {
		return 0, 0, false
	}
	if len(base) == v2NameLen {
		return math.MaxUint64 - n, SchemeV2, true
	}
	return n, SchemeV1, true
}

// VersionRef locates one manifest.
type VersionRef struct {
	Version uint64
	Scheme  Scheme
	Name    string // object name, e.g. "_versions/3.manifest"
	Size    int64
}

// ListVersions lists the lineage versions of a dataset, oldest first.
// errkind.NotFound when there are none (the path is not a dataset);
// errkind.Corrupt when both naming schemes are present, which Lance refuses.
func ListVersions(ctx context.Context, st storage.Store) ([]VersionRef, error) {
	entries, err := st.List(ctx, VersionsDir)
	if errors.Is(err, errkind.NotFound) {
		return nil, fmt.Errorf("%w: table: %s is not a Lance dataset (%v)", errkind.NotFound, st.URI(), err)
	}
	if err != nil {
		return nil, err
	}
	var out []VersionRef
	schemes := map[Scheme]bool{}
	for _, e := range entries {
		base := strings.TrimPrefix(e.Name, VersionsDir)
		if strings.Contains(base, "/") {
			continue
		}
		v, s, ok := ParseManifestName(base)
		if !ok {
			continue
		}
		schemes[s] = true
		out = append(out, VersionRef{Version: v, Scheme: s, Name: e.Name, Size: e.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: table: %s is not a Lance dataset (no manifest under %s)", errkind.NotFound, st.URI(), VersionsDir)
	}
	if len(schemes) > 1 {
		return nil, fmt.Errorf("%w: table: %s mixes V1 and V2 manifest names", errkind.Corrupt, st.URI())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// resolveVersion finds version v (0 = the latest).
func resolveVersion(ctx context.Context, st storage.Store, v uint64) (VersionRef, error) {
	if v != 0 {
		// Cheap path for a pinned version: try both names, as Lance does.
		for _, s := range []Scheme{SchemeV2, SchemeV1} {
			name := ManifestName(s, v)
			if e, err := st.Stat(ctx, name); err == nil {
				return VersionRef{Version: v, Scheme: s, Name: name, Size: e.Size}, nil
			}
		}
	}
	refs, err := ListVersions(ctx, st)
	if err != nil {
		return VersionRef{}, err
	}
	if v == 0 {
		return refs[len(refs)-1], nil
	}
	return VersionRef{}, fmt.Errorf("%w: table: %s has no version %d (latest is %d)", errkind.NotFound, st.URI(), v, refs[len(refs)-1].Version)
}
