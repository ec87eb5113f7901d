package table

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// Manifest footer: i64 manifest_pos, u16 major, u16 minor, "LANC". Part of
// the format; never change.
const (
	footerLen = 16
	magic     = "LANC"
	// Lance writes 0.2 in the manifest footer (the lance_file constants).
	footerMajor = 0
	footerMinor = 2
)

// maxManifestBytes bounds the manifest we read whole: 1M fragments with a
// few data files each stay well below this.
const maxManifestBytes = 1 << 30

// Feature flags, as Lance defines them. Part of the format.
const (
	FlagDeletionFiles         uint64 = 1
	FlagStableRowIDs          uint64 = 2
	FlagUseV2FormatDeprecated uint64 = 4
	FlagTableConfig           uint64 = 8
	FlagBasePaths             uint64 = 16
	FlagDisableTxnFile        uint64 = 32
	FlagDataOverlayFiles      uint64 = 64
	FlagCoveredIndexMetadata  uint64 = 128
	FlagMixedDataFileVersion  uint64 = 256
	// FlagSpilledRowLineage: some fragment keeps its row id (or row
	// version) sequence in a data file column instead of the manifest
	// (pylance 14 writes it as bit 11).
	FlagSpilledRowLineage uint64 = 1 << 11
)

// KnownReaderFlags are the reader feature flags under which this package can
// interpret a manifest's index section and fragment list. Any other bit means
// a Lance feature whose semantics we do not implement: refuse to read.
const KnownReaderFlags = FlagDeletionFiles | FlagStableRowIDs | FlagUseV2FormatDeprecated |
	FlagTableConfig | FlagBasePaths | FlagDisableTxnFile | FlagCoveredIndexMetadata | FlagMixedDataFileVersion |
	FlagSpilledRowLineage

// Snapshot is one dataset version: its manifest and index section.
type Snapshot struct {
	Ref      VersionRef
	Manifest *pb.Manifest
	// Indices is the index section, in manifest order (nil when absent),
	// with the cumulative fragment bitmaps of pylance 0.20 deltas resolved
	// (see resolveCumulativeCoverage).
	Indices []*pb.IndexMetadata
	// IndexSectionRaw is the index section's encoded bytes, kept so that
	// entries can be carried over byte for byte.
	IndexSectionRaw []byte
	// body is the manifest file without its footer (for the inline
	// transaction, read on demand).
	body []byte
	// bases opens and caches the stores of base paths (bases.go).
	bases *bases
}

// Open opens version v of the dataset in st (0 = the latest).
func Open(ctx context.Context, st storage.Store, v uint64) (*Snapshot, error) {
	ref, err := resolveVersion(ctx, st, v)
	if err != nil {
		return nil, err
	}
	data, err := storage.ReadAll(ctx, st, ref.Name, maxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("table: read version %d: %w", ref.Version, err)
	}
	snap, err := DecodeManifestFile(data)
	if err != nil {
		return nil, fmt.Errorf("table: %s version %d (%s): %w", st.URI(), ref.Version, ref.Name, err)
	}
	snap.Ref = ref
	if got := snap.Manifest.GetVersion(); got != ref.Version {
		return nil, fmt.Errorf("%w: table: %s holds version %d", errkind.Corrupt, ref.Name, got)
	}
	if unknown := snap.Manifest.GetReaderFeatureFlags() &^ KnownReaderFlags; unknown != 0 {
		return nil, fmt.Errorf("%w: table: %s version %d needs reader feature flags %#x that lance-segmerge does not know (flags %#x); upgrade lance-segmerge",
			errkind.Unsupported, st.URI(), ref.Version, unknown, snap.Manifest.GetReaderFeatureFlags())
	}
	return snap, nil
}

// DecodeManifestFile decodes a whole manifest file. It never panics on bad
// bytes; every failure is errkind.Corrupt.
func DecodeManifestFile(data []byte) (*Snapshot, error) {
	if len(data) < footerLen {
		return nil, fmt.Errorf("%w: manifest of %d bytes is shorter than its footer", errkind.Corrupt, len(data))
	}
	foot := data[len(data)-footerLen:]
	if string(foot[12:]) != magic {
		return nil, fmt.Errorf("%w: manifest footer magic %q, want %q", errkind.Corrupt, foot[12:], magic)
	}
	pos := int64(binary.LittleEndian.Uint64(foot[0:8]))
	body := int64(len(data) - footerLen)
	msg, err := section(data[:body], pos, "manifest")
	if err != nil {
		return nil, err
	}
	if pos+4+int64(len(msg)) != body {
		return nil, fmt.Errorf("%w: manifest message ends at %d, footer starts at %d", errkind.Corrupt, pos+4+int64(len(msg)), body)
	}
	m := &pb.Manifest{}
	if err := proto.Unmarshal(msg, m); err != nil {
		return nil, fmt.Errorf("%w: decode manifest: %w", errkind.Corrupt, err)
	}
	snap := &Snapshot{Manifest: m, body: data[:body]}
	if m.IndexSection != nil {
		raw, err := section(data[:body], int64(m.GetIndexSection()), "index section")
		if err != nil {
			return nil, err
		}
		sec := &pb.IndexSection{}
		if err := proto.Unmarshal(raw, sec); err != nil {
			return nil, fmt.Errorf("%w: decode index section: %w", errkind.Corrupt, err)
		}
		for i, im := range sec.GetIndices() {
			if len(im.GetUuid().GetUuid()) != 16 {
				return nil, fmt.Errorf("%w: index entry %d (%q) has a %d-byte uuid", errkind.Corrupt, i, im.GetName(), len(im.GetUuid().GetUuid()))
			}
		}
		snap.Indices = sec.GetIndices()
		resolveCumulativeCoverage(snap.Indices)
		snap.IndexSectionRaw = raw
	}
	return snap, nil
}

// section returns the length-prefixed protobuf at pos.
func section(data []byte, pos int64, what string) ([]byte, error) {
	if pos < 0 || pos+4 > int64(len(data)) {
		return nil, fmt.Errorf("%w: %s offset %d outside the %d-byte manifest body", errkind.Corrupt, what, pos, len(data))
	}
	n := int64(binary.LittleEndian.Uint32(data[pos:]))
	if pos+4+n > int64(len(data)) {
		return nil, fmt.Errorf("%w: %s of %d bytes at %d runs past the manifest body (%d bytes)", errkind.Corrupt, what, n, pos, len(data))
	}
	return data[pos+4 : pos+4+n], nil
}

// EncodeManifestFile lays out a manifest file: the index section (when
// indices is non-nil), the transaction (when txn is non-nil), the manifest,
// the footer. It sets m.IndexSection and m.TransactionSection to the
// offsets in this file (clearing them when a section is absent), so an
// offset inherited from another file can never leak through.
func EncodeManifestFile(m *pb.Manifest, indices []*pb.IndexMetadata, txn *pb.Transaction) ([]byte, error) {
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	appendSection := func(msg proto.Message) (uint64, error) {
		b, err := opts.Marshal(msg)
		if err != nil {
			return 0, err
		}
		if uint64(len(b)) > math.MaxUint32 {
			return 0, fmt.Errorf("%w: section of %d bytes", errkind.InvalidInput, len(b))
		}
		pos := uint64(len(buf))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(b)))
		buf = append(buf, b...)
		return pos, nil
	}
	m = proto.Clone(m).(*pb.Manifest)
	m.IndexSection, m.TransactionSection, m.TransactionSectionLegacy = nil, nil, nil
	if indices != nil {
		pos, err := appendSection(&pb.IndexSection{Indices: indices})
		if err != nil {
			return nil, fmt.Errorf("table: encode index section: %w", err)
		}
		m.IndexSection = &pos
	}
	if txn != nil {
		pos, err := appendSection(txn)
		if err != nil {
			return nil, fmt.Errorf("table: encode transaction: %w", err)
		}
		m.TransactionSection = &pos
	}
	pos, err := appendSection(m)
	if err != nil {
		return nil, fmt.Errorf("table: encode manifest: %w", err)
	}
	buf = binary.LittleEndian.AppendUint64(buf, pos)
	buf = binary.LittleEndian.AppendUint16(buf, footerMajor)
	buf = binary.LittleEndian.AppendUint16(buf, footerMinor)
	return append(buf, magic...), nil
}
