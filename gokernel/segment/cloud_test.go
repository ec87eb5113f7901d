package segment

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/cloudtest"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/s3test"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// cloudStore opens a GCS or Azure store on its emulator through
// storage.Open and pylance-style options, reached at base (the emulator,
// or a proxy in front of it).
type cloudStore struct {
	name   string
	target func(t *testing.T) string
	open   func(t *testing.T, base, prefix string, retries string) storage.Store
}

func cloudStores() []cloudStore {
	open := func(t *testing.T, uri string, opts map[string]string) storage.Store {
		st, err := storage.Open(context.Background(), uri, opts)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	return []cloudStore{
		{
			name:   "gcs",
			target: func(t *testing.T) string { base, _ := cloudtest.GCS(t); return base },
			open: func(t *testing.T, base, prefix, retries string) storage.Store {
				_, bucket := cloudtest.GCS(t)
				sa, _ := json.Marshal(map[string]any{"gcs_base_url": base, "disable_oauth": true,
					"client_email": "", "private_key": "", "private_key_id": ""})
				return open(t, "gs://"+bucket+"/"+prefix+"/ds.lance", map[string]string{
					"service_account_key": string(sa), "allow_http": "true", "client_max_retries": retries})
			},
		},
		{
			name:   "azure",
			target: func(t *testing.T) string { return cloudtest.AzureBlob(t).Endpoint },
			open: func(t *testing.T, base, prefix, retries string) storage.Store {
				az := cloudtest.AzureBlob(t)
				return open(t, "az://"+az.Container+"/"+prefix+"/ds.lance", map[string]string{
					"account_name": az.Account, "account_key": az.Key, "endpoint": base + "/" + az.Account,
					"allow_http": "true", "client_max_retries": retries})
			},
		},
	}
}

// Merges and commits through a proxy that fails or delays a fifth of the
// requests succeed after retries. When the store goes away in the middle
// of a merge, the merge fails with a storage error and the dataset is
// exactly as it was; what the merge had written is referenced by no
// version, and cleanup removes it once the store is back. A commit
// through a dead store changes nothing either.
func TestMergeCommitOverFaultyCloud(t *testing.T) {
	ctx := context.Background()
	for _, cs := range cloudStores() {
		t.Run(cs.name, func(t *testing.T) {
			prefix := cloudtest.Prefix()
			direct := cs.open(t, cs.target(t), prefix, "3")
			newFakeDataset(t, direct)

			proxy := s3test.NewFaultProxy(t, cs.target(t), 0.2, 0.1)
			flaky := cs.open(t, proxy.URL, prefix, "10")
			for round := 0; round < 2; round++ {
				snap, err := table.Open(ctx, flaky, 0)
				if err != nil {
					t.Fatal(err)
				}
				segs := snap.Indices
				a, b := segs[len(segs)-2], segs[len(segs)-1]
				m, err := Merge(ctx, flaky, snap, []*pb.IndexMetadata{a, b}, MergeOptions{})
				if err != nil {
					t.Fatalf("merge over a flaky store: %v", err)
				}
				v, err := Commit(ctx, flaky, snap, CommitRequest{IndexName: "vec_idx", Column: "vec", Segments: []*pb.IndexMetadata{m},
					Replaces: []string{table.IndexUUID(a), table.IndexUUID(b)}}, nil)
				if err != nil || v != snap.Ref.Version+1 {
					t.Fatalf("commit over a flaky store: %d %v", v, err)
				}
			}
			if proxy.Faults.Load() == 0 {
				t.Fatal("no fault was injected")
			}
			verifyS3(t, direct)

			// The store goes away after the merge's first write.
			snap, err := table.Open(ctx, direct, 0)
			if err != nil {
				t.Fatal(err)
			}
			const outUUID = "0badc0de-0000-4000-8000-000000000001"
			gone := s3test.NewFaultProxy(t, cs.target(t), 0, 0)
			var writes atomic.Int32
			gone.OnRequest = func(r *http.Request) {
				if (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.String(), outUUID) && writes.Add(1) == 2 {
					gone.SetFailRate(1)
				}
			}
			_, err = Merge(ctx, cs.open(t, gone.URL, prefix, "2"), snap, snap.Indices[:2], MergeOptions{IndexUUID: outUUID})
			if !errors.Is(err, errkind.IO) {
				t.Fatalf("merge while the store goes away: %v", err)
			}
			after, err := table.Open(ctx, direct, 0)
			if err != nil || after.Ref.Version != snap.Ref.Version {
				t.Fatalf("a failed merge changed the dataset: version %d -> %d (%v)", snap.Ref.Version, after.Ref.Version, err)
			}
			verifyS3(t, direct)
			left, err := direct.List(ctx, table.IndicesDir+outUUID+"/")
			if err != nil || len(left) == 0 {
				t.Fatalf("expected the merge's first file to be left behind by the vanished store: %v %v", left, err)
			}
			orphans, err := Cleanup(ctx, direct, 0, false, time.Now().Add(time.Minute))
			if err != nil || len(orphans) != 1 || orphans[0].UUID != outUUID || !orphans[0].Removed {
				t.Fatalf("cleanup: %+v %v", orphans, err)
			}
			if left, _ := direct.List(ctx, table.IndicesDir+outUUID+"/"); len(left) != 0 {
				t.Fatalf("cleanup left %v", left)
			}

			// A commit through a dead store fails and changes nothing.
			m, err := Merge(ctx, direct, snap, snap.Indices[:2], MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dead := s3test.NewFaultProxy(t, cs.target(t), 1.0, 0)
			if _, err := Commit(ctx, cs.open(t, dead.URL, prefix, "1"), snap, CommitRequest{IndexName: "vec_idx", Column: "vec",
				Segments: []*pb.IndexMetadata{m}, Replaces: []string{table.IndexUUID(snap.Indices[0]), table.IndexUUID(snap.Indices[1])}}, nil); !errors.Is(err, errkind.IO) {
				t.Fatalf("a commit through a dead store: %v", err)
			}
			after, err = table.Open(ctx, direct, 0)
			if err != nil || after.Ref.Version != snap.Ref.Version {
				t.Fatalf("a failed commit changed the dataset: version %d -> %d (%v)", snap.Ref.Version, after.Ref.Version, err)
			}
			verifyS3(t, direct)
		})
	}
}
