"""Datasets with stable row ids (enable_stable_row_ids=True): index row ids
are stable ids, not addresses. After appends, updates (rows move to new
fragments with their ids), deletes and compact_files, our merge keeps
exactly the rows each input still owns, as pylance's optimize_indices
does, and the two indices answer every query alike."""

from __future__ import annotations

import os
import shutil

import lance
import lancegen
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls

N0, APPEND = 2000, 300
DIM = lancegen.DIM


class History:
    """A stable-row-id dataset and what its rows hold now."""

    def __init__(self, uri: str, index_type: str) -> None:
        self.uri = uri
        self.index_type = index_type
        self.current = lancegen.vectors(N0 + 3 * APPEND, seed=41)  # vector of each id, as of now
        self.deleted: set[int] = set()
        self.moved_from: dict[int, np.ndarray] = {}  # id -> the vector an update replaced
        self.next_id = 0

    def table(self, ids: np.ndarray) -> pa.Table:
        v = self.current[ids]
        return pa.table({"id": pa.array(ids, pa.int64()), "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM)})

    def append(self, n: int) -> None:
        ids = np.arange(self.next_id, self.next_id + n)
        self.next_id += n
        lance.write_dataset(self.table(ids), self.uri, mode="append")

    def update_vectors(self, ids: list[int], seed: int) -> None:
        """Rows get new vectors: pylance rewrites them into a new fragment,
        with the same stable ids."""
        ids_a = np.array(ids)
        for i in ids:
            self.moved_from[i] = self.current[i].copy()
        self.current[ids_a] = lancegen.vectors(len(ids), seed=seed) + 4.0
        lance.dataset(self.uri).merge_insert("id").when_matched_update_all().execute(self.table(ids_a))

    def delete(self, lo: int, hi: int) -> None:
        lance.dataset(self.uri).delete(f"id >= {lo} AND id < {hi}")
        self.deleted |= set(range(lo, hi))

    def delta(self) -> None:
        lance.dataset(self.uri).optimize.optimize_indices(num_indices_to_merge=0)

    @property
    def live(self) -> np.ndarray:
        return np.array(sorted(set(range(self.next_id)) - self.deleted))


def build_history(uri: str, index_type: str) -> History:
    h = History(uri, index_type)
    ids = np.arange(N0)
    h.next_id = N0
    lance.write_dataset(h.table(ids), uri, max_rows_per_file=1000, enable_stable_row_ids=True)
    lance.dataset(uri).create_index("vec", index_type, name="vec_idx", **lancegen.index_params(index_type))
    h.append(APPEND)
    h.delta()
    h.update_vectors(list(range(10, 40)) + list(range(2100, 2110)), seed=42)  # base and delta rows move
    h.delete(500, 560)
    h.delete(2200, 2210)
    # An update of another column moves rows too; the base segment's
    # coverage follows them into the new fragment.
    lance.dataset(uri).update({"id": "id"}, where="id >= 1500 AND id < 1520")
    h.delta()
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1500)
    h.append(APPEND)
    h.delta()
    h.update_vectors(list(range(700, 712)) + list(range(2350, 2355)), seed=43)  # after compaction
    h.delete(800, 806)
    h.delta()
    h.delete(2400, 2403)  # rows of the last delta
    return h


def merged_row_ids(uri: str) -> np.ndarray:
    (desc,) = lance.dataset(uri).describe_indices()
    (seg,) = desc.segments
    t = LanceFileReader(os.path.join(uri, "_indices", seg.uuid, "auxiliary.idx")).read_all().to_table()
    return np.sort(t["_rowid"].to_numpy())


def top10(ds: lance.LanceDataset, q: np.ndarray, **kw) -> list[tuple[int, float]]:
    t = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 4, **kw}, columns=["id", "_distance"])
    return list(zip(t["id"].to_pylist(), t["_distance"].to_pylist()))


@pytest.fixture(scope="module", params=["IVF_FLAT", "IVF_PQ"])
def history(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("stable")
    return build_history(str(root / request.param), request.param)


def test_two_copies_pylance_and_ours_answer_alike(history, tmp_path):
    h = history
    src = lance.dataset(h.uri)
    assert src.has_stable_row_ids
    segs = ls.open(h.uri).list_index_segments("vec_idx")
    assert len(segs) >= 5
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    shutil.copytree(h.uri, theirs)
    shutil.copytree(h.uri, ours)

    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=len(segs))
    out = ls.optimize(lance.dataset(ours), "vec_idx", fan_in=3, progress=False)
    assert isinstance(out, lance.LanceDataset) and out.version == src.version + 1
    p_ours, p_theirs = lance.dataset(ours), lance.dataset(theirs)
    assert [sorted(s.fragment_ids) for s in p_ours.describe_indices()[0].segments] == [
        sorted(s.fragment_ids) for s in p_theirs.describe_indices()[0].segments
    ]

    # The merged indices hold exactly the same rows: the live ones, each
    # once (moved rows with their new vector only, deleted rows dropped).
    r_ours, r_theirs = merged_row_ids(ours), merged_row_ids(theirs)
    assert np.array_equal(r_ours, r_theirs)
    assert np.array_equal(r_ours, h.live)

    rng = np.random.default_rng(5)
    qs = list(lancegen.vectors(20, seed=44)) + [h.moved_from[i] for i in sorted(h.moved_from)][:20]
    qs += [h.current[i] + 0.01 * rng.standard_normal(DIM).astype(np.float32) for i in sorted(h.moved_from)][:10]
    n_parts = len(ls.open(ours).list_index_segments("vec_idx")[0].partition_rows)
    for q in qs:
        if h.index_type == "IVF_FLAT":
            a, b = top10(p_ours, q), top10(p_theirs, q)
            assert [i for i, _ in a] == [i for i, _ in b] or sorted(a) == sorted(b), (a, b)
        else:
            # PQ top-k ranks by quantized distance tables and breaks their
            # ties by position in the partition, which differs between two
            # merges (input order): compare every row's distance instead,
            # over every partition. Equal distances = equal codes, row by row.
            a, b = top10(p_ours, q, k=len(h.live), nprobes=n_parts), top10(p_theirs, q, k=len(h.live), nprobes=n_parts)
            assert len(a) == len(b) == len(h.live)
            da, db = dict(a), dict(b)
            assert da.keys() == db.keys()
            assert all(abs(da[i] - db[i]) <= 1e-4 * max(1.0, db[i]) for i in da), [(i, da[i], db[i]) for i in da if da[i] != db[i]][:5]
            a = a[:10]
        for rid, dist in a:
            assert rid not in h.deleted
            if h.index_type == "IVF_FLAT":
                # Exact distances: each row is ranked by its current vector.
                assert abs(dist - float(((h.current[rid] - q) ** 2).sum())) <= 1e-3 * max(1.0, dist), (rid, dist)
    # Asking for an updated row's old vector never finds it by that vector.
    for rid, old in list(h.moved_from.items())[:10]:
        for got, dist in top10(p_ours, old):
            if got == rid:
                assert dist > 1.0, (rid, dist)


def test_list_plan_merge_commit_step_by_step(history, tmp_path):
    h = history
    uri = str(tmp_path / "steps")
    shutil.copytree(h.uri, uri)
    ds = ls.open(uri)
    segs = ds.list_index_segments("vec_idx")
    assert all(s.index_type == h.index_type for s in segs)
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2)
    merged = [ds.merge_existing_index_segments(t) for t in plan.tasks]
    ds = ds.commit_existing_index_segments("vec_idx", "vec", merged, replaces=plan.sources)
    # Merged again (a tree): the rows stay the live ones, once each.
    ds = ls.optimize(ds, "vec_idx", progress=False)
    assert np.array_equal(merged_row_ids(uri), h.live)
    assert lancegen.recall(lance.dataset(uri), h.current[h.live], lancegen.vectors(10, seed=45), k=10, nprobes=4) >= 0


def spilled_dataset(uri: str) -> History:
    """Row ids that pylance spills out of the manifest into a data file
    column (table config lance.row_lineage.spill, reader feature flag
    2048): compaction of a table whose rows were updated in shuffled order
    leaves a sequence with no runs, larger than the inline limit."""
    h = History(uri, "IVF_FLAT")
    h.next_id = N0
    lance.write_dataset(h.table(np.arange(N0)), uri, max_rows_per_file=500, enable_stable_row_ids=True)
    ds = lance.dataset(uri)
    ds.update_config({"lance.row_lineage.spill": "true", "lance.row_lineage.inline_max_bytes": "64"})
    ds.create_index("vec", "IVF_FLAT", name="vec_idx", num_partitions=4)
    rng = np.random.default_rng(7)
    h.update_vectors([int(i) for i in rng.permutation(N0)[:700]], seed=47)
    h.delta()
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1200)
    h.append(APPEND)
    h.delta()
    h.update_vectors(list(range(1000, 1010)), seed=48)
    h.delete(300, 320)
    h.delta()
    return h


def test_spilled_row_id_sequences(tmp_path):
    """Sequences pylance stores in a data file column instead of the
    manifest: read through the data file, the merge keeps the rows pylance
    keeps."""
    h = spilled_dataset(str(tmp_path / "spilled"))
    frags = lance.dataset(h.uri).get_fragments()
    assert any(f.metadata.row_id_meta.json() == '"Column"' for f in frags)
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    shutil.copytree(h.uri, theirs)
    shutil.copytree(h.uri, ours)
    n = len(ls.open(ours).list_index_segments("vec_idx"))
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=n)
    ls.optimize(ours, "vec_idx", progress=False)
    assert np.array_equal(merged_row_ids(ours), merged_row_ids(theirs))
    assert np.array_equal(merged_row_ids(ours), h.live)
    for q in lancegen.vectors(5, seed=46):
        assert top10(lance.dataset(ours), q) == top10(lance.dataset(theirs), q)


def test_our_builds_hold_stable_ids(history, tmp_path):
    """Our Go build (training, building on workers' fragments, merging,
    committing: create_index) on a dataset with stable row ids writes the
    rows' stable ids, as pylance's own segments hold them: exactly the live
    ids, each once, and pylance's create_index_uncommitted over a fragment
    whose rows moved holds the same ids as ours. An exact search answers as
    numpy's brute force over the live rows."""
    h = history
    uri = str(tmp_path / "built")
    shutil.copytree(h.uri, uri)
    lance.dataset(uri).drop_index("vec_idx")
    ls.create_index(uri, "vec", h.index_type, name="ours", progress=False, **lancegen.index_params(h.index_type))
    assert np.array_equal(merged_row_ids(uri), h.live)
    ds = lance.dataset(uri)
    rows = ds.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    # the largest fragment whose rows' ids are not their addresses (one
    # compaction rewrote: pylance trains PQ on at least 256 rows)
    moved = pa.compute.not_equal(rows["_rowid"], pa.compute.bit_wise_and(rows["_rowaddr"], 0xFFFFFFFF))
    frags = pa.compute.shift_right(rows.filter(moved)["_rowaddr"], 32).to_numpy()
    last = int(np.bincount(frags).argmax())
    model = ls.read_index_model(uri, "ours")
    seg = ls.build_index_segment(uri, "vec", h.index_type, [last], model=model, name="ours")
    theirs = ds.create_index_uncommitted("vec", h.index_type, name="ours", fragment_ids=[last], replace=True,
                                         **lancegen.index_params(h.index_type))

    def ids(uuid: str) -> list[int]:
        return sorted(LanceFileReader(os.path.join(uri, "_indices", uuid, "auxiliary.idx")).read_all().to_table()["_rowid"].to_pylist())

    in_last = rows.filter(pa.compute.equal(pa.compute.shift_right(rows["_rowaddr"], 32), last))
    assert len(in_last) >= 256
    assert ids(seg.uuid) == ids(theirs.uuid) == sorted(in_last["_rowid"].to_pylist())
    if h.index_type == "IVF_FLAT":
        live = h.current[h.live]
        for q in lancegen.vectors(5, seed=46):
            truth = h.live[np.argsort(((live - q) ** 2).sum(1), kind="stable")[:10]].tolist()
            got = [i for i, _ in top10(ds, q, nprobes=64)]
            assert got == truth
