package lancefile

import (
	"errors"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// TestParseLayers covers the layer stacks pages carry: an item alone, a
// list over an item, and the validity layers of the structs a member sits
// in (any definition level of a struct layer makes the member null).
func TestParseLayers(t *testing.T) {
	const (
		item     = enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM
		nullable = enc21.RepDefLayer_REPDEF_NULLABLE_ITEM
		list     = enc21.RepDefLayer_REPDEF_ALL_VALID_LIST
		nullList = enc21.RepDefLayer_REPDEF_NULLABLE_LIST
		both     = enc21.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST
	)
	for _, tc := range []struct {
		name   string
		layers []enc21.RepDefLayer
		want   repdef
		valid  []uint16 // definition levels whose item is valid
		null   []uint16 // and those whose item is null
		err    error
	}{
		{name: "item", layers: []enc21.RepDefLayer{item}, want: repdef{}, valid: []uint16{0}},
		{name: "nullable item", layers: []enc21.RepDefLayer{nullable}, want: repdef{itemNullable: true, nullLevels: 1},
			valid: []uint16{0}, null: []uint16{1}},
		{name: "list of nullable items", layers: []enc21.RepDefLayer{nullable, nullList},
			want: repdef{itemNullable: true, nullLevels: 1, hasList: true, nullList: 2}, valid: []uint16{0}, null: []uint16{1}},
		{name: "list, null and empty", layers: []enc21.RepDefLayer{item, both},
			want: repdef{hasList: true, nullList: 1, emptyList: 2}, valid: []uint16{0}},
		{name: "member of a nullable struct", layers: []enc21.RepDefLayer{nullable, nullable},
			want: repdef{itemNullable: true, nullLevels: 2}, valid: []uint16{0}, null: []uint16{1, 2}},
		{name: "valid member of a nullable struct", layers: []enc21.RepDefLayer{item, nullable},
			want: repdef{itemNullable: true, nullLevels: 1}, valid: []uint16{0}, null: []uint16{1}},
		{name: "two structs deep, the inner all valid", layers: []enc21.RepDefLayer{nullable, item, nullable},
			want: repdef{itemNullable: true, nullLevels: 2}, valid: []uint16{0}, null: []uint16{1, 2}},
		{name: "list inside a nullable struct", layers: []enc21.RepDefLayer{item, list, nullable},
			want: repdef{hasList: true, structNull: 1}, valid: []uint16{0}},
		{name: "nullable list of nullable items inside a nullable struct", layers: []enc21.RepDefLayer{nullable, nullList, item, nullable},
			want: repdef{itemNullable: true, nullLevels: 1, hasList: true, nullList: 2, structNull: 3}, valid: []uint16{0}, null: []uint16{1}},
		{name: "two lists", layers: []enc21.RepDefLayer{item, list, list}, err: errkind.Unsupported},
		{name: "list of structs", layers: []enc21.RepDefLayer{item, nullable, list}, err: errkind.Unsupported},
		{name: "no layers", layers: nil, err: errkind.Corrupt},
		{name: "list innermost", layers: []enc21.RepDefLayer{list}, err: errkind.Corrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, err := parseLayers(tc.layers)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || rd != tc.want {
				t.Fatalf("got %+v, %v; want %+v", rd, err, tc.want)
			}
			for _, d := range tc.valid {
				if !rd.itemValid(d) {
					t.Errorf("level %d: item null, want valid", d)
				}
			}
			for _, d := range tc.null {
				if rd.itemValid(d) {
					t.Errorf("level %d: item valid, want null", d)
				}
			}
			if rd.structNull != 0 && (rd.visible(rd.structNull) || rd.visible(rd.structNull+1) || !rd.visible(0)) {
				t.Errorf("a null struct around a list has an item slot")
			}
		})
	}
}
