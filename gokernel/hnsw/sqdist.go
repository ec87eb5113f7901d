package hnsw

import "github.com/lance-segmerge/lance-segmerge/gokernel/vecmath"

// l2SqU8 is the squared L2 distance between SQ codes, where an SQ graph
// spends most of its time. The portable kernel is vecmath's; builds with
// GOEXPERIMENT=simd on amd64 with AVX2 replace it (sqdist_simd.go).
var l2SqU8 = vecmath.L2SqU8
