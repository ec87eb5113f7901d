"""BTREE, BITMAP and ZONEMAP segments built by us from a column's data, checked
against real Lance: pylance 14.0.2's ``create_index_uncommitted`` over the
same fragments writes the same keys, rows and page lookup (the same
zones, bounds, counts and map of null rows); pylance
queries, merges and commits what we build; filters answer as the data
says (a scan without the index) and as pylance's own
``create_scalar_index``; builds that spill sorted runs write what builds in
memory write; what we cannot build is refused before anything is written."""

from __future__ import annotations

import shutil
import struct
from collections import defaultdict

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls
from test_btree import FILTERS, ROWS, _table

APPENDS = 3
BTREE_COLS = ["i64", "i32", "f64", "d", "ts", "s", "hs", "ls", "bn", "flag"]
BITMAP_COLS = ["i64", "s", "ls", "d", "flag"]
BITMAP_FILTERS = {
    "i64": ["i64 = 5", "i64 IN (1, 7, 900)", "i64 IS NULL", "i64 IS NOT NULL AND i64 < -990"],
    "s": ["s = 'k7'", "s IN ('k1', 'k22', 'nope')", "s IS NULL"],
    "ls": ["ls = 'k-ü-3'", "ls IS NULL"],
    "d": ["d = DATE '2026-01-05'", "d IS NULL"],
    "flag": ["flag = true", "NOT flag", "flag IS NULL"],
}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> str:
    """Four fragments of the BTREE suite's columns, no index, rows deleted."""
    uri = str(tmp_path_factory.mktemp("scalar_build") / "t")
    lance.write_dataset(_table(0, 0), uri)
    for a in range(APPENDS):
        lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
    lance.dataset(uri).delete("id % 97 = 0")
    return uri


@pytest.fixture
def copy(table, tmp_path):
    def make(name: str = "c") -> str:
        dst = str(tmp_path / name)
        shutil.copytree(table, dst)
        return dst

    return make


def _read(path: str) -> pa.Table:
    return LanceFileReader(path).read_all().to_table()


def _answers(uri: str, filters: list[str], use_index: bool = True) -> dict[str, list[int]]:
    ds = lance.dataset(uri)
    return {f: sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=use_index)["id"].to_pylist()) for f in filters}


def _row_map(b: bytes) -> dict[int, int]:
    """Fragment -> rows in a serialized row map (we count by the roaring
    bitmap's cardinality, read from its portable header)."""
    (n,), pos, out = struct.unpack_from("<I", b), 4, {}
    for _ in range(n):
        frag, ln = struct.unpack_from("<II", b, pos)
        pos += 8
        bits = b[pos:pos + ln]
        pos += ln
        out[frag] = _roaring_cardinality(bits)
    return out


def _roaring_cardinality(b: bytes) -> int:
    """Cardinality of a portable 32-bit roaring bitmap (no run containers:
    cookie 12346, then per container its key and cardinality - 1)."""
    cookie, size = struct.unpack_from("<II", b)
    assert cookie == 12346, f"cookie {cookie}: a run-container bitmap"
    return sum(struct.unpack_from("<HH", b, 8 + 4 * i)[1] + 1 for i in range(size))


def _both_merges_answer(uri: str, tmp_path, name: str, filters: list[str], truth: dict) -> None:
    """pylance's optimize_indices merges our committed segments of ``name``
    (on a copy) and so does our optimize: both answer as the data says,
    and ours verifies clean."""
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    n = len(ls.open(theirs).list_index_segments(name))
    lance.dataset(theirs).optimize.optimize_indices(index_names=[name], num_indices_to_merge=n)
    assert len(ls.open(theirs).list_index_segments(name)) == 1
    assert _answers(theirs, filters) == truth
    ls.optimize(uri, name, progress=False)
    assert len(ls.open(uri).list_index_segments(name)) == 1
    assert _answers(uri, filters) == truth
    rep = ls.verify_index(uri, name)
    assert [s.verdict for s in rep.segments] == ["clean"], rep


@pytest.mark.parametrize("col", BTREE_COLS)
def test_btree_build_writes_what_pylance_writes(copy, col):
    uri = copy()
    ds = lance.dataset(uri)
    frags = [0, 2]
    ours = ls.build_index_segment(uri, col, "BTREE", frags, name=f"{col}_idx")
    theirs = ds.create_index_uncommitted(col, "BTREE", name=f"{col}_idx", fragment_ids=frags)
    assert ours.index_type == "BTREE" and ours.index_version == theirs.index_version
    assert sorted(f.path for f in theirs.files) == sorted(f.path for f in ours.files)
    ours_dir, theirs_dir = f"{uri}/_indices/{ours.uuid}/", f"{uri}/_indices/{theirs.uuid}/"
    a, b = _read(ours_dir + "page_data.lance"), _read(theirs_dir + "page_data.lance")
    assert a.schema == b.schema
    # The same keys in the same order; rows of equal keys may be ordered
    # otherwise, so rows are compared as (key, row) pairs.
    assert a["values"].equals(b["values"])
    assert sorted(zip(a["values"].to_pylist(), a["ids"].to_pylist()), key=repr) == \
        sorted(zip(b["values"].to_pylist(), b["ids"].to_pylist()), key=repr)
    assert _read(ours_dir + "page_lookup.lance").equals(_read(theirs_dir + "page_lookup.lance"))
    assert LanceFileReader(ours_dir + "page_lookup.lance").metadata().schema.metadata == \
        LanceFileReader(theirs_dir + "page_lookup.lance").metadata().schema.metadata


@pytest.mark.parametrize("col", BITMAP_COLS)
def test_bitmap_build_writes_what_pylance_writes(copy, col):
    uri = copy()
    ds = lance.dataset(uri)
    frags = [1, 2, 3]
    ours = ls.build_index_segment(uri, col, "BITMAP", frags, name=f"{col}_bm")
    theirs = ds.create_index_uncommitted(col, "BITMAP", name=f"{col}_bm", fragment_ids=frags)
    assert ours.index_type == "BITMAP" and ours.index_version == theirs.index_version
    path = "bitmap_page_lookup.lance"
    a, b = _read(f"{uri}/_indices/{ours.uuid}/{path}"), _read(f"{uri}/_indices/{theirs.uuid}/{path}")
    assert a.schema == b.schema
    assert a["keys"].equals(b["keys"])  # ascending, the null key first
    assert [_row_map(x) for x in a["bitmaps"].to_pylist()] == [_row_map(x) for x in b["bitmaps"].to_pylist()]
    assert LanceFileReader(f"{uri}/_indices/{ours.uuid}/{path}").metadata().schema.metadata == \
        LanceFileReader(f"{uri}/_indices/{theirs.uuid}/{path}").metadata().schema.metadata


@pytest.mark.parametrize("typ,col", [("BTREE", c) for c in ("i64", "f64", "hs", "bn", "flag")] + [("BITMAP", c) for c in ("s", "d", "flag")])
def test_per_fragment_builds_commit_merge_and_answer(copy, tmp_path, typ, col):
    """One segment per fragment, committed by us: pylance answers as the
    data says; pylance's own optimize_indices merges them, and so does ours,
    and both still answer the same."""
    uri = copy("ours")
    name = f"{col}_{typ.lower()}"
    frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    segs = [ls.build_index_segment(uri, col, typ, [f], name=name) for f in frags]
    ls.commit_existing_index_segments(uri, name, col, segs)
    filters = FILTERS[col] if typ == "BTREE" else BITMAP_FILTERS[col]
    truth = _answers(uri, filters, use_index=False)
    assert all(truth.values()), truth
    ds = lance.dataset(uri)
    assert len(ls.open(uri).list_index_segments(name)) == len(frags)
    assert _answers(uri, filters) == truth
    for f in filters:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    _both_merges_answer(uri, tmp_path, name, filters, truth)


@pytest.mark.parametrize("typ,col", [("BTREE", "hs"), ("BITMAP", "s")])
def test_create_index_on_processes_answers_as_create_scalar_index(copy, typ, col):
    ours, theirs = copy("ours"), copy("theirs")
    ls.create_index(ours, col, typ, executor="processes", max_workers=2, fragments_per_task=1, progress=False)
    lance.dataset(theirs).create_scalar_index(col, typ)
    segs = ls.open(ours).list_index_segments(f"{col}_idx")
    assert len(segs) == 1 and segs[0].index_type == typ
    assert segs[0].num_rows == lance.dataset(ours).count_rows()
    filters = FILTERS[col] if typ == "BTREE" else BITMAP_FILTERS[col]
    assert _answers(ours, filters) == _answers(theirs, filters) == _answers(ours, filters, use_index=False)
    assert "ScalarIndexQuery" in lance.dataset(ours).scanner(filter=filters[0]).explain_plan()
    # a later append: pylance's own delta joins the index we built
    lance.write_dataset(_table(10 * ROWS, 99), ours, mode="append")
    lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    ls.optimize(ours, f"{col}_idx", progress=False)
    assert _answers(ours, filters) == _answers(ours, filters, use_index=False)


@pytest.mark.parametrize("typ,col", [("BTREE", "hs"), ("BTREE", "f64"), ("BITMAP", "s")])
def test_spilled_build_writes_what_an_in_memory_build_writes(copy, typ, col):
    """64 KiB of pairs in memory: the build sorts dozens of spilled runs
    and merges them; the files equal those of a build held in memory."""
    uri = copy()
    frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    small = ls.build_index_segment(uri, col, typ, frags, name="a", memory_bytes=64 << 10, window_rows=1000)
    big = ls.build_index_segment(uri, col, typ, frags, name="a")
    assert small.num_rows == big.num_rows == lance.dataset(uri).count_rows()
    for f in big.files:
        assert _read(f"{uri}/_indices/{small.uuid}/{f.path}").equals(_read(f"{uri}/_indices/{big.uuid}/{f.path}")), f.path


def test_bad_builds_are_refused_and_leave_the_dataset(copy):
    uri = copy()
    before = sorted(p.name for p in __import__("pathlib").Path(uri).rglob("*"))
    model_free = dict(name="x")
    with pytest.raises(ls.UnsupportedError, match="bloomfilter build: keys of type bool"):
        ls.build_index_segment(uri, "flag", "BLOOMFILTER", [0], **model_free)  # pylance builds none either
    with pytest.raises(ls.InvalidInputError, match="no model"):
        ls.train_index_model(uri, "i64", "BTREE", num_partitions=2)
    with pytest.raises(ls.InvalidInputError, match="INVERTED index is built over a string column or a list of strings"):
        ls.build_index_segment(uri, "i64", "FTS", [0], **model_free)
    with pytest.raises(ls.InvalidInputError, match="params: analyzer parameters are for INVERTED"):
        ls.build_index_segment(uri, "i64", "BTREE", [0], params={"stem": False}, **model_free)
    with pytest.raises(ls.InvalidInputError, match="index_type"):
        ls.build_index_segment(uri, "i64", "HASH", [0], **model_free)
    with pytest.raises(ls.InvalidInputError, match="fragment"):
        ls.build_index_segment(uri, "i64", "BTREE", [0, 77], **model_free)
    with pytest.raises(ls.NotFoundError, match="nope"):
        ls.build_index_segment(uri, "nope", "BITMAP", [0], **model_free)
    assert sorted(p.name for p in __import__("pathlib").Path(uri).rglob("*")) == before
    lance.dataset(uri).create_scalar_index("i32", "BITMAP", name="taken")
    with pytest.raises(ls.InvalidInputError, match="BITMAP index, not BTREE"):
        ls.build_index_segment(uri, "i32", "BTREE", [0], name="taken")
    with pytest.raises(ls.InvalidInputError, match="not on column"):
        ls.build_index_segment(uri, "i64", "BITMAP", [0], name="taken")
    with pytest.raises(ls.InvalidInputError, match="already has an index"):
        ls.create_index(uri, "i32", "BITMAP", name="taken", progress=False)


def test_stable_row_ids_btree_builds(tmp_path):
    """BTREE segments hold row addresses even on datasets with stable row
    ids (as pylance writes them, at index version 1)."""
    uri = str(tmp_path / "stable")
    lance.write_dataset(_table(0, 0), uri, enable_stable_row_ids=True)
    lance.write_dataset(_table(ROWS, 1), uri, mode="append", enable_stable_row_ids=True)
    ds = lance.dataset(uri)
    ds.delete("id % 13 = 0")
    frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    segs = [ls.build_index_segment(uri, "i64", "BTREE", [f], name="i64_idx") for f in frags]
    # pylance records version 1 here: a version-0 BTREE on such a dataset
    # is read as holding stable ids (it then misses appended fragments' rows)
    theirs = lance.dataset(uri).create_index_uncommitted("i64", "BTREE", name="i64_idx", fragment_ids=[frags[-1]])
    assert [s.index_version for s in segs] == [theirs.index_version] * len(frags) == [1] * len(frags)
    ls.commit_existing_index_segments(uri, "i64_idx", "i64", segs)
    assert _answers(uri, FILTERS["i64"]) == _answers(uri, FILTERS["i64"], use_index=False)


#: index type -> (column, filters) of the stable row id builds
STABLE_BUILDS = {
    "BITMAP": ("k", ["k = 3", "k IN (1, 12)", "k IS NULL"]),
    "LABEL_LIST": ("tags", ["array_has_any(tags, [1])", "array_has_all(tags, [2, 5])", "tags IS NULL"]),
    "NGRAM": ("s", ["contains(s, 'rd4')", "contains(s, 'text')"]),
    "ZONEMAP": ("k", ["k = 3", "k > 10", "k IS NULL"]),
    "BLOOMFILTER": ("k", ["k = 3", "k IN (1, 12)"]),
}


@pytest.mark.parametrize("typ", sorted(STABLE_BUILDS))
def test_stable_row_ids_builds_hold_what_pylance_builds(tmp_path, typ):
    """On a dataset with stable row ids where an update moved rows (their
    ids no longer their addresses), pylance 14.0.2 writes stable ids into
    BITMAP, LABEL_LIST (its null lists too) and NGRAM segments and row
    addresses into ZONEMAP and BLOOMFILTER ones (their maps of null rows).
    Ours hold the same bytes; committed, they answer as a scan and as
    pylance's own index."""
    uri = str(tmp_path / "stable")

    def tab(start: int, n: int, shift: int = 0) -> pa.Table:
        i = np.arange(start, start + n)
        return pa.table({
            "id": pa.array(i),
            "k": pa.array([None if x % 17 == 0 else int((x + shift) % 13) for x in i]),
            "tags": pa.array([None if x % 19 == 0 else [int((x + shift) % 4), int(x % 6)] for x in i], type=pa.list_(pa.int64())),
            "s": pa.array([None if x % 23 == 0 else f"word{(x + shift) % 50} text" for x in i]),
        })

    lance.write_dataset(tab(0, 600), uri, enable_stable_row_ids=True)
    lance.write_dataset(tab(600, 600), uri, mode="append")
    lance.dataset(uri).merge_insert("id").when_matched_update_all().execute(tab(500, 200, shift=5))  # ids 500-699 move
    lance.dataset(uri).delete("id % 29 = 0")
    ds = lance.dataset(uri)
    frags = [f.fragment_id for f in ds.get_fragments()]
    rows = ds.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    assert rows["_rowid"] != rows["_rowaddr"]  # the moved rows' ids are not their addresses
    col, filters = STABLE_BUILDS[typ]
    name = f"{col}_{typ.lower()}"
    ours = ls.build_index_segment(uri, col, typ, frags, name=name)
    theirs = ds.create_index_uncommitted(col, typ, name=name, fragment_ids=frags)
    assert ours.index_version == theirs.index_version
    (path,) = {f.path for f in theirs.files}
    a = LanceFileReader(f"{uri}/_indices/{ours.uuid}/{path}")
    b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/{path}")
    assert a.read_all().to_table().equals(b.read_all().to_table())  # keys, row maps, zones, filters
    meta = b.metadata().schema.metadata or {}
    for key in (b"null_bitmap", b"lance:label_list_nulls"):
        if key in meta:
            assert a.read_global_buffer(int(a.metadata().schema.metadata[key])) == b.read_global_buffer(int(meta[key])), key
    truth = _answers(uri, filters, use_index=False)
    assert all(truth.values()), truth
    ls.commit_existing_index_segments(uri, name, col, [ours])
    assert _answers(uri, filters) == truth
    # (pylance's plan takes a LABEL_LIST index for array filters, not IS NULL)
    assert all("ScalarIndexQuery" in lance.dataset(uri).scanner(filter=f).explain_plan() for f in filters[:2])


# -- ZONEMAP ------------------------------------------------------------------

ZONE_ROWS = 20_000


@pytest.fixture(scope="module")
def zones_table(tmp_path_factory) -> str:
    """Two fragments of 20,000 rows (three zones of 8,192 live rows each),
    rows deleted at a fragment's start and inside a zone, NaNs, nulls, a
    fragment without nulls, an all-null column."""
    uri = str(tmp_path_factory.mktemp("zones") / "t")
    for part in range(2):
        rng = np.random.default_rng(part)
        i = np.arange(part * ZONE_ROWS, (part + 1) * ZONE_ROWS)
        f = rng.normal(size=ZONE_ROWS)
        f[rng.integers(0, ZONE_ROWS, 30)] = np.nan
        nulls = (rng.random(ZONE_ROWS) < 0.01) if part == 0 else np.zeros(ZONE_ROWS, bool)
        t = pa.table({
            "id": pa.array(i),
            "i64": pa.array(rng.integers(-1000, 1000, ZONE_ROWS), mask=nulls),
            "f64": pa.array(f, mask=nulls),
            "s": pa.array([None if n else f"k{x % 977}" for x, n in zip(i, nulls)]),
            "d": pa.array((20454 + rng.integers(0, 90, ZONE_ROWS)).astype(np.int32), type=pa.date32()),
            "none": pa.array([None] * ZONE_ROWS, pa.int32()),
            "b": pa.array((i // 9000) % 2 == 1, mask=nulls),  # zones of one value, and of both
        })
        lance.write_dataset(t, uri, mode="append" if part else "create", max_rows_per_file=ZONE_ROWS)
    lance.dataset(uri).delete("id < 100 OR (id > 8000 AND id < 8300) OR id = 30000")
    return uri


@pytest.mark.parametrize("col", ["i64", "f64", "s", "d", "none", "b"])
def test_zonemap_build_writes_what_pylance_writes(zones_table, tmp_path, col):
    uri = str(tmp_path / "z")
    shutil.copytree(zones_table, uri)
    ds = lance.dataset(uri)
    ours = ls.build_index_segment(uri, col, "ZONEMAP", [1, 0], name=f"{col}_zm")  # any order: zones follow fragments
    theirs = ds.create_index_uncommitted(col, "ZONEMAP", name=f"{col}_zm", fragment_ids=[0, 1])
    assert ours.index_type == "ZONEMAP" and ours.index_version == theirs.index_version
    assert ours._entry_dict()["index_details"] == __import__("base64").b64encode(theirs.index_details[1]).decode()
    a = LanceFileReader(f"{uri}/_indices/{ours.uuid}/zonemap.lance")
    b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/zonemap.lance")
    ta, tb = a.read_all().to_table(), b.read_all().to_table()
    assert ta.schema == tb.schema
    # NaN never equals NaN: compare bounds as their bytes' reprs
    assert ta.to_pydict().__repr__() == tb.to_pydict().__repr__()
    assert len(ta) >= 5  # zones of 8,192 live rows, spans over deleted ones
    assert a.metadata().schema.metadata == b.metadata().schema.metadata
    assert a.read_global_buffer(1) == b.read_global_buffer(1)  # the null rows, fragment by fragment


def test_zonemap_create_index_answers_and_pylance_merges_ours(zones_table, tmp_path):
    uri = str(tmp_path / "z")
    shutil.copytree(zones_table, uri)
    ls.create_index(uri, "i64", "ZONEMAP", executor="processes", max_workers=2, fragments_per_task=1, progress=False)
    filters = ["i64 = 5", "i64 > 990", "i64 BETWEEN -3 AND 3", "i64 IS NULL", "i64 IN (1, 7, 900)"]
    truth = _answers(uri, filters, use_index=False)
    assert _answers(uri, filters) == truth and all(truth.values())
    assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=filters[0]).explain_plan()
    rep = ls.verify_index(uri, "i64_idx")
    assert [s.verdict for s in rep.segments] == ["clean"], rep
    # segments built per fragment, committed by us, merged by pylance
    segs = [ls.build_index_segment(uri, "f64", "ZONEMAP", [f], name="f_zm") for f in (0, 1)]
    ls.commit_existing_index_segments(uri, "f_zm", "f64", segs)
    f_filters = ["f64 > 2.5", "f64 < -2.9", "f64 IS NULL", "f64 IS NOT NULL AND f64 BETWEEN 0.5 AND 0.51"]
    f_truth = _answers(uri, f_filters, use_index=False)
    assert _answers(uri, f_filters) == f_truth
    lance.dataset(uri).optimize.optimize_indices(index_names=["f_zm"], num_indices_to_merge=2)
    assert len(ls.open(uri).list_index_segments("f_zm")) == 1
    assert _answers(uri, f_filters) == f_truth


def test_verify_takes_pylance_zones_that_span_deleted_rows(zones_table, tmp_path):
    """A zone holds 8,192 live rows but spans the rows deleted between them
    (pylance wrote zone_length 8,491 here): verify once called that damage."""
    uri = str(tmp_path / "z")
    shutil.copytree(zones_table, uri)
    lance.dataset(uri).create_scalar_index("i64", "ZONEMAP")
    spans = LanceFileReader(next(__import__("pathlib").Path(uri, "_indices").rglob("zonemap.lance")).as_posix()) \
        .read_all().to_table()["zone_length"].to_pylist()
    assert max(spans) > 8192
    rep = ls.verify_index(uri, "i64_idx")
    assert [s.verdict for s in rep.segments] == ["clean"], rep
    assert {c.name: c.verdict for c in rep.segments[0].checks}["keys"] == "ok"


# -- LABEL_LIST ---------------------------------------------------------------

LABEL_ROWS = 3_000
LABEL_FILTERS = {
    "tags": ["array_has_any(tags, [1, 3])", "array_has_all(tags, [2, 5])", "array_contains(tags, 7)",
             "tags IS NULL", "NOT array_has_any(tags, [0, 1, 2])"],
    "small": ["array_has_any(small, [1, 3])", "array_has_all(small, [-2, 5])", "small IS NULL"],
    "stags": ["array_has_any(stags, ['t-ü-1', 't-ü-30'])", "array_contains(stags, 't-ü-7')",
              "array_has_all(stags, ['t-ü-2', 't-ü-5'])", "stags IS NULL"],
}


def _labels(start: int, n: int, seed: int) -> pa.Table:
    """Lists of labels: null lists, empty lists, null labels, repeated
    labels, lists of up to six labels of a few dozen values."""
    rng = np.random.default_rng(seed)
    tags, small, stags, words = [], [], [], []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            tags.append(None)
        elif r < 0.1:
            tags.append([])
        else:
            t = [int(x) for x in rng.integers(0, 40, rng.integers(1, 7))]
            tags.append([None if rng.random() < 0.03 else x for x in t])
        small.append(None if rng.random() < 0.02 else [int(x) for x in rng.integers(-5, 6, rng.integers(0, 4))])
        stags.append(None if tags[-1] is None else [None if x is None else f"t-ü-{x}" for x in tags[-1]])
        words.append([f"word-{int(x):07d}-{'x' * int(x % 50)}" for x in rng.integers(0, 10**6, rng.integers(0, 5))])
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "tags": pa.array(tags, pa.list_(pa.int64())),
                     "small": pa.array(small, pa.list_(pa.int8())),
                     "stags": pa.array(stags, pa.list_(pa.string())),
                     "words": pa.array(words, pa.list_(pa.string()))})


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def labels_table(request, tmp_path_factory) -> str:
    """Three fragments of label lists in a given file format, rows deleted."""
    uri = str(tmp_path_factory.mktemp("labels") / "t")
    for a in range(3):
        lance.write_dataset(_labels(a * LABEL_ROWS, LABEL_ROWS, a), uri, mode="append" if a else "create",
                            data_storage_version=request.param)
    lance.dataset(uri).delete("id % 89 = 0")
    return uri


def _labels_copy(src: str, dst) -> str:
    shutil.copytree(src, str(dst))
    return str(dst)


@pytest.mark.parametrize("col", ["tags", "small", "stags", "words"])
def test_label_list_build_writes_what_pylance_writes(labels_table, tmp_path, col):
    """The same keys (the null label first), the same rows under each, the
    same map of null lists (global buffer 1) and metadata as pylance's
    create_index_uncommitted, and the same index version (1)."""
    uri = _labels_copy(labels_table, tmp_path / "c")
    frags = [0, 2]
    ours = ls.build_index_segment(uri, col, "LABEL_LIST", frags, name=f"{col}_ll")
    theirs = lance.dataset(uri).create_index_uncommitted(col, "LABEL_LIST", name=f"{col}_ll", fragment_ids=frags)
    assert ours.index_type == "LABEL_LIST" and ours.index_version == theirs.index_version == 1
    path = "bitmap_page_lookup.lance"
    ra = LanceFileReader(f"{uri}/_indices/{ours.uuid}/{path}")
    rb = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/{path}")
    a, b = ra.read_all().to_table(), rb.read_all().to_table()
    assert a.schema == b.schema
    assert a["keys"].equals(b["keys"])
    assert [_row_map(x) for x in a["bitmaps"].to_pylist()] == [_row_map(x) for x in b["bitmaps"].to_pylist()]
    assert ra.metadata().schema.metadata == rb.metadata().schema.metadata
    assert _row_map(ra.read_global_buffer(1)) == _row_map(rb.read_global_buffer(1))
    assert col == "words" or _row_map(rb.read_global_buffer(1)), "no null lists in the fixture"


@pytest.mark.parametrize("col", ["tags", "stags"])
def test_label_list_builds_commit_merge_and_answer(labels_table, tmp_path, col):
    """One segment per fragment, committed by us: pylance answers every
    list filter as a scan does, with the index in its plan; pylance's
    optimize_indices merges our segments and so does ours."""
    uri = _labels_copy(labels_table, tmp_path / "ours")
    frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    segs = [ls.build_index_segment(uri, col, "LABEL_LIST", [f], name=f"{col}_ll") for f in frags]
    ls.commit_existing_index_segments(uri, f"{col}_ll", col, segs)
    filters = LABEL_FILTERS[col]
    truth = _answers(uri, filters, use_index=False)
    assert all(truth.values()), truth
    assert _answers(uri, filters) == truth
    ds = lance.dataset(uri)
    for f in filters[:3]:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    _both_merges_answer(uri, tmp_path, f"{col}_ll", filters, truth)


def test_label_list_create_index_answers_as_create_scalar_index(labels_table, tmp_path):
    ours = _labels_copy(labels_table, tmp_path / "ours")
    theirs = _labels_copy(labels_table, tmp_path / "theirs")
    ls.create_index(ours, "small", "LABEL_LIST", executor="processes", max_workers=2, fragments_per_task=1, progress=False)
    lance.dataset(theirs).create_scalar_index("small", "LABEL_LIST")
    segs = ls.open(ours).list_index_segments("small_idx")
    assert len(segs) == 1 and segs[0].index_type == "LABEL_LIST"
    filters = LABEL_FILTERS["small"]
    assert _answers(ours, filters) == _answers(theirs, filters) == _answers(ours, filters, use_index=False)
    with pytest.raises(ls.InvalidInputError, match="list column"):
        ls.build_index_segment(ours, "id", "LABEL_LIST", [0], name="id_ll")


# -- BLOOMFILTER --------------------------------------------------------------

@pytest.mark.parametrize("col", ["i64", "f64", "s", "d", "none"])
def test_bloomfilter_build_writes_what_pylance_writes(zones_table, tmp_path, col):
    """Byte-equal files: zones placed as ZONEMAP's, each a split block bloom
    filter (xxHash64 of the value's bytes, 32 KiB for 8,192 values at
    0.00057) and has_null; the same metadata and map of null rows."""
    uri = str(tmp_path / "b")
    shutil.copytree(zones_table, uri)
    ds = lance.dataset(uri)
    ours = ls.build_index_segment(uri, col, "BLOOMFILTER", [1, 0], name=f"{col}_bf")
    theirs = ds.create_index_uncommitted(col, "BLOOMFILTER", name=f"{col}_bf", fragment_ids=[0, 1])
    assert ours.index_type == "BLOOMFILTER" and ours.index_version == theirs.index_version == 0
    assert ours._entry_dict()["index_details"] == __import__("base64").b64encode(theirs.index_details[1]).decode()
    a = LanceFileReader(f"{uri}/_indices/{ours.uuid}/bloomfilter.lance")
    b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/bloomfilter.lance")
    ta, tb = a.read_all().to_table(), b.read_all().to_table()
    assert ta.schema == tb.schema and len(ta) >= 5
    assert ta.drop_columns(["bloom_filter_data"]).equals(tb.drop_columns(["bloom_filter_data"]))
    for z, (x, y) in enumerate(zip(ta["bloom_filter_data"].to_pylist(), tb["bloom_filter_data"].to_pylist())):
        assert len(x) == len(y) == 32768 and x == y, f"zone {z}"
    assert a.metadata().schema.metadata == b.metadata().schema.metadata
    assert a.read_global_buffer(1) == b.read_global_buffer(1)


def test_bloomfilter_builds_commit_answer_and_merge(zones_table, tmp_path):
    """Per-fragment segments committed by us: pylance answers equality and
    IN as a scan does, with the index in its plan; its optimize_indices
    merges ours; create_index on processes answers as create_scalar_index."""
    uri = str(tmp_path / "ours")
    shutil.copytree(zones_table, uri)
    filters = ["i64 = 7", "i64 IN (-3, 500, 999)", "s = 'k12'", "s IN ('k1', 'k900', 'nope')", "i64 IS NULL"]
    truth = _answers(uri, filters, use_index=False)
    for col in ("i64", "s"):
        segs = [ls.build_index_segment(uri, col, "BLOOMFILTER", [f], name=f"{col}_bf") for f in (0, 1)]
        ls.commit_existing_index_segments(uri, f"{col}_bf", col, segs)
    assert _answers(uri, filters) == truth
    ds = lance.dataset(uri)
    for f in filters[:4]:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    _both_merges_answer(uri, tmp_path, "i64_bf", filters, truth)
    ls.optimize(uri, "s_bf", progress=False)
    assert _answers(uri, filters) == truth
    fresh = str(tmp_path / "fresh")
    shutil.copytree(zones_table, fresh)
    ls.create_index(fresh, "i64", "BLOOMFILTER", executor="processes", max_workers=2, fragments_per_task=1, progress=False)
    assert len(ls.open(fresh).list_index_segments("i64_idx")) == 1
    assert _answers(fresh, filters) == truth


def test_bloomfilter_streamed_build_of_many_zones(tmp_path):
    """A build of more zones than the builder holds at once (64) writes
    them in pages as it goes. The index's zone size (32 rows, from
    pylance's IndexConfig) is taken from its first segment; our segment of
    the two appended fragments (188 zones) equals pylance's build of them
    byte for byte, and pylance answers from both segments as a scan."""
    from lance.indices import IndexConfig

    config = IndexConfig("bloomfilter", {"number_of_items": 32, "probability": 0.01})
    uri = str(tmp_path / "t")
    rng = np.random.default_rng(9)
    for k in range(3):
        v = rng.integers(0, 50_000, 3000)
        t = pa.table({"id": pa.array(np.arange(k * 3000, (k + 1) * 3000)), "v": pa.array(v, mask=rng.random(3000) < 0.01)})
        lance.write_dataset(t, uri, mode="append" if k else "create")
        if k == 0:
            lance.dataset(uri).create_scalar_index("v", config, name="v_bf")
    ours = ls.build_index_segment(uri, "v", "BLOOMFILTER", [1, 2], name="v_bf")
    theirs = lance.dataset(uri).create_index_uncommitted("v", config, name="v_bf_theirs", fragment_ids=[1, 2])
    a = LanceFileReader(f"{uri}/_indices/{ours.uuid}/bloomfilter.lance")
    b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/bloomfilter.lance")
    ta, tb = a.read_all().to_table(), b.read_all().to_table()
    assert len(ta) == 2 * -(-3000 // 32) and ta.equals(tb)
    assert a.metadata().schema.metadata == b.metadata().schema.metadata
    assert a.metadata().schema.metadata[b"bloomfilter_item"] == b"32"
    filters = [f"v = {int(x)}" for x in rng.integers(0, 50_000, 5)] + ["v IN (7, 49999, 123)", "v IS NULL"]
    truth = _answers(uri, filters, use_index=False)
    ls.commit_existing_index_segments(uri, "v_bf", "v", [ours])
    assert len(ls.open(uri).list_index_segments("v_bf")) == 2
    assert _answers(uri, filters) == truth and truth["v IS NULL"]
    assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=filters[0]).explain_plan()


# -- NGRAM --------------------------------------------------------------------

# Every character of the ranges whose folding the kernel knows, upper and
# lower case, between two ASCII letters: pylance's tokens show what each
# folds to (nothing, one letter or digit, or several).
FOLD_RANGES = [(0x00A0, 0x017F), (0x0180, 0x024F), (0x1E00, 0x1EFF), (0x0250, 0x02AF), (0x2070, 0x209F), (0x2C60, 0x2C7C),
               (0xA720, 0xA7F0), (0xFB00, 0xFB06), (0xFF00, 0xFFEF), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF), (0x0600, 0x06FF),
               (0x0900, 0x097F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3)]


def _ngram_texts() -> list:
    texts = [f"q{chr(c)}z" for lo, hi in FOLD_RANGES for c in range(lo, hi + 1)]
    rng = np.random.default_rng(4)
    words = ["Hello", "WORLD", "straße", "Über", "naïve", "café", "x9y", "a-b", "日本語abc", "İstanbul", "Ωmega", "ab", "", "Tiếng Việt"]
    texts += [" ".join(rng.choice(words, rng.integers(0, 6))) for _ in range(3000)]
    texts += [None] * 50 + ["The quick brown fox, 1234567890!"] * 5000  # a token of more than 4,096 rows
    return texts


@pytest.fixture(scope="module")
def ngram_table(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("ngram") / "t")
    texts = _ngram_texts()
    half = len(texts) // 2
    for k, part in enumerate((texts[:half], texts[half:])):
        lance.write_dataset(pa.table({"id": pa.array(range(k * half, k * half + len(part)), pa.int64()),
                                      "s": pa.array(part, pa.string())}), uri, mode="append" if k else "create")
    lance.dataset(uri).delete("id % 41 = 0")
    return uri


def test_ngram_build_writes_what_pylance_writes(ngram_table, tmp_path):
    """The same tokens and posting lists, byte for byte, as pylance's
    create_index_uncommitted: trigrams of lower-cased, ASCII-folded text
    (every character of the folded ranges checked), a null text under
    token 0, deleted rows left out."""
    uri = str(tmp_path / "n")
    shutil.copytree(ngram_table, uri)
    ours = ls.build_index_segment(uri, "s", "NGRAM", [1, 0], name="s_ng")
    theirs = lance.dataset(uri).create_index_uncommitted("s", "NGRAM", name="s_ng", fragment_ids=[0, 1])
    assert ours.index_type == "NGRAM" and ours.index_version == theirs.index_version == 0
    ta = _read(f"{uri}/_indices/{ours.uuid}/ngram_postings.lance")
    tb = _read(f"{uri}/_indices/{theirs.uuid}/ngram_postings.lance")
    assert ta.schema == tb.schema
    assert ta["tokens"].equals(tb["tokens"]), sorted(set(ta["tokens"].to_pylist()) ^ set(tb["tokens"].to_pylist()))[:20]
    bad = [t for t, x, y in zip(ta["tokens"].to_pylist(), ta["posting_list"].to_pylist(), tb["posting_list"].to_pylist()) if x != y]
    assert not bad, f"{len(bad)} tokens' posting lists differ, e.g. {bad[:5]}"


def test_ngram_builds_commit_answer_and_merge(ngram_table, tmp_path):
    uri = str(tmp_path / "ours")
    shutil.copytree(ngram_table, uri)
    filters = ["contains(s, 'hello')", "contains(s, 'strasse')", "contains(s, 'quick brown')", "contains(s, 'cafe')",
               "contains(s, 'x9y')", "contains(s, 'Tiếng Việt')", "s IS NULL"]
    truth = _answers(uri, filters, use_index=False)
    assert truth["contains(s, 'Tiếng Việt')"]  # found through the folded trigrams "tie", "ien"... "vie", "iet"
    segs = [ls.build_index_segment(uri, "s", "NGRAM", [f], name="s_ng") for f in (0, 1)]
    ls.commit_existing_index_segments(uri, "s_ng", "s", segs)
    assert _answers(uri, filters) == truth
    assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=filters[0]).explain_plan()
    _both_merges_answer(uri, tmp_path, "s_ng", filters, truth)


def test_ngram_build_refuses_characters_it_cannot_fold(tmp_path):
    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"s": ["plain", "ℂomplex numbers"]}), uri)  # U+2102: pylance folds it in a way not known here
    before = sorted(p.name for p in __import__("pathlib").Path(uri).rglob("*"))
    with pytest.raises(ls.UnsupportedError, match="U\\+2102"):
        ls.build_index_segment(uri, "s", "NGRAM", [0], name="s_ng")
    assert sorted(p.name for p in __import__("pathlib").Path(uri).rglob("*")) == before
