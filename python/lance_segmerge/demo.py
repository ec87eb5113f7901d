"""Demo: build a Lance dataset whose vector index has many delta segments,
merge them with lance_segmerge on local worker processes, commit, and
compare with pylance's own optimize_indices on a copy of the same data.

Run with ``python -m lance_segmerge.demo`` (``make demo``). Needs pylance,
pyarrow and numpy (the ``lance`` extra).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from typing import Any, Sequence

from . import open as open_dataset
from ._args import EXECUTORS
from .types import IndexSegment


# The default shape is one a user would merge: hundreds of deltas over an
# index of a thousand partitions. --small is for a first look in seconds.
DEFAULT = {"deltas": 200, "partitions": 1024, "base_rows": 262144, "delta_rows": 500}
SMALL = {"deltas": 16, "partitions": 16, "base_rows": 4000, "delta_rows": 250}


def _need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"the demo needs {module}: pip install 'lance-segmerge[lance]'")


def build(
    uri: str,
    *,
    deltas: int,
    base_rows: int,
    delta_rows: int,
    dim: int,
    index_type: str,
    partitions: int = 16,
    deltas_by: str = "segmerge",
) -> Any:
    """Write base_rows vectors, index them, then append `deltas` batches,
    each indexed as a new delta segment: with lance-segmerge's build path
    (the index's own model, read once, encodes the new fragment; the
    segment is committed next to the others), or with pylance's
    optimize_indices(num_indices_to_merge=0)."""
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
    params: dict[str, Any] = {"num_partitions": partitions}
    if "PQ" in index_type:
        params["num_sub_vectors"] = dim // 4
    ds.create_index("vec", index_type, name="vec_idx", **params)
    if deltas_by == "segmerge":
        from .api import commit_existing_index_segments
        from .build import build_index_segment, read_index_model

        model = read_index_model(uri, "vec_idx")
    for i in range(deltas):
        lo = base_rows + i * delta_rows
        ds = lance.write_dataset(batch(lo, lo + delta_rows), uri, mode="append")
        if deltas_by == "segmerge":
            new = [f.fragment_id for f in ds.get_fragments()][-1:]
            seg = build_index_segment(uri, "vec", index_type, new, model, name="vec_idx")
            commit_existing_index_segments(uri, "vec_idx", "vec", [seg])
        else:
            ds.optimize.optimize_indices(num_indices_to_merge=0)
    return x


def recall(uri: str, x: Any, nprobes: int, queries: int = 20, k: int = 10) -> tuple[float, float]:
    """Recall@k against numpy brute force, and mean query latency in ms
    (pylance's search alone; the brute force is not timed)."""
    np = _need("numpy")
    lance = _need("lance")
    ds = lance.dataset(uri)
    rng = np.random.default_rng(1)
    qs = (x[rng.choice(len(x), queries, replace=False)] + 0.1 * rng.standard_normal((queries, x.shape[1]))).astype(np.float32)
    truths = [set(np.argsort(((x - q) ** 2).sum(1))[:k].tolist()) for q in qs]
    hits, elapsed = 0, 0.0
    for q, truth in zip(qs, truths):
        t0 = time.perf_counter()
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": nprobes}, columns=["id", "_distance"])
        elapsed += time.perf_counter() - t0
        hits += len(truth & set(got["id"].to_pylist()))
    return hits / (k * queries), elapsed * 1000 / queries


def table(segments: list[IndexSegment]) -> str:
    rows = [("uuid", "fragments", "rows", "parts", "layout", "bytes")]
    for s in segments:
        layout = {True: "query", False: "row-major", None: "-"}[
            s.pq_transposed if s.pq_transposed is not None else s.rq_packed
        ]
        frags = ",".join(map(str, s.fragment_ids[:6])) + ("…" if len(s.fragment_ids) > 6 else "")
        rows.append((s.uuid[:8], frags, str(s.num_rows), str(s.num_partitions), layout, str(s.size_bytes)))
    return _columns(rows)


def _columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells as left-aligned columns, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The demo's options, for its own parser and `lance-segmerge demo`."""
    ap.add_argument(
        "--small",
        action="store_true",
        help=f"a quick shape for a first look ({SMALL['deltas']} deltas, {SMALL['partitions']} partitions); "
        "the flags below still override it",
    )
    ap.add_argument("--deltas", type=int, help=f"delta segments to create (default {DEFAULT['deltas']})")
    ap.add_argument("--partitions", type=int, help=f"IVF partitions (default {DEFAULT['partitions']})")
    ap.add_argument("--base-rows", type=int, help=f"rows indexed by the base segment (default {DEFAULT['base_rows']})")
    ap.add_argument("--delta-rows", type=int, help=f"rows per appended delta (default {DEFAULT['delta_rows']})")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--index-type", default="IVF_PQ", choices=["IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ"])
    ap.add_argument(
        "--executor",
        default="auto",
        choices=EXECUTORS,
        help="where the merge runs (default auto: what optimize would pick on this machine)",
    )
    ap.add_argument("--workers", type=int, help="pool size (default: the executor's)")
    ap.add_argument("--fan-in", type=int, default=32)
    ap.add_argument("--uri", help="where to build the dataset (default: a temporary directory)")
    ap.add_argument(
        "--deltas-by",
        default="segmerge",
        choices=["segmerge", "pylance"],
        help="index each appended batch with lance-segmerge's build path (default) or pylance's optimize_indices",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lance_segmerge.demo", description=__doc__.splitlines()[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the demo with parsed options (see add_arguments)."""
    shape = dict(SMALL if args.small else DEFAULT)
    for key in shape:
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)

    from .runs import optimize_with_report

    lance = _need("lance")
    tmp = None
    uri = args.uri
    if uri is None:
        tmp = tempfile.mkdtemp(prefix="segmerge-demo-")
        uri = f"{tmp}/demo.lance"
    try:
        t0 = time.perf_counter()
        x = build(
            uri,
            deltas=shape["deltas"],
            base_rows=shape["base_rows"],
            delta_rows=shape["delta_rows"],
            partitions=shape["partitions"],
            dim=args.dim,
            index_type=args.index_type,
            deltas_by=args.deltas_by,
        )
        how = "build_index_segment" if args.deltas_by == "segmerge" else "pylance optimize_indices"
        print(f"built {uri}: {len(x)} rows, {args.index_type}, {shape['deltas']} deltas ({how}) in {time.perf_counter() - t0:.1f}s")
        reference = uri + ".pylance"
        shutil.copytree(uri, reference)

        ds = open_dataset(uri)
        segs = ds.list_index_segments("vec_idx")
        print(f"\nversion {ds.version}: {len(segs)} segments")
        print(table(segs[:6]) + (f"\n… and {len(segs) - 6} more" if len(segs) > 6 else ""))
        nprobes = max(4, shape["partitions"] // 32)
        r0, ms0 = recall(uri, x, nprobes)

        t0 = time.perf_counter()
        report = optimize_with_report(
            ds, "vec_idx", executor=args.executor, max_workers=args.workers, fan_in=args.fan_in, progress=False
        )
        ours = time.perf_counter() - t0
        ds = open_dataset(uri, report.version)
        after = ds.list_index_segments("vec_idx")
        r1, ms1 = recall(uri, x, nprobes)

        t0 = time.perf_counter()
        lance.dataset(reference).optimize.optimize_indices(num_indices_to_merge=len(segs))
        theirs = time.perf_counter() - t0
        r2, ms2 = recall(reference, x, nprobes)
        n_ref = len(lance.dataset(reference).describe_indices()[0].segments)

        print(f"\nversion {ds.version}: {len(after)} segment(s)")
        print(table(after))
        print()
        rows = [
            ("", "segments", f"recall@10 (nprobes {nprobes})", "ms/query", "merge time"),
            ("before", str(len(segs)), f"{r0:.3f}", f"{ms0:.1f}", "-"),
            (f"lance-segmerge optimize ({report.executor})", str(len(after)), f"{r1:.3f}", f"{ms1:.1f}", f"{ours:.2f}s"),
            ("pylance optimize_indices", str(n_ref), f"{r2:.3f}", f"{ms2:.1f}", f"{theirs:.2f}s"),
        ]
        ratio = theirs / ours if ours > 0 else float("inf")
        print(_columns(rows))
        verdict = f"{ratio:.1f}x faster than" if ratio >= 1 else f"{1 / ratio:.1f}x slower than"
        print(f"\nlance-segmerge's merge was {verdict} pylance's on the same data ({ours:.2f}s vs {theirs:.2f}s).")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
