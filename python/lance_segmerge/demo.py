"""Demo: build a Lance dataset whose vector index has many delta segments,
then show what lance_segmerge sees in it.

Run with ``python -m lance_segmerge.demo`` (``make demo``). Needs pylance,
pyarrow and numpy (the ``lance`` extra).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from typing import Any

from . import open as open_dataset
from .types import IndexSegment


def _need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"the demo needs {module}: pip install 'lance-segmerge[lance]'")


def build(uri: str, *, deltas: int, base_rows: int, delta_rows: int, dim: int, index_type: str) -> Any:
    """Write base_rows vectors, index them, then append `deltas` batches,
    each indexed as a new delta segment (optimize_indices with
    num_indices_to_merge=0)."""
    np = _need("numpy")
    pa = _need("pyarrow")
    lance = _need("lance")
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((32, dim)).astype(np.float32) * 4
    n = base_rows + deltas * delta_rows
    x = (centers[rng.integers(0, len(centers), n)] + rng.standard_normal((n, dim))).astype(np.float32)

    def batch(lo: int, hi: int) -> Any:
        return pa.table(
            {
                "id": pa.array(np.arange(lo, hi), pa.int64()),
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(x[lo:hi].ravel()), dim),
            }
        )

    ds = lance.write_dataset(batch(0, base_rows), uri)
    params: dict[str, Any] = {"num_partitions": 16}
    if "PQ" in index_type:
        params["num_sub_vectors"] = dim // 4
    ds.create_index("vec", index_type, name="vec_idx", **params)
    for i in range(deltas):
        lo = base_rows + i * delta_rows
        ds = lance.write_dataset(batch(lo, lo + delta_rows), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    return x


def recall(uri: str, x: Any, queries: int = 50, k: int = 10) -> tuple[float, float]:
    """Recall@k against numpy brute force, and mean query latency (ms)."""
    np = _need("numpy")
    lance = _need("lance")
    ds = lance.dataset(uri)
    rng = np.random.default_rng(1)
    qs = x[rng.choice(len(x), queries, replace=False)] + 0.1 * rng.standard_normal((queries, x.shape[1]))
    hits, t0 = 0, time.perf_counter()
    for q in qs.astype(np.float32):
        truth = set(np.argsort(((x - q) ** 2).sum(1))[:k].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": 4}, columns=["id", "_distance"])
        hits += len(truth & set(got["id"].to_pylist()))
    return hits / (k * queries), (time.perf_counter() - t0) * 1000 / queries


def table(segments: list[IndexSegment]) -> str:
    rows = [("uuid", "fragments", "rows", "parts", "layout", "bytes")]
    for s in segments:
        layout = {True: "query", False: "row-major", None: "-"}[
            s.pq_transposed if s.pq_transposed is not None else s.rq_packed
        ]
        frags = ",".join(map(str, s.fragment_ids[:6])) + ("…" if len(s.fragment_ids) > 6 else "")
        rows.append((s.uuid[:8], frags, str(s.num_rows), str(s.num_partitions), layout, str(s.size_bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lance_segmerge.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--deltas", type=int, default=24, help="delta segments to create (default 24)")
    ap.add_argument("--base-rows", type=int, default=20000)
    ap.add_argument("--delta-rows", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--index-type", default="IVF_PQ", choices=["IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ"])
    ap.add_argument("--uri", help="where to build the dataset (default: a temporary directory)")
    args = ap.parse_args(argv)

    tmp = None
    uri = args.uri
    if uri is None:
        tmp = tempfile.mkdtemp(prefix="segmerge-demo-")
        uri = f"{tmp}/demo.lance"
    try:
        t0 = time.perf_counter()
        x = build(
            uri,
            deltas=args.deltas,
            base_rows=args.base_rows,
            delta_rows=args.delta_rows,
            dim=args.dim,
            index_type=args.index_type,
        )
        print(f"built {uri}: {len(x)} rows, {args.index_type}, {args.deltas} deltas in {time.perf_counter() - t0:.1f}s")
        ds = open_dataset(uri)
        t0 = time.perf_counter()
        segs = ds.list_index_segments("vec_idx")
        print(f"\nversion {ds.version}: {len(segs)} segments (listed in {1000 * (time.perf_counter() - t0):.0f} ms)")
        print(table(segs))
        r, ms = recall(uri, x)
        print(f"\nrecall@10 {r:.3f}, {ms:.1f} ms/query with {len(segs)} segments")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
