// Package vecmath holds the float32 vector kernels the kernel's search,
// training, encoding and graph code share: squared L2 distance, dot
// product, norms, and nearest-centroid search over a row-major matrix.
//
// Every function is pure and safe for concurrent use. Vectors are plain
// []float32 slices; a matrix of n rows of dim values is one []float32 of
// n*dim values, row-major, as Lance stores centroids and codebooks.
// Lengths are the caller's contract: the kernels index b by the length of
// a and panic (a broken invariant, never bad input) if b is shorter, so
// callers check dimensions where the data enters, once.
//
//	best, dist := vecmath.NearestL2(v, centroids, dim) // index of the nearest row, its squared distance
package vecmath
