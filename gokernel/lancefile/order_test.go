package lancefile

import "testing"

func TestHalfFloats(t *testing.T) {
	for _, tc := range []struct {
		bits uint16
		nan  bool
	}{
		{0x0000, false}, {0x8000, false}, // ±0
		{0x3c00, false}, {0xc000, false}, // 1, -2
		{0x7c00, false}, {0xfc00, false}, // ±inf
		{0x7e00, true}, {0xfe00, true}, {0x7c01, true}, // NaNs: quiet, negative, signalling
		{0x03ff, false}, // the largest subnormal
	} {
		if got := IsNaN16(tc.bits); got != tc.nan {
			t.Errorf("IsNaN16(%#04x) = %v, want %v", tc.bits, got, tc.nan)
		}
		if back := FromTotalOrder16(TotalOrder16(tc.bits)); back != tc.bits {
			t.Errorf("%#04x came back as %#04x", tc.bits, back)
		}
	}
	// every pair of finite values keeps its order
	ordered := []uint16{0xfc00, 0xc000, 0x8001, 0x8000, 0x0000, 0x0001, 0x3c00, 0x7c00, 0x7e00}
	for i := 1; i < len(ordered); i++ {
		if TotalOrder16(ordered[i-1]) >= TotalOrder16(ordered[i]) {
			t.Errorf("%#04x does not order before %#04x", ordered[i-1], ordered[i])
		}
	}
}

func TestWideValuesOrder(t *testing.T) {
	dec := func(hi int64, lo uint64) []byte {
		b := make([]byte, 16)
		for i := range 8 {
			b[i], b[8+i] = byte(lo>>(8*i)), byte(uint64(hi)>>(8*i))
		}
		return b
	}
	for _, tc := range []struct {
		t    DataType
		vals [][]byte // ascending
	}{
		{ParseLogicalType("decimal:128:38:2"), [][]byte{
			dec(-1<<63, 0), dec(-2, ^uint64(0)), dec(-1, 0), dec(-1, ^uint64(0)), // -1 is all ones
			dec(0, 0), dec(0, 1), dec(0, 1<<63), dec(1, 0), dec(1<<62, 5)}},
		{ParseLogicalType("fixed_size_binary:3"), [][]byte{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0xff, 0, 0}}},
		{ParseLogicalType("fixed_size_binary:10"), [][]byte{
			{1, 2, 3, 4, 5, 6, 7, 8, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 1}, {1, 2, 3, 4, 5, 6, 7, 9, 0, 0}}},
		{DataType{Kind: KindBinary, Logical: "binary"}, [][]byte{{}, {0}, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 0}}},
	} {
		for i := 1; i < len(tc.vals); i++ {
			a, b := tc.vals[i-1], tc.vals[i]
			if CompareWide(tc.t, a, b) >= 0 || CompareWide(tc.t, b, a) <= 0 || CompareWide(tc.t, a, a) != 0 {
				t.Errorf("%v: %x does not order before %x", tc.t, a, b)
			}
			if PrefixKey(tc.t, a) > PrefixKey(tc.t, b) {
				t.Errorf("%v: the prefix of %x orders after the prefix of %x", tc.t, a, b)
			}
		}
	}
}
