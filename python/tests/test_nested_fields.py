"""Scalar indices on fields inside structs (``s.x``, ``s.t.y``), checked
against real Lance: pylance 14.0.2 builds them with ``create_scalar_index``
and ``create_index_uncommitted``, but its ``optimize_indices`` fails on them
("No column with name x"), so new rows stay unindexed. We read the field's
values (a null struct reads as a null value, as pylance indexes it; file
version 2.0 has no struct validity), build what pylance builds, commit,
merge and verify them."""

from __future__ import annotations

import base64
import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls
from test_scalar_build import _answers, _read, _row_map

ROWS = 4000
VERSIONS = ["2.0", "2.2"]
FILTERS = {
    "s.x": ["s.x = 3", "s.x < 10", "s.x IN (7, 900)", "s.x IS NULL"],
    "s.z": ["s.z = 3", "s.z IS NULL"],
    "s.c": ["s.c = 'c3'", "s.c IN ('c1', 'nope')", "s.c IS NULL"],
    "s.t.y": ["s.t.y = 7.0", "s.t.y > 45", "s.t.y IS NULL"],
    "s.tags": ["array_has_any(s.tags, ['t1'])", "array_has_all(s.tags, ['t0', 't2'])", "s.tags IS NULL"],
}


def _table(start: int, n: int, version: str) -> pa.Table:
    """id and s: struct<x int64, z int64, c string, t: struct<y double>,
    tags: list<string>>, with null members throughout and (2.1+) null
    structs."""
    i = np.arange(start, start + n)
    x = pa.array([None if v % 11 == 0 else int(v % 1000) for v in i], pa.int64())
    z = pa.array([None if v % 23 == 0 else int((v + 500) % 1000) for v in i], pa.int64())
    c = pa.array([None if v % 13 == 0 else f"c{v % 7}" for v in i])
    y = pa.array([None if v % 5 == 0 else float(v % 50) for v in i])
    mask = None if version == "2.0" else pa.array([v % 17 == 0 for v in i])
    tags = pa.array([None if v % 19 == 0 else [f"t{v % 5}", f"t{v % 3}"][: v % 3] for v in i], pa.list_(pa.string()))
    t = pa.StructArray.from_arrays([y], names=["y"])
    s = pa.StructArray.from_arrays([x, z, c, t, tags], names=["x", "z", "c", "t", "tags"], mask=mask)
    return pa.table({"id": pa.array(i), "s": s})


@pytest.fixture(scope="module", params=VERSIONS)
def nested(request, tmp_path_factory) -> tuple[str, str]:
    """Three fragments of nested rows, some deleted, no index."""
    version = request.param
    uri = str(tmp_path_factory.mktemp(f"nested{version}") / "t")
    for k in range(3):
        lance.write_dataset(_table(k * ROWS, ROWS, version), uri, mode="append" if k else "create",
                            data_storage_version=version)
    lance.dataset(uri).delete("id % 97 = 0")
    return uri, version


def _copy(src: str, tmp_path, name: str = "c") -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _same_files(uri: str, typ: str, ours, theirs) -> None:
    """Our segment's files hold what pylance's hold (rows of equal keys
    may be ordered otherwise)."""
    a_dir, b_dir = f"{uri}/_indices/{ours.uuid}/", f"{uri}/_indices/{theirs.uuid}/"
    if typ == "BTREE":
        a, b = _read(a_dir + "page_data.lance"), _read(b_dir + "page_data.lance")
        assert a.schema == b.schema and a["values"].equals(b["values"])
        assert sorted(zip(a["values"].to_pylist(), a["ids"].to_pylist()), key=repr) == \
            sorted(zip(b["values"].to_pylist(), b["ids"].to_pylist()), key=repr)
        assert _read(a_dir + "page_lookup.lance").equals(_read(b_dir + "page_lookup.lance"))
        return
    (path,) = [f.path for f in theirs.files]
    a, b = _read(a_dir + path), _read(b_dir + path)
    assert a.schema == b.schema
    if typ in ("BITMAP", "LABEL_LIST"):
        assert a["keys"].equals(b["keys"])
        assert [_row_map(x) for x in a["bitmaps"].to_pylist()] == [_row_map(x) for x in b["bitmaps"].to_pylist()]
    else:  # zones, bloom filters, n-gram postings: byte for byte
        assert a.to_pydict().__repr__() == b.to_pydict().__repr__()
    assert LanceFileReader(a_dir + path).metadata().schema.metadata == \
        LanceFileReader(b_dir + path).metadata().schema.metadata


@pytest.mark.parametrize("typ,col", [("BTREE", "s.x"), ("BTREE", "s.t.y"), ("BITMAP", "s.c"), ("ZONEMAP", "s.x"),
                                     ("BLOOMFILTER", "s.c"), ("NGRAM", "s.c"), ("LABEL_LIST", "s.tags")])
def test_builds_inside_structs_write_what_pylance_writes(nested, tmp_path, typ, col):
    uri = _copy(nested[0], tmp_path)
    name = col.replace(".", "_") + "_" + typ.lower()
    ours = ls.build_index_segment(uri, col, typ, [1, 2], name=name)
    theirs = lance.dataset(uri).create_index_uncommitted(col, typ, name=name, fragment_ids=[1, 2])
    assert ours.index_type == typ and ours.index_version == theirs.index_version
    assert ours._entry_dict()["index_details"] == base64.b64encode(theirs.index_details[1]).decode()
    assert sorted(f.path for f in ours.files) == sorted(f.path for f in theirs.files)
    _same_files(uri, typ, ours, theirs)


def test_a_null_struct_is_a_null_key(nested, tmp_path):
    """In 2.1+ a row whose struct is null is indexed under the null key of
    each member (as pylance does); 2.0 files cannot hold a null struct."""
    uri, version = nested
    uri = _copy(uri, tmp_path)
    seg = ls.build_index_segment(uri, "s.x", "BTREE", [0], name="x_idx")
    keys = _read(f"{uri}/_indices/{seg.uuid}/page_data.lance")
    ids = set(np.asarray(keys.filter(keys["values"].is_null())["ids"]).tolist())
    rows = lance.dataset(uri).get_fragment(0).to_table(columns=["id"], with_row_address=True)
    want = {a for v, a in zip(rows["id"].to_pylist(), rows["_rowaddr"].to_pylist())
            if v % 11 == 0 or (version != "2.0" and v % 17 == 0)}
    assert ids == want
    assert any(v % 17 == 0 and v % 11 != 0 for v in rows["id"].to_pylist())


def test_pylance_cannot_optimize_them_and_we_index_merge_and_verify(nested, tmp_path):
    """pylance builds each index over the first fragment; after appends its
    own optimize_indices fails on a field inside a struct, so the new rows
    stay unindexed. Our segments for them commit, pylance answers every
    filter as a scan does (with the index in its plan), our optimize merges
    each index to one segment that still answers so, and verify is clean."""
    version = nested[1]
    uri = str(tmp_path / "t")
    lance.write_dataset(_table(0, ROWS, version), uri, data_storage_version=version)
    indices = {"x_bt": ("s.x", "BTREE"), "c_bm": ("s.c", "BITMAP"), "y_bt": ("s.t.y", "BTREE"), "z_zm": ("s.z", "ZONEMAP")}
    ds = lance.dataset(uri)
    for name, (col, typ) in indices.items():
        ds.create_scalar_index(col, typ, name=name)
    for k in (1, 2):
        lance.write_dataset(_table(k * ROWS, ROWS, version), uri, mode="append")
    with pytest.raises(OSError, match="No column with name"):
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0, index_names=["x_bt"])
    filters = [f for col, _ in indices.values() for f in FILTERS[col]]
    truth = _answers(uri, filters, use_index=False)
    assert all(truth.values()), truth
    for name, (col, typ) in indices.items():
        covered = {f for s in ls.open(uri).list_index_segments(name) for f in s.fragment_ids}
        new = [f.fragment_id for f in lance.dataset(uri).get_fragments() if f.fragment_id not in covered]
        assert new == [1, 2]
        segs = [ls.build_index_segment(uri, col, typ, [f], name=name) for f in new]
        ls.commit_existing_index_segments(uri, name, col, segs)
        assert len(ls.open(uri).list_index_segments(name)) == 3
    assert _answers(uri, filters) == truth
    ds = lance.dataset(uri)
    for name, (col, _) in indices.items():
        f = FILTERS[col][0]
        assert f"@{name}" in ds.scanner(filter=f).explain_plan(), (name, f)
    for name in indices:
        ls.optimize(uri, name, progress=False)
        (seg,) = ls.open(uri).list_index_segments(name)
        assert sorted(seg.fragment_ids) == [0, 1, 2]
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"]
    assert _answers(uri, filters) == truth


def test_keys_that_are_not_the_data_are_damage_inside_structs(nested, tmp_path):
    """verify reads the member's values: a BTREE of s.x holding s.z's keys
    is damage."""
    uri = _copy(nested[0], tmp_path)
    ds = lance.dataset(uri)
    ds.create_scalar_index("s.x", "BTREE", name="x_bt")
    ds.create_scalar_index("s.z", "BTREE", name="z_bt")
    for name in ("x_bt", "z_bt"):
        checks = {c.name: c for c in ls.verify_index(uri, name).segments[0].checks}
        assert checks["keys"].verdict == "ok", checks
    src, dst = (f"{uri}/_indices/{ls.open(uri).list_index_segments(n)[0].uuid}" for n in ("z_bt", "x_bt"))
    for f in ("page_data.lance", "page_lookup.lance"):
        shutil.copy(f"{src}/{f}", f"{dst}/{f}")
    (seg,) = ls.verify_index(uri, "x_bt").segments
    checks = {c.name: c for c in seg.checks}
    assert checks["structure"].verdict == "ok" and seg.verdict == "damaged"
    assert checks["keys"].damage == "keys_mismatch" and "is under key" in checks["keys"].message


def test_maintain_index_new_indexes_the_appended_rows(nested, tmp_path):
    """maintain_all(index_new=True) does what pylance's optimize_indices
    cannot here: each index gets a delta over the appended fragments and
    is merged to one segment over all of them, answering as a scan."""
    version = nested[1]
    uri = str(tmp_path / "t")
    lance.write_dataset(_table(0, ROWS, version), uri, data_storage_version=version)
    # pylance 14.0.2 builds a LABEL_LIST of a list inside a struct, but its
    # plans do not use it: its answers come from the data either way.
    indices = {"x_bt": ("s.x", "BTREE"), "c_bm": ("s.c", "BITMAP"), "z_zm": ("s.z", "ZONEMAP"), "c_fts": ("s.c", "INVERTED"),
               "tags_ll": ("s.tags", "LABEL_LIST")}
    ds = lance.dataset(uri)
    for name, (col, typ) in indices.items():
        ds.create_scalar_index(col, typ, name=name)
    for k in (1, 2):
        lance.write_dataset(_table(k * ROWS, ROWS, version), uri, mode="append")
    version_before = lance.dataset(uri).version
    with pytest.raises(OSError, match="No column with name"):  # for every index: nothing committed
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    assert lance.dataset(uri).version == version_before
    filters = [f for col, _ in indices.values() if col in FILTERS for f in FILTERS[col]]
    truth = _answers(uri, filters, use_index=False)
    words = _matches(uri, "c3")
    assert len(words) > ROWS // 10
    reports = ls.maintain_all(uri, index_new=True, policy="all")
    assert {r.index_name: (r.indexed_rows, r.segments_after) for r in reports} == {n: (2 * ROWS, 1) for n in indices}
    for name in indices:
        (seg,) = ls.open(uri).list_index_segments(name)
        assert sorted(seg.fragment_ids) == [0, 1, 2]
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"]
    assert _answers(uri, filters) == truth
    assert _matches(uri, "c3") == words
    again = ls.maintain(uri, "x_bt", index_new=True)
    assert again.indexed_rows == 0 and not again.committed



def _matches(uri: str, word: str) -> list[int]:
    from lance.query import MatchQuery

    t = lance.dataset(uri).to_table(full_text_query=MatchQuery(word, column="s.c"), columns=["id", "_score"])
    return sorted(t["id"].to_pylist())


def _vectors(start: int, n: int, version: str) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(start)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    v = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16)
    i = np.arange(start, start + n)
    mask = None if version == "2.0" else pa.array(i % 17 == 0)
    s = pa.StructArray.from_arrays([v, pa.array(i)], names=["v", "k"], mask=mask)
    return pa.table({"id": i, "s": s}), x


def test_a_vector_index_inside_a_struct_builds_verifies_and_merges(nested, tmp_path):
    """pylance 14.0.2 indexes a vector inside a struct ("s.v") and its own
    optimize_indices adds deltas there. maintain(index_new=True) builds the
    delta pylance builds (the same rows, partitions and vectors; a null
    struct is a null vector, left out), our optimize merges, verify is
    clean, and pylance's nearest neighbours over all partitions are the
    brute-force ones."""
    from test_build import read_aux

    version = nested[1]
    uri = str(tmp_path / "v")
    t, x0 = _vectors(0, 2000, version)
    lance.write_dataset(t, uri, data_storage_version=version)
    lance.dataset(uri).create_index("s.v", "IVF_FLAT", name="v_idx", num_partitions=4)
    xs = [x0]
    for k in (1, 2):
        t, x = _vectors(k * 2000, 1000, version)
        lance.write_dataset(t, uri, mode="append")
        xs.append(x)
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    rep = ls.maintain(uri, "v_idx", index_new=True)
    assert rep.indexed_rows == 2000 and rep.segments_after == 2
    (ours,) = [s for s in ls.open(uri).list_index_segments("v_idx") if sorted(s.fragment_ids) == [1, 2]]
    (delta,) = [s for s in ls.open(theirs).list_index_segments("v_idx") if sorted(s.fragment_ids) == [1, 2]]
    oinfo, orid, opart = read_aux(uri, ours.uuid)
    tinfo, trid, tpart = read_aux(theirs, delta.uuid)
    nulls = 0 if version == "2.0" else sum(1 for i in range(2000, 4000) if i % 17 == 0)
    assert len(orid) == len(trid) == 2000 - nulls
    oi, ti = np.argsort(orid), np.argsort(trid)
    np.testing.assert_array_equal(orid[oi], trid[ti])
    np.testing.assert_array_equal(opart[oi], tpart[ti])
    ov = np.frombuffer(__import__("base64").b64decode(oinfo["columns"]["flat"]["values"]), np.float32).reshape(-1, 16)
    tv = np.frombuffer(__import__("base64").b64decode(tinfo["columns"]["flat"]["values"]), np.float32).reshape(-1, 16)
    np.testing.assert_array_equal(ov[oi], tv[ti])
    ls.optimize(uri, "v_idx", progress=False)
    (seg,) = ls.open(uri).list_index_segments("v_idx")
    assert sorted(seg.fragment_ids) == [0, 1, 2]
    assert [s.verdict for s in ls.verify_index(uri, "v_idx").segments] == ["clean"]
    every = np.concatenate(xs)
    ids = np.concatenate([np.arange(0, 2000), np.arange(2000, 3000), np.arange(4000, 5000)])
    live = np.ones(len(ids), bool) if version == "2.0" else ids % 17 != 0
    for q in np.random.default_rng(5).standard_normal((5, 16)).astype(np.float32):
        got = lance.dataset(uri).to_table(nearest={"column": "s.v", "q": q, "k": 10, "nprobes": 4}, columns=["id"])
        want = ids[live][np.argsort(((every[live] - q) ** 2).sum(1), kind="stable")[:10]]
        assert sorted(got["id"].to_pylist()) == sorted(want.tolist())
