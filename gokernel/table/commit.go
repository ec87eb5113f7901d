package table

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// TransactionsDir holds one transaction file per commit attempt. Part of
// the format.
const TransactionsDir = "_transactions/"

// versionHint is the latest-version hint Lance keeps on stores whose
// listings are not ordered (the local filesystem). Part of the format.
const versionHint = VersionsDir + "latest_version_hint.json"

// maxTransactionBytes bounds a transaction file we read.
const maxTransactionBytes = 1 << 30

// KnownWriterFlags are the writer feature flags whose meaning a commit that
// only changes the index section preserves by carrying the manifest over.
// Any other bit names a feature a writer must understand: refuse.
const KnownWriterFlags = FlagDeletionFiles | FlagStableRowIDs | FlagUseV2FormatDeprecated |
	FlagTableConfig | FlagBasePaths | FlagDisableTxnFile | FlagCoveredIndexMetadata | FlagMixedDataFileVersion |
	FlagSpilledRowLineage

// Transaction reads the transaction that produced this version: the inline
// section of its manifest, else the .txn file it names. errkind.NotFound
// when it has neither (concurrent writers cannot check conflicts then).
func (s *Snapshot) Transaction(ctx context.Context, st storage.Store) (*pb.Transaction, error) {
	body := s.body
	pos := s.Manifest.TransactionSection
	if pos == nil {
		pos = s.Manifest.TransactionSectionLegacy
	}
	var raw []byte
	var err error
	if pos != nil {
		if raw, err = section(body, int64(*pos), "transaction section"); err != nil {
			return nil, fmt.Errorf("table: version %d: %w", s.Ref.Version, err)
		}
	} else if name := s.Manifest.GetTransactionFile(); name != "" {
		if raw, err = storage.ReadAll(ctx, st, TransactionsDir+name, maxTransactionBytes); err != nil {
			return nil, fmt.Errorf("table: version %d transaction: %w", s.Ref.Version, err)
		}
	} else {
		return nil, fmt.Errorf("%w: table: version %d has no transaction", errkind.NotFound, s.Ref.Version)
	}
	t := &pb.Transaction{}
	if err := proto.Unmarshal(raw, t); err != nil {
		return nil, fmt.Errorf("%w: table: version %d transaction: %w", errkind.Corrupt, s.Ref.Version, err)
	}
	return t, nil
}

// Publish writes version m.Version of the dataset: the transaction file
// (when name is non-empty), then the manifest file, created only if absent
// (errkind.Conflict when another writer published that version first), then
// the latest-version hint if the dataset keeps one. The manifest is written
// in the naming scheme of the dataset.
func Publish(ctx context.Context, st storage.Store, scheme Scheme, m *pb.Manifest, indices []*pb.IndexMetadata, txn *pb.Transaction) error {
	txnBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
	if err != nil {
		return fmt.Errorf("table: encode transaction: %w", err)
	}
	if name := m.GetTransactionFile(); name != "" {
		if strings.ContainsAny(name, "/\\") {
			return fmt.Errorf("%w: table: transaction file name %q", errkind.InvalidInput, name)
		}
		if err := storage.Put(ctx, st, TransactionsDir+name, txnBytes); err != nil {
			return fmt.Errorf("table: write transaction: %w", err)
		}
	}
	file, err := EncodeManifestFile(m, indices, txn)
	if err != nil {
		return err
	}
	name := ManifestName(scheme, m.GetVersion())
	if err := st.PutIfAbsent(ctx, name, file); err != nil {
		return fmt.Errorf("table: publish version %d: %w", m.GetVersion(), err)
	}
	updateHint(ctx, st, m.GetVersion())
	return nil
}

// updateHint rewrites _versions/latest_version_hint.json when the dataset
// has one. It is only a hint (readers probe upward from it), so failures
// are ignored, and it never moves backwards.
func updateHint(ctx context.Context, st storage.Store, v uint64) {
	raw, err := storage.ReadAll(ctx, st, versionHint, 1<<10)
	if err != nil {
		return
	}
	var hint struct {
		Version uint64 `json:"version"`
	}
	if json.Unmarshal(raw, &hint) == nil && hint.Version >= v {
		return
	}
	_ = storage.Put(ctx, st, versionHint, []byte(fmt.Sprintf(`{"version":%d}`, v)))
}
