package vecmath

// L2SqU8 returns the squared Euclidean distance between two byte vectors
// (SQ codes), a and b[:len(a)], as an exact integer: at most
// len(a)·255², which fits a uint32 for vectors up to 66051 bytes.
func L2SqU8(a, b []byte) uint32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		aa, bb := a[i:i+8:i+8], b[i:i+8:i+8]
		d0 := int32(aa[0]) - int32(bb[0])
		d1 := int32(aa[1]) - int32(bb[1])
		d2 := int32(aa[2]) - int32(bb[2])
		d3 := int32(aa[3]) - int32(bb[3])
		d4 := int32(aa[4]) - int32(bb[4])
		d5 := int32(aa[5]) - int32(bb[5])
		d6 := int32(aa[6]) - int32(bb[6])
		d7 := int32(aa[7]) - int32(bb[7])
		s0 += d0*d0 + d4*d4
		s1 += d1*d1 + d5*d5
		s2 += d2*d2 + d6*d6
		s3 += d3*d3 + d7*d7
	}
	for ; i < len(a); i++ {
		d := int32(a[i]) - int32(b[i])
		s0 += d * d
	}
	return uint32(s0) + uint32(s1) + uint32(s2) + uint32(s3)
}
