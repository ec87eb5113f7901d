// Package ivf holds the IVF vector index model and its per-quantizer storage
// as Lance lays them out in a segment's two files:
//
//	_indices/<uuid>/index.idx      sub-index (FLAT marker or HNSW graph);
//	                               schema metadata "lance:index" {type, distance_type},
//	                               "lance:ivf" -> global buffer with the IVF message
//	_indices/<uuid>/auxiliary.idx  quantized storage, rows grouped by partition:
//	                               _rowid + codes (__pq_code, __sq_code, _rabit_codes…, flat);
//	                               "distance_type", "lance:ivf", "storage_metadata"
//
// It also holds the code layouts Lance applies for search (PQ transposed per
// partition, RQ packed for FastScan) and their inverses.
//
// Concurrency: a Segment is safe for concurrent reads once opened.
package ivf
