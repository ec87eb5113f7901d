package lancefile

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
)

// smallFiles are files of every version and column kind, written by our
// writer, to seed the fuzzers alongside the Lance-written fixtures.
func smallFiles(tb testing.TB) [][]byte {
	var out [][]byte
	for _, v := range []Version{V2_0, V2_1, V2_2} {
		r := rand.New(rand.NewPCG(9, 9))
		var fields []*Field
		var batch []*Array
		for _, s := range specs {
			if isList(s.t) {
				fields = append(fields, NewListField(s.name, s.item, s.nullFrac > 0, false))
			} else {
				fields = append(fields, NewField(s.name, s.t, s.nullFrac > 0))
			}
			batch = append(batch, genArray(r, s.t, s.item, 40, s.nullFrac, s.empty))
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, fields, WriterOptions{Version: v})
		if err != nil {
			tb.Fatal(err)
		}
		if err := w.Write(batch); err != nil {
			tb.Fatal(err)
		}
		if err := w.Finish(); err != nil {
			tb.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	// strings and bools, the 2.0 pages specs leaves out
	r := rand.New(rand.NewPCG(9, 10))
	bools := &Array{Type: Primitive(KindBool), Len: 40, Values: make([]byte, 40)}
	for i := range bools.Values {
		bools.Values[i] = byte(r.IntN(2))
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []*Field{NewField("s", ParseLogicalType("string"), true), NewField("b", bools.Type, false)},
		WriterOptions{Version: V2_0})
	if err == nil {
		err = w.Write([]*Array{binaryArray(r, 40, 12, 3), bools})
	}
	if err == nil {
		err = w.Finish()
	}
	if err != nil {
		tb.Fatal(err)
	}
	return append(out, buf.Bytes())
}

// FuzzOpen feeds whole files to the footer, schema and column metadata
// decoders, then reads every global buffer and every column: page
// encodings, chunk headers, levels and codecs. Errors only, never a panic.
func FuzzOpen(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b)
	}
	for _, b := range smallFiles(f) {
		f.Add(b)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := openBytes(t, b)
		if err != nil {
			return
		}
		for i := 0; i < r.NumGlobalBuffers(); i++ {
			_, _ = r.GlobalBuffer(ctx, i)
		}
		for _, fd := range r.Fields() {
			_, _ = r.ReadAll(ctx, fd.Name)
			if r.NumRows() > 2 {
				_, _ = r.Read(ctx, fd.Name, 1, r.NumRows()-1)
			}
		}
	})
}

// FuzzParseFooter checks the footer parser alone against arbitrary tails.
func FuzzParseFooter(f *testing.F) {
	for _, b := range fixtureFiles(f) {
		f.Add(b[len(b)-FooterLen:], int64(len(b)))
	}
	f.Fuzz(func(t *testing.T, tail []byte, size int64) {
		if len(tail) != FooterLen {
			return
		}
		foot, err := parseFooter(tail, size)
		if err != nil {
			return
		}
		if foot.gboStart+16*uint64(foot.numGlobal)+FooterLen != uint64(size) {
			t.Fatalf("accepted a footer whose tables do not end at the footer: %+v size %d", foot, size)
		}
	})
}

// FuzzMiniBlockChunk decodes arbitrary chunk bytes under a list layout with
// bitpacked rep levels, RLE def levels and bitpacked values.
func FuzzMiniBlockChunk(f *testing.F) {
	f.Add([]byte{4, 0, 8, 0, 8, 0, 8, 0, 0xfe, 0xfe, 1, 0, 0, 0, 1, 0, 0, 0}, 4, true)
	f.Add(make([]byte, 64), 1024, false)
	f.Fuzz(func(t *testing.T, chunk []byte, n int, large bool) {
		if n < 0 || n > 4096 {
			return
		}
		l := &enc21.MiniBlockLayout{
			RepCompression: &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_OutOfLineBitpacking{
				OutOfLineBitpacking: &enc21.OutOfLineBitpacking{UncompressedBitsPerValue: 16, Values: flat21(1)}}},
			DefCompression: &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_Rle{
				Rle: &enc21.Rle{Values: flat21(16), RunLengths: flat21(8)}}},
			ValueCompression: &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_InlineBitpacking{
				InlineBitpacking: &enc21.InlineBitpacking{UncompressedBitsPerValue: 32}}},
			NumBuffers: 1, HasLargeChunk: large,
		}
		mb := &miniBlock{l: l, large: large, hasRep: true, hasDef: true, nbuf: 1, valueBits: 32}
		rep, def, _, err := mb.decodeChunk(chunk, n, nil)
		if err != nil {
			return
		}
		rd, _ := parseLayers([]enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM, enc21.RepDefLayer_REPDEF_EMPTYABLE_LIST})
		_ = newLevelsOut(rd).add(rep, def, min(len(rep), len(def)))
	})
}

// FuzzBlocks decodes arbitrary bytes with each block codec.
func FuzzBlocks(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 4}, 1024, uint8(0))
	f.Add(make([]byte, 128), 1024, uint8(1))
	f.Add([]byte{8, 0, 0, 0, 0x80, 1, 2, 3, 4, 5, 6, 7, 8}, 4, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, n int, which uint8) {
		if n < 0 || n > 1<<16 {
			return
		}
		var e *enc21.CompressiveEncoding
		switch which % 4 {
		case 0:
			e = &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_Rle{Rle: &enc21.Rle{Values: flat21(16), RunLengths: flat21(8)}}}
		case 1:
			e = &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_OutOfLineBitpacking{
				OutOfLineBitpacking: &enc21.OutOfLineBitpacking{UncompressedBitsPerValue: 16, Values: flat21(int(which/4) % 17)}}}
		case 2:
			e = &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_General{General: &enc21.General{
				Compression: &enc21.BufferCompression{Scheme: enc21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4}, Values: flat21(64)}}}
		default:
			e = &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_General{General: &enc21.General{
				Compression: &enc21.BufferCompression{Scheme: enc21.CompressionScheme_COMPRESSION_ALGORITHM_ZSTD}, Values: flat21(16)}}}
		}
		bits := 16
		if which%4 == 2 {
			bits = 64
		}
		out, err := decodeBlock(e, b, n, bits)
		if err == nil && len(out) != n*bits/8 {
			t.Fatalf("decoded %d bytes for %d values", len(out), n)
		}
	})
}
