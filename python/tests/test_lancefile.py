"""Lance file format 2.0 / 2.1 / 2.2: what pylance's LanceFileWriter writes,
the Go reader reads with equal values (whole columns and row ranges)."""

from __future__ import annotations

import json
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest
from filecheck import assert_same, go_inspect
from lance.file import LanceFileReader, LanceFileWriter

import lance_segmerge as ls

VERSIONS = ["2.0", "2.1", "2.2"]


def fsl(values: np.ndarray, d: int, mask=None) -> pa.Array:
    arr = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), d)
    if mask is not None:
        arr = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), d, mask=pa.array(mask))
    return arr


def columns(n: int, seed: int = 0) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 6, n)
    lens_e = rng.integers(0, 4, n)
    cols = {
        "_rowid": pa.array((np.arange(n, dtype=np.uint64) % 1500) | (np.arange(n, dtype=np.uint64) // 1500 << 32), pa.uint64()),
        "f_mixed": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f_pos": pa.array(rng.random(n).astype(np.float32) + 0.5),
        "pq16": fsl(rng.integers(0, 256, (n, 16), dtype=np.uint8), 16),
        "sq300": fsl(rng.integers(0, 256, (n, 300), dtype=np.uint8), 300),
        "flat128": fsl(rng.standard_normal((n, 128)).astype(np.float32), 128),
        "flat8": fsl(rng.standard_normal((n, 8)).astype(np.float32), 8),
        "f16x4": fsl(rng.standard_normal((n, 4)).astype(np.float16), 4),
        "f64x3": fsl(rng.standard_normal((n, 3)), 3),
        "nbrs": pa.array([rng.integers(0, 1 << 20, k).astype(np.uint32) for k in lens], pa.list_(pa.uint32())),
        "nbrs_empty": pa.array([rng.integers(0, 1000, k).astype(np.uint32) for k in lens_e], pa.list_(pa.uint32())),
        "dists": pa.array([rng.random(k).astype(np.float32) for k in lens], pa.list_(pa.float32())),
        "const_f32": pa.array(np.full(n, 1.5, np.float32)),
        "const_u64": pa.array(np.full(n, 7, np.uint64)),
        "lowcard_u64": pa.array(rng.integers(0, 4, n).astype(np.uint64) << 33),
        "runs_u32": pa.array((np.arange(n) // 300).astype(np.uint32)),
        "small_u32": pa.array(rng.integers(0, 16, n).astype(np.uint32)),
    }
    return cols


def null_columns(n: int, seed: int = 1) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)
    m = rng.random(n) < 0.1
    lens = rng.integers(0, 4, n)
    items_null = [pa.array([None if rng.random() < 0.2 else int(x) for x in rng.integers(0, 100, k)], pa.uint32()) for k in lens]
    return {
        "u64_nulls": pa.array(np.arange(n, dtype=np.uint64), mask=m),
        "f32_nulls": pa.array(rng.standard_normal(n).astype(np.float32), mask=m),
        "fsl16_null_rows": fsl(rng.integers(0, 256, (n, 16), dtype=np.uint8), 16, mask=m),
        "fsl128_null_rows": fsl(rng.standard_normal((n, 128)).astype(np.float32), 128, mask=m),
        "fsl16_null_items": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(0, 256, n * 16).astype(np.uint8), mask=rng.random(n * 16) < 0.05), 16
        ),
        "list_nulls": pa.array(
            [None if m[i] else list(rng.integers(0, 9, lens[i]).astype(np.uint32)) for i in range(n)], pa.list_(pa.uint32())
        ),
        "list_item_nulls": pa.array([x.to_pylist() for x in items_null], pa.list_(pa.uint32())),
        "all_null_f32": pa.array([None] * n, pa.float32()),
    }


def write(path: str, tbl: pa.Table, version: str) -> None:
    w = LanceFileWriter(path, tbl.schema, version=version)
    if len(tbl):
        w.write_batch(tbl)
    w.close()


def check_file(path: str, tbl: pa.Table, ranges: list[tuple[int, int]]) -> None:
    whole = go_inspect(path)
    assert whole["num_rows"] == len(tbl)
    for name in tbl.column_names:
        assert_same(tbl[name], whole["columns"][name], f"{name} all rows")
    for a, b in ranges:
        part = go_inspect(path, a, b)
        for name in tbl.column_names:
            assert_same(tbl[name].slice(a, b - a), part["columns"][name], f"{name} rows [{a},{b})")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 2, 5000])
def test_read_pylance_matrix(tmp_path, version, n):
    tbl = pa.table(columns(n))
    path = str(tmp_path / f"m{version}.lance")
    write(path, tbl, version)
    assert go_inspect(path)["version"] == version
    ranges = [(0, n), (n // 3, n // 3 + 1), (1000, 3100), (n - 7, n)] if n >= 5000 else []
    check_file(path, tbl, ranges)


@pytest.mark.parametrize("version", VERSIONS)
def test_read_pylance_nulls(tmp_path, version):
    n = 3000
    tbl = pa.table(null_columns(n))
    path = str(tmp_path / f"n{version}.lance")
    write(path, tbl, version)
    check_file(path, tbl, [(5, 2999), (1024, 2048)])


def binary_columns(n: int, seed: int = 7) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)

    def blobs(lo: int, hi: int, null_every: int = 0) -> pa.Array:
        return pa.array(
            [None if null_every and i % null_every == 0 else rng.integers(0, 256, int(rng.integers(lo, hi)), dtype=np.uint8).tobytes() for i in range(n)],
            pa.binary(),
        )

    return {
        # Random bytes do not compress, so pylance stores them plain: large
        # values full-zip, small ones in mini-blocks.
        "big": blobs(50, 400),
        "big_nulls": blobs(50, 400, null_every=7),
        "small": blobs(0, 20),
        "small_nulls": blobs(0, 20, null_every=5),
        "all_null": pa.array([None] * n, pa.binary()),
    }


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_binary(tmp_path, version):
    n = 6000
    tbl = pa.table(binary_columns(n))
    path = str(tmp_path / f"b{version}.lance")
    write(path, tbl, version)
    layouts = {f.name: str(c.pages[0].encoding) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    # The test is about these two layouts: fail loudly if pylance stops writing them.
    assert "FullZipLayout" in layouts["big"] and "Variable" in layouts["big"], layouts["big"][:300]
    assert "MiniBlockLayout" in layouts["small"] and "Variable" in layouts["small"], layouts["small"][:300]
    check_file(path, tbl, [(0, n), (1, 2), (255, 257), (1000, 4100), (n - 3, n)])


def fsst_columns(n: int, seed: int = 3) -> dict[str, pa.Array]:
    # Text of many distinct values, at least 32 KiB a page: pylance compresses it
    # with FSST. Short values go in mini-blocks, values of 256 bytes or more full-zip.
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "théta", "\x00nul"]

    def short() -> list[str]:
        return [f"{words[x % 8]}-{x}" for x in rng.integers(0, 1_000_000, n)]

    def long() -> list[str]:
        return [" ".join(words[(x + i) % 8] for i in range(60)) + str(x) for x in rng.integers(0, 1_000_000, n)]

    def holes(v: list[str], every: int) -> list[Optional[str]]:
        return [None if i % every == 0 else s for i, s in enumerate(v)]

    return {
        "short": pa.array(short()),
        "short_nulls": pa.array(holes(short(), 5)),
        "short_large": pa.array(short(), pa.large_string()),
        "long": pa.array(long()),
        "long_nulls": pa.array(holes(long(), 7)),
    }


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_fsst(tmp_path, version):
    n = 5000
    tbl = pa.table(fsst_columns(n))
    path = str(tmp_path / f"s{version}.lance")
    write(path, tbl, version)
    layouts = {f.name: str(c.pages[0].encoding) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    # The test is about FSST in both layouts: fail loudly if pylance stops writing them.
    for name, layout in [("short", "MiniBlockLayout"), ("short_large", "MiniBlockLayout"), ("long_nulls", "FullZipLayout")]:
        assert "Fsst" in layouts[name] and layout in layouts[name], (name, layouts[name][:300])
    check_file(path, tbl, [(0, n), (1, 2), (255, 257), (1000, 4100), (n - 3, n)])


def test_read_pylance_2_0_strings(tmp_path):
    # 2.0: a Dictionary page (an index per row, 0 for null) where values
    # repeat, a Binary page (u64 end offsets, a null's plus the adjustment)
    # where they do not; nulls, empty values, large types, several pages.
    n = 20000
    rng = np.random.default_rng(6)
    tbl = pa.table({
        "few": pa.array([None if i % 13 == 0 else "" if i % 17 == 0 else f"cat-{x}" for i, x in enumerate(rng.integers(0, 9, n))]),
        "many": pa.array([None if i % 7 == 0 else f"value-ü-{i}" for i in range(n)]),
        "large": pa.array([f"k{x}" for x in rng.integers(0, 40, n)], pa.large_string()),
        "bytes": pa.array([bytes([i % 251]) * (i % 5) for i in range(n)], pa.binary()),
        "nulls": pa.array([None] * n, pa.string()),
    })
    path = str(tmp_path / "s20.lance")
    write(path, tbl, "2.0")
    layouts = {f.name: str(c.pages[0].encoding) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    assert "Dictionary" in layouts["few"] and "Binary" in layouts["many"], (layouts["few"][:300], layouts["many"][:300])
    check_file(path, tbl, [(0, n), (1, 2), (4095, 4097), (1000, 14100), (n - 3, n)])


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_string_dictionaries(tmp_path, version):
    # Few distinct values: pylance stores dictionary indices (run-length
    # encoded or bitpacked) and an LZ4-compressed dictionary.
    n = 20000
    rng = np.random.default_rng(5)
    tbl = pa.table({
        "runs": pa.array([f"category-{i // 700}" for i in range(n)]),
        "mixed_nulls": pa.array([None if i % 13 == 0 else f"cat-{x}" for i, x in enumerate(rng.integers(0, 9, n))]),
        "large": pa.array([f"k{x}" for x in rng.integers(0, 40, n)], pa.large_string()),
        "bytes": pa.array([bytes([x]) * 6 for x in rng.integers(0, 5, n)], pa.binary()),
    })
    path = str(tmp_path / f"d{version}.lance")
    write(path, tbl, version)
    layouts = {f.name: str(c.pages[0].encoding) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    assert "dictionary: Some" in layouts["runs"] and "dictionary: Some" in layouts["mixed_nulls"], layouts["runs"][:300]
    check_file(path, tbl, [(0, n), (1, 2), (4095, 4097), (1000, 14100), (n - 3, n)])


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_constant_strings(tmp_path, version):
    # One value in every row: pylance 14.0.2 writes 2.2 files a constant page
    # whose buffer holds the value as two buffers (its offsets, its bytes);
    # 2.1 files store such a column as usual.
    n = 3000
    tbl = pa.table({
        "s": pa.array(["the same value ü"] * n),
        "ls": pa.array(["x" * 300] * n, pa.large_string()),
        "b": pa.array([b"\x00\x01"] * n, pa.binary()),
    })
    path = str(tmp_path / f"c{version}.lance")
    write(path, tbl, version)
    layouts = [str(c.pages[0].encoding) for c in LanceFileReader(path).metadata().columns]
    if version == "2.2":
        assert all("ConstantLayout" in x and "inline_value: None" in x for x in layouts), layouts[0][:300]
    check_file(path, tbl, [(0, n), (5, 6), (100, 2900)])


def bool_columns(n: int, seed: int = 9) -> dict[str, pa.Array]:
    rng = np.random.default_rng(seed)
    return {
        "mixed": pa.array(rng.random(n) < 0.5),
        "nulls": pa.array([None if i % 3 == 0 else bool(i % 2) for i in range(n)], pa.bool_()),
        "const": pa.array([True] * n),
    }


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("n", [2, 5, 3000, 9000])
def test_read_pylance_bools(tmp_path, version, n):
    # 1-bit Flat mini-block pages (least significant bit first), constant pages
    # of one inline byte, definition levels for nulls.
    tbl = pa.table(bool_columns(n))
    path = str(tmp_path / f"b{version}-{n}.lance")
    write(path, tbl, version)
    assert "bits_per_value: 1," in str(LanceFileReader(path).metadata().columns[0].pages[0].encoding)
    check_file(path, tbl, [(0, n), (1, 2), (0, n // 2 + 1)])


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_go_writes_bools_pylance_reads(tmp_path, version):
    from filecheck import go_write

    tbl = pa.table(bool_columns(9000, seed=4))
    path = str(tmp_path / f"gb{version}.lance")
    go_write(path, tbl, version, tmp=str(tmp_path))
    assert_pylance_reads(path, tbl)
    assert LanceFileReader(path).read_range(4090, 20).to_table().equals(tbl.slice(4090, 20))
    check_file(path, tbl, [(0, 9000), (4095, 4097)])


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_lists_of_strings(tmp_path, version):
    # A LABEL_LIST build reads them: mini-block pages of plain, FSST and
    # dictionary-encoded items under repetition and definition levels
    # (null lists, empty lists, null items), over many chunks.
    n = 10_000
    rng = np.random.default_rng(11)
    vocab = [f"tag-ü-{i}" for i in range(40)]

    def lists(make) -> list:
        out = []
        for _ in range(n):
            r = rng.random()
            out.append(None if r < 0.05 else [] if r < 0.1 else
                       [None if rng.random() < 0.03 else make() for _ in range(rng.integers(1, 6))])
        return out

    tbl = pa.table({
        "few": pa.array(lists(lambda: vocab[rng.integers(0, 40)]), pa.list_(pa.string())),
        "many": pa.array(lists(lambda: f"word-{rng.integers(0, 10**7)}-{'x' * int(rng.integers(0, 30))}"), pa.list_(pa.string())),
        "bin": pa.array(lists(lambda: rng.bytes(int(rng.integers(0, 12)))), pa.list_(pa.binary())),
    })
    path = str(tmp_path / f"ls{version}.lance")
    write(path, tbl, version)
    layouts = {f.name: "".join(str(p.encoding) for p in c.pages) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    # the layouts the test is about: fail loudly if pylance stops writing them
    assert "dictionary: Some" in layouts["few"], layouts["few"][:300]
    assert "Fsst" in layouts["many"], layouts["many"][:300]
    check_file(path, tbl, [(0, n), (1, 2), (4095, 4097), (3_000, 9_000), (n - 3, n)])


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_read_pylance_lists_of_long_strings(tmp_path, version):
    # Lists of long strings (and the posting blocks of a full-text index)
    # are written full-zip: each item a control word with its repetition
    # and definition levels, then its length and bytes. Null lists, empty
    # lists and null items among them; whole and by range.
    rng = np.random.default_rng(8)
    rows = []
    for i in range(3000):
        k = int(rng.integers(0, 4))
        if i % 41 == 0:
            rows.append(None)
        elif i % 37 == 0:
            rows.append([])
        else:
            rows.append([None if (i + j) % 29 == 0 else f"v{i}-{j}" + "x" * int(rng.integers(250, 600)) for j in range(k)])
    tbl = pa.table({"s": pa.array(rows, pa.list_(pa.string())), "b": pa.array(
        [[rng.bytes(300) for _ in range(1 + i % 3)] for i in range(3000)], pa.list_(pa.large_binary()))})
    path = str(tmp_path / "l.lance")
    write(path, tbl, version)
    layouts = {f.name: "".join(str(p.encoding) for p in c.pages) for f, c in zip(tbl.schema, LanceFileReader(path).metadata().columns)}
    assert all("full_zip" in v.lower() or "fullzip" in v.lower() for v in layouts.values()), layouts
    check_file(path, tbl, [(0, 1), (1000, 1003), (2990, 3000), (40, 45)])


@pytest.mark.parametrize("version", VERSIONS)
def test_read_pylance_many_pages(tmp_path, version):
    # Enough rows that pylance splits columns into several pages.
    n = 100_000
    rng = np.random.default_rng(5)
    lens = rng.integers(0, 3, n)
    tbl = pa.table(
        {
            "_rowid": pa.array(np.arange(n, dtype=np.uint64) * 3),
            "flat128": fsl(rng.standard_normal((n, 128)).astype(np.float32), 128),
            "pq32": fsl(rng.integers(0, 256, (n, 32), dtype=np.uint8), 32),
            "nbrs": pa.array([np.arange(k, dtype=np.uint32) for k in lens], pa.list_(pa.uint32())),
        }
    )
    path = str(tmp_path / f"p{version}.lance")
    write(path, tbl, version)
    meta = LanceFileReader(path).metadata()
    assert max(len(c.pages) for c in meta.columns) > 1, "expected several pages"
    check_file(path, tbl, [(0, 1), (33_333, 66_667), (99_000, 100_000), (49_999, 50_001)])


@pytest.mark.parametrize("version", VERSIONS)
def test_schema_metadata_and_global_buffers(tmp_path, version):
    tbl = pa.table({"x": pa.array(np.arange(10, dtype=np.uint64))})
    path = str(tmp_path / "g.lance")
    w = LanceFileWriter(path, tbl.schema, version=version)
    assert w.add_global_buffer(b"first") == 1
    w.write_batch(tbl)
    assert w.add_global_buffer(b"second buffer") == 2
    w.add_schema_metadata("lance:ivf", "1")
    w.add_schema_metadata("k", "v")
    w.close()
    got = go_inspect(path)
    import base64

    assert [base64.b64decode(b) for b in got["global_buffers"]] == [b"first", b"second buffer"]
    meta = {k: base64.b64decode(v).decode() for k, v in got["metadata"].items()}
    assert meta["lance:ivf"] == "1" and meta["k"] == "v"
    assert got["fields"] == [{"name": "x", "id": 0, "type": "uint64", "nullable": True}]


def test_bad_range_and_column(tmp_path):
    tbl = pa.table({"x": pa.array(np.arange(10, dtype=np.uint64))})
    path = str(tmp_path / "r.lance")
    write(path, tbl, "2.2")
    with pytest.raises(ls.InvalidInputError):
        go_inspect(path, 5, 11)
    with pytest.raises(ls.NotFoundError):
        go_inspect(path, columns=["nope"])
    with pytest.raises(ls.NotFoundError):
        go_inspect(str(tmp_path / "missing.lance"))


# -- Go writes, pylance reads -------------------------------------------------


def write_cols(n: int) -> dict[str, pa.Array]:
    """The column types index files hold (the writer's scope)."""
    cols = columns(n)
    keep = ["_rowid", "f_mixed", "pq16", "sq300", "flat128", "flat8", "f16x4", "f64x3", "nbrs", "nbrs_empty", "dists"]
    return {k: cols[k] for k in keep}


def assert_pylance_reads(path: str, tbl: pa.Table) -> None:
    got = LanceFileReader(path).read_all().to_table()
    assert got.schema.names == tbl.schema.names
    for name in tbl.column_names:
        assert got[name].type == tbl[name].type, name
        assert got[name].combine_chunks().equals(tbl[name].combine_chunks()), f"{name} differs"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 2, 5000])
def test_go_writes_pylance_reads(tmp_path, version, n):
    from filecheck import go_write

    tbl = pa.table(write_cols(n))
    path = str(tmp_path / "go.lance")
    go_write(path, tbl, version, tmp=str(tmp_path), metadata={"lance:ivf": "1", "distance_type": "l2"},
             global_buffers=[b"ivf-bytes", b"\x00" * 100])
    r = LanceFileReader(path)
    meta = r.metadata()
    footer = {"2.0": (0, 3), "2.1": (2, 1), "2.2": (2, 2)}[version]
    assert (meta.major_version, meta.minor_version) == footer
    assert r.num_rows() == n
    assert meta.schema.metadata[b"lance:ivf"] == b"1"
    assert r.read_global_buffer(1) == b"ivf-bytes" and r.read_global_buffer(2) == b"\x00" * 100
    assert_pylance_reads(path, tbl)
    # And ranges of it, through pylance's own ranged read.
    if n:
        part = r.read_range(n // 3, max(n // 3, 1)).to_table()
        assert part.equals(tbl.slice(n // 3, max(n // 3, 1)))


@pytest.mark.parametrize("version", VERSIONS)
def test_go_writes_many_pages_and_batches(tmp_path, version):
    from filecheck import go_write

    tbl = pa.table(write_cols(20_000))
    path = str(tmp_path / "pages.lance")
    go_write(path, tbl, version, tmp=str(tmp_path), max_page_bytes=256 << 10, batch_rows=3000)
    meta = LanceFileReader(path).metadata()
    assert max(len(c.pages) for c in meta.columns) > 4
    assert_pylance_reads(path, tbl)
    # Go reads back its own multi-page file.
    whole = go_inspect(path)
    for name in tbl.column_names:
        assert_same(tbl[name], whole["columns"][name], name)


@pytest.mark.parametrize("version", VERSIONS)
def test_go_writes_nulls(tmp_path, version):
    from filecheck import go_write

    n = 3000
    cols = null_columns(n)
    keep = ["u64_nulls", "f32_nulls", "fsl16_null_rows", "fsl128_null_rows", "list_nulls", "list_item_nulls"]
    tbl = pa.table({k: cols[k] for k in keep})
    path = str(tmp_path / "nulls.lance")
    go_write(path, tbl, version, tmp=str(tmp_path))
    got = LanceFileReader(path).read_all().to_table()
    for name in tbl.column_names:
        assert got[name].to_pylist() == tbl[name].to_pylist(), name


@pytest.mark.parametrize("version", VERSIONS)
def test_go_writes_only_empty_lists(tmp_path, version):
    from filecheck import go_write

    tbl = pa.table({"l": pa.array([[]] * 10 + [None] * 3, pa.list_(pa.uint32())), "x": pa.array(np.arange(13, dtype=np.uint64))})
    path = str(tmp_path / "empty.lance")
    go_write(path, tbl, version, tmp=str(tmp_path))
    got = LanceFileReader(path).read_all().to_table()
    assert got["l"].to_pylist() == tbl["l"].to_pylist()


@pytest.mark.parametrize("cardinality", [8, 3000])
def test_reads_pylance_bitmap_index_files(tmp_path, cardinality):
    # BITMAP and LABEL_LIST segments are one file, "keys" and "bitmaps"
    # (binary: one serialized row-id set per key). Few keys give large
    # bitmaps (full-zip pages), many keys small ones (mini-blocks).
    import glob

    import lance

    n = 20_000
    rng = np.random.default_rng(cardinality)
    keys = rng.integers(0, cardinality, n)
    tbl = pa.table(
        {
            "k": pa.array(keys, mask=rng.random(n) < 0.02),
            "tags": pa.array([[int(x) for x in rng.integers(0, cardinality, 2)] for _ in range(n)], pa.list_(pa.int64())),
        }
    )
    ds = lance.write_dataset(tbl, str(tmp_path / "t.lance"))
    ds.create_scalar_index("k", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    files = glob.glob(str(tmp_path / "t.lance" / "_indices" / "*" / "bitmap_page_lookup.lance"))
    assert len(files) == 2
    for f in files:
        want = LanceFileReader(f).read_all().to_table()
        got = go_inspect(f)
        assert got["num_rows"] == want.num_rows > 0
        for name in ("keys", "bitmaps"):
            assert_same(want[name], got["columns"][name], f"{f}: {name}")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_go_writes_binary_pylance_reads(tmp_path, version):
    from filecheck import go_write

    cols = binary_columns(5000, seed=11)
    cols["empty_values"] = pa.array([b""] * 5000, pa.binary())
    # The large types: pylance reads them only with 64-bit lengths.
    cols["large_binary"] = cols["small_nulls"].cast(pa.large_binary())
    cols["large_string"] = pa.array([None if i % 9 == 0 else f"v-ü-{i}" for i in range(5000)], pa.large_string())
    cols["string"] = cols["large_string"].cast(pa.string())
    tbl = pa.table(cols)
    path = str(tmp_path / f"gb{version}.lance")
    go_write(path, tbl, version, tmp=str(tmp_path), max_page_bytes=256 << 10, batch_rows=500)
    assert len(LanceFileReader(path).metadata().columns[0].pages) > 1, "expected several pages"
    assert_pylance_reads(path, tbl)
    reader = LanceFileReader(path)
    for a, b in [(0, 1), (999, 3001), (4990, 5000)]:
        assert reader.read_range(a, b - a).to_table().equals(tbl.slice(a, b - a))
    check_file(path, tbl, [(0, 5000), (17, 4017)])


#: int64 pages by sign: pylance 14.0.2 bitpacks an int64 page by its
#: two's-complement bits whenever that makes it smaller
INT64_PAGES = {
    "non-negative": np.arange(8192, dtype=np.int64) * 37,
    "negative": -np.arange(1, 8193, dtype=np.int64),
    "crossing zero": np.arange(8192, dtype=np.int64) - 4000,
}


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("kind", sorted(INT64_PAGES))
def test_int64_pages_bitpack_both_ways(tmp_path, version, kind):
    from filecheck import go_write

    tbl = pa.table({"k": pa.array(INT64_PAGES[kind])})
    # pylance writes: a page is InlineBitpacking unless every chunk needs
    # all 64 bits (a page of negative values); the Go reader reads it
    theirs = str(tmp_path / "theirs.lance")
    write(theirs, tbl, version)
    layout = "".join(str(p.encoding) for p in LanceFileReader(theirs).metadata().columns[0].pages)
    assert ("InlineBitpacking" in layout) == (kind != "negative"), layout[:400]
    check_file(theirs, tbl, [(0, 8192), (1000, 3000), (8191, 8192)])
    # the Go writer packs a page when no chunk needs all 64 bits (narrower
    # than pylance's rule: a page crossing zero stays flat); pylance reads
    # and range-reads either exactly
    ours = str(tmp_path / "ours.lance")
    go_write(ours, tbl, version, tmp=str(tmp_path))
    layout = "".join(str(p.encoding) for p in LanceFileReader(ours).metadata().columns[0].pages)
    assert ("InlineBitpacking" in layout) == (kind == "non-negative"), layout[:400]
    assert_pylance_reads(ours, tbl)
    assert LanceFileReader(ours).read_range(1000, 2000).to_table().equals(tbl.slice(1000, 2000))
