"""IVF_HNSW_FLAT / IVF_HNSW_SQ / IVF_HNSW_PQ: pylance 14.0.2 writes the
graphs, the kernel reads them (its distances equal pylance's stored ones),
merges segments with a rebuilt or a reused graph per partition, and
pylance opens, lists and queries the result with the recall of its own
optimize_indices."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import lance
import lancegen
import numpy as np
import pyarrow as pa
import pytest
from filecheck import go_write
from lance.file import LanceFileReader

import lance_segmerge as ls
from lance_segmerge import _ffi

KINDS = ["IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ"]
K = 10
EFS = (20, 50)


def queries(n: int = 200) -> np.ndarray:
    return lancegen.vectors(n, seed=4243)


def inspect(uri: str, uuid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(_ffi.call("InspectHNSW", os.path.join(uri, "_indices", uuid)))
    return out


def index_meta(uri: str, uuid: str) -> tuple[list[Any], LanceFileReader]:
    r = LanceFileReader(os.path.join(uri, "_indices", uuid, "index.idx"))
    entries = json.loads(r.metadata().schema.metadata[b"lance:hnsw"])
    return [json.loads(e) if e else None for e in entries], r


def recalls(uri: str, x: np.ndarray, kind: str) -> dict[int, float]:
    """Recall@K at each ef. IVF_HNSW_PQ reranks 2K candidates by exact
    distance: PQ distances tie often, and which of equal candidates a
    search returns says nothing about its graph."""
    ds = lance.dataset(uri)
    extra = {"refine_factor": 2} if "PQ" in kind else {}
    return {ef: lancegen.recall(ds, x, queries(), k=K, nprobes=4, ef=ef, **extra) for ef in EFS}


def index_dirs(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "_indices")))


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
@pytest.mark.parametrize("kind", KINDS)
def test_kernel_reads_pylance_graphs(tmp_path, kind, metric):
    """Every partition graph pylance writes decodes; its levels, entry point
    and row ranges are the metadata's; every stored edge distance is the
    one the kernel computes on the partition's storage."""
    x = lancegen.vectors(1500, seed=3)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri)
    ds.create_index("vec", kind, name="vec_idx", metric=metric, **lancegen.index_params(kind))
    (seg,) = lance.dataset(uri).describe_indices()[0].segments
    metas, reader = index_meta(uri, seg.uuid)
    graphs = {g["partition"]: g for g in inspect(uri, seg.uuid)}
    rows = 0
    for p, m in enumerate(metas):
        if m is None:
            assert p not in graphs
            continue
        g = graphs[p]
        offs = m["level_offsets"]
        assert len(offs) == m["params"]["max_level"] + 1
        counts = [offs[i + 1] - offs[i] for i in range(len(offs) - 1)]
        assert g["level_counts"] == [c for c in counts if c], (p, g, offs)
        assert g["nodes"] == offs[1] and g["rows"] == offs[-1] and g["entry_point"] == m["entry_point"]
        assert g["unreachable"] == 0
        # Float rounding only (SQ dot sums decoded values ~1e2 apart).
        assert g["max_distance_error"] < 1e-3, g
        rows += offs[-1]
    assert rows == reader.num_rows()


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_kernel_reads_older_file_versions(tmp_path, version):
    x = lancegen.vectors(1200, seed=5)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, data_storage_version=version)
    ds.create_index("vec", "IVF_HNSW_SQ", name="vec_idx", num_partitions=4)
    (seg,) = lance.dataset(uri).describe_indices()[0].segments
    graphs = inspect(uri, seg.uuid)
    assert sum(g["nodes"] for g in graphs) == 1200
    assert all(g["unreachable"] == 0 and g["max_distance_error"] < 1e-3 for g in graphs)


def test_listing_shows_hnsw_parameters(tmp_path):
    x = lancegen.vectors(1500, seed=6)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri)
    ds.create_index("vec", "IVF_HNSW_FLAT", name="vec_idx", num_partitions=3, m=12, ef_construction=60, max_level=5)
    (seg,) = ls.open(uri).list_index_segments("vec_idx")
    assert (seg.index_type, seg.hnsw_m, seg.hnsw_ef_construction, seg.hnsw_max_level) == ("IVF_HNSW_FLAT", 12, 60, 5)
    assert 1 <= seg.hnsw_levels <= 5
    _, reader = index_meta(uri, seg.uuid)
    assert len(seg.partition_graph_rows) == 3 and sum(seg.partition_graph_rows) == reader.num_rows()
    assert sum(seg.partition_rows) == 1500
    assert ls.IndexSegment.from_json(seg.to_json()) == seg


@pytest.fixture(scope="module")
def deltas(tmp_path_factory) -> dict[str, lancegen.Built]:
    """Per kind: a base segment and 3 delta segments from optimize_indices."""
    root = tmp_path_factory.mktemp("hnsw-deltas")
    return {k: lancegen.build_with_deltas(str(root / k), k, base_rows=2000, delta_rows=300) for k in KINDS}


@pytest.fixture(scope="module")
def pylance_optimized(deltas, tmp_path_factory) -> dict[str, dict[int, float]]:
    """Recall of pylance's own optimize_indices over the same deltas."""
    root = tmp_path_factory.mktemp("hnsw-optimized")
    out = {}
    for kind, built in deltas.items():
        dst = str(root / kind)
        shutil.copytree(built.uri, dst)
        lance.dataset(dst).optimize.optimize_indices(num_indices_to_merge=4)
        assert len(lance.dataset(dst).describe_indices()[0].segments) == 1
        out[kind] = recalls(dst, built.vectors, kind)
    return out


@pytest.mark.parametrize("mode", ["reuse", "rebuild"])
@pytest.mark.parametrize("kind", KINDS)
def test_merge_deltas_matches_pylance_optimize(tmp_path, deltas, pylance_optimized, kind, mode):
    built = deltas[kind]
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    ds = ls.open(uri)
    base, *rest = segs = ds.list_index_segments("vec_idx")
    assert all(s.index_type == kind and s.hnsw_m == 20 for s in segs)
    seen: list[ls.OperationProgress] = []
    merged = ds.merge_existing_index_segments(segs, hnsw_graph=mode, progress=seen.append)
    assert merged.num_rows == 2900 and merged.hnsw_m == 20 and merged.hnsw_ef_construction == 150
    last = seen[-1]
    assert last.graph_rows_inserted + last.graph_rows_reused == 2900
    if mode == "reuse":
        # The base is the largest input of every partition: its rows keep
        # their edges, the deltas' rows are inserted.
        assert last.graph_rows_reused == base.num_rows and last.graph_distances > 0
    else:
        assert last.graph_rows_reused == 0
    graphs = inspect(uri, merged.uuid)
    assert sum(g["nodes"] for g in graphs) == 2900
    # Reused edges keep the distances pylance stored (equal to float rounding).
    assert all(g["unreachable"] == 0 and g["max_distance_error"] < 1e-5 for g in graphs)
    assert [g["rows"] for g in graphs] == [n for n in merged.partition_graph_rows if n]
    version = ls.commit_existing_index_segments(uri, "vec_idx", "vec", [merged], replaces=segs).version
    pds = lance.dataset(uri)
    assert pds.version == version and len(pds.describe_indices()[0].segments) == 1
    ours = recalls(uri, built.vectors, kind)
    ref = pylance_optimized[kind]
    for ef in EFS:
        assert abs(ours[ef] - ref[ef]) <= 0.01, (ef, ours, ref)
        # 4 PQ sub-vectors of 32 dims lose a lot, and pylance trains the
        # deltas' fixture anew each run (CI saw 0.499 and 0.52 on one data).
        truth_floor = 0.45 if kind == "IVF_HNSW_PQ" else 0.9
        assert ours[ef] >= truth_floor, ours
    # pylance builds on what we wrote: one more delta, then its own merge of
    # our segment and the delta.
    lancegen_append(uri, built)
    assert len(lance.dataset(uri).describe_indices()[0].segments) == 2
    if mode == "reuse":
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=2)
        pds = lance.dataset(uri)
        assert len(pds.describe_indices()[0].segments) == 1
        x = np.concatenate([built.vectors, lancegen.vectors(200, seed=99)])
        extra = {"refine_factor": 2} if "PQ" in kind else {}
        again = {ef: lancegen.recall(pds, x, queries(), k=K, nprobes=4, ef=ef, **extra) for ef in EFS}
        # pylance's own rebuild of the merged graph varies run to run (its
        # insertion order is random): it is bounded by that spread below our
        # recall, which itself is above the floor (a CI run saw 0.499 for a
        # PQ floor of 0.5 here, so the floor is not asked of pylance's run).
        assert min(again.values()) >= min(ours.values()) - 0.04, (again, ours)


def lancegen_append(uri: str, built: lancegen.Built) -> None:
    x = lancegen.vectors(200, seed=99)
    ds = lance.write_dataset(lancegen.table(x, len(built.vectors)), uri, mode="append")  # ids = positions
    ds.optimize.optimize_indices(num_indices_to_merge=0)


@pytest.mark.parametrize("kind", KINDS)
def test_chains_and_trees(tmp_path, kind):
    """create_index_uncommitted shards (one shared model), merged as a chain
    and as a flat merge; optimize() merges a delta dataset as a tree."""
    x = lancegen.vectors(2400, seed=12)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=800)
    kw = lancegen.train_shared_model(ds, kind)
    if "PQ" in kind:
        kw["num_sub_vectors"] = 4
    a, b, c = (ds.create_index_uncommitted("vec", kind, name="vec_idx", fragment_ids=[f], **kw) for f in range(3))
    rq = kind == "IVF_HNSW_SQ"  # every shard trains its own SQ bounds
    m1 = ls.merge_existing_index_segments(uri, [a, b], requantize_sq=rq)
    m2 = ls.merge_existing_index_segments(uri, [m1, c], requantize_sq=rq)
    flat = ls.merge_existing_index_segments(uri, [a, b, c], requantize_sq=rq, hnsw_graph="rebuild")
    assert m2.num_rows == flat.num_rows == 2400 and m2.fragment_ids == (0, 1, 2)
    results = {}
    for name, segs in (("chain", [m2]), ("flat", [flat]), ("parts", [a, b, c])):
        dst = str(tmp_path / name)
        shutil.copytree(uri, dst)
        lance.dataset(dst).commit_existing_index_segments(
            "vec_idx", "vec", [s.to_lance_index() if isinstance(s, ls.IndexSegment) else s for s in segs])
        results[name] = recalls(dst, x, kind)
    for ef in EFS:
        assert abs(results["chain"][ef] - results["flat"][ef]) <= 0.01, results
        if kind == "IVF_HNSW_FLAT":
            # One graph over all rows finds at least what three smaller ones
            # do (SQ codes are re-quantized at every level of the chain, which
            # costs recall of its own).
            assert results["chain"][ef] >= results["parts"][ef] - 0.01, results

    # A delta dataset merged as a tree (fan_in 2: two levels) and committed.
    built = lancegen.build_with_deltas(str(tmp_path / "tree"), kind, base_rows=1000, delta_rows=200, n_deltas=3)
    if kind == "IVF_HNSW_FLAT":  # through the CLI, graphs rebuilt
        from lance_segmerge import _cli

        assert _cli.main(["optimize", built.uri, "--index", "vec_idx", "--fan-in", "2", "--no-progress", "--hnsw-graph", "rebuild"]) == 0
        version = lance.dataset(built.uri).version
    else:
        version = ls.optimize(built.uri, "vec_idx", fan_in=2, progress=False).version
    pds = lance.dataset(built.uri)
    assert pds.version == version and len(pds.describe_indices()[0].segments) == 1
    (seg,) = ls.open(built.uri).list_index_segments("vec_idx")
    assert seg.num_rows == 1600 and seg.index_type == kind
    assert ls.IndexSegment.from_dict(seg.to_dict()) == seg and seg.partition_graph_rows  # listed (unchecked) = checked
    r = recalls(built.uri, built.vectors, kind)
    assert min(r.values()) >= (0.5 if kind == "IVF_HNSW_PQ" else 0.9), r


def test_dropped_rows_are_removed_from_a_reused_graph(tmp_path):
    """The base's third fragment is deleted: its rows leave the reused graph
    (edges repaired), and the result still queries like pylance's own."""
    x = lancegen.vectors(2600, seed=14)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x[:2000]), uri, max_rows_per_file=700)  # fragments of 700, 700, 600
    ds.create_index("vec", "IVF_HNSW_FLAT", name="vec_idx", num_partitions=4)
    ds = lance.write_dataset(lancegen.table(x[2000:], 2000), uri, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    ds = lance.dataset(uri)
    ds.delete("id >= 1400 AND id < 2000")
    # Re-committing the segments prunes the deleted fragment from the base.
    lance.dataset(uri).commit_existing_index_segments(
        "vec_idx", "vec", [s.to_lance_index() for s in ls.open(uri).list_index_segments("vec_idx")])
    segs = ls.open(uri).list_index_segments("vec_idx")
    base = max(segs, key=lambda s: s.num_rows)
    assert base.fragment_ids == (0, 1) and base.num_rows == 2000
    seen: list[ls.OperationProgress] = []
    merged = ls.merge_existing_index_segments(uri, segs, progress=seen.append)
    assert merged.num_rows == 2000 and seen[-1].graph_rows_reused == 1400 and seen[-1].graph_rows_inserted == 600
    assert all(g["unreachable"] == 0 for g in inspect(uri, merged.uuid))
    ref = str(tmp_path / "ref")
    shutil.copytree(uri, ref)
    lance.dataset(ref).optimize.optimize_indices(num_indices_to_merge=len(segs))
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", [merged], replaces=segs)
    live = np.concatenate([x[:1400], x[2000:]])
    ids = np.concatenate([np.arange(1400), np.arange(2000, 2600)])
    for ef in EFS:
        got = recall_ids(lance.dataset(uri), live, ids, ef)
        want = recall_ids(lance.dataset(ref), live, ids, ef)
        assert abs(got - want) <= 0.01 and got >= 0.9, (ef, got, want)


def recall_ids(ds: lance.LanceDataset, x: np.ndarray, ids: np.ndarray, ef: int) -> float:
    hits = 0
    qs = queries()
    for qv in qs:
        truth = set(ids[np.argsort(((x - qv) ** 2).sum(1), kind="stable")[:K]].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": qv, "k": K, "nprobes": 4, "ef": ef}, columns=["id"])["id"].to_pylist()
        hits += len(truth & set(got))
    return hits / (K * len(qs))


def rewrite_index(path: str, tmp: str, edit_table: Any = None, edit_meta: Any = None) -> None:
    """Rewrite an index.idx with the kernel's writer: the same columns,
    metadata and IVF buffer, after edits."""
    r = LanceFileReader(path)
    tbl = r.read_all().to_table()
    meta = {k.decode(): v.decode() for k, v in r.metadata().schema.metadata.items()}
    buffers = [r.read_global_buffer(i) for i in range(1, len(r.metadata().global_buffers))]
    if edit_table:
        tbl = edit_table(tbl)
    if edit_meta:
        edit_meta(meta)
    os.remove(path)
    go_write(path, tbl, "2.2", tmp=tmp, metadata=meta, global_buffers=buffers)


def out_of_range_neighbour(tbl: pa.Table) -> pa.Table:
    nb = tbl["__neighbors"].to_pylist()
    nb[3][0] = 1_000_000
    return tbl.set_column(1, pa.field("__neighbors", pa.list_(pa.uint32())), pa.array(nb, pa.list_(pa.uint32())))


def bad_level_offsets(meta: dict[str, str]) -> None:
    entries = json.loads(meta["lance:hnsw"])
    first = next(i for i, e in enumerate(entries) if e)
    e = json.loads(entries[first])
    e["level_offsets"][1] -= 1  # level 0 one node short: a level count that disagrees with the rows
    entries[first] = json.dumps(e)
    meta["lance:hnsw"] = json.dumps(entries)


@pytest.mark.parametrize("damage", ["neighbour", "levels", "truncated"])
def test_damaged_graphs_are_corrupt(tmp_path, deltas, damage):
    built = deltas["IVF_HNSW_FLAT"]
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    segs = ls.open(uri).list_index_segments("vec_idx")
    base = segs[0]
    path = os.path.join(uri, "_indices", base.uuid, "index.idx")
    if damage == "neighbour":
        rewrite_index(path, str(tmp_path), edit_table=out_of_range_neighbour)
    elif damage == "levels":
        rewrite_index(path, str(tmp_path), edit_meta=bad_level_offsets)
    else:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    # The manifest lists the old size; a rewritten file must be re-described.
    segs = [s if s.uuid != base.uuid else ls.IndexSegment.from_dict({**s.to_dict(), "files": [], "metadata": ""})
            for s in segs]
    before = index_dirs(uri)
    with pytest.raises(ls.CorruptError, match=base.uuid):
        ls.merge_existing_index_segments(uri, segs)
    assert index_dirs(uri) == before, "a failed merge left files behind"


def test_mixed_parameters_take_the_larger_inputs(tmp_path):
    # pylance before 0.31 builds optimize deltas with m=20 whatever the base
    # used; such inputs merge, and the output keeps the parameters of the
    # input with the most rows.
    x = lancegen.vectors(2400, seed=15)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=800)
    kw = lancegen.train_shared_model(ds, "IVF_HNSW_FLAT")
    a = ds.create_index_uncommitted("vec", "IVF_HNSW_FLAT", name="vec_idx", fragment_ids=[0], m=12, ef_construction=100, **kw)
    b = ds.create_index_uncommitted("vec", "IVF_HNSW_FLAT", name="vec_idx", fragment_ids=[1, 2], **kw)
    with pytest.raises(ls.InvalidInputError, match="hnsw_graph"):
        ls.merge_existing_index_segments(uri, [a, b], hnsw_graph="sometimes")
    merged = ls.merge_existing_index_segments(uri, [a, b])
    assert merged.hnsw_m is not None and merged.hnsw_m != 12, merged
    assert merged.hnsw_ef_construction != 100, merged
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", [merged])
    got = lance.dataset(uri).to_table(nearest={"column": "vec", "q": x[5], "k": 1, "nprobes": 64}, columns=["id"])
    assert got["id"][0].as_py() == 5


def test_cancel_while_building_graphs(tmp_path, monkeypatch):
    x = lancegen.vectors(12_000, seed=16)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=6000)
    kw = lancegen.train_shared_model(ds, "IVF_HNSW_FLAT")
    segs = [ds.create_index_uncommitted("vec", "IVF_HNSW_FLAT", name="vec_idx", fragment_ids=[f], **kw) for f in range(2)]
    before = index_dirs(uri)

    def fast(name: str, args: Any, on_progress: Any = None, poll_seconds: float = 0.1) -> Any:
        return run(name, args, on_progress, poll_seconds=0.0005)

    run = _ffi.run_operation
    monkeypatch.setattr(_ffi, "run_operation", fast)
    seen: list[ls.OperationProgress] = []

    def cancel_when_inserting(p: ls.OperationProgress) -> None:
        seen.append(p)
        if p.graph_rows_inserted > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ls.merge_existing_index_segments(uri, segs, progress=cancel_when_inserting, hnsw_graph="rebuild", parallelism=1)
    assert index_dirs(uri) == before, "a cancelled merge left files behind"
    assert seen[-1].stage == "build_graph" and seen[-1].graph_rows_inserted < 12_000
