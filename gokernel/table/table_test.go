package table

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// compatDir is testdata/lance-compat at the repository root: datasets
// written by old Lance releases (see its README).
func compatDir(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "lance-compat")
}

func TestParseManifestName(t *testing.T) {
	for _, tc := range []struct {
		base   string
		v      uint64
		scheme Scheme
		ok     bool
	}{
		{"1.manifest", 1, SchemeV1, true},
		{"42.manifest", 42, SchemeV1, true},
		{"18446744073709551614.manifest", 1, SchemeV2, true},
		{"18446744073709551605.manifest", 10, SchemeV2, true},
		{"d9223372036854775809.manifest", 0, 0, false}, // detached
		{"latest_version_hint.json", 0, 0, false},
		{".tmp-abc", 0, 0, false},
		{"x.manifest", 0, 0, false},
		{".manifest", 0, 0, false},
		{"+1.manifest", 0, 0, false},
		{"1.manifest#1", 0, 0, false},
	} {
		t.Run(tc.base, func(t *testing.T) {
			v, s, ok := ParseManifestName(tc.base)
			if ok != tc.ok || v != tc.v || s != tc.scheme {
				t.Fatalf("ParseManifestName(%q) = %d %v %v, want %d %v %v", tc.base, v, s, ok, tc.v, tc.scheme, tc.ok)
			}
		})
	}
	for _, s := range []Scheme{SchemeV1, SchemeV2} {
		for _, v := range []uint64{1, 2, 10, 1 << 40} {
			name := ManifestName(s, v)
			got, gs, ok := ParseManifestName(filepath.Base(name))
			if !ok || got != v || gs != s {
				t.Fatalf("round trip of %s: %d %v %v", name, got, gs, ok)
			}
		}
	}
}

func TestOpenCompatFixtures(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		dir       string
		uuid      string
		createdAt bool
	}{
		{"v0.27.1/pq_in_schema", "14a2a13d-1c6f-400c-b59c-8e2d10b9b68b", false},
		{"v0.30.0_pre_created_at/index_without_created_at", "37929a30-7178-4a99-bcca-2eaaa3b08b46", false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			dir := filepath.Join(compatDir(t), tc.dir)
			st := storage.NewLocal(dir, dir)
			refs, err := ListVersions(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if len(refs) != 2 || refs[0].Version != 1 || refs[1].Version != 2 || refs[0].Scheme != SchemeV1 {
				t.Fatalf("versions: %+v", refs)
			}
			snap, err := Open(ctx, st, 0)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Ref.Version != 2 || len(snap.Indices) != 1 {
				t.Fatalf("latest: v%d with %d indices", snap.Ref.Version, len(snap.Indices))
			}
			im := snap.Indices[0]
			if IndexUUID(im) != tc.uuid || im.GetName() != "vec_idx" {
				t.Fatalf("index %s %q", IndexUUID(im), im.GetName())
			}
			if (im.CreatedAt != nil) != tc.createdAt {
				t.Fatalf("created_at present = %v", im.CreatedAt != nil)
			}
			ids, ok, err := DecodeFragmentBitmap(im.GetFragmentBitmap())
			if err != nil || !ok || len(ids) != 1 || ids[0] != 0 {
				t.Fatalf("bitmap %v %v %v", ids, ok, err)
			}
			if got := snap.FieldPath(im.GetFields()[0]); got != "vec" {
				t.Fatalf("indexed field %q", got)
			}
			old, err := Open(ctx, st, 1)
			if err != nil || old.Ref.Version != 1 || len(old.Indices) != 0 {
				t.Fatalf("version 1: %+v %v", old, err)
			}
			if _, err := Open(ctx, st, 3); !errors.Is(err, errkind.NotFound) {
				t.Fatalf("version 3: %v", err)
			}
		})
	}
}

func fixtureManifest(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(compatDir(t), "v0.27.1", "pq_in_schema", "_versions", "2.manifest"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeRoundTrip(t *testing.T) {
	snap, err := DecodeManifestFile(fixtureManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	txn := &pb.Transaction{ReadVersion: 2, Uuid: "u", Operation: &pb.Transaction_CreateIndex_{CreateIndex: &pb.Transaction_CreateIndex{NewIndices: snap.Indices}}}
	b, err := EncodeManifestFile(snap.Manifest, snap.Indices, txn)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeManifestFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest.GetIndexSection() != 0 || again.Manifest.TransactionSection == nil {
		t.Fatalf("section offsets: index %v txn %v", again.Manifest.IndexSection, again.Manifest.TransactionSection)
	}
	again.Manifest.IndexSection, again.Manifest.TransactionSection = snap.Manifest.IndexSection, snap.Manifest.TransactionSection
	if !proto.Equal(again.Manifest, snap.Manifest) {
		t.Fatal("manifest changed in a round trip")
	}
	if len(again.Indices) != 1 || !proto.Equal(again.Indices[0], snap.Indices[0]) {
		t.Fatal("index section changed in a round trip")
	}
	// Unknown fields survive: add one to the manifest and an index entry.
	m := proto.Clone(snap.Manifest).(*pb.Manifest)
	m.ProtoReflect().SetUnknown([]byte{0x98, 0x06, 0x07}) // field 99, varint 7
	im := proto.Clone(snap.Indices[0]).(*pb.IndexMetadata)
	im.ProtoReflect().SetUnknown([]byte{0xf8, 0x03, 0x01}) // field 63, varint 1
	b, err = EncodeManifestFile(m, []*pb.IndexMetadata{im}, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err = DecodeManifestFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Manifest.ProtoReflect().GetUnknown()) != "\x98\x06\x07" || string(again.Indices[0].ProtoReflect().GetUnknown()) != "\xf8\x03\x01" {
		t.Fatal("unknown fields were dropped")
	}
	if again.Manifest.TransactionSection != nil {
		t.Fatal("a stale transaction offset leaked into a file without a transaction")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good := fixtureManifest(t)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"short", good[:10]},
		{"truncated", good[len(good)/2:]},
		{"no footer", good[:len(good)-16]},
		{"bad magic", mutate(func(b []byte) []byte { b[len(b)-1] = 'X'; return b })},
		{"pos past end", mutate(func(b []byte) []byte { b[len(b)-16] = 0xff; b[len(b)-15] = 0xff; return b })},
		{"pos negative", mutate(func(b []byte) []byte {
			for i := 9; i <= 16; i++ {
				b[len(b)-i] = 0xff
			}
			return b
		})},
		{"length lies", mutate(func(b []byte) []byte {
			pos := int(b[len(b)-16]) | int(b[len(b)-15])<<8
			b[pos]++
			return b
		})},
		{"garbage message", mutate(func(b []byte) []byte {
			pos := int(b[len(b)-16]) | int(b[len(b)-15])<<8
			for i := pos + 4; i < len(b)-16; i++ {
				b[i] = 0xff
			}
			return b
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeManifestFile(tc.data); !errors.Is(err, errkind.Corrupt) {
				t.Fatalf("got %v, want a corrupt error", err)
			}
		})
	}
}

func TestUnknownReaderFlagRefused(t *testing.T) {
	ctx := context.Background()
	snap, err := DecodeManifestFile(fixtureManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags uint64
		kind  error
	}{
		{FlagDeletionFiles | FlagStableRowIDs, nil},
		{1 << 20, errkind.Unsupported},
		{FlagDataOverlayFiles, errkind.Unsupported},
		{4096, errkind.Unsupported},
	} {
		st := storage.NewMem("memory://flags")
		m := proto.Clone(snap.Manifest).(*pb.Manifest)
		m.ReaderFeatureFlags = tc.flags
		b, err := EncodeManifestFile(m, snap.Indices, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, ManifestName(SchemeV1, m.GetVersion()), b); err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, st, 0)
		if tc.kind == nil && err != nil || tc.kind != nil && !errors.Is(err, tc.kind) {
			t.Fatalf("flags %#x: got %v, want %v", tc.flags, err, tc.kind)
		}
	}
}

func TestListVersionsErrors(t *testing.T) {
	ctx := context.Background()
	st := storage.NewMem("memory://x")
	if _, err := ListVersions(ctx, st); !errors.Is(err, errkind.NotFound) {
		t.Fatalf("empty store: %v", err)
	}
	storage.Put(ctx, st, "_versions/1.manifest", fixtureManifest(t))
	storage.Put(ctx, st, ManifestName(SchemeV2, 2), fixtureManifest(t))
	if _, err := ListVersions(ctx, st); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("mixed schemes: %v", err)
	}
	// A manifest whose content disagrees with its name is corrupt.
	st = storage.NewMem("memory://y")
	storage.Put(ctx, st, "_versions/7.manifest", fixtureManifest(t))
	if _, err := Open(ctx, st, 0); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("version mismatch: %v", err)
	}
}

func TestFragmentBitmap(t *testing.T) {
	for _, ids := range [][]uint32{{}, {0}, {1, 2, 3}, {0, 70000, 1 << 31}} {
		b, err := EncodeFragmentBitmap(ids)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != 0x3a || b[1] != 0x30 {
			t.Fatalf("cookie %x, want 12346 (no run containers)", b[:2])
		}
		got, ok, err := DecodeFragmentBitmap(b)
		if err != nil || !ok || len(got) != len(ids) {
			t.Fatalf("%v: %v %v %v", ids, got, ok, err)
		}
	}
	// Lance 14 writes run containers (cookie 12347) after optimize().
	// cookie 12347 + size-1 | run flags | key, card-1 | 1 run: start 0, length-1 9
	runs := []byte{0x3b, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00}
	got, ok, err := DecodeFragmentBitmap(runs)
	if err != nil || !ok || len(got) != 10 || got[9] != 9 {
		t.Fatalf("run container: %v %v %v", got, ok, err)
	}
	if _, ok, err := DecodeFragmentBitmap(nil); ok || err != nil {
		t.Fatal("empty bytes must mean unknown coverage")
	}
	for _, bad := range [][]byte{{1, 2, 3}, {0x3a, 0x30, 0, 0, 5, 0, 0, 0}, append(runs, 0)} {
		if _, _, err := DecodeFragmentBitmap(bad); !errors.Is(err, errkind.Corrupt) {
			t.Fatalf("%x: %v", bad, err)
		}
	}
}
