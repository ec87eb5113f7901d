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


def _merged_both_ways(tmp_path, tab, storage: str, col: str, name: str) -> tuple[str, str]:
    """A ZONEMAP of ``col`` over ``tab``'s rows in file version ``storage``:
    a base, two optimize deltas, rows deleted; then merged by pylance (the
    second path) and by our optimize (the first)."""
    uri = str(tmp_path / "t")
    lance.write_dataset(tab(0, 20_000), uri, data_storage_version=storage)
    lance.dataset(uri).create_scalar_index(col, "ZONEMAP", name=name)
    for a in range(2):
        lance.write_dataset(tab(20_000 + 10_000 * a, 10_000), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 13 = 0")
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(uri, ours)
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=3)
    ls.optimize(ours, name, progress=False)
    return ours, theirs


@pytest.mark.parametrize("storage,values", [("2.0", "few"), ("2.2", "few"), ("2.2", "many"), ("2.1", "int64"), ("2.0", "int64")])
def test_a_zonemap_of_a_dictionary_column_merges_builds_and_verifies(tmp_path, storage, values):
    """pylance 14.0.2 builds a ZONEMAP on a dictionary-encoded column with
    null bounds in every zone (in 2.1+ an all-null page, in 2.0 a
    dictionary of null indices) and counts each zone's nulls: it keeps the
    index and never prunes a zone. Our merge carries the null bounds over
    (written as nulls of the column's dictionary type), our build reads the
    column's dictionary pages and writes what pylance's writes (file and
    index details), verify checks each zone's nulls against the data, and
    pylance answers every filter as after its own merge."""
    def value(x: int) -> object:
        return {"few": f"v{x % 7}", "many": f"value-{x % 9000:05d}", "int64": x % 7 * 1000}[values]

    def tab(start: int, n: int) -> pa.Table:
        i = np.arange(start, start + n)
        return pa.table({"id": pa.array(i), "d": pa.array([None if x % 11 == 0 else value(x) for x in i]).dictionary_encode()})

    ours, theirs = _merged_both_ways(tmp_path, tab, storage, "d", "d_zm")
    (seg,) = ls.open(ours).list_index_segments("d_zm")
    from lance.file import LanceFileReader

    zones = LanceFileReader(f"{ours}/_indices/{seg.uuid}/zonemap.lance").read_all().to_table()
    assert zones.num_rows == 7 and zones["min"].null_count == zones["max"].null_count == 7
    assert pa.types.is_dictionary(zones.schema.field("min").type)
    probe = value(3)
    for f in [f"d = {probe!r}", "d IS NULL", f"d IN ({value(1)!r}, {value(2)!r})", "d IS NOT NULL"]:
        got = sorted(lance.dataset(ours).to_table(filter=f, columns=["id"])["id"].to_pylist())
        assert got, f
        assert got == sorted(lance.dataset(theirs).to_table(filter=f, columns=["id"])["id"].to_pylist()), f
        assert got == sorted(lance.dataset(ours).to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist()), f
        assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter=f).explain_plan(), f
    (v,) = ls.verify_index(ours, "d_zm").segments
    assert v.verdict == "clean" and any(c.name == "keys" and c.verdict == "ok" for c in v.checks), v
    _builds_as_pylance(ours, "d", "d_zm2")


@pytest.mark.parametrize("storage,item", [("2.2", pa.int64()), ("2.2", pa.string()), ("2.0", pa.string())], ids=["2.2-int64", "2.2-string", "2.0-string"])
def test_a_zonemap_of_a_list_column_merges_builds_and_verifies(tmp_path, storage, item):
    """pylance 14.0.2 builds a ZONEMAP on a list column with null min and
    max lists in every zone (in 2.1+ a constant page whose repetition and
    definition levels are all 1), counting each zone's null lists: it
    answers IS NULL from it and prunes nothing else. Our merge carries the
    null bounds over, our build writes what pylance's writes (file and
    index details), verify checks each zone's null lists against the data,
    and pylance answers every filter as after its own merge."""
    def value(x: int) -> object:
        return x % 7 if item == pa.int64() else f"t{x % 7}"

    def tab(start: int, n: int) -> pa.Table:
        i = np.arange(start, start + n)
        lists = [None if x % 11 == 0 else [] if x % 17 == 0 else [value(x), value(x + 3)] for x in i]
        return pa.table({"id": pa.array(i), "l": pa.array(lists, pa.list_(item))})

    ours, theirs = _merged_both_ways(tmp_path, tab, storage, "l", "l_zm")
    from lance.file import LanceFileReader

    def zones(root: str) -> pa.Table:
        (seg,) = [s for s in lance.dataset(root).describe_indices() if s.name == "l_zm"][0].segments
        return LanceFileReader(f"{root}/_indices/{seg.uuid}/zonemap.lance").read_all().to_table()

    # (pylance's merge zones the live rows afresh; ours keeps the zones)
    z_ours, z_theirs = zones(ours), zones(theirs)
    assert z_ours.schema.remove_metadata() == z_theirs.schema.remove_metadata()
    assert z_ours.num_rows == 7 and z_ours["min"].null_count == z_ours["max"].null_count == 7
    assert sum(z_ours["null_count"].to_pylist()) > 0
    probe = value(3)
    for f in ["l IS NULL", "l IS NOT NULL", f"array_has_any(l, [{probe!r}])", "array_length(l) = 0"]:
        got = sorted(lance.dataset(ours).to_table(filter=f, columns=["id"])["id"].to_pylist())
        assert got, f
        assert got == sorted(lance.dataset(theirs).to_table(filter=f, columns=["id"])["id"].to_pylist()), f
        assert got == sorted(lance.dataset(ours).to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist()), f
    assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter="l IS NULL").explain_plan()
    (v,) = ls.verify_index(ours, "l_zm").segments
    assert v.verdict == "clean" and any(c.name == "keys" and c.verdict == "ok" for c in v.checks), v
    _builds_as_pylance(ours, "l", "l_zm2")


def _builds_as_pylance(uri: str, col: str, name: str) -> None:
    """Our ZONEMAP build of fragments 0-2 of ``col`` beside pylance's of
    the same fragments: the same index details, zones, metadata and null
    rows (fragment by fragment)."""
    from lance.file import LanceFileReader

    mine = ls.build_index_segment(uri, col, "ZONEMAP", [0, 1, 2], name=name)
    pylances = lance.dataset(uri).create_index_uncommitted(col, "ZONEMAP", name=name, fragment_ids=[0, 1, 2])
    assert mine._entry_dict()["index_details"] == __import__("base64").b64encode(pylances.index_details[1]).decode()
    a = LanceFileReader(f"{uri}/_indices/{mine.uuid}/zonemap.lance")
    b = LanceFileReader(f"{uri}/_indices/{pylances.uuid}/zonemap.lance")
    assert a.read_all().to_table() == b.read_all().to_table()
    assert a.metadata().schema.metadata == b.metadata().schema.metadata
    assert a.read_global_buffer(1) == b.read_global_buffer(1)
