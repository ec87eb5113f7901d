package hnsw

import (
	"encoding/binary"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/lancefile"
)

// FuzzDecode feeds the graph decoder metadata and columns built from
// arbitrary bytes: it must return a graph or an error, never panic, and a
// graph it returns must encode back to the rows it came from.
//
// Inputs: the lance:hnsw entry, node ids (u32 each), list offsets (u32
// each, one more than the rows) and neighbour ids (u32 each).
func FuzzDecode(f *testing.F) {
	meta, cols := smallGraph(f, 120)
	mb, _ := meta.Marshal()
	offs := make([]byte, 0, 4*len(cols[1].Offsets))
	for _, o := range cols[1].Offsets {
		offs = binary.LittleEndian.AppendUint32(offs, uint32(o))
	}
	f.Add(string(mb), cols[0].Values, offs, cols[1].Items.Values)
	f.Add(`{"entry_point":0,"params":{"max_level":2,"m":4,"ef_construction":8},"level_offsets":[0,2,2]}`,
		[]byte{0, 0, 0, 0, 1, 0, 0, 0}, []byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0}, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, metaJSON string, ids, offsets, items []byte) {
		m, err := ParseMetadata(metaJSON)
		// The merge's bound: a graph addresses at most the storage rows of
		// its partition, which exist.
		if err != nil || m == nil || m.Nodes()*(2*m.Params.M+1) > 1<<22 {
			return
		}
		u32 := lancefile.Primitive(lancefile.KindUint32)
		idArr := &lancefile.Array{Type: u32, Len: len(ids) / 4, Values: ids[:len(ids)/4*4]}
		nb := &lancefile.Array{Type: lancefile.ListType(), Len: max(len(offsets)/4-1, 0),
			Items: &lancefile.Array{Type: u32, Len: len(items) / 4, Values: items[:len(items)/4*4]}}
		for i := 0; i+4 <= len(offsets); i += 4 {
			nb.Offsets = append(nb.Offsets, int64(binary.LittleEndian.Uint32(offsets[i:])))
		}
		if len(nb.Offsets) == 0 {
			nb.Offsets = []int64{0}
		}
		g, err := Decode(m, idArr, nb, nil, m.Nodes())
		if err != nil {
			return
		}
		if g.Rows() != m.Rows() {
			t.Fatalf("decoded %d rows from metadata of %d", g.Rows(), m.Rows())
		}
		out, _ := g.Encode()
		if string(out[0].Values) != string(idArr.Values) {
			t.Fatal("node ids do not encode back")
		}
	})
}

// FuzzParseList feeds the "lance:hnsw" parser arbitrary text: errors only,
// and what it accepts encodes to a list it accepts again.
func FuzzParseList(f *testing.F) {
	meta, _ := smallGraph(f, 60)
	list, _ := MarshalList([]*Metadata{nil, meta})
	f.Add(string(list))
	f.Add(`["", "{\"entry_point\":0,\"params\":{\"max_level\":2,\"m\":4,\"ef_construction\":8},\"level_offsets\":[0,2,2]}"]`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseList(s)
		if err != nil {
			return
		}
		b, err := MarshalList(ms)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseList(string(b))
		if err != nil || len(again) != len(ms) {
			t.Fatalf("%s re-encoded as %s: %v", s, b, err)
		}
	})
}
