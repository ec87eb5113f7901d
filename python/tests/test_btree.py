"""BTREE segments merged by us, checked against real Lance: pylance 14.0.2
writes a BTREE index and one optimize delta per append (keys of several
types, nulls, deletes); our optimize merges them (a tree of merges, so
merged segments merge again) and commits; every filter that uses the index
returns exactly the rows it returns after pylance's own optimize_indices
on a copy, pylance's plan uses the index, and verify_index checks the
merged segment's order, pages and row ids."""

from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls

ROWS = 3000
APPENDS = 5
#: column -> arrow type of its keys
KEYS = {"i64": pa.int64(), "i32": pa.int32(), "u64": pa.uint64(), "f64": pa.float64(), "f32": pa.float32(),
        "ts": pa.timestamp("us"), "tz": pa.timestamp("ms", tz="UTC"), "d": pa.date32(),
        # Strings of few values (pylance stores them as a dictionary), of many
        # (FSST, from 32 KiB a page), large strings and binary.
        "s": pa.string(), "hs": pa.string(), "ls": pa.large_string(), "bn": pa.binary(),
        # Bools: a byte each in our reader, one bit each in the files.
        "flag": pa.bool_()}
FILTERS = {
    "i64": ["i64 = 5", "i64 > 990", "i64 < -995", "i64 BETWEEN -3 AND 3", "i64 IS NULL", "i64 IN (1, 7, 900)", "i64 >= 999 OR i64 IS NULL"],
    "i32": ["i32 = -7", "i32 <= -990", "i32 BETWEEN 10 AND 12", "i32 IS NULL"],
    "u64": ["u64 = 42", "u64 > 1990", "u64 BETWEEN 100 AND 105"],
    "f64": ["f64 > 2.5", "f64 < -2.9", "f64 BETWEEN 0.001 AND 0.01", "f64 IS NULL"],
    "f32": ["f32 > 2.7", "f32 < -2.5"],
    "ts": ["ts < TIMESTAMP '2026-01-01 00:00:01'", "ts > TIMESTAMP '2026-01-01 00:16:30'", "ts IS NULL",
           "ts BETWEEN TIMESTAMP '2026-01-01 00:00:01' AND TIMESTAMP '2026-01-01 00:00:02'"],
    "tz": ["tz < TIMESTAMP '2026-01-01 00:00:00.100'", "tz > TIMESTAMP '2026-01-01 00:00:17.990'"],
    "d": ["d = DATE '2026-01-05'", "d >= DATE '2026-03-01'", "d IS NULL"],
    "s": ["s = 'k7'", "s > 'k45'", "s LIKE 'k1%'", "s IN ('k1', 'k22', 'nope')", "s IS NULL"],
    "hs": ["hs = 'customer-00079190'", "hs < 'customer-00100000'", "hs BETWEEN 'customer-0500' AND 'customer-0501'", "hs LIKE 'customer-0099%'"],
    "ls": ["ls = 'k-ü-3'", "ls >= 'k-ü-95'", "ls IS NULL"],
    "bn": ["bn = X'0102'", "bn > X'0603'", "bn IS NULL"],
    "flag": ["flag = true", "flag = false", "flag IS NULL", "NOT flag", "flag = true OR flag IS NULL"],
}


def _table(start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    nulls = rng.random(ROWS) < 0.05
    cols = {
        "id": pa.array(np.arange(start, start + ROWS)),
        "i64": pa.array(rng.integers(-1000, 1000, ROWS), mask=nulls),
        "i32": pa.array(rng.integers(-1000, 1000, ROWS).astype(np.int32), mask=nulls),
        "u64": pa.array(rng.integers(0, 2000, ROWS).astype(np.uint64)),
        "f64": pa.array(rng.normal(size=ROWS), mask=rng.random(ROWS) < 0.02),
        "f32": pa.array(rng.normal(size=ROWS).astype(np.float32)),
        "s": pa.array([None if k % 41 == 0 else f"k{k % 50}" for k in range(start, start + ROWS)]),
        "hs": pa.array([f"customer-{k * 7919 % 10**7:08d}" for k in range(start, start + ROWS)]),
        "ls": pa.array([None if k % 37 == 0 else f"k-ü-{k % 100}" for k in range(start, start + ROWS)], pa.large_string()),
        "bn": pa.array([None if k % 43 == 0 else bytes([k % 7, k % 5]) * (k % 3) for k in range(start, start + ROWS)], pa.binary()),
        # Temporal keys: their storage integers, the logical type kept.
        "ts": pa.array(np.datetime64("2026-01-01") + rng.integers(0, 10**9, ROWS).astype("timedelta64[us]"), mask=nulls),
        "tz": pa.array((1767225600000 + rng.integers(0, 18000, ROWS)).astype(np.int64), type=pa.timestamp("ms", tz="UTC")),
        "d": pa.array((20454 + rng.integers(0, 90, ROWS)).astype(np.int32), type=pa.date32(), mask=rng.random(ROWS) < 0.03),
        "flag": pa.array(rng.random(ROWS) < 0.3, mask=rng.random(ROWS) < 0.04),
    }
    return pa.table(cols)


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("btree") / "t")
    ds = lance.write_dataset(_table(0, 0), uri)
    for col in KEYS:
        ds.create_scalar_index(col, "BTREE")
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 97 = 0")
    return uri


@pytest.fixture
def pair(deltas, tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(deltas, ours)
    shutil.copytree(deltas, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    return ours, theirs


def _answers(uri: str, filters: list[str]) -> dict[str, list[int]]:
    ds = lance.dataset(uri)
    return {f: sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in filters}


@pytest.mark.parametrize("col", sorted(KEYS))
def test_optimize_merges_btree_segments_and_pylance_answers_as_after_its_own(pair, col):
    ours, theirs = pair
    name = f"{col}_idx"
    before = ls.open(ours).list_index_segments(name)
    assert len(before) == 1 + APPENDS and all(s.index_type == "BTREE" for s in before)
    ls.optimize(ours, name, fan_in=2, progress=False)  # three levels: merged segments merge again
    after = ls.open(ours).list_index_segments(name)
    assert len(after) == 1 and after[0].index_type == "BTREE"
    ds = lance.dataset(ours)
    # Rows deleted before the merge are dropped from the merged pages.
    assert after[0].num_rows == ds.count_rows()
    assert set(after[0].fragment_ids) == {f.fragment_id for f in ds.get_fragments()}
    answers = _answers(ours, FILTERS[col])
    assert answers == _answers(theirs, FILTERS[col])
    assert all(answers.values()), {f: len(a) for f, a in answers.items()}  # every filter selects rows
    for f in FILTERS[col]:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    ds.validate()
    rep = ls.verify_index(ours, name)
    assert rep.index_type == "BTREE" and [s.verdict for s in rep.segments] == ["clean"]
    checks = {c.name: c.verdict for c in rep.segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "ok" and checks["keys"] == "ok"


def test_merge_by_hand_then_delta_then_merge_again(pair):
    ours, theirs = pair
    segs = ls.open(ours).list_index_segments("i64_idx")
    plan = ls.plan_index_segment_merge(ours, "i64_idx", segments_per_task=3)
    assert plan.index_type == "BTREE" and len(plan.tasks) == 2
    merged = [ls.merge_existing_index_segments(ours, t) for t in plan.tasks]
    assert sum(m.num_rows for m in merged) == lance.dataset(ours).count_rows()
    ls.commit_existing_index_segments(ours, "i64_idx", "i64", merged, replaces=plan.sources)
    assert len(ls.open(ours).list_index_segments("i64_idx")) == 2
    # Another append indexed by pylance, then everything merged again.
    for uri in (ours, theirs):
        lance.write_dataset(_table(ROWS * 10, 99), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    ls.optimize(ours, "i64_idx", progress=False)
    assert len(ls.open(ours).list_index_segments("i64_idx")) == 1
    assert _answers(ours, FILTERS["i64"]) == _answers(theirs, FILTERS["i64"])
    assert segs  # the original deltas are untouched in older versions
    lance.dataset(ours).validate()


def test_maintain_merges_a_btree_index(pair):
    ours, theirs = pair
    rep = ls.maintain(ours, "f64_idx", policy="all", retrain="auto")  # no model: nothing to retrain
    assert rep.committed and rep.segments_before == 1 + APPENDS and rep.segments_after == 1
    assert rep.health_verdict == "" and not rep.reindexed
    assert _answers(ours, FILTERS["f64"]) == _answers(theirs, FILTERS["f64"])


def test_health_and_reindex_refuse_btree(pair):
    ours, _ = pair
    with pytest.raises(ls.UnsupportedError, match="BTREE"):
        ls.health(ours, "i64_idx")
    with pytest.raises(ls.UnsupportedError, match="BTREE"):
        ls.reindex(ours, "i64_idx", progress=False)


def test_string_indices_of_a_2_0_dataset_merge(tmp_path):
    """pylance writes 2.0 index files of strings as Dictionary pages (few
    distinct values: an index per row, 0 for null, over a Binary of the
    items) or Binary pages (u64 end offsets, a null's plus
    null_adjustment, then the bytes); we read both and write Binary. A
    BTREE and a BITMAP on low-cardinality strings with nulls and empty
    strings, and a BTREE and a BLOOMFILTER on unique strings, each of three
    segments, merge to one that verifies clean, and pylance answers as a
    scan does."""
    uri = str(tmp_path / "t")

    def rows(lo: int) -> pa.Table:
        i = np.arange(lo, lo + 1000)
        s = [None if k % 50 == 0 else "" if k % 61 == 0 else f"k{k % 97}" for k in i]
        return pa.table({"id": pa.array(i), "s": pa.array(s), "h": pa.array([f"v{k}" for k in i])})

    ds = lance.write_dataset(rows(0), uri, data_storage_version="2.0")
    ds.create_scalar_index("s", "BTREE")
    ds.create_scalar_index("s", "BITMAP", name="s_bm")
    ds.create_scalar_index("h", "BTREE")
    ds.create_scalar_index("h", "BLOOMFILTER", name="h_bf")  # its files have a bool column
    for k in (1, 2):
        ds = lance.write_dataset(rows(1000 * k), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    filters = ["s = 'k5'", "s IS NULL", "s = ''", "s > 'k90'", "h = 'v1500'", "h < 'v11'", "s IN ('k1', 'k96')"]
    truth = {f: sorted(lance.dataset(uri).to_table(filter=f, use_scalar_index=False)["id"].to_pylist()) for f in filters}
    assert all(truth.values())
    for name in ("s_idx", "s_bm", "h_idx", "h_bf"):
        assert len(ls.open(uri).list_index_segments(name)) == 3
        ls.optimize(uri, name, progress=False)
        assert len(ls.open(uri).list_index_segments(name)) == 1
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"]
    ds = lance.dataset(uri)
    assert ds.data_storage_version == "2.0"
    assert {f: sorted(ds.to_table(filter=f)["id"].to_pylist()) for f in filters} == truth
    assert "ScalarIndexQuery" in ds.scanner(filter=filters[4]).explain_plan()


def test_many_deltas_merge_in_one_task(tmp_path):
    """Past the default group size, a BTREE plan is one task (every level of
    a tree would rewrite every row); smaller groups asked for are kept."""
    uri = str(tmp_path / "t")
    rng = np.random.default_rng(3)

    def part(start: int) -> pa.Table:
        return pa.table({"id": pa.array(np.arange(start, start + 50)), "k": pa.array(rng.integers(-99, 99, 50))})

    ds = lance.write_dataset(part(0), uri)
    ds.create_scalar_index("k", "BTREE")
    for a in range(1, 36):
        ds = lance.write_dataset(part(50 * a), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert len(ls.open(uri).list_index_segments("k_idx")) == 36
    assert len(ls.plan_index_segment_merge(uri, "k_idx").tasks) == 1
    small = [len(t.segments) for t in ls.plan_index_segment_merge(uri, "k_idx", segments_per_task=8).tasks]
    assert len(small) == 5 and max(small) <= 8 and sum(small) == 36
    want = sorted(lance.dataset(uri).to_table(filter="k BETWEEN -5 AND 5", columns=["id"])["id"].to_pylist())
    ls.optimize(uri, "k_idx", progress=False)
    assert len(ls.open(uri).list_index_segments("k_idx")) == 1
    assert sorted(lance.dataset(uri).to_table(filter="k BETWEEN -5 AND 5", columns=["id"])["id"].to_pylist()) == want
