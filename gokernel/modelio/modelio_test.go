package modelio

import (
	"errors"
	"slices"
	"testing"
	"unsafe"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// C structs in heap memory that stays put (package-level: not on a
// goroutine stack, which can move).
var structs [4]struct {
	arr [80]byte
	sch [72]byte
}

func ptrs(i int) [2]uint64 {
	return [2]uint64{uint64(uintptr(unsafe.Pointer(&structs[i].arr))), uint64(uintptr(unsafe.Pointer(&structs[i].sch)))}
}

func TestExportImportRoundTrip(t *testing.T) {
	m := &encode.Model{Type: ivf.IVFPQ, Metric: encode.L2, Dim: 4,
		Centroids: []float32{1, 2, 3, 4, 5, 6, 7, 8},
		PQ:        &encode.PQParams{NumSubVectors: 2, NumBits: 4, Codebook: make([]float32, 16*4)}}
	for i := range m.PQ.Codebook {
		m.PQ.Codebook[i] = float32(i)
	}
	sp := SpecOf(m)
	sp.Arrays = ArrayPtrs{"centroids": ptrs(0), "codebook": ptrs(1)}
	if err := Export(m, sp.Arrays); err != nil {
		t.Fatal(err)
	}
	got, release, err := Import(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !slices.Equal(got.Centroids, m.Centroids) || !slices.Equal(got.PQ.Codebook, m.PQ.Codebook) || got.PQ.NumBits != 4 || got.Dim != 4 {
		t.Fatalf("round trip: %+v %+v", got, got.PQ)
	}
}

func TestImportRefusesBadSpecs(t *testing.T) {
	c := []float32{1, 2, 3, 4}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
	}{
		{"no centroids", func(sp *Spec) { delete(sp.Arrays, "centroids") }},
		{"null pointers", func(sp *Spec) { sp.Arrays["centroids"] = [2]uint64{} }},
		{"wrong width", func(sp *Spec) { sp.Dim = 3 }},
		{"metric", func(sp *Spec) { sp.Metric = "jaccard" }},
		{"sq without bounds", func(sp *Spec) { sp.IndexType = "IVF_SQ" }},
		{"unknown array", func(sp *Spec) { sp.Arrays["weights"] = ptrs(3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ExportMatrix(c, 2, 2, uintptr(ptrs(2)[0]), uintptr(ptrs(2)[1])); err != nil {
				t.Fatal(err)
			}
			if err := ExportMatrix(c, 2, 2, uintptr(ptrs(3)[0]), uintptr(ptrs(3)[1])); err != nil {
				t.Fatal(err)
			}
			sp := &Spec{IndexType: "IVF_FLAT", Metric: "l2", Dim: 2, Arrays: ArrayPtrs{"centroids": ptrs(2)}}
			tc.edit(sp)
			if _, _, err := Import(sp); !errors.Is(err, errkind.InvalidInput) {
				t.Fatalf("err = %v, want InvalidInput", err)
			}
			// Whatever the spec names is released.
			for _, p := range sp.Arrays {
				for i := range structs {
					if p == ptrs(i) {
						if a := (*cArray)(unsafe.Pointer(&structs[i].arr)); a.release != nil {
							t.Fatalf("struct %d not released", i)
						}
					}
				}
			}
		})
	}
}
