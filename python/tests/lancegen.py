"""Build real Lance datasets with pylance for the tests (and nothing else).

Every fixture of the test suite is written at test time by the pinned
pylance, so what the Go kernel reads is what pylance really writes.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import lance
import numpy as np
import pyarrow as pa
from lance.indices import IndicesBuilder

DIM = 32


def vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    """Clustered float32 vectors: a mixture of 16 Gaussians, so that IVF
    partitions are meaningful and recall is a fair test."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).standard_normal((16, dim)).astype(np.float32) * 3
    labels = rng.integers(0, len(centers), n)
    return (centers[labels] + rng.standard_normal((n, dim)).astype(np.float32)).astype(np.float32)


def table(x: np.ndarray, start_id: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(np.arange(start_id, start_id + len(x)), pa.int64()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1]),
        }
    )


@dataclass
class Built:
    """A dataset a fixture built, with its vectors for ground truth."""

    uri: str
    vectors: np.ndarray
    index_name: str = "vec_idx"
    index_type: str = ""
    metric: str = "l2"

    def dataset(self, version: Optional[int] = None) -> lance.LanceDataset:
        return lance.dataset(self.uri, version=version)


def index_params(index_type: str, dim: int = DIM, num_partitions: int = 4) -> dict[str, Any]:
    params: dict[str, Any] = {"num_partitions": num_partitions}
    if "PQ" in index_type:
        params["num_sub_vectors"] = dim // 8
    return params


def build_with_deltas(
    uri: str,
    index_type: str,
    *,
    metric: str = "l2",
    base_rows: int = 2000,
    delta_rows: int = 300,
    n_deltas: int = 3,
    v2_manifest_paths: bool = True,
    storage_version: Optional[str] = None,
    seed: int = 0,
    **extra: Any,
) -> Built:
    """A dataset with an index over its first fragments, then n_deltas
    appends each indexed by optimize_indices(num_indices_to_merge=0): one
    base segment plus n_deltas delta segments."""
    x = vectors(base_rows + n_deltas * delta_rows, seed=seed)
    kw: dict[str, Any] = {"enable_v2_manifest_paths": v2_manifest_paths, "max_rows_per_file": 1000}
    if storage_version:
        kw["data_storage_version"] = storage_version
    ds = lance.write_dataset(table(x[:base_rows]), uri, **kw)
    ds.create_index("vec", index_type, name="vec_idx", metric=metric, **index_params(index_type), **extra)
    for i in range(n_deltas):
        lo = base_rows + i * delta_rows
        ds = lance.write_dataset(table(x[lo : lo + delta_rows], lo), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    return Built(uri, x, "vec_idx", index_type, metric)


def train_shared_model(
    ds: lance.LanceDataset, index_type: str, num_partitions: int = 4, metric: str = "l2"
) -> dict[str, Any]:
    """Train the model every worker shares: IVF centroids, plus the PQ
    codebook or the RaBitQ rotation."""
    ib = IndicesBuilder(ds, "vec")
    ivf = ib.train_ivf(num_partitions, distance_type=metric)
    kw: dict[str, Any] = {"num_partitions": num_partitions, "ivf_centroids": ivf.centroids, "metric": metric}
    if "PQ" in index_type:
        nsub = DIM // 8
        kw["num_sub_vectors"] = nsub
        kw["pq_codebook"] = ib.train_pq(ivf, nsub, sample_rate=8).codebook
    if index_type == "IVF_RQ":
        from lance.lance import indices as native_indices

        kw["rabitq_model"] = native_indices.build_rq_model(DIM)
    return kw


def build_uncommitted_segments(
    uri: str, index_type: str, *, n_fragments: int = 6, rows: int = 500, metric: str = "l2", seed: int = 0
) -> tuple[Built, list[Any]]:
    """One fragment per segment, built with create_index_uncommitted and a
    shared model; returns the dataset and the uncommitted pylance Indexes."""
    x = vectors(n_fragments * rows, seed=seed)
    ds = lance.write_dataset(table(x), uri, max_rows_per_file=rows)
    kw = train_shared_model(ds, index_type, metric=metric)
    segs = [
        ds.create_index_uncommitted("vec", index_type, name="vec_idx", fragment_ids=[f], **kw)
        for f in range(n_fragments)
    ]
    return Built(uri, x, "vec_idx", index_type, metric), segs


def recall(ds: lance.LanceDataset, x: np.ndarray, queries: np.ndarray, k: int = 10, metric: str = "l2", **q: Any) -> float:
    """Mean recall@k of ds's vector search against numpy brute force."""
    hits = 0
    for qv in queries:
        if metric == "l2":
            d = ((x - qv) ** 2).sum(1)
        elif metric == "cosine":
            d = 1 - (x @ qv) / (np.linalg.norm(x, axis=1) * np.linalg.norm(qv) + 1e-12)
        else:
            d = -(x @ qv)
        truth = set(np.argsort(d, kind="stable")[:k].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": qv, "k": k, **q}, columns=["id", "_distance"])["id"].to_pylist()
        hits += len(truth & set(got))
    return hits / (k * len(queries))


def knn_answers(ds: lance.LanceDataset, queries: Iterable[np.ndarray], k: int = 10, **q: Any) -> list[list[tuple[float, int]]]:
    """Each query's top k as (distance, row id) pairs, nearest first."""
    out = []
    for qv in queries:
        t = ds.to_table(nearest={"column": "vec", "q": qv, "k": k, **q}, columns=[], with_row_id=True)
        out.append(sorted(zip(t["_distance"].to_pylist(), t["_rowid"].to_pylist())))
    return out


def knn_difference(a: list[list[tuple[float, int]]], b: list[list[tuple[float, int]]], rel: float = 1e-5) -> Optional[str]:
    """None when two indices answer alike, else the first difference.

    Alike means equal distances (to float rounding) and the same rows,
    except among rows tied with the k-th distance: PQ codes repeat, and
    which of several equally near rows fills the last places depends on
    the order the search visits them, which a merge may change."""
    for i, (qa, qb) in enumerate(zip(a, b, strict=True)):
        da, db = np.array([d for d, _ in qa]), np.array([d for d, _ in qb])
        tol = rel * max(1.0, float(np.abs(np.concatenate([da, db])).max(initial=0.0)))
        if len(da) != len(db) or not np.allclose(da, db, rtol=0, atol=tol):
            return f"query {i}: distances {qa} != {qb}"
        edge = max(da.max(initial=0.0), db.max(initial=0.0)) - tol
        ra, rb = {r for d, r in qa if d < edge}, {r for d, r in qb if d < edge}
        if ra != rb:
            return f"query {i}: rows nearer than the k-th differ: {qa} != {qb}"
    return None


# -- byte surgery on manifests, for corruption tests --------------------------


def latest_manifest_path(uri: str) -> str:
    names = [n for n in os.listdir(os.path.join(uri, "_versions")) if n.endswith(".manifest")]
    if any(len(n) == 29 for n in names):
        best = min(names)  # V2: newest sorts first
    else:
        best = max(names, key=lambda n: int(n.split(".")[0]))
    return os.path.join(uri, "_versions", best)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def set_manifest_varint_field(path: str, field: int, value: int) -> None:
    """Rewrite a manifest file with top-level varint field `field` of its
    Manifest message set to `value` (e.g. 9 = reader feature flags)."""
    data = open(path, "rb").read()
    pos, major, minor, magic = struct.unpack("<qhh4s", data[-16:])
    (n,) = struct.unpack("<I", data[pos : pos + 4])
    msg = data[pos + 4 : pos + 4 + n]
    out = bytearray()
    i = 0
    while i < len(msg):
        start = i
        key, i = _read_varint(msg, i)
        wt = key & 7
        if wt == 0:
            _, i = _read_varint(msg, i)
        elif wt == 1:
            i += 8
        elif wt == 2:
            ln, i = _read_varint(msg, i)
            i += ln
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
        if key >> 3 != field:
            out += msg[start:i]
    out += _varint(field << 3) + _varint(value)
    new = data[:pos] + struct.pack("<I", len(out)) + bytes(out) + struct.pack("<qhh4s", pos, major, minor, magic)
    with open(path, "wb") as f:
        f.write(new)


# -- hostile inputs, for the hardening tests ------------------------------------


def roaring_bomb(n_ids: int) -> bytes:
    """A valid portable roaring bitmap (run containers, cookie 12347) of the
    ids [0, n_ids), n_ids a multiple of 65536: one full run per container,
    so 2^32 ids take under 1 MB and naive decoding materialises 16 GiB."""
    size = n_ids >> 16
    assert size << 16 == n_ids and 1 <= size <= 65536
    head = struct.pack("<HH", 12347, size - 1) + b"\xff" * ((size + 7) // 8)
    head += b"".join(struct.pack("<HH", k, 0xFFFF) for k in range(size))
    if size >= 4:  # NO_OFFSET_THRESHOLD
        start = len(head) + 4 * size
        head += b"".join(struct.pack("<I", start + 6 * k) for k in range(size))
    return head + struct.pack("<HHH", 1, 0, 0xFFFF) * size


def with_fragment_bitmap(metadata: bytes, bitmap: bytes) -> bytes:
    """An IndexMetadata protobuf with its fragment_bitmap (field 5)
    replaced."""
    out = bytearray()
    i = 0
    while i < len(metadata):
        start = i
        key, i = _read_varint(metadata, i)
        wt = key & 7
        if wt == 0:
            _, i = _read_varint(metadata, i)
        elif wt == 1:
            i += 8
        elif wt == 2:
            ln, i = _read_varint(metadata, i)
            i += ln
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
        if key >> 3 != 5:
            out += metadata[start:i]
    return bytes(out + _varint(5 << 3 | 2) + _varint(len(bitmap)) + bitmap)
