#!/usr/bin/env python3
"""Ingestion simulation: an index kept healthy while data keeps arriving.

Appends of equal size, each followed by pylance's
``optimize_indices(num_indices_to_merge=0)`` (one new delta segment per
append), on three copies of the same data:

* ``maintain``: a ``lance_segmerge.maintain`` pass (tiered policy, defaults
  unless overridden) after every ``--every`` appends;
* ``never``: no merge at all;
* ``pylance``: pylance ``optimize_indices`` merging every segment after
  every ``--every`` appends (a fully merged index at each checkpoint).

At every checkpoint (after the merges) it reports, per contender: segments,
median and p95 query latency (pylance queries, warm), recall@k against
numpy brute force over every row so far; over the run: bytes written by
merges / index bytes ingested (write amplification) and total merge time.

    python bench/ingest_sim.py --preset smoke     # seconds
    python bench/ingest_sim.py --preset small     # 300 appends x 500 rows (minutes)
    python bench/ingest_sim.py                    # default: 300 appends x 3000 rows, 128-d
    python bench/ingest_sim.py --appends 300 --rows-per-append 10000   # the scale knob

Goals (issue 16): maintain's latency within 1.2x of the fully merged index
(pylance's, at the same checkpoint) at every point, write amplification
<= 3, total merge time <= 0.3x of pylance's. The report goes to
``bench/results/ingest-<preset>-<date>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import logging
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
os.environ.setdefault("LANCE_LOG", "error")  # pylance warns about every empty IVF partition
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import bench_merge as bm  # noqa: E402


@dataclass
class Preset:
    appends: int
    every: int
    rows_per_append: int
    base_rows: int
    dim: int
    partitions: int
    queries: int
    checkpoint_every: int  # measure queries at every n-th merge checkpoint (and the last)


PRESETS = {
    "smoke": Preset(appends=30, every=10, rows_per_append=200, base_rows=4000, dim=32, partitions=16, queries=20,
                    checkpoint_every=1),
    "small": Preset(appends=300, every=10, rows_per_append=500, base_rows=20_000, dim=64, partitions=64, queries=50,
                    checkpoint_every=3),
    "default": Preset(appends=300, every=10, rows_per_append=3000, base_rows=100_000, dim=128, partitions=256,
                      queries=100, checkpoint_every=3),
}
CONTENDERS = ["maintain", "never", "pylance"]


def index_bytes(uri: str) -> dict[str, int]:
    import lance_segmerge as ls

    return {s.uuid: s.size_bytes for s in ls.open(uri).list_index_segments("vec_idx", with_stats=False)}


def measure_queries(uris: dict[str, str], x: Any, queries: Any, k: int, nprobes: int) -> dict[str, dict[str, float]]:
    """Median and p95 latency and recall@k of pylance queries on every
    contender. Queries are interleaved (each query on every contender in a
    rotating order), so that a burst of load on a shared machine hits them
    alike."""
    import lance
    import numpy as np

    dss = {c: lance.dataset(u) for c, u in uris.items()}
    q = {"column": "vec", "k": k, "nprobes": nprobes}
    for ds in dss.values():  # warm the index caches
        for qv in queries[:5]:
            ds.to_table(nearest={**q, "q": qv}, columns=["id"])
    names = list(dss)
    lat: dict[str, list[float]] = {c: [] for c in names}
    hits = {c: 0 for c in names}
    for i, qv in enumerate(queries):
        d = ((x - qv) ** 2).sum(1)
        truth = set(np.argpartition(d, k)[:k].tolist())
        for c in names[i % len(names):] + names[: i % len(names)]:
            t0 = time.perf_counter()
            got = dss[c].to_table(nearest={**q, "q": qv}, columns=["id"])["id"].to_numpy()
            lat[c].append(time.perf_counter() - t0)
            hits[c] += len(truth & set(got.tolist()))
    out = {}
    for c in names:
        ls_ = sorted(lat[c])
        out[c] = {
            "median_ms": 1e3 * statistics.median(ls_),
            "p95_ms": 1e3 * ls_[min(len(ls_) - 1, int(round(0.95 * (len(ls_) - 1))))],
            "recall": hits[c] / (k * len(queries)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--appends", type=int)
    ap.add_argument("--every", type=int)
    ap.add_argument("--rows-per-append", type=int, help="the scale knob")
    ap.add_argument("--type", default="IVF_PQ")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nprobes", type=int, default=8)
    ap.add_argument("--executor", default="auto", help="maintain's executor (default auto)")
    ap.add_argument("--segments-per-tier", type=int, help="maintain's tiered policy (default: the policy's)")
    ap.add_argument("--floor-rows", type=int, help="maintain's tiered policy (default: the policy's)")
    ap.add_argument("--max-segments", type=int, help="maintain's tiered policy, latency first (default: no cap)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--work", help="scratch directory (kept when given)")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    for key in ("appends", "every", "rows_per_append"):
        if getattr(args, key) is not None:
            setattr(p, key, getattr(args, key))
    logging.basicConfig(level=logging.WARNING)

    import lance
    import numpy as np

    import lance_segmerge as ls

    root = Path(args.work or tempfile.mkdtemp(prefix="segmerge-ingest-"))
    root.mkdir(parents=True, exist_ok=True)
    uris = {c: str(root / c) for c in CONTENDERS}
    total = p.base_rows + p.appends * p.rows_per_append
    x = bm.vectors(total, p.dim, seed=16)
    queries = bm.vectors(p.queries, p.dim, seed=61)
    params = bm.index_params(args.type, bm.Preset(rows=total, fragments=1, group=1, base_rows=p.base_rows, deltas=0,
                                                  delta_rows=0, dim=p.dim, partitions=p.partitions, repeats=1,
                                                  types=[args.type]))
    # One base index (one trained model) for all: only the merges differ.
    for c in CONTENDERS:
        shutil.rmtree(uris[c], ignore_errors=True)
    ds = lance.write_dataset(bm.table(x[: p.base_rows], 0), uris["maintain"])
    ds.create_index("vec", args.type, name="vec_idx", **params)
    for c in CONTENDERS[1:]:
        shutil.copytree(uris["maintain"], uris[c])
    stats = {c: {"merge_seconds": 0.0, "bytes_rewritten": 0, "bytes_ingested": 0, "merges": 0, "rows_rewritten": 0,
                 "rows_ingested": 0} for c in CONTENDERS}
    points: list[dict[str, Any]] = []
    tier = {k: v for k, v in (("segments_per_tier", args.segments_per_tier), ("floor_rows", args.floor_rows),
                              ("max_segments", args.max_segments)) if v}
    t_start = time.perf_counter()
    for i in range(1, p.appends + 1):
        lo = p.base_rows + (i - 1) * p.rows_per_append
        part = bm.table(x[lo : lo + p.rows_per_append], lo)
        for c in CONTENDERS:
            before = index_bytes(uris[c])
            lance.write_dataset(part, uris[c], mode="append")
            lance.dataset(uris[c]).optimize.optimize_indices(num_indices_to_merge=0)
            after = index_bytes(uris[c])
            stats[c]["bytes_ingested"] += sum(b for u, b in after.items() if u not in before)
            stats[c]["rows_ingested"] += p.rows_per_append
        if i % p.every:
            continue
        for c in ("maintain", "pylance"):
            before = index_bytes(uris[c])
            t0 = time.perf_counter()
            if c == "maintain":
                rep = ls.maintain(uris[c], "vec_idx", executor=args.executor, **tier)
                stats[c]["rows_rewritten"] += rep.rows_written
            else:
                lance.dataset(uris[c]).optimize.optimize_indices(num_indices_to_merge=len(before))
                stats[c]["rows_rewritten"] += lo + p.rows_per_append  # every row, into one segment
            stats[c]["merge_seconds"] += time.perf_counter() - t0
            stats[c]["merges"] += 1
            after = index_bytes(uris[c])
            stats[c]["bytes_rewritten"] += sum(b for u, b in after.items() if u not in before)
        checkpoint = i // p.every
        last = i + p.every > p.appends
        if checkpoint % p.checkpoint_every and not last and checkpoint != 1:
            continue
        pt: dict[str, Any] = {"appends": i, "rows": lo + p.rows_per_append}
        measured = measure_queries(uris, x[: lo + p.rows_per_append], queries, args.k, args.nprobes)
        for c in CONTENDERS:
            pt[c] = {"segments": len(index_bytes(uris[c])), **measured[c]}
        pt["maintain_over_merged"] = pt["maintain"]["median_ms"] / pt["pylance"]["median_ms"]
        points.append(pt)
        print(
            f"append {i:4d}: " + "  ".join(
                f"{c} {pt[c]['segments']:3d} seg {pt[c]['median_ms']:6.2f} ms r={pt[c]['recall']:.3f}" for c in CONTENDERS
            ),
            flush=True,
        )
    res = {
        "preset": args.preset, "params": asdict(p), "type": args.type, "k": args.k, "nprobes": args.nprobes,
        "executor": args.executor, "tier": tier, "machine": bm.machine(), "points": points, "stats": stats,
        "wall_seconds": time.perf_counter() - t_start,
    }
    for c in CONTENDERS:
        s = stats[c]
        s["write_amplification"] = s["bytes_rewritten"] / max(1, s["bytes_ingested"])
        s["rows_write_amplification"] = s["rows_rewritten"] / max(1, s["rows_ingested"])
    res["summary"] = {
        "max_latency_over_merged": max(pt["maintain_over_merged"] for pt in points),
        "write_amplification": stats["maintain"]["write_amplification"],
        "merge_time_over_pylance": stats["maintain"]["merge_seconds"] / max(1e-9, stats["pylance"]["merge_seconds"]),
    }
    if not args.work:
        shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"ingest-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.with_suffix(".json").write_text(json.dumps(res, indent=2))
    md = report_markdown(res)
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md")
    return 0


def report_markdown(res: dict[str, Any]) -> str:
    p = res["params"]
    lines = [
        f"# Ingestion simulation: {p['appends']} appends x {p['rows_per_append']} rows, {res['type']} "
        f"{p['dim']}-d, {p['partitions']} partitions, merges every {p['every']} appends",
        "",
        f"Preset {res['preset']}; queries: {p['queries']} pylance queries, k={res['k']}, nprobes={res['nprobes']}; "
        f"maintain executor {res['executor']}{', ' + str(res['tier']) if res['tier'] else ''}. "
        f"Machine: {res['machine'].get('cpu', '?')}, {res['machine'].get('cores', '?')} cores.",
        "",
        "| appends | rows | segments (maintain / never / pylance) | median ms (maintain / never / pylance) "
        "| p95 ms (maintain / never / pylance) | recall@k (maintain / never / pylance) | maintain / merged |",
        "| ---: | ---: | --- | --- | --- | --- | ---: |",
    ]
    for pt in res["points"]:
        def trio(key: str, fmt: str) -> str:
            return " / ".join(format(pt[c][key], fmt) for c in CONTENDERS)

        lines.append(
            f"| {pt['appends']} | {pt['rows']} | {trio('segments', 'd')} | {trio('median_ms', '.2f')} | "
            f"{trio('p95_ms', '.2f')} | {trio('recall', '.3f')} | {pt['maintain_over_merged']:.2f} |"
        )
    st = res["stats"]
    lines += [
        "",
        "| over the run | maintain | never | pylance (merge all) |",
        "| --- | ---: | ---: | ---: |",
        "| merges | {} | 0 | {} |".format(st["maintain"]["merges"], st["pylance"]["merges"]),
        "| total merge time (s) | {:.2f} | 0 | {:.2f} |".format(st["maintain"]["merge_seconds"], st["pylance"]["merge_seconds"]),
        "| bytes rewritten / bytes ingested | {:.2f} | 0 | {:.2f} |".format(
            st["maintain"]["write_amplification"], st["pylance"]["write_amplification"]),
        "| rows rewritten / rows ingested (each delta carries its own centroids and codebook, so bytes flatter) "
        "| {:.2f} | 0 | {:.2f} |".format(st["maintain"]["rows_write_amplification"], st["pylance"]["rows_write_amplification"]),
        "",
        "| goal | measured | |",
        "| --- | ---: | --- |",
    ]
    s = res["summary"]
    for name, val, goal in (
        ("maintain latency / fully merged (pylance) at every point (≤ 1.2)", s["max_latency_over_merged"], 1.2),
        ("write amplification (≤ 3)", s["write_amplification"], 3.0),
        ("maintain total merge time / pylance's (≤ 0.3)", s["merge_time_over_pylance"], 0.3),
    ):
        lines.append(f"| {name} | {val:.2f} | {'met' if val <= goal else 'missed'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
