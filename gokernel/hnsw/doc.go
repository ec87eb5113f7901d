// Package hnsw reads, builds and writes the HNSW graphs of Lance's
// IVF_HNSW_FLAT / IVF_HNSW_SQ / IVF_HNSW_PQ vector indices: one graph per
// IVF partition, over the partition's rows of the quantized storage
// (auxiliary.idx), stored in index.idx as pylance 14.0.2 writes it:
//
//	index.idx columns: __vector_id UInt32 | __neighbors List<UInt32> | _distance List<Float32>  (all nullable)
//	partition p's rows: the index IVF message's range p, level by level:
//	    level 0: one row per node, node ids 0 … n-1 in order (row r is node r)
//	    level l ≥ 1: one row per node on level l, ascending node id
//	    each row: the node's neighbours on that level and their distances
//	schema metadata "lance:hnsw": JSON list, one string per partition ("" when empty):
//	    {"entry_point":E,"params":{"max_level":7,"m":20,"ef_construction":150,"prefetch_distance":2},
//	     "level_offsets":[0, n, n+n1, …]}   (max_level+1 offsets: row ranges of the levels)
//
// Node ids are row positions in the partition's storage, so a graph
// belongs to one storage order: merging renumbers nodes (Reuse) or builds
// anew (Build). Distances are the ones Lance computes on the storage
// (Space), so that a graph built here and pylance's search agree.
//
// Usage:
//
//	metas, err := hnsw.ParseList(lanceHNSW)            // per partition
//	g, err := hnsw.Decode(metas[p], ids, nbrs, dists, storageRows)
//	space, err := hnsw.NewSQ(codes, dim, lo, hi, "l2")
//	g2, stats, err := hnsw.Reuse(ctx, space, g, newID, true, hnsw.Options{Seed: p})
//	cols, meta := g2.Encode()                           // rows for index.idx, entry for lance:hnsw
//
// Graphs, builders and queries are not safe for concurrent use; a Space
// and a PQModel are read-only and may be shared.
package hnsw
