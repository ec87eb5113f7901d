package lancefile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
)

// orderable are the kinds SortKey orders: fixed-width numbers (temporal
// types are stored as their integers) and bools (false before true).
var orderable = map[Kind]bool{
	KindBool: true, KindInt8: true, KindInt16: true, KindInt32: true, KindInt64: true,
	KindUint8: true, KindUint16: true, KindUint32: true, KindUint64: true,
	KindFloat16: true, KindFloat32: true, KindFloat64: true,
}

// Orderable reports whether SortKey orders values of kind k.
func Orderable(k Kind) bool { return orderable[k] }

// SortKey maps a fixed-width value to a uint64 whose order is the value's
// (floats in total order: -NaN < -inf < ... < +inf < +NaN, as Lance sorts
// them).
func SortKey(k Kind, b []byte) uint64 {
	switch k {
	case KindBool: // a byte each, as the reader holds them
		if b[0] != 0 {
			return 1
		}
		return 0
	case KindInt8:
		return uint64(int64(int8(b[0]))) ^ 1<<63
	case KindInt16:
		return uint64(int64(int16(binary.LittleEndian.Uint16(b)))) ^ 1<<63
	case KindInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b)))) ^ 1<<63
	case KindInt64:
		return binary.LittleEndian.Uint64(b) ^ 1<<63
	case KindUint8:
		return uint64(b[0])
	case KindUint16:
		return uint64(binary.LittleEndian.Uint16(b))
	case KindUint32:
		return uint64(binary.LittleEndian.Uint32(b))
	case KindUint64:
		return binary.LittleEndian.Uint64(b)
	case KindFloat16:
		return uint64(TotalOrder16(binary.LittleEndian.Uint16(b)))
	case KindFloat32:
		return totalOrder(math.Float64bits(float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))))
	default: // KindFloat64
		return totalOrder(binary.LittleEndian.Uint64(b))
	}
}

// TotalOrder16 maps a half float's bits to a uint16 in total order (as
// totalOrder does for doubles); FromTotalOrder16 is its inverse.
func TotalOrder16(bits uint16) uint16 {
	if bits>>15 == 1 {
		return ^bits
	}
	return bits | 1<<15
}

// FromTotalOrder16 is the inverse of TotalOrder16.
func FromTotalOrder16(k uint16) uint16 {
	if k>>15 == 1 {
		return k &^ (1 << 15)
	}
	return ^k
}

// IsNaN16 reports whether a half float's bits are a NaN (all exponent
// bits set, a fraction that is not zero).
func IsNaN16(bits uint16) bool { return bits&0x7c00 == 0x7c00 && bits&0x3ff != 0 }

func totalOrder(bits uint64) uint64 {
	if bits>>63 == 1 {
		return ^bits
	}
	return bits | 1<<63
}

// AppendSortKeys appends the SortKey of each of n fixed-width values (one loop
// per type, not a type switch per value).
func AppendSortKeys(k Kind, b []byte, n int, out []uint64) []uint64 {
	le := binary.LittleEndian
	switch k {
	case KindInt64:
		for i := range n {
			out = append(out, le.Uint64(b[i*8:])^1<<63)
		}
	case KindUint64:
		for i := range n {
			out = append(out, le.Uint64(b[i*8:]))
		}
	case KindFloat64:
		for i := range n {
			out = append(out, totalOrder(le.Uint64(b[i*8:])))
		}
	case KindInt32:
		for i := range n {
			out = append(out, uint64(int64(int32(le.Uint32(b[i*4:]))))^1<<63)
		}
	default:
		w := Primitive(k).ValueBits() / 8
		for i := range n {
			out = append(out, SortKey(k, b[i*w:(i+1)*w]))
		}
	}
	return out
}

// Wide reports whether values of type t order by more than a uint64:
// binary and fixed-size binary values (by their bytes) and decimals (by
// value). PrefixKey orders them up to ties, which CompareWide breaks.
func Wide(t DataType) bool {
	return t.Kind == KindBinary || t.Kind == KindFixedSizeBinary || t.Kind == KindDecimal
}

// PrefixKey is a wide value's order up to ties: the first 8 bytes read
// big-endian (zero-padded) for bytes; for a decimal, its most
// significant 8 bytes as a signed integer, offset to unsigned order.
func PrefixKey(t DataType, v []byte) uint64 {
	if t.Kind == KindDecimal {
		return binary.LittleEndian.Uint64(v[len(v)-8:]) ^ 1<<63
	}
	var w [8]byte
	copy(w[:], v)
	return binary.BigEndian.Uint64(w[:])
}

// CompareWide orders two wide values of type t (-1, 0, +1): bytes
// lexicographically, decimals by value (two's complement, little-endian
// limbs: the top one signed, the others unsigned).
func CompareWide(t DataType, a, b []byte) int {
	if t.Kind != KindDecimal {
		return bytes.Compare(a, b)
	}
	le := binary.LittleEndian
	n := len(a)
	if x, y := int64(le.Uint64(a[n-8:])), int64(le.Uint64(b[n-8:])); x != y {
		return cmp.Compare(x, y)
	}
	for off := n - 16; off >= 0; off -= 8 {
		if x, y := le.Uint64(a[off:]), le.Uint64(b[off:]); x != y {
			return cmp.Compare(x, y)
		}
	}
	return 0
}

// AppendPrefixKeys appends the PrefixKey of each row of an array of a
// wide type. A null row's key is whatever its slot holds (0 for binary):
// callers test validity first.
func AppendPrefixKeys(a *Array, out []uint64) []uint64 {
	if a.Type.Kind != KindBinary {
		w := a.Type.ValueBits() / 8
		for i := 0; i < a.Len; i++ {
			out = append(out, PrefixKey(a.Type, a.Values[i*w:(i+1)*w]))
		}
		return out
	}
	for i := 0; i < a.Len; i++ {
		out = append(out, PrefixKey(a.Type, a.Values[a.Offsets[i]:a.Offsets[i+1]]))
	}
	return out
}
