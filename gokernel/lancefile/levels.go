package lancefile

import (
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// repdef interprets the structural layers of a 2.1+ page: one item layer,
// at most one list layer, and the validity layers of the structs the
// column sits in (around the item, or around the list). Layers are listed
// innermost first; definition levels are numbered from the inside out (0 =
// valid at every level).
type repdef struct {
	itemNullable bool
	// nullLevels is the highest definition level that makes the item
	// null: its own (1) and those of the structs around it, a null struct
	// being a null value of each of its fields.
	nullLevels uint16
	hasList    bool
	nullList   uint16 // def level of a null list (0 = none)
	emptyList  uint16 // def level of an empty list (0 = none)
	// structNull is the first def level of a null struct around a list
	// (0 = none): it and every level above it are a null row.
	structNull uint16
}

func parseLayers(layers []enc21.RepDefLayer) (repdef, error) {
	var rd repdef
	if len(layers) == 0 {
		return rd, fmt.Errorf("%w: a page without structural layers", errkind.Corrupt)
	}
	next := uint16(1)
	switch layers[0] {
	case enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM:
	case enc21.RepDefLayer_REPDEF_NULLABLE_ITEM:
		next++
	default:
		return rd, fmt.Errorf("%w: innermost layer %v is not an item layer", errkind.Corrupt, layers[0])
	}
	for i, l := range layers[1:] {
		switch l {
		case enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM:
			continue
		case enc21.RepDefLayer_REPDEF_NULLABLE_ITEM:
			if rd.hasList && rd.structNull == 0 {
				rd.structNull = next
			}
			next++
			continue
		}
		if rd.hasList || i > 0 {
			return rd, fmt.Errorf("%w: structural layers %v (one list over one item, with structs around either, is read; not lists of lists or of structs)", errkind.Unsupported, layers)
		}
		rd.hasList = true
		switch l {
		case enc21.RepDefLayer_REPDEF_ALL_VALID_LIST:
		case enc21.RepDefLayer_REPDEF_NULLABLE_LIST:
			rd.nullList = next
			next++
		case enc21.RepDefLayer_REPDEF_EMPTYABLE_LIST:
			rd.emptyList = next
			next++
		case enc21.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
			rd.nullList, rd.emptyList = next, next+1
			next += 2
		default:
			return rd, fmt.Errorf("%w: outer layer %v is not a list layer", errkind.Corrupt, l)
		}
	}
	if !rd.hasList {
		rd.nullLevels = next - 1
	} else if layers[0] == enc21.RepDefLayer_REPDEF_NULLABLE_ITEM {
		rd.nullLevels = 1
	}
	rd.itemNullable = rd.nullLevels > 0
	return rd, nil
}

// visible reports whether a level with definition d has a value slot.
func (rd repdef) visible(d uint16) bool {
	return !(rd.nullList != 0 && d == rd.nullList) && !(rd.emptyList != 0 && d == rd.emptyList) && !rd.nullStruct(d)
}

// nullStruct reports whether a level with definition d is a row whose
// struct (around a list) is null.
func (rd repdef) nullStruct(d uint16) bool {
	return rd.structNull != 0 && d >= rd.structNull
}

// itemValid reports whether a visible level with definition d holds a
// non-null item.
func (rd repdef) itemValid(d uint16) bool { return d == 0 || d > rd.nullLevels }

// levelsOut accumulates rows from (rep, def) levels and the value slots
// they consume.
type levelsOut struct {
	rd       repdef
	rows     int
	offsets  []int64 // lists: per row end offsets, with a leading 0
	validity []byte  // row validity (nil while all valid)
	items    int     // value slots consumed
	itemNull []byte  // item validity (nil while all valid)
}

func newLevelsOut(rd repdef) *levelsOut {
	o := &levelsOut{rd: rd}
	if rd.hasList {
		o.offsets = []int64{0}
	}
	return o
}

func setBit(bits []byte, n, i int, valid bool) []byte {
	for len(bits) < (n+7)/8 {
		bits = append(bits, 0)
	}
	if valid {
		bits[i/8] |= 1 << (i % 8)
	}
	return bits
}

// add consumes n levels. rep may be nil (no repetition: every level is a
// row) and def may be nil (all zero). It returns an error when a level
// sequence is impossible.
func (o *levelsOut) add(rep, def []uint16, n int) error {
	if rep == nil && !o.rd.hasList && o.validity == nil && o.itemNull == nil && allZero(def[:min(n, len(def))]) {
		o.rows += n // fast path: all valid rows, one value each
		o.items += n
		return nil
	}
	for i := 0; i < n; i++ {
		var d uint16
		if def != nil {
			d = def[i]
		}
		if !o.rd.hasList {
			o.markRow(o.rd.itemValid(d))
			o.markItem(o.rd.itemValid(d))
			continue
		}
		startsRow := rep == nil || rep[i] >= 1
		if startsRow {
			if o.rows > 0 {
				o.offsets = append(o.offsets, int64(o.items))
			}
			o.rows++
			valid := !(o.rd.nullList != 0 && d == o.rd.nullList) && !o.rd.nullStruct(d)
			o.validity = o.markBit(o.validity, o.rows, o.rows-1, valid)
		} else if o.rows == 0 {
			return fmt.Errorf("%w: page starts inside a list (repetition level 0)", errkind.Corrupt)
		}
		if o.rd.visible(d) {
			o.markItem(o.rd.itemValid(d))
		}
	}
	return nil
}

// allZero reports whether every level is 0 (a valid row of a nullable
// column without lists: the common page, worth its quick scan).
func allZero(def []uint16) bool {
	for _, d := range def {
		if d != 0 {
			return false
		}
	}
	return true
}

func (o *levelsOut) markRow(valid bool) {
	o.rows++
	o.validity = o.markBit(o.validity, o.rows, o.rows-1, valid)
}

func (o *levelsOut) markItem(valid bool) {
	o.items++
	o.itemNull = o.markBit(o.itemNull, o.items, o.items-1, valid)
}

// markBit keeps bits nil while everything is valid.
func (o *levelsOut) markBit(bits []byte, n, i int, valid bool) []byte {
	if valid && bits == nil {
		return nil
	}
	if bits == nil {
		bits = allValid(i)
	}
	return setBit(bits, n, i, valid)
}

// finish closes the last list.
func (o *levelsOut) finish() {
	if o.rd.hasList && o.rows > 0 {
		o.offsets = append(o.offsets, int64(o.items))
	}
}
