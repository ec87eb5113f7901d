"""BITMAP and LABEL_LIST segments merged by us, checked against real Lance:
pylance 14.0.2 writes each index and one optimize delta per append (keys of
several types, null keys, null lists, deletes); our optimize merges them
(a tree of merges, so merged segments merge again) and commits; every
filter that uses the index returns exactly the rows it returns after
pylance's own optimize_indices on a copy, pylance's plan uses the index,
and verify_index checks the merged segment's keys and row maps."""

from __future__ import annotations

import json
import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls

ROWS = 2000
APPENDS = 4
#: index name -> (column, pylance index type)
INDICES = {
    "i64_idx": ("i64", "BITMAP"), "i32_idx": ("i32", "BITMAP"), "u8_idx": ("u8", "BITMAP"),
    "f64_idx": ("f64", "BITMAP"), "s_idx": ("s", "BITMAP"), "d_idx": ("d", "BITMAP"),
    "w_idx": ("w", "BITMAP"),  # thousands of keys: several windows of the merge
    "ls_idx": ("ls", "BITMAP"),  # large_string: written with 64-bit lengths
    "b_idx": ("b", "BITMAP"),  # bools: the null key, false, true
    "tags_idx": ("tags", "LABEL_LIST"), "stags_idx": ("stags", "LABEL_LIST"),
}
FILTERS = {
    "i64_idx": ["i64 = 5", "i64 IN (1, 7, 33)", "i64 IS NULL", "i64 > 45", "i64 BETWEEN -3 AND 3", "i64 = 10 OR i64 IS NULL"],
    "i32_idx": ["i32 = -7", "i32 IN (0, 1)", "i32 < -45"],
    "u8_idx": ["u8 = 200", "u8 IN (3, 4, 250)"],
    "f64_idx": ["f64 = 0.5", "f64 IN (1.5, -2.0)", "f64 IS NULL"],
    "s_idx": ["s = 'key-17'", "s IN ('key-1', 'key-99', 'nope')", "s IS NULL"],
    "ls_idx": ["ls = 'ü-3'", "ls IN ('ü-1', 'ü-12')", "ls IS NULL"],
    "w_idx": ["w = 17", "w IN (1, 2000, 2999)", "w > 2990"],
    "b_idx": ["b = true", "b = false", "b IS NULL", "NOT b", "b = true OR b IS NULL"],
    "d_idx": ["d = DATE '2026-01-05'", "d IN (DATE '2026-01-01', DATE '2026-01-20')"],
    "tags_idx": ["array_has_any(tags, [1, 2])", "array_has_all(tags, [0, 3])", "array_contains(tags, 5)"],
    "stags_idx": ["array_has_any(stags, ['a', 'z'])", "array_has_all(stags, ['b', 'c'])", "array_contains(stags, 'd')"],
}


def _table(start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(ROWS) < 0.05
    i = np.arange(start, start + ROWS)
    letters = list("abcdefg")
    return pa.table({
        "id": pa.array(i),
        "i64": pa.array(rng.integers(-50, 50, ROWS), mask=nulls),
        "i32": pa.array(rng.integers(-50, 50, ROWS).astype(np.int32)),
        "w": pa.array((i * 7) % 3001),
        "u8": pa.array(rng.integers(0, 256, ROWS).astype(np.uint8)),
        "f64": pa.array(rng.integers(-8, 8, ROWS) / 2.0, mask=rng.random(ROWS) < 0.03),
        "s": pa.array([None if k % 31 == 0 else f"key-{k % 113}" for k in i]),
        "ls": pa.array([None if k % 37 == 0 else f"ü-{k % 13}" for k in i], pa.large_string()),
        "b": pa.array(rng.random(ROWS) < 0.3, mask=rng.random(ROWS) < 0.04),
        "d": pa.array((20454 + rng.integers(0, 40, ROWS)).astype(np.int32), type=pa.date32()),
        "tags": pa.array([None if k % 23 == 0 else [int(k % 3), int(k % 7), int(k % 5)] for k in i], type=pa.list_(pa.int64())),
        "stags": pa.array([None if k % 29 == 0 else [letters[k % 7], letters[(k // 7) % 7]] for k in i]),
    })


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("bitmap") / "t")
    ds = lance.write_dataset(_table(0, 0), uri)
    for name, (col, kind) in INDICES.items():
        ds.create_scalar_index(col, kind, name=name)
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 97 = 0")
    return uri


@pytest.fixture(scope="module")
def merged_by_pylance(deltas, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("bitmap-pylance") / "t")
    shutil.copytree(deltas, uri)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    return uri


@pytest.fixture
def pair(deltas, merged_by_pylance, tmp_path):
    """Our copy of the deltas, and a copy of pylance's own merge of them."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(deltas, ours)
    shutil.copytree(merged_by_pylance, theirs)
    return ours, theirs


def _answers(uri: str, filters: list[str]) -> dict[str, list[int]]:
    ds = lance.dataset(uri)
    return {f: sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in filters}


def _keys(uri: str, seg: ls.IndexSegment) -> list:
    """The keys of a segment's file as pylance reads them, checked against
    the count its lance:index_stats metadata gives."""
    r = LanceFileReader(f"{uri}/_indices/{seg.uuid}/bitmap_page_lookup.lance")
    keys = r.read_all().to_table()["keys"].to_pylist()
    assert json.loads(r.metadata().schema.metadata[b"lance:index_stats"]) == {"num_bitmaps": len(keys)}
    return keys


@pytest.mark.parametrize("name", sorted(INDICES))
def test_optimize_merges_bitmap_segments_and_pylance_answers_as_after_its_own(pair, name):
    ours, theirs = pair
    col, kind = INDICES[name]
    before = ls.open(ours).list_index_segments(name)
    assert len(before) == 1 + APPENDS and {s.index_type for s in before} == {kind}
    ls.optimize(ours, name, fan_in=2, progress=False)  # three levels: merged segments merge again
    after = ls.open(ours).list_index_segments(name)
    assert len(after) == 1 and after[0].index_type == kind
    ds = lance.dataset(ours)
    assert set(after[0].fragment_ids) == {f.fragment_id for f in ds.get_fragments()}
    # The merged keys are the live data's distinct values (rows deleted
    # before the merge are dropped, and keys left without rows with them),
    # ascending with the null key first, as pylance writes them.
    values = ds.to_table(columns=[col])[col].to_pylist()
    if kind == "LABEL_LIST":
        distinct = {x for v in values if v is not None for x in v}
    else:
        distinct = set(values)
    keys = _keys(ours, after[0])
    assert keys == sorted(distinct, key=lambda k: (k is not None, k))
    assert after[0].distinct_keys == len(distinct)
    if kind == "BITMAP":
        assert after[0].num_rows == ds.count_rows()
    answers = _answers(ours, FILTERS[name])
    assert answers == _answers(theirs, FILTERS[name])
    assert all(answers.values()), {f: len(a) for f, a in answers.items()}  # every filter selects rows
    for f in FILTERS[name]:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    ds.validate()
    rep = ls.verify_index(ours, name)
    assert rep.index_type == kind and [s.verdict for s in rep.segments] == ["clean"]
    checks = {c.name: c.verdict for c in rep.segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "ok"
    if kind == "BITMAP":
        assert checks["keys"] == "ok"  # a sample of rows read back from the data holds its keys


def test_null_lists_survive_the_merge(pair):
    """LABEL_LIST keeps the rows whose list is null in a row map of its own
    (global buffer lance:label_list_nulls): after our merge, pylance still
    finds them, and still leaves them out of array_has_any."""
    ours, theirs = pair
    ls.optimize(ours, "tags_idx", progress=False)
    for f in ["tags IS NULL", "tags IS NOT NULL", "NOT array_has_any(tags, [0])"]:
        assert _answers(ours, [f]) == _answers(theirs, [f]), f
    assert lance.dataset(ours).count_rows("tags IS NULL") > 0


def test_plan_merge_commit_by_hand_then_delta_then_merge_again(pair):
    ours, theirs = pair
    name = "i64_idx"
    plan = ls.plan_index_segment_merge(ours, name, segments_per_task=3)
    assert plan.index_type == "BITMAP" and len(plan.tasks) == 2
    merged = [ls.merge_existing_index_segments(ours, t) for t in plan.tasks]
    ls.commit_existing_index_segments(ours, name, "i64", merged, replaces=plan.sources)
    assert len(ls.open(ours).list_index_segments(name)) == 2
    assert _answers(ours, FILTERS[name]) == _answers(theirs, FILTERS[name])
    for uri in (ours, theirs):
        lance.write_dataset(_table(ROWS * 10, 99), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    rep = ls.maintain(ours, name, policy="all")
    assert rep.committed and rep.segments_before == 3 and rep.segments_after == 1
    assert _answers(ours, FILTERS[name]) == _answers(theirs, FILTERS[name])
    lance.dataset(ours).validate()


@pytest.mark.parametrize("name", ["i64_idx", "w_idx", "tags_idx"])
def test_segments_given_in_any_order_merge_as_pylance_answers(pair, name):
    """A caller may list segments in any order, and a plan's tasks hold
    fragments that interleave with each other's: a key's row-map entries
    then arrive as several runs out of fragment order (here five, the
    segments newest first), which the merge puts back in order."""
    ours, theirs = pair
    col, kind = INDICES[name]
    segs = ls.open(ours).list_index_segments(name)
    assert len(segs) == 1 + APPENDS
    newest_first = sorted(segs, key=lambda s: -min(s.fragment_ids))
    merged = ls.merge_existing_index_segments(ours, newest_first)
    ls.commit_existing_index_segments(ours, name, col, [merged], replaces=segs)
    (after,) = ls.open(ours).list_index_segments(name)
    assert after.index_type == kind
    assert _answers(ours, FILTERS[name]) == _answers(theirs, FILTERS[name])
    rep = ls.verify_index(ours, name)
    assert [s.verdict for s in rep.segments] == ["clean"]
    lance.dataset(ours).validate()


def test_segments_of_different_key_types_do_not_merge(pair):
    ours, _ = pair
    a = ls.open(ours).list_index_segments("i64_idx")[0]
    b = ls.open(ours).list_index_segments("i32_idx")[1]
    v = lance.dataset(ours).version
    with pytest.raises(ls.InvalidInputError):
        ls.merge_existing_index_segments(ours, [a, b])
    assert lance.dataset(ours).version == v


@pytest.mark.parametrize("shape", ["short", "long"])
def test_fsst_compressed_string_keys_merge(tmp_path, shape):
    """pylance compresses string keys with FSST once a page holds 32 KiB of
    them (mini-block for short keys, full-zip from 256 bytes): our merge
    reads them and pylance answers as after its own merge."""
    n = 6000
    pad = "ü" * 150 if shape == "long" else ""

    def tab(start: int) -> pa.Table:
        k = np.arange(start, start + n)
        return pa.table({"id": pa.array(k), "s": pa.array([None if x % 1000 == 7 else f"customer-{x % 9000:08d}{pad}" for x in k])})

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ds = lance.write_dataset(tab(0), ours)
    ds.create_scalar_index("s", "BITMAP")
    for a in range(2):
        ds = lance.write_dataset(tab(n * (a + 1)), ours, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(ours).delete("id % 11 = 0")
    seg = ls.open(ours).list_index_segments("s_idx")[0]
    layout = str(LanceFileReader(f"{ours}/_indices/{seg.uuid}/bitmap_page_lookup.lance").metadata().columns[0].pages[0].encoding)
    assert "Fsst" in layout, layout[:300]  # the case under test: fail loudly if pylance stops writing it
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=3)
    ls.optimize(ours, "s_idx", progress=False)
    after = ls.open(ours).list_index_segments("s_idx")
    assert len(after) == 1
    values = lance.dataset(ours).to_table(columns=["s"])["s"].to_pylist()
    assert _keys(ours, after[0]) == sorted(set(values), key=lambda k: (k is not None, k))
    filters = [f"s = 'customer-{42:08d}{pad}'", f"s IN ('customer-{8999:08d}{pad}', 'customer-{1:08d}{pad}', 'nope')",
               "s IS NULL", f"s > 'customer-{8990:08d}'"]
    answers = _answers(ours, filters)
    assert answers == _answers(theirs, filters) and all(answers.values())
    assert [s.verdict for s in ls.verify_index(ours, "s_idx").segments] == ["clean"]


def test_stable_row_ids_updates_and_deletes(tmp_path):
    """On a dataset with stable row ids pylance 14.0.2 writes stable ids
    into BITMAP and LABEL_LIST segments but row addresses into BTREE ones.
    An update moves a row to a new fragment with the same stable id: for
    BITMAP only the input covering the new fragment still owns it, so the
    old key's copy is dropped; for BTREE the old address is deleted in the
    old fragment. Deleted rows are dropped too; pylance then answers as
    after its own merge."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")

    def tab(start: int, n: int, shift: int = 0) -> pa.Table:
        i = np.arange(start, start + n)
        return pa.table({"id": pa.array(i), "k": pa.array((i + shift) % 13),
                         "tags": pa.array([[int((k + shift) % 4), int(k % 6)] for k in i], type=pa.list_(pa.int64()))})

    ds = lance.write_dataset(tab(0, 1500), ours, enable_stable_row_ids=True)
    ds.create_scalar_index("k", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    ds.create_scalar_index("id", "BTREE")  # the same ownership rule holds for BTREE
    for a in range(3):
        lance.write_dataset(tab(1500 + 500 * a, 500), ours, mode="append")
        lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(ours).merge_insert("id").when_matched_update_all().execute(tab(100, 200, shift=5))
    lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(ours).delete("id % 11 = 0")
    # BTREE: addresses (an appended fragment's delta holds fragment << 32
    # onwards); BITMAP: stable ids (the same delta's row maps are all of
    # "fragment" 0, the high half of ids below 2^32).
    delta = ls.open(ours).list_index_segments("id_idx")[1]
    ids = LanceFileReader(f"{ours}/_indices/{delta.uuid}/page_data.lance").read_all().to_table()["ids"].to_numpy()
    assert set(ids >> 32) == set(delta.fragment_ids) == {1}
    delta = ls.open(ours).list_index_segments("k_idx")[1]
    maps = LanceFileReader(f"{ours}/_indices/{delta.uuid}/bitmap_page_lookup.lance").read_all().to_table()["bitmaps"].to_pylist()
    assert list(delta.fragment_ids) == [1] and {int.from_bytes(m[4:8], "little") for m in maps} == {0}
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    filters = ["k = 3", "k IN (0, 12)", "k > 10", "array_has_any(tags, [1])", "array_has_all(tags, [2, 5])", "id < 400", "id = 150"]
    for name in ("k_idx", "tags_idx", "id_idx"):
        ls.optimize(ours, name, fan_in=2, progress=False)
        assert len(ls.open(ours).list_index_segments(name)) == 1
    assert _answers(ours, filters) == _answers(theirs, filters)
    assert lance.dataset(ours).count_rows("k = 3") == sum(1 for i in range(3000) if i % 11 and (i + (5 if 100 <= i < 300 else 0)) % 13 == 3)
    seg = ls.open(ours).list_index_segments("k_idx")[0]
    assert seg.num_rows == lance.dataset(ours).count_rows()
    assert ls.open(ours).list_index_segments("id_idx")[0].num_rows == lance.dataset(ours).count_rows()
    # BTREE's addresses are checked against the fragments; BITMAP's stable
    # ids are not mapped to fragments here, so that check is skipped.
    assert [s.verdict for s in ls.verify_index(ours, "id_idx").segments] == ["clean"]
    checks = {c.name: c.verdict for c in ls.verify_index(ours, "k_idx").segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "skipped"
    assert {c.name: c.verdict for c in ls.verify_index(ours, "id_idx").segments[0].checks}["row_ids"] == "ok"
