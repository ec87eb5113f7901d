// Package lancefile reads and writes Lance data files, format versions 2.0,
// 2.1 and 2.2, as Lance uses them for vector index files (index.idx,
// auxiliary.idx).
//
// Layout, start to end (integers little-endian):
//
//	| data pages + global buffers 1..n (each padded to 64 B with 0x48) |
//	| GB0: FileDescriptor (schema, row count) | ColumnMetadata 0..c-1 |
//	| CMO table: c × (u64 pos, u64 size) | GBO table: n+1 × (u64 pos, u64 size) |
//	| footer, 40 B: u64 colmeta start, u64 CMO start, u64 GBO start,
//	  u32 #global buffers, u32 #columns, u16 major, u16 minor, "LANC" |
//
// Footer versions: 2.0 is written as 0.3 (2.0 also read), 2.1 as 2.1, 2.2 as
// 2.2. Global buffer 0 is always the FileDescriptor; numbers stored in schema
// metadata ("lance:ivf": "1") index the GBO table directly.
//
// Usage:
//
//	r, err := lancefile.Open(ctx, obj, "auxiliary.idx", lancefile.Options{})
//	ivf, err := r.GlobalBuffer(ctx, 1)
//	part, err := r.Read(ctx, "__pq_code", off, off+n) // one IVF partition
//
//	w, err := lancefile.NewWriter(out, fields, lancefile.WriterOptions{Version: lancefile.V2_2})
//	n, err := w.AddGlobalBuffer(ivfBytes) // written now; returns 1, 2, …
//	err = w.Write(batch)                  // pages flush as columns fill
//	err = w.Finish()                      // schema, column metadata, footer
//
// What is read: 2.0 Nullable/Flat/FixedSizeList/List pages; 2.1 and 2.2
// mini-block (flat, FastLanes inline bitpacking, RLE, byte-stream-split,
// dictionary, LZ4/ZSTD general compression, fixed-size lists with item
// validity, u16/u32 chunk grammars), full-zip (fixed width, with control
// words) and constant/all-null pages, with one list layer and item
// nullability as repetition and definition levels. That is every encoding
// pylance 14 writes for index columns, and the ones its LanceFileWriter
// picks for other fixed-width data. What is written: 2.0 plain pages; 2.1
// and 2.2 mini-block (flat, inline bitpacking for unsigned integers) below
// 256 bytes per value, full-zip above, lists as mini-block with flat levels
// and a repetition index; in 2.0, lists of binary (a List page over a
// Binary page).
//
// In memory a column is an Array: fixed-width values as one contiguous
// little-endian byte slice (plus bitmaps), not arrow-go arrays. The merge
// only slices, concatenates and permutes rows of fixed-width values; a flat
// []byte lets it do that with copy() and hand pages straight to the writer,
// and keeps the kernel free of an allocator and of arrow's release rules.
//
// Concurrency: a Reader is safe for concurrent use. A Writer is not.
package lancefile
