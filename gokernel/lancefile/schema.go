package lancefile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
)

// Kind is the physical kind of a column's values.
type Kind uint8

const (
	KindUnknown Kind = iota
	KindBool
	KindInt8
	KindInt16
	KindInt32
	KindInt64
	KindUint8
	KindUint16
	KindUint32
	KindUint64
	KindFloat16
	KindFloat32
	KindFloat64
	// KindFixedSizeList is a vector of Dim primitive Elem values. Lance stores
	// it as one leaf field: the item is folded into the logical type.
	KindFixedSizeList
	// KindList is a variable-length list; its item is the field's only child.
	KindList
	KindLargeList
	KindStruct
	// KindBinary is a variable-width value (binary, string and their large
	// forms): Array.Offsets delimit each row's bytes in Array.Values.
	KindBinary
	// KindFixedSizeBinary is a value of Dim bytes, ordered by its bytes.
	KindFixedSizeBinary
	// KindDecimal is a two's-complement little-endian integer of Dim bytes
	// (16 for decimal128, 32 for decimal256); its scale lives in Logical.
	KindDecimal
)

// logical type names of primitives, as Lance spells them. Part of the format.
var primitiveNames = map[Kind]string{
	KindBool: "bool", KindInt8: "int8", KindInt16: "int16", KindInt32: "int32", KindInt64: "int64",
	KindUint8: "uint8", KindUint16: "uint16", KindUint32: "uint32", KindUint64: "uint64",
	KindFloat16: "halffloat", KindFloat32: "float", KindFloat64: "double",
}

// primitiveBits is indexed by Kind (an array, not a map: ValueBits is on
// the per-piece path of every merge).
var primitiveBits = [KindDecimal + 1]int{
	// A bool is held as one byte (0 or 1) in an Array, and stored as one
	// bit (Flat of 1 bit, least significant first).
	KindBool: 8,
	KindInt8: 8, KindInt16: 16, KindInt32: 32, KindInt64: 64,
	KindUint8: 8, KindUint16: 16, KindUint32: 32, KindUint64: 64,
	KindFloat16: 16, KindFloat32: 32, KindFloat64: 64,
}

// DataType is a column type.
type DataType struct {
	Kind Kind
	// Elem is the item kind of a FixedSizeList.
	Elem Kind
	// Dim is the size of a FixedSizeList.
	Dim int
	// Logical is the Lance logical type string as stored (for types we do
	// not decode, it is all we know).
	Logical string
}

// Primitive returns the type of a primitive kind.
func Primitive(k Kind) DataType { return DataType{Kind: k, Logical: primitiveNames[k]} }

// FixedSizeList returns FixedSizeList<elem>[dim].
func FixedSizeList(elem Kind, dim int) DataType {
	return DataType{Kind: KindFixedSizeList, Elem: elem, Dim: dim,
		Logical: fmt.Sprintf("fixed_size_list:%s:%d", primitiveNames[elem], dim)}
}

// ListType returns List<...>; the item type lives in the child field.
func ListType() DataType { return DataType{Kind: KindList, Logical: "list"} }

// ValueBits is the width of one value in bits (a whole vector for a
// FixedSizeList), or 0 for types that are not fixed-width.
func (t DataType) ValueBits() int {
	switch t.Kind {
	case KindFixedSizeList:
		return primitiveBits[t.Elem] * t.Dim
	case KindFixedSizeBinary, KindDecimal:
		return 8 * t.Dim
	default:
		return primitiveBits[t.Kind]
	}
}

// ElemBits is the width of one primitive item (the element of a
// FixedSizeList, or the value itself).
func (t DataType) ElemBits() int {
	if t.Kind == KindFixedSizeList {
		return primitiveBits[t.Elem]
	}
	return primitiveBits[t.Kind]
}

func (t DataType) String() string { return t.Logical }

// Field is one node of a file schema.
type Field struct {
	Name     string
	ID       int32
	ParentID int32
	Type     DataType
	Nullable bool
	Metadata map[string][]byte
	Children []*Field
}

func parseKind(s string) (Kind, bool) {
	for k, n := range primitiveNames {
		if n == s {
			return k, true
		}
	}
	return KindUnknown, false
}

// maxFixedBytes bounds a fixed-size binary's width: wider than any index
// key (a uuid is 16 bytes, a SHA-256 32), narrow enough that a window of
// them stays within a merge's memory budget. Wider ones are KindUnknown:
// read nowhere.
const maxFixedBytes = 4096

// maxListDim bounds a fixed-size list's size (2^24 values: a vector wider
// than any index holds), so that its width in bits stays far inside int.
const maxListDim = 1 << 24

// ParseLogicalType maps a Lance logical type string to a DataType. Dates,
// times, timestamps and durations are their storage integers (Kind) with
// the logical type kept; types the kernel never decodes (strings,
// decimals, ...) come back as KindUnknown with Logical set; only reading
// their pages fails.
func ParseLogicalType(s string) DataType {
	if k, ok := parseKind(s); ok {
		return Primitive(k)
	}
	switch {
	case s == "list" || s == "list.struct":
		return DataType{Kind: KindList, Logical: s}
	case s == "large_list" || s == "large_list.struct":
		return DataType{Kind: KindLargeList, Logical: s}
	case s == "struct":
		return DataType{Kind: KindStruct, Logical: s}
	case s == "binary" || s == "string" || s == "large_binary" || s == "large_string":
		return DataType{Kind: KindBinary, Logical: s}
	case strings.HasPrefix(s, "date32:") || strings.HasPrefix(s, "time32:"):
		// Stored as int32 (days, seconds or milliseconds); the logical type
		// is kept, so a writer writes it back as it was.
		return DataType{Kind: KindInt32, Logical: s}
	case strings.HasPrefix(s, "date64:") || strings.HasPrefix(s, "time64:") || strings.HasPrefix(s, "timestamp:") || strings.HasPrefix(s, "duration:"):
		return DataType{Kind: KindInt64, Logical: s}
	case strings.HasPrefix(s, "fixed_size_binary:"):
		n, err := strconv.Atoi(s[len("fixed_size_binary:"):])
		if err != nil || n <= 0 || n > maxFixedBytes {
			return DataType{Kind: KindUnknown, Logical: s}
		}
		return DataType{Kind: KindFixedSizeBinary, Dim: n, Logical: s}
	case strings.HasPrefix(s, "decimal:128:"):
		return DataType{Kind: KindDecimal, Dim: 16, Logical: s}
	case strings.HasPrefix(s, "decimal:256:"):
		return DataType{Kind: KindDecimal, Dim: 32, Logical: s}
	case strings.HasPrefix(s, "fixed_size_list:"):
		// fixed_size_list:<elem>:<n>; the element may itself contain colons.
		// Untrusted: "fixed_size_list:" alone has no element nor size.
		last := strings.LastIndex(s, ":")
		if last < len("fixed_size_list:") {
			return DataType{Kind: KindUnknown, Logical: s}
		}
		elem := s[len("fixed_size_list:"):last]
		n, err := strconv.Atoi(s[last+1:])
		k, ok := parseKind(elem)
		if err != nil || !ok || n <= 0 || n > maxListDim {
			return DataType{Kind: KindUnknown, Logical: s}
		}
		return DataType{Kind: KindFixedSizeList, Elem: k, Dim: n, Logical: s}
	}
	return DataType{Kind: KindUnknown, Logical: s}
}

// DictValues is the value type of a dictionary column's logical type,
// "dict:<values>:<indices>:<ordered>" (the values' own type may contain
// colons): a reader decodes such a column as its values, since a page of it
// is a dictionary page of the value type. ok is false for other types and
// for a dictionary of values this package does not decode.
func DictValues(t DataType) (DataType, bool) {
	v, _, ok := dictTypes(t)
	return v, ok
}

// dictTypes is DictValues and the kind of the column's indices.
func dictTypes(t DataType) (values DataType, indices Kind, ok bool) {
	s, ok := strings.CutPrefix(t.Logical, "dict:")
	if !ok || t.Kind != KindUnknown {
		return DataType{}, 0, false
	}
	// the last two parts are the indices' type and the ordered flag
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return DataType{}, 0, false
	}
	j := strings.LastIndex(s[:i], ":")
	if j <= 0 {
		return DataType{}, 0, false
	}
	indices, ok = parseKind(s[j+1 : i])
	if !ok || s[i+1:] != "true" && s[i+1:] != "false" {
		return DataType{}, 0, false
	}
	v := ParseLogicalType(s[:j])
	if v.Kind != KindBinary && (v.Kind == KindUnknown || v.Kind == KindStruct || isList(v) || v.ValueBits() == 0 || v.ValueBits()%8 != 0) {
		return DataType{}, 0, false
	}
	return v, indices, true
}

// buildSchema rebuilds the field tree from Lance's flat pre-order list.
func buildSchema(pfields []*pb.Field) ([]*Field, error) {
	byID := map[int32]*Field{}
	var top []*Field
	for i, pf := range pfields {
		f := &Field{
			Name:     pf.GetName(),
			ID:       pf.GetId(),
			ParentID: pf.GetParentId(),
			Type:     ParseLogicalType(pf.GetLogicalType()),
			Nullable: pf.GetNullable(),
			Metadata: pf.GetMetadata(),
		}
		// Lance reserves ids below -1 for hidden top-level columns (a
		// fragment's spilled row ids are -3, its row versions -4 and -5);
		// -1 means "no parent" and is never a field's own id.
		if f.ID == -1 || (f.ID < 0 && f.ParentID >= 0) {
			return nil, fmt.Errorf("%w: schema field %d (%q) has id %d", errkind.Corrupt, i, f.Name, f.ID)
		}
		if _, dup := byID[f.ID]; dup {
			return nil, fmt.Errorf("%w: schema field id %d appears twice", errkind.Corrupt, f.ID)
		}
		byID[f.ID] = f
		if f.ParentID < 0 {
			top = append(top, f)
			continue
		}
		parent, ok := byID[f.ParentID]
		if !ok {
			return nil, fmt.Errorf("%w: schema field %q has parent %d, which does not come before it", errkind.Corrupt, f.Name, f.ParentID)
		}
		parent.Children = append(parent.Children, f)
	}
	return top, nil
}

// toProto flattens a field tree in pre-order, as Lance stores it.
func schemaToProto(fields []*Field) []*pb.Field {
	var out []*pb.Field
	var walk func(f *Field)
	walk = func(f *Field) {
		enc := int32(1) // PLAIN: what Lance writes for fixed-width types and lists
		switch f.Type.Kind {
		case KindStruct:
			enc = 0
		case KindBinary:
			enc = 2 // VAR_BINARY
		}
		out = append(out, &pb.Field{
			Name:        f.Name,
			Id:          f.ID,
			ParentId:    f.ParentID,
			LogicalType: f.Type.Logical,
			Nullable:    f.Nullable,
			Encoding:    enc,
			Metadata:    f.Metadata,
		})
		for _, c := range f.Children {
			walk(c)
		}
	}
	for _, f := range fields {
		walk(f)
	}
	return out
}

// leafColumns returns the number of physical columns a field occupies in a
// file of version v, in pre-order: 2.0 stores a list as an offsets column
// plus its item's columns; 2.1+ folds lists into their leaf, and a struct
// header takes a column only in 2.0.
func columnCount(f *Field, v Version) int {
	n := 0
	switch f.Type.Kind {
	case KindList, KindLargeList, KindStruct:
		if v == V2_0 {
			n = 1
		}
	default:
		n = 1
	}
	for _, c := range f.Children {
		n += columnCount(c, v)
	}
	return n
}
