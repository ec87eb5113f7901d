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
//
// Concurrency: a Reader is safe for concurrent use. A Writer is not.
package lancefile
