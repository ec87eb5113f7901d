package search

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/encode"
	"github.com/lance-segmerge/lance-segmerge/gokernel/ivf"
)

// FuzzScorePartition scores partitions whose codes, extended codes and
// factors are arbitrary bytes (what a hostile auxiliary file decodes to),
// with every layout undone up to twice: never a panic, and the row count
// is kept.
func FuzzScorePartition(f *testing.F) {
	f.Add(uint8(0), uint8(5), uint16(3), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(1), uint8(8), uint16(40), []byte{0xff})
	f.Add(uint8(2), uint8(1), uint16(33), []byte{})
	f.Add(uint8(3), uint8(9), uint16(1), []byte{0x7f, 0x80, 0, 0})
	f.Fuzz(func(t *testing.T, kind, bits uint8, rows uint16, data []byte) {
		const dim, k = 64, 3
		n := int(rows % 200)
		m := &encode.Model{Metric: []encode.Metric{encode.L2, encode.Cosine, encode.Dot}[int(bits)%3], Dim: dim, Centroids: make([]float32, k*dim)}
		for i := range m.Centroids {
			m.Centroids[i] = float32(i%7) - 3
		}
		switch kind % 4 {
		case 0:
			m.Type = ivf.IVFFlat
		case 1:
			m.Type, m.SQ = ivf.IVFSQ, &encode.SQParams{NumBits: 8, Lo: -2, Hi: 5}
		case 2:
			nb := 8
			if bits%2 == 0 {
				nb = 4
			}
			m.Type, m.PQ = ivf.IVFPQ, &encode.PQParams{NumSubVectors: 8, NumBits: nb, Codebook: make([]float32, (1<<nb)*dim)}
			for i := range m.PQ.Codebook {
				m.PQ.Codebook[i] = float32(i%11) - 5
			}
		default:
			m.Type = ivf.IVFRQ
			m.RQ = &encode.RQParams{NumBits: 1 + int(bits)%9, Rotation: encode.RotationFast, QueryEstimator: encode.RawQuery,
				Signs: make([]byte, encode.FastRotationSignBytes(dim))}
			if bits&16 != 0 {
				m.RQ.QueryEstimator = encode.ResidualQuery
			}
		}
		ix, err := New(m)
		if err != nil {
			t.Fatal(err)
		}
		byteAt := func(i int) byte {
			if len(data) == 0 {
				return 0
			}
			return data[i%len(data)]
		}
		floats := func(salt int) []float32 {
			out := make([]float32, n)
			for i := range out {
				var b [4]byte
				for j := range b {
					b[j] = byteAt(4*i + j + salt)
				}
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[:]))
			}
			return out
		}
		w := ix.CodeWidth()
		stored := make([]byte, n*w)
		for i := range stored {
			stored[i] = byteAt(i)
		}
		q, ok := ix.NewQuery(m.Centroids[dim : 2*dim])
		if !ok {
			return
		}
		for depth := 0; depth <= 2; depth++ {
			part := &Partition{ID: int(rows) % k, RowIDs: make([]uint64, n), Codes: Undo(m.Type.Quantizer(), stored, n, w, depth)}
			if m.RQ != nil {
				part.Add, part.Scale, part.Err = floats(1), floats(2), floats(3)
				if ex := m.RQ.NumBits - 1; ex > 0 {
					ew := encode.BlockedExCodeBytes(dim, ex)
					for i := 0; i < n; i++ {
						row := make([]byte, ew)
						for j := range row {
							row[j] = byteAt(i*ew + j + 7)
						}
						part.Ex = append(part.Ex, encode.UnpackBlockedRow(row, ex, dim)...)
					}
					part.ExAdd, part.ExScale = floats(4), floats(5)
				}
			}
			if got := q.Distances(part, 10, nil); len(got) != n {
				t.Fatalf("%d distances for %d rows", len(got), n)
			}
		}
	})
}
