package ivf

import (
	"encoding/binary"
	"math"
)

// Code layouts. Lance stores codes in the order its search kernels read
// them, per IVF partition of N rows:
//
// PQ "transposed": the N×B code bytes of a partition (B bytes per row) are
// stored column-major, Y[b·N + i] = X[i·B + b]. Rows of other columns
// (_rowid) stay in row order, so FSL row k of the stored column is not the
// code of row k.
//
// RQ "packed": the N×L binary code bytes are regrouped for the FastScan
// kernel in blocks of 32 rows: for block g and code byte c, the 32 bytes at
// 32·(g·L + c) hold byte c of the block's 32 rows, bytes j < 16 their low
// nibbles (row perm0[j] in the low half, row perm0[j]+16 in the high half)
// and bytes 16 + j their high nibbles (the same rows). The N mod 32 rows
// after the last full block are stored column-major.
//
// Neither transform is idempotent: applying either twice scrambles the
// codes, which is why a merge must undo each input's layout before applying
// it once to the merged partition. Part of the format; never change.

// rqBlock is the FastScan block size (rows).
const rqBlock = 32

// RQBlockRows is the FastScan block size: the packed bytes of each full
// block of RQBlockRows rows depend only on those rows, at their position.
const RQBlockRows = rqBlock

var rqPerm0 = [16]int{0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15}

// TransposePQ writes the column-major form of n rows of b bytes from src
// into dst (len n·b each).
func TransposePQ(dst, src []byte, n, b int) {
	for i := 0; i < n; i++ {
		row := src[i*b : (i+1)*b]
		for c, v := range row {
			dst[c*n+i] = v
		}
	}
}

// UntransposePQ is the inverse of TransposePQ.
func UntransposePQ(dst, src []byte, n, b int) {
	for i := 0; i < n; i++ {
		row := dst[i*b : (i+1)*b]
		for c := range row {
			row[c] = src[c*n+i]
		}
	}
}

// PackRQ writes the FastScan layout of n rows of l code bytes from src into
// dst (len n·l each).
func PackRQ(dst, src []byte, n, l int) {
	full := n / rqBlock
	for g := 0; g < full; g++ {
		rows, out := src[g*rqBlock*l:(g+1)*rqBlock*l], dst[g*rqBlock*l:(g+1)*rqBlock*l]
		for j := 0; j < 16; j++ {
			a := rqPerm0[j]
			x, y := rows[a*l:(a+1)*l], rows[(a+16)*l:(a+17)*l]
			c := 0
			for ; c+8 <= l; c += 8 { // eight code bytes of both rows at once
				xw, yw := binary.LittleEndian.Uint64(x[c:]), binary.LittleEndian.Uint64(y[c:])
				lo, hi := xw&lowNibbles|(yw&lowNibbles)<<4, xw>>4&lowNibbles|yw&^lowNibbles
				o := out[32*c+j : 32*(c+7)+j+17]
				for i := 0; i < 8; i++ {
					o[32*i], o[32*i+16] = byte(lo>>(8*i)), byte(hi>>(8*i))
				}
			}
			for ; c < l; c++ {
				out[32*c+j] = x[c]&0x0f | (y[c]&0x0f)<<4
				out[32*c+16+j] = x[c]>>4 | y[c]&0xf0
			}
		}
	}
	p, r := full*rqBlock, n-full*rqBlock
	for c := 0; c < l; c++ {
		for k := 0; k < r; k++ {
			dst[p*l+c*r+k] = src[(p+k)*l+c]
		}
	}
}

// lowNibbles masks the low nibble of each byte of a little-endian word.
const lowNibbles = 0x0f0f0f0f0f0f0f0f

// UnpackRQ is the inverse of PackRQ.
func UnpackRQ(dst, src []byte, n, l int) {
	full := n / rqBlock
	for g := 0; g < full; g++ {
		blk, rows := src[g*rqBlock*l:(g+1)*rqBlock*l], dst[g*rqBlock*l:(g+1)*rqBlock*l]
		for j := 0; j < 16; j++ {
			a := rqPerm0[j]
			x, y := rows[a*l:(a+1)*l], rows[(a+16)*l:(a+17)*l]
			c := 0
			for ; c+8 <= l; c += 8 {
				b := blk[32*c+j : 32*(c+7)+j+17]
				var lo, hi uint64
				for i := 0; i < 8; i++ {
					lo |= uint64(b[32*i]) << (8 * i)
					hi |= uint64(b[32*i+16]) << (8 * i)
				}
				binary.LittleEndian.PutUint64(x[c:], lo&lowNibbles|(hi&lowNibbles)<<4)
				binary.LittleEndian.PutUint64(y[c:], lo>>4&lowNibbles|hi&^lowNibbles)
			}
			for ; c < l; c++ {
				u, v := blk[32*c+j], blk[32*c+16+j]
				x[c] = u&0x0f | (v&0x0f)<<4
				y[c] = u>>4 | v&0xf0
			}
		}
	}
	p, r := full*rqBlock, n-full*rqBlock
	for c := 0; c < l; c++ {
		for k := 0; k < r; k++ {
			dst[(p+k)*l+c] = src[p*l+c*r+k]
		}
	}
}

// UnpackRQTail writes the rows after the last full block of a packed
// partition of n rows of l code bytes (src) into dst, row-major (len
// (n mod 32)·l).
func UnpackRQTail(dst, src []byte, n, l int) {
	p, r := n/rqBlock*rqBlock, n%rqBlock
	for c := 0; c < l; c++ {
		for k := 0; k < r; k++ {
			dst[k*l+c] = src[p*l+c*r+k]
		}
	}
}

// RequantizeSQ re-encodes 8-bit SQ codes from bounds [lo, hi] to bounds
// [newLo, newHi]. Lance encodes v as round((v-lo)·255/(hi-lo)), clamped to
// [0, 255]; a code c stands for lo + c·(hi-lo)/255.
func RequantizeSQ(dst, src []byte, lo, hi, newLo, newHi float64) {
	var table [256]byte
	r, nr := hi-lo, newHi-newLo
	for c := 0; c < 256; c++ {
		v := lo + float64(c)*r/255
		if nr <= 0 {
			continue
		}
		q := math.Round((v - newLo) * 255 / nr)
		table[c] = byte(max(0, min(255, q)))
	}
	for i, c := range src {
		dst[i] = table[c]
	}
}

// PQPart is one input's rows of a partition: n rows of PQ codes, stored
// transposed (column-major) or row-major.
type PQPart struct {
	Codes      []byte
	N          int
	Transposed bool
}

// MergeTransposedPQ writes the transposed layout of the concatenation of
// parts (in order) into dst, B bytes per row. A transposed part is copied
// one code byte column at a time (its columns are runs of the output's);
// a row-major part is transposed byte by byte.
func MergeTransposedPQ(dst []byte, parts []PQPart, b int) {
	total := 0
	for _, p := range parts {
		total += p.N
	}
	base := 0
	for _, p := range parts {
		if p.Transposed {
			for c := 0; c < b; c++ {
				copy(dst[c*total+base:c*total+base+p.N], p.Codes[c*p.N:(c+1)*p.N])
			}
		} else {
			transposeInto(dst, p.Codes, p.N, b, total, base)
		}
		base += p.N
	}
}

// transposeInto writes the n×b row-major block src, transposed, at column
// offset base of a b×total column-major dst. Rows go 8 at a time, so that
// every column receives 8 contiguous bytes per step.
func transposeInto(dst, src []byte, n, b, total, base int) {
	i := 0
	for ; i+8 <= n; i += 8 {
		blk := src[i*b : (i+8)*b]
		for c := 0; c < b; c++ {
			out := dst[c*total+base+i : c*total+base+i+8]
			out[0], out[1], out[2], out[3] = blk[c], blk[b+c], blk[2*b+c], blk[3*b+c]
			out[4], out[5], out[6], out[7] = blk[4*b+c], blk[5*b+c], blk[6*b+c], blk[7*b+c]
		}
	}
	for ; i < n; i++ {
		for c, v := range src[i*b : (i+1)*b] {
			dst[c*total+base+i] = v
		}
	}
}
