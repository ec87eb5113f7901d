package segment

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

func TestOtherType(t *testing.T) {
	entry := func(name, url string, files ...string) *pb.IndexMetadata {
		im := &pb.IndexMetadata{Name: name}
		if url != "" {
			im.IndexDetails = &anypb.Any{TypeUrl: url}
		}
		for _, f := range files {
			im.Files = append(im.Files, &pb.IndexFile{Path: f})
		}
		return im
	}
	for _, tc := range []struct {
		im   *pb.IndexMetadata
		want string
	}{
		{entry("v", "/lance.index.pb.VectorIndexDetails"), ""},
		{entry("v", "", ivf.AuxiliaryFileName), ""},
		{entry("legacy", ""), ""}, // no details, no files: a vector index of an old writer
		{entry("b", "/lance.table.BTreeIndexDetails"), "BTREE"},
		{entry("b", "/lance.table.BitmapIndexDetails"), "BITMAP"},
		{entry("b", "/lance.table.LabelListIndexDetails"), "LABEL_LIST"},
		{entry("b", "/lance.table.InvertedIndexDetails"), "INVERTED"},
		{entry("b", "/lance.table.NGramIndexDetails"), "NGRAM"},
		{entry("b", "/lance.table.ZoneMapIndexDetails"), "ZONEMAP"},
		{entry("b", "/lance.index.pb.BloomFilterIndexDetails"), "BLOOMFILTER"},
		{entry("b", "type.googleapis.com/lance.table.RTreeIndexDetails"), "RTREE"},
		{entry("b", "/lance.table.FancyNewIndexDetails"), "FANCYNEW"},
		{entry("__lance_frag_reuse", ""), "SYSTEM"},
	} {
		if got := OtherType(tc.im); got != tc.want {
			t.Errorf("OtherType(%q, %q) = %q, want %q", tc.im.GetName(), tc.im.GetIndexDetails().GetTypeUrl(), got, tc.want)
		}
		err := RequireVector(tc.im)
		if (err == nil) != (tc.want == "") {
			t.Errorf("RequireVector(%q) = %v", tc.im.GetIndexDetails().GetTypeUrl(), err)
		}
		if err != nil && (!errors.Is(err, errkind.Unsupported) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("RequireVector: %v, want Unsupported naming %s", err, tc.want)
		}
	}
}

func TestStatsJSONOfOtherTypes(t *testing.T) {
	for _, tc := range []struct {
		s    Stats
		want map[string]any
	}{
		{Stats{IndexType: "IVF_PQ", NumRows: 5, NumPartitions: 2}, map[string]any{"num_rows": 5.0, "num_partitions": 2.0}},
		{Stats{IndexType: "BTREE", NumRows: 7, notVector: true, rowsCounted: true}, map[string]any{"num_rows": 7.0, "num_partitions": nil}},
		{Stats{IndexType: "BITMAP", notVector: true}, map[string]any{"num_rows": nil, "num_partitions": nil}},
	} {
		b, err := json.Marshal(&tc.s)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v (%s)", tc.s.IndexType, k, got[k], v, b)
			}
		}
		if got["index_type"] != tc.s.IndexType {
			t.Errorf("index_type %v", got["index_type"])
		}
	}
}
