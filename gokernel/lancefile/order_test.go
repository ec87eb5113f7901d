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
