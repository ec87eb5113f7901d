"""ZONEMAP segments merged by us, checked against real Lance: pylance
14.0.2 writes a ZONEMAP index (zonemap.lance: a zone per run of rows of a
fragment, and the row map of null values in a global buffer) and one
optimize delta per append; our optimize merges them (a tree: merged
segments merge again) and commits; every filter returns exactly the rows it
returns after pylance's own optimize_indices, pylance's plan uses the
index, and verify_index checks the zones."""

from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls

ROWS = 12000
APPENDS = 4
FILTERS = {
    "ts": ["ts = 300", "ts > 100000", "ts BETWEEN 1000 AND 1100", "ts IS NULL", "ts IS NOT NULL AND ts < 40"],
    "x": ["x > 3.2", "x < -3.3", "x BETWEEN 0.5 AND 0.5001", "x IS NULL"],
    # String bounds (FSST-compressed by pylance once a page holds 32 KiB).
    "s": ["s = 'name-00000300'", "s > 'name-00059000'", "s BETWEEN 'name-00001000' AND 'name-00001010'", "s IS NULL"],
    # Bools: zones of all-false rows let pylance skip them for `b = true`.
    "b": ["b = true", "b IS NULL", "b IS FALSE", "b = true OR b IS NULL"],
}


def _table(start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    i = np.arange(start, start + ROWS)
    return pa.table({"id": pa.array(i), "ts": pa.array(i * 3, mask=rng.random(ROWS) < 0.01),
                     "x": pa.array(rng.normal(size=ROWS), mask=rng.random(ROWS) < 0.02),
                     "s": pa.array([None if k % 89 == 0 else f"name-{k:08d}" for k in i]),
                     "b": pa.array((i // 5000) % 3 == 1, mask=rng.random(ROWS) < 0.01)})


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("zonemap") / "t")
    ds = lance.write_dataset(_table(0, 0), uri, max_rows_per_file=ROWS // 2)  # two fragments in the base
    for col in FILTERS:
        ds.create_scalar_index(col, "ZONEMAP")
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 101 = 0")
    return uri


@pytest.mark.parametrize("col", sorted(FILTERS))
def test_optimize_merges_zonemap_segments_and_pylance_answers_as_after_its_own(deltas, tmp_path, col):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(deltas, ours)
    shutil.copytree(deltas, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    name = f"{col}_idx"
    before = ls.open(ours).list_index_segments(name)
    assert len(before) == 1 + APPENDS and {s.index_type for s in before} == {"ZONEMAP"}
    assert sum(s.num_rows for s in before) == ROWS * (1 + APPENDS)
    ls.optimize(ours, name, fan_in=2, progress=False)
    (merged,) = ls.open(ours).list_index_segments(name)
    assert merged.index_type == "ZONEMAP" and merged.num_rows == ROWS * (1 + APPENDS)
    a, b = lance.dataset(ours), lance.dataset(theirs)
    for f in FILTERS[col]:
        got = sorted(a.to_table(filter=f, columns=["id"])["id"].to_pylist())
        assert got == sorted(b.to_table(filter=f, columns=["id"])["id"].to_pylist()), f
        assert "ScalarIndexQuery" in a.scanner(filter=f).explain_plan(), f
    a.validate()
    rep = ls.verify_index(ours, name)
    assert rep.index_type == "ZONEMAP" and [s.verdict for s in rep.segments] == ["clean"]


def test_maintain_and_plan_take_zonemap(deltas, tmp_path):
    uri = str(tmp_path / "t")
    shutil.copytree(deltas, uri)
    plan = ls.plan_index_segment_merge(uri, "ts_idx", segments_per_task=2)
    assert plan.index_type == "ZONEMAP" and plan.num_segments == 1 + APPENDS
    rep = ls.maintain(uri, "ts_idx", policy="all")
    assert rep.committed and rep.segments_after == 1
    with pytest.raises(ls.UnsupportedError, match="ZONEMAP"):
        ls.health(uri, "ts_idx")


BLOOM_FILTERS = {
    "ts": ["ts = 300", "ts IN (3, 36000, 123456)", "ts = 7"],
    "s": ["s = 'name-00000300'", "s IN ('name-00012000', 'name-00059999', 'nope')"],
}


@pytest.fixture(scope="module")
def bloom_deltas(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("bloom") / "t")
    ds = lance.write_dataset(_table(0, 0), uri, max_rows_per_file=ROWS // 2)
    for col in BLOOM_FILTERS:
        ds.create_scalar_index(col, "BLOOMFILTER")
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 101 = 0")
    return uri


@pytest.mark.parametrize("col", sorted(BLOOM_FILTERS))
def test_optimize_merges_bloomfilter_segments_and_pylance_answers_as_after_its_own(bloom_deltas, tmp_path, col):
    """BLOOMFILTER segments are zones too (bloomfilter.lance: fragment_id,
    zone_start, zone_length, has_null (bool), bloom_filter_data): merged by
    concatenating the zones, pylance answers as after its own merge."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(bloom_deltas, ours)
    shutil.copytree(bloom_deltas, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    name = f"{col}_idx"
    before = ls.open(ours).list_index_segments(name)
    assert len(before) == 1 + APPENDS and {s.index_type for s in before} == {"BLOOMFILTER"}
    assert sum(s.num_rows for s in before) == ROWS * (1 + APPENDS)
    plan = ls.plan_index_segment_merge(ours, name, segments_per_task=2)
    assert plan.index_type == "BLOOMFILTER" and plan.num_segments == 1 + APPENDS
    ls.optimize(ours, name, fan_in=2, progress=False)
    (merged,) = ls.open(ours).list_index_segments(name)
    assert merged.index_type == "BLOOMFILTER" and merged.num_rows == ROWS * (1 + APPENDS)
    a, b = lance.dataset(ours), lance.dataset(theirs)
    for f in BLOOM_FILTERS[col]:
        got = sorted(a.to_table(filter=f, columns=["id"])["id"].to_pylist())
        assert got == sorted(b.to_table(filter=f, columns=["id"])["id"].to_pylist()), f
        assert "ScalarIndexQuery" in a.scanner(filter=f).explain_plan(), f
    assert a.count_rows(BLOOM_FILTERS[col][0]) == 1
    a.validate()
    rep = ls.verify_index(ours, name)
    assert rep.index_type == "BLOOMFILTER" and [s.verdict for s in rep.segments] == ["clean"]
