"""Key types beyond the scalar suites' own, each checked against real Lance:
pylance 14.0.2 writes a BTREE, a BITMAP, a ZONEMAP and (where it builds
one) a BLOOMFILTER index on a column of the type, one optimize delta per
append, and deletes rows; our optimize merges every index, and each
filter returns exactly the rows it returns after pylance's own
optimize_indices and in a scan without the index. Our builds of the same
columns hold what pylance's create_index_uncommitted holds."""

from __future__ import annotations

import base64
import decimal
import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls

ROWS = 2000
APPENDS = 2
#: index type -> column suffix
KINDS = {"BTREE": "bt", "BITMAP": "bm", "ZONEMAP": "zm", "BLOOMFILTER": "bf"}
#: base column -> filters ({c} is the indexed column)
FILTERS = {
    "i8": ["{c} = 7", "{c} < -90", "{c} IS NULL"],
    "i16": ["{c} = -7", "{c} > 990", "{c} IN (1, 2, 3)"],
    "u8": ["{c} = 7", "{c} > 190", "{c} IS NULL"],
    "u16": ["{c} < 10", "{c} > 1990"],
    "u32": ["{c} < 70", "{c} > 19900"],
    # half floats with NaN, -0.0 and infinity
    "h": ["{c} > 1.5", "{c} = 0.0", "{c} IS NULL", "{c} BETWEEN -0.1 AND 0.1", "{c} > 100"],
    "d64": ["{c} = DATE '1970-01-05'", "{c} > DATE '1980-01-01'"],
    "t32": ["{c} = arrow_cast(5, 'Time32(Second)')", "{c} < arrow_cast(10, 'Time32(Second)')"],
    "t64": ["{c} < arrow_cast(10000, 'Time64(Microsecond)')", "{c} IS NULL"],
    "tsn": ["{c} = TIMESTAMP '1970-01-01 00:00:05'", "{c} > TIMESTAMP '1970-01-01 01:00:00'"],
    "tss": ["{c} < TIMESTAMP '1970-01-01 00:00:10'", "{c} IS NULL"],
    "lb": ["{c} = X'6b37'", "{c} < X'6b31'", "{c} IS NULL"],
    # decimals of both signs (two's complement: ordered by value, not bytes)
    "dec": ["{c} = CAST('12.25' AS DECIMAL(12, 2))", "{c} < -90", "{c} > 99", "{c} IS NULL",
            "{c} BETWEEN CAST('-0.5' AS DECIMAL(12, 2)) AND CAST('0.5' AS DECIMAL(12, 2))"],
    "d256": ["{c} < -90", "{c} > 99", "{c} BETWEEN -1 AND 1", "{c} IS NULL"],
    # 16-byte ids (uuids as fixed-size binary), ordered by their bytes
    "fsb": ["{c} = X'00000000000000000000000000000007'", "{c} > X'ff000000000000000000000000000000'",
            "{c} < X'00000000000000000000000000000010'", "{c} IS NULL"],
}
#: pylance 14.0.2 builds no bloom filter of these ("does not support data type")
NO_BLOOM = {"h", "dec", "d256", "fsb"}


def _base(start: int, seed: int) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)
    i = np.arange(start, start + ROWS)

    def m() -> np.ndarray:
        return rng.random(ROWS) < 0.05

    h = rng.normal(size=ROWS).astype(np.float16)
    h[rng.integers(0, ROWS, 15)] = np.nan
    h[rng.integers(0, ROWS, 10)] = -0.0
    h[rng.integers(0, ROWS, 5)] = np.inf
    return {
        "i8": pa.array(rng.integers(-100, 100, ROWS).astype(np.int8), mask=m()),
        "i16": pa.array(rng.integers(-1000, 1000, ROWS).astype(np.int16), mask=m()),
        "u8": pa.array(rng.integers(0, 200, ROWS).astype(np.uint8), mask=m()),
        "u16": pa.array(rng.integers(0, 2000, ROWS).astype(np.uint16), mask=m()),
        "u32": pa.array(rng.integers(0, 20000, ROWS).astype(np.uint32), mask=m()),
        "h": pa.array(h, mask=m()),
        "d64": pa.array(i * 86_400_000, type=pa.date64(), mask=m()),
        "t32": pa.array((i % 86400).astype(np.int32), type=pa.time32("s"), mask=m()),
        "t64": pa.array(i * 1000, type=pa.time64("us"), mask=m()),
        "tsn": pa.array(i * 10**9, type=pa.timestamp("ns"), mask=m()),
        "tss": pa.array(i, type=pa.timestamp("s", tz="UTC"), mask=m()),
        "lb": pa.array([None if n else b"k%d" % (k % 300) for k, n in zip(i, m())], type=pa.large_binary()),
        "dec": pa.array([None if n else decimal.Decimal(int(x)) / 4 for x, n in zip(rng.integers(-400, 400, ROWS), m())],
                        type=pa.decimal128(12, 2)),
        "d256": pa.array([None if n else decimal.Decimal(int(x)) / 8 for x, n in zip(rng.integers(-800, 800, ROWS), m())],
                         type=pa.decimal256(40, 3)),
        "fsb": pa.array([None if n else (int(k % 500) if k % 3 else (0xff << 120) | int(k)).to_bytes(16, "big")
                         for k, n in zip(i, m())], type=pa.binary(16)),
    }


def _table(start: int, seed: int) -> pa.Table:
    """Each base column once per index type (a column of its own, so
    pylance's plan uses that index), and ids."""
    cols = {"id": pa.array(np.arange(start, start + ROWS))}
    for name, arr in _base(start, seed).items():
        for kind, suffix in KINDS.items():
            if not (kind == "BLOOMFILTER" and name in NO_BLOOM):
                cols[f"{name}_{suffix}"] = arr
    return pa.table(cols)


def _indices() -> list[tuple[str, str, str]]:
    """(base column, index type, indexed column) of every index."""
    return [(c, k, f"{c}_{s}") for c in FILTERS for k, s in KINDS.items() if not (k == "BLOOMFILTER" and c in NO_BLOOM)]


@pytest.fixture(scope="module")
def deltas(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("scalar_types") / "t")
    ds = lance.write_dataset(_table(0, 0), uri)
    for _, kind, col in _indices():
        ds.create_scalar_index(col, kind, name=f"{col}_idx")
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 97 = 0")
    return uri


def _ids(uri: str, f: str, use_index: bool = True) -> list[int]:
    return sorted(lance.dataset(uri).to_table(filter=f, columns=["id"], use_scalar_index=use_index)["id"].to_pylist())


@pytest.mark.parametrize("base", sorted(FILTERS))
def test_every_index_of_the_type_merges_and_answers_as_pylance(deltas, tmp_path, base):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(deltas, ours)
    shutil.copytree(deltas, theirs)
    mine = [(kind, col) for c, kind, col in _indices() if c == base]
    names = [f"{col}_idx" for _, col in mine]
    lance.dataset(theirs).optimize.optimize_indices(index_names=names, num_indices_to_merge=APPENDS + 1)
    for kind, col in mine:
        name = f"{col}_idx"
        assert len(ls.open(ours).list_index_segments(name)) == 1 + APPENDS
        ls.optimize(ours, name, fan_in=2, progress=False)
        (seg,) = ls.open(ours).list_index_segments(name)
        assert seg.index_type == kind
        ds = lance.dataset(ours)
        for f in (f.format(c=col) for f in FILTERS[base]):
            got = _ids(ours, f)
            assert got == _ids(theirs, f) == _ids(ours, f, use_index=False), f
            assert got, f  # every filter selects rows
            if kind in ("BTREE", "BITMAP"):
                assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
        rep = ls.verify_index(ours, name)
        assert [s.verdict for s in rep.segments] == ["clean"], (name, rep)
    lance.dataset(ours).validate()


@pytest.mark.parametrize("base", sorted(FILTERS))
def test_builds_hold_what_pylance_builds(deltas, tmp_path, base):
    """Our fragment-scoped BTREE, BITMAP and ZONEMAP builds hold the keys,
    rows, pages and zones of pylance's create_index_uncommitted over the
    same fragments."""
    uri = str(tmp_path / "b")
    shutil.copytree(deltas, uri)
    ds = lance.dataset(uri)
    frags = [f.fragment_id for f in ds.get_fragments()][:2]
    for kind, file, key in (("BTREE", "page_data.lance", "values"), ("BITMAP", "bitmap_page_lookup.lance", "keys"),
                            ("ZONEMAP", "zonemap.lance", None)):
        col = f"{base}_{KINDS[kind]}"
        ours = ls.build_index_segment(uri, col, kind, frags, name=f"{col}_new")
        theirs = ds.create_index_uncommitted(col, kind, name=f"{col}_new", fragment_ids=frags)
        a = LanceFileReader(f"{uri}/_indices/{ours.uuid}/{file}").read_all().to_table()
        b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/{file}").read_all().to_table()
        assert a.schema == b.schema, kind
        if key is None:
            # NaN never equals NaN: compare the zones' reprs
            assert repr(a.to_pydict()) == repr(b.to_pydict()), kind
            assert ours._entry_dict()["index_details"] == base64.b64encode(theirs.index_details[1]).decode()
        elif kind == "BTREE":
            # the same keys in order; rows of equal keys in any order
            assert repr(a[key].to_pylist()) == repr(b[key].to_pylist()), kind
            assert sorted(map(repr, zip(a[key].to_pylist(), a["ids"].to_pylist()))) == \
                sorted(map(repr, zip(b[key].to_pylist(), b["ids"].to_pylist()))), kind
        else:
            assert repr(a[key].to_pylist()) == repr(b[key].to_pylist()), kind
            assert a["bitmaps"].to_pylist() == b["bitmaps"].to_pylist(), kind
    if base in NO_BLOOM:
        with pytest.raises(ls.UnsupportedError, match="bloomfilter build: keys of type"):
            ls.build_index_segment(uri, f"{base}_bt", "BLOOMFILTER", frags, name="no_bloom")


def test_a_2_0_dataset_merges_the_new_key_types(tmp_path):
    """A dataset written as Lance 2.0 files (its index files too): decimal,
    fixed-size binary and half-float keys merge, answer as pylance's own
    merge and verify clean."""
    uri = str(tmp_path / "v20")
    indices = [("dec_bt", "BTREE"), ("dec_zm", "ZONEMAP"), ("fsb_bm", "BITMAP"), ("fsb_bt", "BTREE"), ("h_bm", "BITMAP")]

    def table(start: int, seed: int) -> pa.Table:
        return _table(start, seed).select(["id"] + [c for c, _ in indices])

    ds = lance.write_dataset(table(0, 0), uri, data_storage_version="2.0")
    for col, kind in indices:
        ds.create_scalar_index(col, kind, name=f"{col}_idx")
    for a in range(APPENDS):
        ds = lance.write_dataset(table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    for col, kind in indices:
        before = ls.open(uri).list_index_segments(f"{col}_idx")
        assert {s.file_version for s in before} == {"2.0"}, (col, before)
        ls.optimize(uri, f"{col}_idx", progress=False)
        assert [s.file_version for s in ls.open(uri).list_index_segments(f"{col}_idx")] == ["2.0"]
        for f in (f.format(c=col) for f in FILTERS[col.split("_")[0]]):
            assert _ids(uri, f) == _ids(theirs, f) == _ids(uri, f, use_index=False), f
        assert [s.verdict for s in ls.verify_index(uri, f"{col}_idx").segments] == ["clean"]


def test_indices_of_nested_fields_merge_where_pylance_cannot(tmp_path):
    """A BTREE and a BITMAP on fields inside a struct ("meta.x"): pylance
    14.0.2 builds them, but its optimize_indices fails after an append ("No
    column with name x"). Segments it builds per fragment merge with ours
    into one that answers as a scan, with the index in its plan, and whose
    keys verify against the member's data (test_nested_fields.py checks
    our builds of such members against pylance's)."""
    uri = str(tmp_path / "nested")

    def table(start: int) -> pa.Table:
        i = np.arange(start, start + ROWS)
        meta = pa.StructArray.from_arrays([pa.array(i % 50), pa.array([f"c{x % 7}" for x in i])], names=["x", "cat"])
        return pa.table({"id": pa.array(i), "meta": meta})

    ds = lance.write_dataset(table(0), uri)
    indices = {"mx": ("meta.x", "BTREE", "meta.x = 7"), "mc": ("meta.cat", "BITMAP", "meta.cat = 'c3'")}
    for name, (col, kind, _) in indices.items():
        ds.create_scalar_index(col, kind, name=name)
    for a in range(APPENDS):
        lance.write_dataset(table(ROWS * (a + 1)), uri, mode="append")
    with pytest.raises(OSError, match="No column with name"):
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    ds = lance.dataset(uri)
    for name, (col, kind, f) in indices.items():
        new = [f.fragment_id for f in ds.get_fragments()][1:]
        segs = [ds.create_index_uncommitted(col, kind, name=name, fragment_ids=[fr], replace=True) for fr in new]
        ds = ds.commit_existing_index_segments(name, col, segs)
        assert len(ls.open(uri).list_index_segments(name)) == 1 + APPENDS
        ls.optimize(uri, name, progress=False)
        (seg,) = ls.open(uri).list_index_segments(name)
        assert seg.num_rows == ROWS * (1 + APPENDS)
        assert _ids(uri, f) == _ids(uri, f, use_index=False) and _ids(uri, f)
        assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=f).explain_plan()
        rep = ls.verify_index(uri, name)
        assert [s.verdict for s in rep.segments] == ["clean"]
        assert {c.name: c.verdict for c in rep.segments[0].checks}["keys"] == "ok"
    lance.dataset(uri).validate()
