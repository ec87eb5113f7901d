// Package segment holds the verbs of lance-segmerge over the segments of a
// vector index: list (with per-segment statistics read from the index files),
// and later plan, merge and commit.
//
// Concurrency: the functions are safe to call concurrently; they share
// nothing but the store.
package segment
