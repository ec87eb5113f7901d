"""The dataset vector reader (vecdata) against pylance 14.0.2: what a build
reads from the data files is what pylance's scanner returns, minus deleted
rows, null vectors and vectors with NaN or infinity (which pylance's index
builder skips too)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import lancegen
from lance_segmerge import _ffi
from lance_segmerge.errors import InvalidInputError, NotFoundError, UnsupportedError


def read_vectors(uri: str, frags: Any = None, sample: int = 0, seed: int = 0, column: str = "vec") -> tuple[np.ndarray, np.ndarray, int]:
    out = _ffi.call_json("ReadVectors", uri, "", 0, column, "" if frags is None else json.dumps(frags), sample, seed)
    v = np.frombuffer(base64.b64decode(out["vectors"]), np.float32).reshape(-1, out["dim"])
    return np.array(out["row_ids"], np.uint64), v, int(out["skipped"])


def expected(ds: lance.LanceDataset, x: np.ndarray, bad: np.ndarray, frags: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Row ids and vectors pylance's scanner returns, without bad rows."""
    if frags is None:
        tb = ds.to_table(columns=["id"], with_row_id=True)
    else:
        tb = pa.concat_tables(
            [ds.get_fragment(f).to_table(columns=["id"], with_row_id=True) for f in frags]
        )
    ids, rids = tb["id"].to_numpy(), tb["_rowid"].to_numpy()
    keep = ~bad[ids]
    return rids[keep].astype(np.uint64), x[ids[keep]]


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    """Three fragments with NaN, infinite and null vectors; deletions in an
    Arrow deletion file (few rows) and in a roaring bitmap (many rows)."""
    root = str(tmp_path_factory.mktemp("vectors") / "messy")
    n, dim = 30000, 16
    x = lancegen.vectors(n, dim=dim)
    x[12, 3] = np.nan
    x[10001, 0] = np.inf
    x[20003, 15] = -np.inf
    x[20004, 1] = np.nan  # deleted below
    null = np.zeros(n, bool)
    null[[40, 10040, 29999]] = True
    vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim, mask=pa.array(null))
    ds = lance.write_dataset(pa.table({"id": pa.array(np.arange(n)), "vec": vec}), root, max_rows_per_file=10000)
    ds.delete("id < 5 or (id >= 10100 and id < 10200)")  # Arrow files
    ds.delete("id >= 20000 and id % 2 = 0")  # 5000 rows: pylance writes a roaring bitmap
    bad = null | ~np.isfinite(x).all(axis=1)
    return root, x, bad


def test_deletion_file_kinds(messy: tuple[str, np.ndarray, np.ndarray]) -> None:
    root, _, _ = messy
    names = sorted(p.suffix for p in Path(root, "_deletions").iterdir())
    assert ".arrow" in names and ".bin" in names, names


def test_reader_matches_pylance_scan(messy: tuple[str, np.ndarray, np.ndarray]) -> None:
    root, x, bad = messy
    ds = lance.dataset(root)
    rid, v, skipped = read_vectors(root)
    want_rid, want_v = expected(ds, x, bad)
    np.testing.assert_array_equal(rid, want_rid)
    np.testing.assert_array_equal(v, want_v)
    assert skipped == 6  # 12, 10001, 20003 (non-finite), 40, 10040, 29999 (null)
    # pylance's own index build skips the same rows.
    seg = ds.create_index_uncommitted("vec", "IVF_FLAT", name="probe", num_partitions=2, fragment_ids=[0, 1, 2])
    info = _ffi.call_json("InspectFile", f"{root}/_indices/{seg.uuid}/auxiliary.idx", 0, 0, "")
    assert info["num_rows"] == len(rid)


def test_reader_fragments_in_order(messy: tuple[str, np.ndarray, np.ndarray]) -> None:
    root, x, bad = messy
    ds = lance.dataset(root)
    rid, v, _ = read_vectors(root, [2, 0])
    want_rid, want_v = expected(ds, x, bad, [2, 0])
    np.testing.assert_array_equal(rid, want_rid)
    np.testing.assert_array_equal(v, want_v)


def test_sample(messy: tuple[str, np.ndarray, np.ndarray]) -> None:
    root, x, bad = messy
    rid, v, _ = read_vectors(root, [0, 1], sample=3000, seed=5)
    assert 2900 <= len(rid) <= 3000
    assert len(set(rid.tolist())) == len(rid)
    # every sampled row is a live, valid row with its own vector
    all_rid, all_v, _ = read_vectors(root, [0, 1])
    pos = {r: i for i, r in enumerate(all_rid.tolist())}
    idx = np.array([pos[r] for r in rid.tolist()])
    np.testing.assert_array_equal(v, all_v[idx])
    # both fragments are drawn from, and the same seed draws the same rows
    assert {int(r) >> 32 for r in rid} == {0, 1}
    again, _, _ = read_vectors(root, [0, 1], sample=3000, seed=5)
    np.testing.assert_array_equal(rid, again)
    # asking for more rows than there are returns them all
    rid_all, _, _ = read_vectors(root, [1], sample=10**6)
    np.testing.assert_array_equal(rid_all, read_vectors(root, [1])[0])


def test_float16_and_storage_versions(tmp_path: Path) -> None:
    x = lancegen.vectors(3000, dim=8)
    for version in ("2.0", "2.1"):
        uri = str(tmp_path / f"f16-{version}")
        vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel().astype(np.float16)), 8)
        lance.write_dataset(pa.table({"id": pa.array(np.arange(3000)), "vec": vec}), uri, data_storage_version=version, max_rows_per_file=1000)
        rid, v, _ = read_vectors(uri)
        assert len(rid) == 3000
        np.testing.assert_array_equal(v, x.astype(np.float16).astype(np.float32))


def test_reader_errors(messy: tuple[str, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    root, _, _ = messy
    with pytest.raises(NotFoundError):
        read_vectors(root, column="nope")
    with pytest.raises(InvalidInputError):
        read_vectors(root, column="id")
    with pytest.raises(InvalidInputError):
        read_vectors(root, [7])
    with pytest.raises(InvalidInputError):
        read_vectors(root, [0, 0])
    uri = str(tmp_path / "ints")
    lance.write_dataset(pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.int32)), 4)}), uri)
    with pytest.raises(UnsupportedError):
        read_vectors(uri, column="v")
