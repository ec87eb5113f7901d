package lancefile

import "testing"

func TestTemporalTypesAreTheirStorageIntegers(t *testing.T) {
	for _, tc := range []struct {
		logical string
		kind    Kind
	}{
		{"date32:day", KindInt32}, {"time32:ms", KindInt32},
		{"date64:ms", KindInt64}, {"time64:us", KindInt64}, {"timestamp:us:-", KindInt64},
		{"timestamp:ms:UTC", KindInt64}, {"duration:ns", KindInt64},
		{"string", KindBinary}, {"decimal:128:10:2", KindUnknown},
	} {
		got := ParseLogicalType(tc.logical)
		if got.Kind != tc.kind || got.Logical != tc.logical {
			t.Errorf("ParseLogicalType(%q) = %+v, want kind %v with the logical type kept", tc.logical, got, tc.kind)
		}
	}
	if ParseLogicalType("timestamp:us:-") == ParseLogicalType("timestamp:ms:UTC") {
		t.Error("timestamps of different units compare equal")
	}
}
