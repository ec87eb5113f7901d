package vecmath

// Lance's float32 distance kernels sum in a fixed order: the values past
// the last whole group of 16 first (sequentially), then 16 running sums,
// one per lane, added together in lane order, and the two added. The
// functions below sum in exactly that order, so that a distance, and
// every code or factor computed from it, is bit for bit what Lance
// computes. (L2Sq and Dot above sum in 4 lanes: faster, and fine where
// only the value matters, not its last bit.) Products are rounded before
// they are added (the float32 conversions forbid fused multiply-adds), as
// Lance's Rust does.

// L2Sq16 returns the squared Euclidean distance between a and b[:len(a)],
// summed as Lance's f32 L2 kernel sums it.
func L2Sq16(a, b []float32) float32 { return l2Sq16(a, b[:len(a)]) }

// Dot16 returns the inner product of a and b[:len(a)], summed as Lance's
// f32 dot kernel sums it.
func Dot16(a, b []float32) float32 { return dot16(a, b[:len(a)]) }

// The implementations; the SIMD build replaces them with kernels that keep
// the 16 running sums in one register (or two), the same operations in
// the same order, so the same bits.
var (
	l2Sq16 = l2Sq16Generic
	dot16  = dot16Generic
)

func l2Sq16Generic(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		d := a[i] - b[i]
		tail += float32(d * d)
	}
	var s [16]float32
	for i := 0; i < whole; i += 16 {
		x, y := (*[16]float32)(a[i:i+16]), (*[16]float32)(b[i:i+16])
		for l := range s {
			d := x[l] - y[l]
			s[l] += float32(d * d)
		}
	}
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}

func dot16Generic(a, b []float32) float32 {
	b = b[:len(a)]
	whole := len(a) &^ 15
	var tail float32
	for i := whole; i < len(a); i++ {
		tail += float32(a[i] * b[i])
	}
	var s [16]float32
	for i := 0; i < whole; i += 16 {
		x, y := (*[16]float32)(a[i:i+16]), (*[16]float32)(b[i:i+16])
		for l := range s {
			s[l] += float32(x[l] * y[l])
		}
	}
	var lanes float32
	for _, v := range s {
		lanes += v
	}
	return tail + lanes
}
