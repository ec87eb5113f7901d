package lancefile

import (
	"encoding/binary"
	"fmt"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// FSST-compressed strings, as pylance 14.0.2 writes them for utf8 pages
// of many distinct values (python/tests/test_lancefile.py has it write
// both layouts): the page's value compression is
// Fsst{symbol_table, values: Variable{offsets: Flat{32|64}}}, one symbol
// table per page, and the values are laid out exactly as uncompressed
// ones (mini-block chunks or full-zip items), each value's bytes being
// its FSST codes.
//
// The symbol table starts with a little-endian u64 header: the magic
// "FSST" in bits 32-63, a switch in bit 24 (0: the values are stored
// raw), then suffix limit and terminator (encoder state, unused when
// decoding) and the symbol count in bits 0-7. Then come that many u64
// symbols (little-endian, the symbol's bytes first) and that many u8
// symbol lengths. A code below the count emits its symbol; code 255
// emits the byte after it.

const (
	fsstMagic  = 0x46535354 // "FSST", the header's bits 32-63
	fsstEscape = 255
)

type fsstTable struct {
	on   bool // false: values are stored raw
	n    int
	syms [255]uint64
	lens [255]uint8
}

// fsstValues unwraps an Fsst value compression: it returns the page's
// symbol table and the encoding of the compressed values, or a nil table
// and e itself when e is not FSST.
func fsstValues(e *enc21.CompressiveEncoding) (*fsstTable, *enc21.CompressiveEncoding, error) {
	f, ok := e.GetCompression().(*enc21.CompressiveEncoding_Fsst)
	if !ok {
		return nil, e, nil
	}
	t, err := parseFsstTable(f.Fsst.GetSymbolTable())
	if err != nil {
		return nil, nil, err
	}
	return t, f.Fsst.GetValues(), nil
}

func parseFsstTable(b []byte) (*fsstTable, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: FSST symbol table of %d bytes", errkind.Corrupt, len(b))
	}
	h := binary.LittleEndian.Uint64(b)
	if h>>32 != fsstMagic {
		return nil, fmt.Errorf("%w: FSST symbol table without its magic (header %#x)", errkind.Corrupt, h)
	}
	t := &fsstTable{on: h&(1<<24) != 0, n: int(h & 0xff)}
	if !t.on {
		return t, nil
	}
	if len(b) < 8+9*t.n {
		return nil, fmt.Errorf("%w: FSST symbol table of %d bytes for %d symbols", errkind.Corrupt, len(b), t.n)
	}
	lens := b[8+8*t.n:]
	for i := 0; i < t.n; i++ {
		t.syms[i] = binary.LittleEndian.Uint64(b[8+8*i:])
		if l := lens[i]; l < 1 || l > 8 {
			return nil, fmt.Errorf("%w: FSST symbol %d of length %d", errkind.Corrupt, i, l)
		}
		t.lens[i] = lens[i]
	}
	return t, nil
}

// appendDecoded appends the decompression of one value's codes to dst.
func (t *fsstTable) appendDecoded(dst, codes []byte) ([]byte, error) {
	if !t.on {
		return append(dst, codes...), nil
	}
	var sym [8]byte
	for i := 0; i < len(codes); i++ {
		c := codes[i]
		if c == fsstEscape {
			if i++; i == len(codes) {
				return dst, fmt.Errorf("%w: FSST value ends in an escape", errkind.Corrupt)
			}
			dst = append(dst, codes[i])
			continue
		}
		if int(c) >= t.n {
			return dst, fmt.Errorf("%w: FSST code %d of a %d-symbol table", errkind.Corrupt, c, t.n)
		}
		binary.LittleEndian.PutUint64(sym[:], t.syms[c])
		dst = append(dst, sym[:t.lens[c]]...)
	}
	return dst, nil
}
