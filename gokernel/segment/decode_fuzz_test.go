package segment

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/table"
)

// fuzzSnapshot is a dataset version of ten fragments (ids 0-9).
func fuzzSnapshot() *table.Snapshot {
	maxID := uint32(9)
	m := &pb.Manifest{Version: 3, MaxFragmentId: &maxID}
	for f := uint64(0); f < 10; f++ {
		m.Fragments = append(m.Fragments, &pb.DataFragment{Id: f, PhysicalRows: 100})
	}
	return &table.Snapshot{Ref: table.VersionRef{Version: 3}, Manifest: m}
}

// seedInfo is the Info JSON of a segment over frags, with its metadata
// bytes when withMeta.
func seedInfo(f *testing.F, frags []uint32, withMeta bool) *Info {
	bm, err := table.EncodeFragmentBitmap(frags)
	if err != nil {
		f.Fatal(err)
	}
	// Deterministic: the fuzz workers must see the coordinator's seeds.
	id := uuid.NewSHA1(uuid.NameSpaceOID, binary.LittleEndian.AppendUint32(bm, uint32(len(frags))))
	iv := int32(1)
	im := &pb.IndexMetadata{Uuid: &pb.UUID{Uuid: id[:]}, Fields: []int32{1}, Name: "vec_idx", DatasetVersion: 2,
		FragmentBitmap: bm, IndexVersion: &iv, IndexDetails: &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails"},
		Files: []*pb.IndexFile{{Path: "auxiliary.idx", SizeBytes: 100}, {Path: "index.idx", SizeBytes: 50}}}
	info, err := Describe(im)
	if err != nil {
		f.Fatal(err)
	}
	if !withMeta {
		info.Metadata = nil
	}
	return info
}

// FuzzParseSegments: the segments a caller passes to merge, plan and
// commit (JSON, with base64 IndexMetadata bytes holding a roaring bitmap)
// are refused with an error, never a panic, and what is accepted names
// only fragments the dataset has.
func FuzzParseSegments(f *testing.F) {
	for _, meta := range []bool{true, false} {
		b, _ := json.Marshal([]*Info{seedInfo(f, []uint32{1, 2}, meta), seedInfo(f, []uint32{3}, meta)})
		f.Add(b)
	}
	f.Add([]byte(`[{"uuid":"00000000-0000-4000-8000-000000000000","fragment_ids":[4294967295]}]`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`))
	snap := fuzzSnapshot()
	f.Fuzz(func(t *testing.T, b []byte) {
		metas, err := ParseSegments(b, snap)
		if err != nil {
			return
		}
		for _, im := range metas {
			ids, _, err := snap.DecodeCoverage(im)
			if err != nil {
				t.Fatalf("accepted a segment whose coverage does not decode: %v", err)
			}
			for _, id := range ids {
				if id > 9 {
					t.Fatalf("accepted fragment %d of a 10-fragment dataset", id)
				}
			}
			if _, err := Describe(im); err != nil {
				t.Fatalf("accepted a segment Describe refuses: %v", err)
			}
		}
		_ = checkEntries(context.Background(), nil, metas, snap)
	})
}

// FuzzDecodePlan: a plan's JSON, refused with an error or accepted as a
// plan whose tasks each merge two or more distinct segments of its index.
func FuzzDecodePlan(f *testing.F) {
	snap := fuzzSnapshot()
	p := Plan{FormatVersion: PlanFormatVersion, PlanID: "p", URI: "/x", ReadVersion: 3, IndexName: "vec_idx", Column: "vec",
		IndexType: "IVF_PQ", Tasks: []Task{{ID: 0, Segments: []*Info{seedInfo(f, []uint32{0}, true), seedInfo(f, []uint32{1, 2}, true)}}},
		Untouched: []string{}}
	b, _ := json.Marshal(p)
	f.Add(b)
	p.Tasks[0].Segments = []*Info{seedInfo(f, []uint32{0}, false), seedInfo(f, []uint32{5}, false)}
	b, _ = json.Marshal(p)
	f.Add(b)
	f.Add([]byte(`{"format_version":1,"index_name":"i","read_version":3,"tasks":[{"segments":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePlan(b, snap)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, task := range p.Tasks {
			if len(task.Segments) < 2 {
				t.Fatalf("task %d of %d segments accepted", task.ID, len(task.Segments))
			}
			for _, s := range task.Segments {
				if seen[s.UUID] || s.Name != p.IndexName {
					t.Fatalf("segment %s accepted twice or from index %q", s.UUID, s.Name)
				}
				seen[s.UUID] = true
			}
		}
	})
}
