package lancefile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lance-segmerge/lance-segmerge/gokernel/errkind"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb"
	"github.com/lance-segmerge/lance-segmerge/gokernel/internal/pb/enc21"
	"github.com/lance-segmerge/lance-segmerge/gokernel/storage"
)

// genArray makes n rows of type t (item for lists) with a fraction of nulls.
func genArray(r *rand.Rand, t, item DataType, n int, nullFrac, emptyFrac float64) *Array {
	a := &Array{Type: t, Len: n}
	if nullFrac > 0 {
		a.Validity = make([]byte, (n+7)/8)
		for i := 0; i < n; i++ {
			if r.Float64() >= nullFrac {
				a.Validity[i/8] |= 1 << (i % 8)
			}
		}
	}
	if isList(t) {
		a.Offsets = []int64{0}
		total := 0
		for i := 0; i < n; i++ {
			k := 1 + r.IntN(5)
			if !a.IsValid(i) || r.Float64() < emptyFrac {
				k = 0
			}
			total += k
			a.Offsets = append(a.Offsets, int64(total))
		}
		a.Items = genArray(r, item, DataType{}, total, 0, 0)
		return a
	}
	if t.Kind == KindBinary {
		a.Offsets = []int64{0}
		for i := 0; i < n; i++ {
			if a.IsValid(i) && r.Float64() >= emptyFrac {
				for range r.IntN(40) {
					a.Values = append(a.Values, byte(r.Uint32()))
				}
			}
			a.Offsets = append(a.Offsets, int64(len(a.Values)))
		}
		return a
	}
	a.Values = make([]byte, n*t.ValueBits()/8)
	for i := range a.Values {
		a.Values[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		if !a.IsValid(i) {
			clear(a.Values[i*t.ValueBits()/8 : (i+1)*t.ValueBits()/8])
		}
	}
	return a
}

// equalRows compares two arrays row by row (valid rows only carry values).
func equalRows(t *testing.T, label string, want, got *Array) {
	t.Helper()
	if want.Len != got.Len {
		t.Fatalf("%s: %d rows, want %d", label, got.Len, want.Len)
	}
	for i := 0; i < want.Len; i++ {
		if want.IsValid(i) != got.IsValid(i) {
			t.Fatalf("%s: row %d validity %v, want %v", label, i, got.IsValid(i), want.IsValid(i))
		}
		if !want.IsValid(i) {
			continue
		}
		if isList(want.Type) {
			w := want.Items.Slice(int(want.Offsets[i]), int(want.Offsets[i+1]))
			g := got.Items.Slice(int(got.Offsets[i]), int(got.Offsets[i+1]))
			if w.Len != g.Len || !bytes.Equal(w.Values, g.Values) && w.Type.Kind != KindBinary {
				t.Fatalf("%s: list row %d differs", label, i)
			}
			if w.Type.Kind == KindBinary || isList(w.Type) {
				equalRows(t, fmt.Sprintf("%s: list row %d", label, i), w, g)
			}
			continue
		}
		if want.Type.Kind == KindBinary {
			if !bytes.Equal(want.Values[want.Offsets[i]:want.Offsets[i+1]], got.Values[got.Offsets[i]:got.Offsets[i+1]]) {
				t.Fatalf("%s: row %d differs", label, i)
			}
			continue
		}
		rb := want.rowBytes()
		if !bytes.Equal(want.Values[i*rb:(i+1)*rb], got.Values[i*rb:(i+1)*rb]) {
			t.Fatalf("%s: row %d differs", label, i)
		}
	}
}

type colSpec struct {
	name     string
	t, item  DataType
	nullFrac float64
	empty    float64
}

var specs = []colSpec{
	{"_rowid", Primitive(KindUint64), DataType{}, 0, 0},
	{"f32", Primitive(KindFloat32), DataType{}, 0, 0},
	{"f32_nulls", Primitive(KindFloat32), DataType{}, 0.1, 0},
	{"pq16", FixedSizeList(KindUint8, 16), DataType{}, 0, 0},
	{"pq48_nulls", FixedSizeList(KindUint8, 48), DataType{}, 0.05, 0},
	{"sq300", FixedSizeList(KindUint8, 300), DataType{}, 0, 0},
	{"flat128", FixedSizeList(KindFloat32, 128), DataType{}, 0, 0},
	{"flat64_nulls", FixedSizeList(KindFloat32, 64), DataType{}, 0.1, 0},
	{"f16x8", FixedSizeList(KindFloat16, 8), DataType{}, 0, 0},
	{"nbrs", ListType(), Primitive(KindUint32), 0, 0},
	{"nbrs_empty", ListType(), Primitive(KindUint32), 0, 0.2},
	{"dists_null", ListType(), Primitive(KindFloat32), 0.1, 0.1},
}

// specFields declares one field per column spec.
func specFields() []*Field { return fieldsOf(specs) }

// fieldsOf declares one field per column spec of specs.
func fieldsOf(specs []colSpec) []*Field {
	var fields []*Field
	for _, s := range specs {
		if isList(s.t) {
			fields = append(fields, NewListField(s.name, s.item, s.nullFrac > 0, false))
		} else {
			fields = append(fields, NewField(s.name, s.t, s.nullFrac > 0))
		}
	}
	return fields
}

func writeFile(t *testing.T, v Version, n, batches int, pageBytes int, r *rand.Rand) ([]*Array, []byte) {
	t.Helper()
	fields := specFields()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, fields, WriterOptions{Version: v, MaxPageBytes: pageBytes})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := w.AddGlobalBuffer([]byte("ivf")); err != nil || g != 1 {
		t.Fatalf("global buffer %d %v", g, err)
	}
	w.SetMetadata("lance:ivf", []byte("1"))
	whole := make([][]*Array, len(specs))
	for b := 0; b < batches; b++ {
		batch := make([]*Array, len(specs))
		for i, s := range specs {
			batch[i] = genArray(r, s.t, s.item, n, s.nullFrac, s.empty)
			whole[i] = append(whole[i], batch[i])
		}
		if err := w.Write(batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	var out []*Array
	for i, s := range specs {
		a, err := Concat(s.t, whole[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out, buf.Bytes()
}

func TestWriteReadRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, v := range []Version{V2_0, V2_1, V2_2} {
		for _, tc := range []struct{ n, batches, pageBytes int }{{0, 1, 0}, {1, 1, 0}, {3000, 1, 0}, {2500, 4, 64 << 10}} {
			t.Run(fmt.Sprintf("%s/%dx%d/page%d", v, tc.batches, tc.n, tc.pageBytes), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.n), 7))
				want, file := writeFile(t, v, tc.n, tc.batches, tc.pageBytes, r)
				rd, err := openBytes(t, file)
				if err != nil {
					t.Fatal(err)
				}
				if rd.Version() != v || rd.NumRows() != uint64(tc.n*tc.batches) {
					t.Fatalf("version %v rows %d", rd.Version(), rd.NumRows())
				}
				if g, _ := rd.GlobalBuffer(ctx, 1); string(g) != "ivf" {
					t.Fatalf("global buffer %q", g)
				}
				if m, _ := rd.MetadataString("lance:ivf"); m != "1" {
					t.Fatalf("metadata %q", m)
				}
				total := tc.n * tc.batches
				reuse := make([]byte, 0, 64)
				for i, s := range specs {
					got, err := rd.ReadAll(ctx, s.name)
					if err != nil {
						t.Fatalf("%s: %v", s.name, err)
					}
					equalRows(t, s.name, want[i], got)
					ranges := [][2]int{{0, min(1, total)}, {total / 3, total / 2}, {max(total-5, 0), total}}
					for k := 0; k < 8 && total > 0; k++ { // random ranges, most across pages
						a := r.IntN(total)
						ranges = append(ranges, [2]int{a, a + 1 + r.IntN(total-a)})
					}
					for _, rg := range ranges {
						got, err := rd.Read(ctx, s.name, uint64(rg[0]), uint64(rg[1]))
						if err != nil {
							t.Fatalf("%s %v: %v", s.name, rg, err)
						}
						equalRows(t, fmt.Sprintf("%s %v", s.name, rg), want[i].Slice(rg[0], rg[1]), got)
						// The same through one recycled buffer, too small at
						// times (then the reader allocates).
						if !isList(s.t) && cap(reuse) < IntoCap(s.t, rg[1]-rg[0]) && r.IntN(2) == 0 {
							reuse = make([]byte, 0, IntoCap(s.t, rg[1]-rg[0]))
						}
						into, err := rd.ReadInto(ctx, s.name, uint64(rg[0]), uint64(rg[1]), reuse)
						if err != nil {
							t.Fatalf("%s %v into: %v", s.name, rg, err)
						}
						equalRows(t, fmt.Sprintf("%s %v into", s.name, rg), want[i].Slice(rg[0], rg[1]), into)
						// The file's own bound (never more than its rows) is
						// enough: decoded in place, nothing allocated.
						if !isList(s.t) && s.nullFrac == 0 && v != V2_0 && rg[1] > rg[0] {
							n := rd.IntoCap(s.t, rg[1]-rg[0])
							if n > total*s.t.ValueBits()/8 {
								t.Fatalf("%s: IntoCap %d above the file's %d rows", s.name, n, total)
							}
							exact := make([]byte, 0, n)
							got, err := rd.ReadInto(ctx, s.name, uint64(rg[0]), uint64(rg[1]), exact)
							if err != nil {
								t.Fatalf("%s %v exact: %v", s.name, rg, err)
							}
							equalRows(t, fmt.Sprintf("%s %v exact", s.name, rg), want[i].Slice(rg[0], rg[1]), got)
							if &got.Values[0] != &exact[:1][0] {
								t.Fatalf("%s %v: a buffer of IntoCap = %d bytes was not used", s.name, rg, n)
							}
							// No page decode outgrew it either: as few
							// allocations as with a buffer far larger.
							large := make([]byte, 0, n+1<<20)
							allocs := func(dst []byte) float64 {
								return testing.AllocsPerRun(3, func() { rd.ReadInto(ctx, s.name, uint64(rg[0]), uint64(rg[1]), dst) })
							}
							if a, b := allocs(exact), allocs(large); a > b {
								t.Fatalf("%s %v: %v allocations with IntoCap = %d bytes, %v with more", s.name, rg, a, n, b)
							}
						}
					}
				}
				// Alignment: every page and global buffer starts on 64 bytes.
				for ci, cm := range rd.columns {
					for pi, p := range cm.GetPages() {
						for _, off := range p.GetBufferOffsets() {
							if off%64 != 0 {
								t.Fatalf("column %d page %d buffer at %d", ci, pi, off)
							}
						}
					}
				}
				for _, g := range rd.globals {
					if g.pos%64 != 0 {
						t.Fatalf("global buffer at %d", g.pos)
					}
				}
				if _, cols, _ := rd.fieldColumns("flat128"); tc.pageBytes > 0 && len(rd.columns[cols[0]].GetPages()) < 4 {
					t.Fatalf("expected several pages, got %d", len(rd.columns[cols[0]].GetPages()))
				}
			})
		}
	}
}

func TestWriterRejects(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []*Field{NewField("x", Primitive(KindUint64), false)}, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]*Array{
		{},
		{{Type: Primitive(KindUint32), Len: 1, Values: make([]byte, 4)}},
		{{Type: Primitive(KindUint64), Len: 2, Values: make([]byte, 8)}},
		{{Type: Primitive(KindUint64), Len: 1, Values: make([]byte, 8), Validity: []byte{0}}},
	} {
		if err := w.Write(batch); err == nil {
			t.Fatalf("accepted %+v", batch)
		}
	}
	if _, err := NewWriter(&buf, nil, WriterOptions{Version: Version{3, 0}}); err == nil {
		t.Fatal("accepted version 3.0")
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]*Array{{Type: Primitive(KindUint64), Len: 1, Values: make([]byte, 8)}}); err == nil {
		t.Fatal("write after Finish")
	}
}

// A Writer over a storage.Writer streams: pages reach the store before
// Finish.
func TestWriterStreams(t *testing.T) {
	ctx := context.Background()
	st := storage.NewLocal(t.TempDir(), "t")
	sw, err := st.Create(ctx, "f.lance")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingWriter{w: sw}
	w, err := NewWriter(counting, []*Field{NewField("v", FixedSizeList(KindFloat32, 64), false)}, WriterOptions{MaxPageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 10; i++ {
		if err := w.Write([]*Array{genArray(r, FixedSizeList(KindFloat32, 64), DataType{}, 4096, 0, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if counting.n < 9<<20 {
		t.Fatalf("only %d bytes written before Finish: the writer buffers", counting.n)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(); err != nil {
		t.Fatal(err)
	}
	obj, _ := st.Open(ctx, "f.lance")
	defer obj.Close()
	rd, err := Open(ctx, obj, "f", Options{})
	if err != nil || rd.NumRows() != 40960 {
		t.Fatalf("%v %v", rd, err)
	}
}

type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return c.w.Write(p) }

func TestValuesPerChunk(t *testing.T) {
	for _, tc := range []struct{ bytes, want int }{{8, 512}, {4, 1024}, {1, 4096}, {16, 256}, {48, 128}, {128, 32}, {255, 32}, {2, 2048}} {
		if got := valuesPerChunk(tc.bytes); got != tc.want {
			t.Fatalf("valuesPerChunk(%d) = %d, want %d", tc.bytes, got, tc.want)
		}
	}
}

// Unknown encodings (a oneof number we do not know decodes as unset) and
// page type URLs are corruption; recognised but unhandled codecs are
// unsupported.
func TestUnknownEncodings(t *testing.T) {
	unknown := &enc21.CompressiveEncoding{}
	unknown.ProtoReflect().SetUnknown([]byte{0xa0, 0x06, 0x01}) // field 100
	if _, err := decodeMiniBlockValues(unknown, [][]byte{{1}}, 1, 8, nil); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("unknown value encoding: %v", err)
	}
	if _, err := decodeBlock(unknown, []byte{1, 2}, 1, 16); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("unknown block encoding: %v", err)
	}
	fsst := &enc21.CompressiveEncoding{Compression: &enc21.CompressiveEncoding_Fsst{Fsst: &enc21.Fsst{}}}
	if _, err := decodeMiniBlockValues(fsst, [][]byte{{1}}, 1, 8, nil); !errors.Is(err, errkind.Unsupported) {
		t.Fatalf("fsst: %v", err)
	}
	e, _ := directEncoding("/lance.encodings99.Weird", nil)
	if err := decodeAny(&pb.Page{Encoding: e}, "lance.encodings21.PageLayout", &enc21.PageLayout{}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("unknown page type: %v", err)
	}
	if err := decodeAny(&pb.Page{}, "x", &enc21.PageLayout{}); !errors.Is(err, errkind.Corrupt) {
		t.Fatalf("page without encoding: %v", err)
	}
}

// TestWriteChunkedCopies checks WriteChunked's contract: the writer keeps
// no reference to the pieces, so the caller may overwrite them at once,
// also when it is mixed with Write (which keeps references) on one writer.
func TestWriteChunkedCopies(t *testing.T) {
	ctx := context.Background()
	scribble := func(a *Array) {
		for _, b := range [][]byte{a.Values, a.Validity, a.ItemValidity} {
			for i := range b {
				b[i] ^= 0x5a
			}
		}
		if a.Items != nil {
			for i := range a.Items.Values {
				a.Items.Values[i] ^= 0x5a
			}
		}
	}
	// binary columns too, which WriteChunked copies into buffers of their own
	specs := append(slices.Clip(specs),
		colSpec{"bin", DataType{Kind: KindBinary, Logical: "binary"}, DataType{}, 0, 0.1},
		colSpec{"str_nulls", DataType{Kind: KindBinary, Logical: "string"}, DataType{}, 0.2, 0.1},
		colSpec{"large_nulls", DataType{Kind: KindBinary, Logical: "large_binary"}, DataType{}, 0.05, 0})
	for _, v := range []Version{V2_0, V2_1, V2_2} {
		t.Run(v.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			fields := fieldsOf(specs)
			var buf bytes.Buffer
			w, err := NewWriter(&buf, fields, WriterOptions{Version: v, MaxPageBytes: 32 << 10})
			if err != nil {
				t.Fatal(err)
			}
			want := make([][]*Array, len(specs))
			for b := 0; b < 6; b++ {
				n := 300 + r.IntN(700)
				batch := make([]*Array, len(specs))
				for i, s := range specs {
					batch[i] = genArray(r, s.t, s.item, n, s.nullFrac, s.empty)
					keep, err := Concat(s.t, []*Array{batch[i]}) // a deep copy to compare with
					if err != nil {
						t.Fatal(err)
					}
					want[i] = append(want[i], keep)
				}
				if b%3 == 2 {
					if err := w.Write(batch); err != nil {
						t.Fatal(err)
					}
					continue
				}
				cut := []int{0, n / 3, n / 2, n}
				cols := make([][]*Array, len(specs))
				for i := range specs {
					for k := 0; k+1 < len(cut); k++ {
						cols[i] = append(cols[i], batch[i].Slice(cut[k], cut[k+1]))
					}
				}
				if err := w.WriteChunked(cols); err != nil {
					t.Fatal(err)
				}
				for _, a := range batch {
					scribble(a)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			rd, err := openBytes(t, buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range specs {
				got, err := rd.ReadAll(ctx, s.name)
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				all, _ := Concat(s.t, want[i])
				equalRows(t, s.name, all, got)
			}
		})
	}
}

// TestExpectedRowsKeepsTheBytes: the ExpectedRows hint only sizes the
// column buffers; the file is the same whether the hint is absent, far too
// low (the buffers grow), exact or far too high.
func TestExpectedRowsKeepsTheBytes(t *testing.T) {
	const n, batches = 1500, 3
	for _, v := range []Version{V2_0, V2_2} {
		var first []byte
		for _, hint := range []int{0, 1, n * batches, 100 * n * batches} {
			r := rand.New(rand.NewPCG(11, 7))
			var buf bytes.Buffer
			w, err := NewWriter(&buf, specFields(), WriterOptions{Version: v, MaxPageBytes: 32 << 10, ExpectedRows: hint})
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < batches; b++ {
				batch := make([][]*Array, len(specs)) // each column in two pieces
				for i, s := range specs {
					a := genArray(r, s.t, s.item, n, s.nullFrac, s.empty)
					batch[i] = []*Array{a.Slice(0, n/3), a.Slice(n/3, n)}
				}
				if err := w.WriteChunked(batch); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = buf.Bytes()
				continue
			}
			if !bytes.Equal(buf.Bytes(), first) {
				t.Fatalf("%s: ExpectedRows %d wrote a different file (%d bytes, %d without the hint)", v, hint, buf.Len(), len(first))
			}
		}
	}
}

// writeInSlices writes a as field f's column, step rows per Write, and
// opens the file.
func writeInSlices(t *testing.T, f *Field, a *Array, v Version, maxPage, step int) *Reader {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []*Field{f}, WriterOptions{Version: v, MaxPageBytes: maxPage})
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < a.Len; lo += step {
		if err := w.Write([]*Array{a.Slice(lo, min(lo+step, a.Len))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	rd, err := openBytes(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// TestListOfBinary: lists of binary (the posting blocks of a full-text
// index) are written in 2.0 as a List page over a Binary page and in 2.1
// and 2.2 as full-zip pages, and read back whole and by range, with empty
// items (and, in 2.0, empty lists; 2.1 refuses those).
func TestListOfBinary(t *testing.T) {
	ctx := context.Background()
	item := DataType{Kind: KindBinary, Logical: "large_binary"}
	for _, v := range []Version{V2_0, V2_1, V2_2} {
		r := rand.New(rand.NewPCG(3, 4))
		const n = 700
		a := &Array{Type: ListType(), Len: n, Offsets: []int64{0}}
		items := &Array{Type: item, Offsets: []int64{0}}
		for i := 0; i < n; i++ {
			k := r.IntN(4)
			if v != V2_0 {
				k++
			}
			for j := 0; j < k; j++ {
				b := make([]byte, r.IntN(300))
				for x := range b {
					b[x] = byte(r.Uint32())
				}
				items.Values = append(items.Values, b...)
				items.Offsets = append(items.Offsets, int64(len(items.Values)))
				items.Len++
			}
			a.Offsets = append(a.Offsets, int64(items.Len))
		}
		a.Items = items
		rd := writeInSlices(t, NewListField("_posting", item, false, false), a, v, 16<<10, 250)
		got, err := rd.ReadAll(ctx, "_posting")
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		equalRows(t, v.String()+" all", a, got)
		for _, rg := range [][2]int{{0, 1}, {100, 400}, {n - 3, n}} {
			got, err := rd.Read(ctx, "_posting", uint64(rg[0]), uint64(rg[1]))
			if err != nil {
				t.Fatal(err)
			}
			equalRows(t, fmt.Sprint(v, rg), a.Slice(rg[0], rg[1]), got)
		}
	}
	empty := &Array{Type: ListType(), Len: 1, Offsets: []int64{0, 0}, Items: &Array{Type: item, Offsets: []int64{0}, Values: []byte{}}}
	w, _ := NewWriter(&bytes.Buffer{}, []*Field{NewListField("_posting", item, false, false)}, WriterOptions{Version: V2_2})
	if err := w.Write([]*Array{empty}); err == nil {
		if err = w.Finish(); err == nil {
			t.Fatal("2.2: an empty list of binary written")
		}
	}
}

// TestListOfListsOfBinary20: a 2.0 list of lists of binary (FTS format 1
// positions: per token, per document, its packed chunks) is three
// physical columns; it is written over several pages and read back whole
// and by range, empty lists at both levels included. 2.1+ refuse it.
func TestListOfListsOfBinary20(t *testing.T) {
	ctx := context.Background()
	bin := DataType{Kind: KindBinary, Logical: "large_binary"}
	inner := &Array{Type: ListType(), Offsets: []int64{0}, Items: &Array{Type: bin, Offsets: []int64{0}}}
	const n = 500
	outer := &Array{Type: ListType(), Len: n, Offsets: []int64{0}, Items: inner}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < n; i++ {
		for d := r.IntN(5); d > 0; d-- {
			for k := r.IntN(4); k > 0; k-- {
				b := make([]byte, r.IntN(40))
				for x := range b {
					b[x] = byte(r.Uint32())
				}
				it := inner.Items
				it.Values = append(it.Values, b...)
				it.Offsets = append(it.Offsets, int64(len(it.Values)))
				it.Len++
			}
			inner.Offsets = append(inner.Offsets, int64(inner.Items.Len))
			inner.Len++
		}
		outer.Offsets = append(outer.Offsets, int64(inner.Len))
	}
	field := func() *Field {
		f := NewListField("_position", ListType(), false, false)
		f.Children[0].Children = []*Field{{Name: "item", Type: bin}}
		return f
	}
	rd := writeInSlices(t, field(), outer, V2_0, 4<<10, 120)
	if pages := len(rd.columns[0].GetPages()); pages < 3 {
		t.Fatalf("%d offsets pages: the test means to cross pages", pages)
	}
	got, err := rd.ReadAll(ctx, "_position")
	if err != nil {
		t.Fatal(err)
	}
	equalRows(t, "all", outer, got)
	for _, rg := range [][2]int{{0, 1}, {117, 365}, {n - 2, n}} {
		got, err := rd.Read(ctx, "_position", uint64(rg[0]), uint64(rg[1]))
		if err != nil {
			t.Fatal(err)
		}
		equalRows(t, fmt.Sprint(rg), outer.Slice(rg[0], rg[1]), got)
	}
	if _, err := NewWriter(&bytes.Buffer{}, []*Field{field()}, WriterOptions{Version: V2_2}); !errors.Is(err, errkind.Unsupported) {
		t.Fatalf("2.2 list of lists: %v", err)
	}
}

// An int64 column packs like pylance 14's: a page of non-negative values
// is inline-bitpacked, a page with a negative value is flat, and both
// read back exactly.
func TestInt64PagesPackUnlessNegative(t *testing.T) {
	var file bytes.Buffer
	w, err := NewWriter(&file, []*Field{NewField("v", Primitive(KindInt64), false)}, WriterOptions{Version: V2_2, MaxPageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8192 // 64 KiB of values: one page each
	var want []byte
	for page, lo := range []int64{0, -3} {
		b := make([]byte, 0, n*8)
		for i := range int64(n) {
			b = binary.LittleEndian.AppendUint64(b, uint64(lo+i%1000*int64(page+1)))
		}
		want = append(want, b...)
		if err := w.Write([]*Array{{Type: Primitive(KindInt64), Len: n, Values: b}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	rd, err := openBytes(t, file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	pages := rd.columns[0].GetPages()
	if len(pages) != 2 {
		t.Fatalf("%d pages, want 2", len(pages))
	}
	for i, packed := range []bool{true, false} {
		var l enc21.PageLayout
		if err := decodeAny(pages[i], "lance.encodings21.PageLayout", &l); err != nil {
			t.Fatal(err)
		}
		got := l.GetMiniBlockLayout().GetValueCompression().GetInlineBitpacking() != nil
		if got != packed {
			t.Errorf("page %d: bitpacked %v, want %v (%v)", i, got, packed, l.GetMiniBlockLayout().GetValueCompression())
		}
	}
	a, err := rd.Read(context.Background(), "v", 0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Values, want) {
		t.Fatal("int64 values do not read back")
	}
}

// A column of a type this package does not encode (a dictionary, as
// ZONEMAP bounds of a dictionary column) is written and read back (as its
// values' type) when all its rows are null, in 2.0 and 2.2; a value in it
// is refused.
func TestAllNullColumnsOfOpaqueTypes(t *testing.T) {
	ctx := context.Background()
	for _, logical := range []string{"dict:string:int32:false", "dict:int64:int8:false"} {
		t.Run(logical, func(t *testing.T) { testAllNullOpaque(t, ctx, logical) })
	}
}

func testAllNullOpaque(t *testing.T, ctx context.Context, logical string) {
	dict := ParseLogicalType(logical)
	if dict.Kind != KindUnknown {
		t.Fatalf("%s parsed as %v", dict, dict.Kind)
	}
	for _, v := range []Version{V2_0, V2_2} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, []*Field{NewField("min", dict, true), NewField("n", Primitive(KindUint32), false)}, WriterOptions{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		nulls := &Array{Type: dict, Len: 3, Validity: []byte{0}}
		if err := w.Write([]*Array{nulls, {Type: Primitive(KindUint32), Len: 3, Values: make([]byte, 12)}}); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		rd, err := openBytes(t, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got, err := rd.ReadAll(ctx, "min")
		if vals, _ := DictValues(dict); err != nil || got.Len != 3 || got.NullCount() != 3 || got.Type != vals {
			t.Fatalf("%s: %+v, %v", v, got, err)
		}
		w, _ = NewWriter(&bytes.Buffer{}, []*Field{NewField("min", dict, true)}, WriterOptions{Version: v})
		if err := w.Write([]*Array{{Type: dict, Len: 1, Validity: []byte{1}}}); !errors.Is(err, errkind.Unsupported) {
			t.Fatalf("%s: a value of %s written: %v", v, dict, err)
		}
	}
}

// Null lists (ZONEMAP bounds of a list column) are written as pylance
// writes them in 2.1+, a constant page whose repetition and definition
// levels are all 1, and read back as null lists in every version.
func TestNullLists(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		v    Version
		item DataType
	}{
		{V2_0, Primitive(KindInt64)},
		{V2_0, ParseLogicalType("string")},
		{V2_1, ParseLogicalType("string")},
		{V2_2, Primitive(KindInt64)},
	} {
		var buf bytes.Buffer
		f := NewListField("min", tt.item, true, true)
		w, err := NewWriter(&buf, []*Field{f}, WriterOptions{Version: tt.v})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write([]*Array{NullLists(f.Type, tt.item, 5)}); err != nil {
			t.Fatalf("%s %s: %v", tt.v, tt.item, err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		rd, err := openBytes(t, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got, err := rd.ReadAll(ctx, "min")
		if err != nil || got.Len != 5 || got.NullCount() != 5 || got.Items == nil || got.Items.Len != 0 {
			t.Fatalf("%s %s: %+v, %v", tt.v, tt.item, got, err)
		}
		if tt.v == V2_0 {
			continue
		}
		l := &enc21.PageLayout{}
		if err := decodeAny(rd.columns[0].GetPages()[0], "lance.encodings21.PageLayout", l); err != nil {
			t.Fatal(err)
		}
		c := l.GetAllNullLayout()
		want := []enc21.RepDefLayer{enc21.RepDefLayer_REPDEF_ALL_VALID_ITEM, enc21.RepDefLayer_REPDEF_NULLABLE_LIST}
		if c == nil || !slices.Equal(c.GetLayers(), want) || c.GetNumRepValues() != 5 || c.GetNumDefValues() != 5 {
			t.Fatalf("%s %s: page layout %v", tt.v, tt.item, l)
		}
	}
}

// TestCopiedRowsSplitAtPages: rows handed to WriteChunked in one array far
// larger than a page are copied a page at a time (the column's buffer
// never grows past a page), every page holds at most a page of bytes, and
// the rows read back as written.
func TestCopiedRowsSplitAtPages(t *testing.T) {
	const maxPage = 4096
	for _, tc := range []struct {
		name  string
		typ   DataType
		rows  int
		width int
	}{
		{"int64", Primitive(KindInt64), 5000, 8},
		{"uint8", Primitive(KindUint8), 9000, 1},
		{"vector", FixedSizeList(KindFloat32, 24), 700, 96}, // 4096 is not a multiple of 96
		{"one page", Primitive(KindInt64), 100, 8},
	} {
		for _, v := range []Version{V2_0, V2_2} {
			t.Run(fmt.Sprint(tc.name, "/", v), func(t *testing.T) {
				r := rand.New(rand.NewPCG(5, 9))
				vals := make([]byte, tc.rows*tc.width)
				for i := range vals {
					vals[i] = byte(r.IntN(256))
				}
				a := &Array{Type: tc.typ, Len: tc.rows, Values: vals}
				var buf bytes.Buffer
				w, err := NewWriter(&buf, []*Field{NewField("v", tc.typ, false)}, WriterOptions{Version: v, MaxPageBytes: maxPage})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.WriteChunked([][]*Array{{a}}); err != nil {
					t.Fatal(err)
				}
				if got := cap(w.cols[0].own); got > 2*maxPage {
					t.Errorf("the column's buffer holds %d bytes, a page is %d", got, maxPage)
				}
				if err := w.Finish(); err != nil {
					t.Fatal(err)
				}
				rd, err := openBytes(t, buf.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				perPage := (maxPage + tc.width - 1) / tc.width // a page closes once it holds maxPage bytes
				pages, rows := rd.columns[0].GetPages(), 0
				if want := (tc.rows + perPage - 1) / perPage; len(pages) != want {
					t.Errorf("%d pages, want %d", len(pages), want)
				}
				for i, p := range pages {
					if n := int(p.GetLength()); n > perPage {
						t.Errorf("page %d holds %d rows (%d bytes), more than fill a %d-byte page", i, n, n*tc.width, maxPage)
					}
					rows += int(p.GetLength())
				}
				if rows != tc.rows {
					t.Errorf("the pages hold %d rows, want %d", rows, tc.rows)
				}
				got, err := rd.Read(context.Background(), "v", 0, uint64(tc.rows))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Values, vals) {
					t.Error("the rows read back differ")
				}
			})
		}
	}
}

func TestDictValues(t *testing.T) {
	for _, c := range []struct {
		logical string
		want    string // "" when not a dictionary this package reads
	}{
		{"dict:string:int32:false", "string"},
		{"dict:large_string:int8:true", "large_string"},
		{"dict:int64:uint16:false", "int64"},
		{"dict:timestamp:us:UTC:int32:false", "timestamp:us:UTC"},
		{"dict:fixed_size_binary:16:int32:false", "fixed_size_binary:16"},
		{"dict:struct:int32:false", ""},
		{"dict:list:int32:false", ""},
		{"dict:string:int32", ""},
		{"dict:string:text:false", ""},
		{"dict::int32:false", ""},
		{"dict:", ""},
		{"string", ""},
	} {
		got, ok := DictValues(ParseLogicalType(c.logical))
		if ok != (c.want != "") || ok && got.Logical != c.want {
			t.Errorf("DictValues(%q) = %q, %v; want %q", c.logical, got.Logical, ok, c.want)
		}
	}
}
