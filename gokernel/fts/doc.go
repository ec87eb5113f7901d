// Package fts reads, builds, merges and checks the segments of Lance
// full-text (INVERTED) indices, as pylance 14.0.2 writes them.
//
// A segment is metadata.lance (the analyzer's parameters, the partition
// ids, the layout keys) and, per partition N, part_N_tokens.lance (token
// to id, an fst map: fst.go), part_N_docs.lance (row id and token count
// of each document) and part_N_invert.lance (a row per token: posting
// blocks of 128 documents, block scores, impacts and positions:
// posting.go, encode.go, positions.go). docs/formats.md has the byte
// layout.
//
// Merge writes one partition from any number of input partitions, as
// pylance's merge does: documents appended in input order (rows of
// fragments the dataset no longer has dropped), token dictionaries
// unioned, each token's lists concatenated with documents renumbered and
// position deltas moved as they are, then blocks, BM25 block scores and
// impacts computed for the merged partition's statistics, so pylance's
// scores after our merge equal those after its own.
//
// Build analyzes text as pylance's analyzer does (analyzer.go: the
// tokenizers, filters, stop words; stem.go: Snowball English 3.x) and a
// Builder writes the documents' posting lists as a segment of one
// partition, through the same encoder as Merge.
//
// Memory: a merge streams the inputs' posting lists, as stored, into
// buckets of output tokens of about MergeOptions.MemoryBytes each (one
// in memory, or several in an unlinked temporary file: spill.go) and
// merges one bucket at a time, a chunk of tokens per goroutine; the output
// is written a window of tokens at a time, in token order. What grows with
// the inputs is per document (16 bytes) and per input token row (8 bytes).
package fts
