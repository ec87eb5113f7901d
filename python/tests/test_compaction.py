"""Segments after pylance 14.0.2's ``compact_files``: compaction rewrites
fragments, and pylance remaps the segments of every index onto the new
ones (BTREE, BITMAP, LABEL_LIST, NGRAM, INVERTED and vector segments are
rewritten with the new row addresses; ZONEMAP and BLOOMFILTER segments are
not, and keep naming the fragments that are gone). Our optimize merges the
remapped segments, pylance answers every filter as a scan does and as
after its own optimize, and the merged segments verify clean. With
``defer_index_remap=True`` the segments keep their old row addresses, which
a fragment reuse index maps until pylance's optimize merges them through
it. We read that map (its row addresses match where pylance put every
row) and our merges move the segments' rows through it, whether their
bitmaps still name the compacted fragments or pylance's optimize has
pointed them at the new ones; ZONEMAP and BLOOMFILTER merges build the
zones of the fragments the compaction wrote from their data instead.
Fragments deleted whole are still dropped as stale."""

from __future__ import annotations

import json
import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls
from lance_segmerge import _ffi

#: index name -> (column, index type); one each of what compaction remaps
INDICES = {
    "k_idx": ("k", "BTREE"),
    "b_idx": ("b", "BITMAP"),
    "b_ngram": ("b", "NGRAM"),
    "t_idx": ("t", "INVERTED"),
    "tags_idx": ("tags", "LABEL_LIST"),
    "vec_idx": ("vec", "IVF_PQ"),
}
#: zone indices, which pylance cannot remap: their zones span rows of one fragment
ZONES = {"z_idx": ("z", "ZONEMAP"), "id_bloom": ("id", "BLOOMFILTER")}
FILTERS = ["id = 4321", "id IN (10, 3333)", "k = 5", "k > 990", "k IN (3, 400)", "b = 'c7'", "b IN ('c1', 'c2')", "contains(b, 'c4')",
           "array_has_any(tags, ['t4'])", "array_has_all(tags, ['t0', 't1'])", "z < 100", "z > 6900"]


def _table(start: int, n: int) -> pa.Table:
    i = np.arange(start, start + n)
    vec = np.random.default_rng(start).normal(size=n * 8).astype(np.float32)
    return pa.table({"id": pa.array(i), "k": pa.array(i % 997), "b": pa.array([f"c{x % 50}" for x in i]),
                     "z": pa.array(i * 2), "t": pa.array([f"w{x % 13} w{x % 7} doc" for x in i]),
                     "tags": pa.array([[f"t{x % 5}", f"t{x % 3}"] for x in i]),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec), 8)})


def _compacted(uri: str, defer: bool) -> None:
    ds = lance.write_dataset(_table(0, 3000), uri, max_rows_per_file=1000)
    for name, (col, typ) in INDICES.items():
        if typ == "IVF_PQ":
            ds.create_index(col, typ, name=name, num_partitions=4, num_sub_vectors=2)
        else:
            ds.create_scalar_index(col, typ, name=name)
    for name, (col, typ) in ZONES.items():
        ds.create_scalar_index(col, typ, name=name)
    for a in range(3):
        lance.write_dataset(_table(3000 + 500 * a, 500), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 7 = 0")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000, defer_index_remap=defer)


def _ids(uri: str, f: str, **kw: object) -> list[int]:
    return sorted(lance.dataset(uri).to_table(filter=f, columns=["id"], **kw)["id"].to_pylist())


def _fts(uri: str, q: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(full_text_query=q, columns=["id"])["id"].to_pylist())


def test_remapped_segments_merge_and_answer_as_pylance(tmp_path):
    uri = str(tmp_path / "c")
    _compacted(uri, defer=False)
    live = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    before = ls.open(uri)
    for name in INDICES:
        segs = before.list_index_segments(name)
        assert len(segs) == 4 and set().union(*(s.fragment_ids for s in segs)) <= live, name  # remapped by pylance
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(uri, ours)
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=4)
    for name in INDICES:
        ls.optimize(ours, name, progress=False)
    after = ls.open(ours)
    for name in INDICES:
        (seg,) = after.list_index_segments(name)
        assert set(seg.fragment_ids) == live, name
        assert [s.verdict for s in ls.verify_index(ours, name).segments] == ["clean"], name
    for f in FILTERS:
        got = _ids(ours, f)
        assert got and got == _ids(theirs, f) == _ids(ours, f, use_scalar_index=False), f
    assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter="k = 5").explain_plan()
    assert _fts(ours, "w3") == _fts(theirs, "w3") and _fts(ours, "w3")
    q = np.ones(8, np.float32)
    near = lance.dataset(ours).to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 4}, columns=["id"])
    assert near.num_rows == 10 and all(i % 7 for i in near["id"].to_pylist())  # no deleted row comes back
    # pylance does not remap ZONEMAP and BLOOMFILTER segments: they keep
    # naming the compacted fragments, cover none of the new ones, and
    # neither merge plans them; filters read the data.
    for name in ZONES:
        z = after.list_index_segments(name)
        assert len(z) == 4 and not set().union(*(s.fragment_ids for s in z)) & live, name
        assert ls.plan_index_segment_merge(ours, name).tasks == (), name


def _nearest(uri: str) -> list[int]:
    q = np.ones(8, np.float32)
    t = lance.dataset(uri).to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 4}, columns=["id"])
    return t["id"].to_pylist()


def _agree(ours: str, theirs: str) -> None:
    """pylance answers every filter, full-text and vector query on ours as
    on theirs and as a scan, the ZONEMAP and BLOOMFILTER filters through
    the segments we merged."""
    for f in FILTERS:
        got = _ids(ours, f)
        assert got and got == _ids(theirs, f) == _ids(ours, f, use_scalar_index=False), f
    for f in ["z < 100", "id = 4321"]:
        assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter=f).explain_plan(), f
    assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter="k = 5").explain_plan()
    assert _fts(ours, "w3") == _fts(theirs, "w3") and _fts(ours, "w3")
    near = _nearest(ours)
    assert near == _nearest(theirs) and len(near) == 10 and all(i % 7 for i in near)  # no deleted row comes back


def test_deferred_remap_is_applied_by_maintain_right_after_the_compaction(tmp_path, caplog):
    """Right after a compaction with ``defer_index_remap=True`` the
    segments' fragment bitmaps name the compacted fragments and their rows
    the old addresses. One ``maintain_all`` merges every index whose merge
    moves rows (BTREE, BITMAP, LABEL_LIST, NGRAM, INVERTED, IVF_PQ) through
    the fragment reuse index (with ``index_new``, the new fragments count
    as indexed: their rows are the compacted ones): each becomes one
    segment over the new fragments, verifies clean, and pylance answers as
    after its own merge through the map and as a scan. ZONEMAP and
    BLOOMFILTER merges build the zones of the new fragments from their data
    (their zones cannot move) and end the same way."""
    uri = str(tmp_path / "c")
    _compacted(uri, defer=True)
    (fri,) = ls.open(uri).list_index_segments("__lance_frag_reuse")  # its map is inline: no files
    assert fri.index_type == "FRAGMENTREUSE" and fri.files == ()
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=4)
    live = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    assert not live & set(ls.open(uri).list_index_segments("k_idx")[0].fragment_ids)  # the old fragments
    with caplog.at_level("WARNING", logger="lance_segmerge"):
        reports = ls.maintain_all(uri, policy="all", index_new=True, progress=False)
    assert sorted(r.index_name for r in reports) == sorted([*INDICES, *ZONES])
    # the new fragments hold the compacted rows: nothing to index afresh
    assert [r.indexed_rows for r in reports] == [0] * len(reports)
    assert ls.open(uri).list_index_segments("k_idx")[0].num_rows == lance.dataset(uri).count_rows()
    assert "passed over" not in caplog.text  # Lance's own index is passed over without a warning
    for name in [*INDICES, *ZONES]:
        (seg,) = ls.open(uri).list_index_segments(name)
        assert set(seg.fragment_ids) == live, name
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"], name
    _agree(uri, theirs)


def test_deferred_remap_is_applied_once_pylance_points_the_segments_at_the_new_fragments(tmp_path):
    """pylance's optimize points the segments' fragment bitmaps at the
    fragments a deferred compaction wrote without rewriting their files
    (with ``num_indices_to_merge=1`` it merges the newest vector segment
    through the map). verify_index calls these segments clean (their rows
    are the map's to move); our merges move every row of a compacted
    fragment to the address the map gives it, and pylance answers on the
    merged segments as on its own merge and as a scan. ZONEMAP and
    BLOOMFILTER merges, whose zones name the compacted fragments, build
    those of the new fragments from their data."""
    uri = str(tmp_path / "c")
    _compacted(uri, defer=True)
    lance.dataset(uri).optimize.optimize_indices(index_names=["vec_idx"], num_indices_to_merge=1)
    lance.dataset(uri).optimize.optimize_indices()
    live = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    for name in ["k_idx", "b_idx", "tags_idx", "b_ngram", "t_idx", *ZONES]:
        segs = ls.open(uri).list_index_segments(name)
        assert len(segs) == 4 and set().union(*(s.fragment_ids for s in segs)) <= live, name  # moved, not rewritten
        # rows at the old addresses, for the map: pylance's state, not damage
        assert {s.verdict for s in ls.verify_index(uri, name).segments} == {"clean"}, name
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=4)
    for name in [*INDICES, *ZONES]:
        ls.optimize(uri, name, progress=False)
        (seg,) = ls.open(uri).list_index_segments(name)
        assert set(seg.fragment_ids) == live, name
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"], name
    _agree(uri, theirs)


@pytest.mark.parametrize("typ", ["IVF_HNSW_SQ", "IVF_HNSW_PQ"])
def test_a_graph_index_s_rows_move_through_the_map_too(tmp_path, typ):
    """An IVF_HNSW_* index after a deferred compaction: its merge moves
    the row ids (the graphs name rows by position), the merged segment
    covers the new fragments and no deleted row comes back; its recall
    against an exact search is pylance's after its own merge through the
    map."""
    uri = str(tmp_path / "c")
    ds = lance.write_dataset(_table(0, 3000), uri, max_rows_per_file=1000)
    ds.create_index("vec", typ, name="vec_idx", num_partitions=4, **({"num_sub_vectors": 2} if typ.endswith("PQ") else {}))
    for a in range(3):
        lance.write_dataset(_table(3000 + 500 * a, 500), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 7 = 0")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000, defer_index_remap=True)
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=4)
    ls.optimize(uri, "vec_idx", progress=False)
    (seg,) = ls.open(uri).list_index_segments("vec_idx")
    assert set(seg.fragment_ids) == {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    assert seg.num_rows == lance.dataset(uri).count_rows()

    def hits(d: str, q: np.ndarray, **kw: object) -> set[int]:
        t = lance.dataset(d).to_table(nearest={"column": "vec", "q": q, "k": 10, **kw}, columns=["id"])
        return set(t["id"].to_pylist())

    ours = theirs_hits = 0
    for seed in range(20):
        q = np.random.default_rng(seed).normal(size=8).astype(np.float32)
        exact = hits(uri, q, use_index=False)
        got = hits(uri, q, nprobes=4, ef=200)
        assert all(i % 7 for i in got)  # no deleted row comes back
        ours += len(got & exact)
        theirs_hits += len(hits(theirs, q, nprobes=4, ef=200) & exact)
    assert ours >= theirs_hits - 4 and ours > 80, (ours, theirs_hits)


def test_a_fragment_deleted_whole_is_not_a_compacted_one(tmp_path):
    """With a fragment reuse index in the table, a segment covering a
    fragment that was deleted whole (not compacted) merges: that
    fragment's rows are dropped as stale, as they are without a map."""
    uri = str(tmp_path / "c")
    _compacted(uri, defer=True)
    lance.dataset(uri).optimize.optimize_indices(index_names=["k_idx"], num_indices_to_merge=4)  # through the map
    lance.write_dataset(_table(9000, 500), uri, mode="append", max_rows_per_file=250)
    lance.dataset(uri).optimize.optimize_indices(index_names=["k_idx"], num_indices_to_merge=0)
    lance.dataset(uri).delete("id >= 9000 AND id < 9250")
    assert len(ls.open(uri).list_index_segments("k_idx")) == 2
    assert ls.open(uri).list_index_segments("__lance_frag_reuse")
    ls.optimize(uri, "k_idx", progress=False)
    (seg,) = ls.open(uri).list_index_segments("k_idx")
    live = {f.fragment_id for f in lance.dataset(uri).get_fragments()}
    assert live < set(seg.fragment_ids)  # the union of its inputs' bitmaps, the deleted fragment too, as pylance's merge
    for f in [*FILTERS[2:5], "k > 900", "id >= 9000"]:
        assert _ids(uri, f) == _ids(uri, f, use_scalar_index=False), f
    assert [s.verdict for s in ls.verify_index(uri, "k_idx").segments] == ["clean"]


def _addresses(uri: str, version: int) -> dict[int, int]:
    t = lance.dataset(uri, version=version).to_table(columns=["id"], with_row_address=True)
    return dict(zip(t["id"].to_pylist(), t["_rowaddr"].to_pylist()))


def test_the_fragment_reuse_map_puts_every_row_where_pylance_did(tmp_path):
    """The fragment reuse index as we read it (lance.table.
    FragmentReuseIndexDetails: a version per compaction, its groups' old
    and new fragments and the carried-over row addresses) maps every row
    address from before two compactions with ``defer_index_remap=True`` to
    the address pylance's compactions gave the row, through both, and the
    rows deleted before either to nothing."""
    uri = str(tmp_path / "c")
    _compacted(uri, defer=True)
    first = lance.dataset(uri).version
    lance.dataset(uri).delete("id % 3 = 0")
    lance.write_dataset(_table(9000, 700), uri, mode="append", max_rows_per_file=350)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=5000, defer_index_remap=True)
    now = _addresses(uri, lance.dataset(uri).version)
    for before in (first - 1, first):  # through both compactions, and the second alone
        old = _addresses(uri, before)
        got = _ffi.call_json("RemapRowAddresses", uri, "{}", 0, json.dumps(list(old.values())))
        assert [g for i, g in zip(old, got) if i in now] == [now[i] for i in old if i in now], before
        # a row deleted since maps to nothing where a compaction dropped
        # it, else to where it lies deleted (not a live row's address)
        gone = [g for i, g in zip(old, got) if i not in now]
        assert None in gone and not set(gone) & set(now.values()), before
        assert sum(i in now for i in old) > 2000 and any(old[i] != now[i] for i in old if i in now), before
    (fri,) = ls.open(uri).list_index_segments("__lance_frag_reuse")
    assert fri.dataset_version == lance.dataset(uri).version - 1  # the version the compaction read


def test_a_fragment_reuse_map_in_its_own_file(tmp_path):
    """pylance moves the fragment reuse index's content to a file of its
    own past 200 KB (here 2M compacted rows with scattered deletions).
    Merges read it there: right after the compaction, ``maintain_all``
    brings a BTREE and a ZONEMAP index to one segment over the new
    fragments; once pylance's optimize has pointed the segments at them and
    a fragment appended since was deleted whole, the plan tells that
    fragment from a compacted one (it used to refuse the segment naming
    it) and the merges drop its rows. Every filter answers as a scan, and
    the merged segments verify clean."""
    uri, n = str(tmp_path / "c"), 2_000_000
    i = np.arange(n)
    ds = lance.write_dataset(pa.table({"id": i, "k": i % 997}), uri, max_rows_per_file=n // 4)
    ds.create_scalar_index("k", "BTREE", name="k_idx")
    ds.create_scalar_index("id", "ZONEMAP", name="z_idx")
    lance.write_dataset(pa.table({"id": np.arange(n, n + 1000), "k": np.arange(1000) % 997}), uri, mode="append")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 7 = 0")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=n, defer_index_remap=True)
    (fri,) = ls.open(uri).list_index_segments("__lance_frag_reuse")
    assert fri.files == () and "details.binpb" in os.listdir(os.path.join(uri, "_indices", fri.uuid))
    filters = ["k = 5", "k > 990", "id = 1234567", "id < 100", f"id > {n + 1200}", f"id >= {n}"]

    def answers_as_a_scan(d: str) -> None:
        for f in filters:
            got = _ids(d, f)
            assert got == _ids(d, f, use_scalar_index=False), f
        assert "ScalarIndexQuery" in lance.dataset(d).scanner(filter="k = 5").explain_plan()

    def one_clean_segment(d: str, live: set[int]) -> None:
        for name in ("k_idx", "z_idx"):
            (seg,) = ls.open(d).list_index_segments(name)
            assert live <= set(seg.fragment_ids), name
            assert [s.verdict for s in ls.verify_index(d, name).segments] == ["clean"], name

    right_after = str(tmp_path / "right_after")
    shutil.copytree(uri, right_after)
    reports = ls.maintain_all(right_after, policy="all", index_new=True, progress=False)
    assert [r.indexed_rows for r in reports] == [0, 0]
    one_clean_segment(right_after, {f.fragment_id for f in lance.dataset(right_after).get_fragments()})
    answers_as_a_scan(right_after)

    lance.write_dataset(pa.table({"id": np.arange(n + 1000, n + 1500), "k": np.arange(500) % 997}), uri, mode="append",
                        max_rows_per_file=250)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete(f"id >= {n + 1000} AND id < {n + 1250}")  # a fragment deleted whole
    for name in ("k_idx", "z_idx"):
        ls.optimize(uri, name, progress=False)
    one_clean_segment(uri, {f.fragment_id for f in lance.dataset(uri).get_fragments()})
    answers_as_a_scan(uri)


def test_zones_of_a_dictionary_column_are_rebuilt_after_a_deferred_compaction(tmp_path):
    """A ZONEMAP of a dictionary column (pylance's zones have null bounds)
    after a deferred compaction: the merge builds the new fragments' zones
    from the column's dictionary pages, in 2.0 and 2.1 files, and pylance
    answers as a scan through the one clean segment."""
    for storage in ("2.0", "2.1"):
        uri = str(tmp_path / storage)

        def tab(start: int, n: int) -> pa.Table:
            i = np.arange(start, start + n)
            return pa.table({"id": pa.array(i), "d": pa.array([None if x % 11 == 0 else f"v{x % 7}" for x in i]).dictionary_encode()})

        ds = lance.write_dataset(tab(0, 2000), uri, max_rows_per_file=500, data_storage_version=storage)
        ds.create_scalar_index("d", "ZONEMAP", name="d_zm")
        lance.write_dataset(tab(2000, 500), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
        lance.dataset(uri).delete("id % 7 = 0")
        lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=5000, defer_index_remap=True)
        ls.optimize(uri, "d_zm", progress=False)
        ds = lance.dataset(uri)
        (seg,) = ls.open(uri).list_index_segments("d_zm")
        assert sorted(seg.fragment_ids) == sorted(f.fragment_id for f in ds.get_fragments()), storage
        assert [s.verdict for s in ls.verify_index(uri, "d_zm").segments] == ["clean"], storage
        for f in ["d = 'v3'", "d IS NULL", "d IS NOT NULL"]:
            got = sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist())
            assert got == sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist()), (storage, f)
            assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), (storage, f)
        assert ds.count_rows("d IS NULL") == len([x for x in range(2500) if x % 11 == 0 and x % 7 != 0]), storage
