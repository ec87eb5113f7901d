package lancefile

import "testing"

func TestTemporalTypesAreTheirStorageIntegers(t *testing.T) {
	for _, tc := range []struct {
		logical string
		kind    Kind
		bits    int
	}{
		{"date32:day", KindInt32, 32}, {"time32:ms", KindInt32, 32},
		{"date64:ms", KindInt64, 64}, {"time64:us", KindInt64, 64}, {"timestamp:us:-", KindInt64, 64},
		{"timestamp:ms:UTC", KindInt64, 64}, {"duration:ns", KindInt64, 64},
		{"string", KindBinary, 0}, {"decimal:128:10:2", KindDecimal, 128}, {"decimal:256:40:-3", KindDecimal, 256},
		{"fixed_size_binary:16", KindFixedSizeBinary, 128}, {"fixed_size_binary:0", KindUnknown, 0},
		{"fixed_size_binary:x", KindUnknown, 0}, {"fixed_size_binary:99999999999", KindUnknown, 0},
		{"fixed_size_binary:4096", KindFixedSizeBinary, 32768}, {"fixed_size_binary:4097", KindUnknown, 0},
		{"decimal:64:10:2", KindUnknown, 0},
	} {
		got := ParseLogicalType(tc.logical)
		if got.Kind != tc.kind || got.Logical != tc.logical {
			t.Errorf("ParseLogicalType(%q) = %+v, want kind %v with the logical type kept", tc.logical, got, tc.kind)
		}
		if tc.bits != 0 && got.ValueBits() != tc.bits {
			t.Errorf("ParseLogicalType(%q) holds %d bits, want %d", tc.logical, got.ValueBits(), tc.bits)
		}
	}
	if ParseLogicalType("timestamp:us:-") == ParseLogicalType("timestamp:ms:UTC") {
		t.Error("timestamps of different units compare equal")
	}
}
