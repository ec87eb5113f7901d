// Package table reads (and, for index commits, writes) the Lance table
// format: dataset versions under _versions/, manifest files, the index
// section with its IndexMetadata entries and their roaring fragment bitmaps,
// and transactions.
//
// A manifest file, as Lance writes it (all integers little-endian):
//
//	| u32 len | IndexSection |   (optional; Manifest.index_section = its offset)
//	| u32 len | Transaction  |   (optional; Manifest.transaction_section)
//	| u32 len | Manifest     |   <- manifest_pos
//	| i64 manifest_pos | u16 major | u16 minor | "LANC" |   (16-byte footer)
//
// The Manifest message must end exactly where the footer begins.
//
// Version files are named either "{v}.manifest" (V1 scheme) or
// "{2^64-1-v:020}.manifest" (V2 scheme, newest first in a listing);
// "d{v}.manifest" names a detached version, which is not part of the lineage.
//
// Concurrency: a Snapshot is immutable once opened and safe for concurrent
// reads.
package table
