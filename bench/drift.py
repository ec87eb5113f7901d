"""Drift benchmark (issue 29): recall on data whose distribution moves.

One IVF_PQ index is trained on a base table; then ``--appends`` appends of
``rows`` rows each arrive, every one drawn around centres that move a
little further each time. After each append, four copies of the same table
are maintained, each its own way:

* ``fresh``: pylance ``create_index(replace=True)``, a model trained on
  today's table (the reference), and ``fresh-b``, the same on a second
  copy: k-means starts at random, so two fresh builds differ, and their
  gap is the noise floor of every recall comparison here;
* ``pylance``: pylance 14.0.2's default ``optimize_indices()``;
* ``ours``: a pylance delta (``optimize_indices(num_indices_to_merge=0)``)
  and ``lance_segmerge.maintain`` without retraining;
* ``ours-auto``: the same delta and ``lance_segmerge.maintain(retrain=
  "auto")`` (centroids added where the new rows went when the model no
  longer fits them; health and a reindex when that cannot help).

After each step: recall@10 at ``nprobes`` of queries drawn from the newest
append's rows against numpy brute force over every row, segment counts,
the health verdict, and the wall time of each maintenance call. At the end,
the cost of one reindex (2 worker processes) against pylance's
``create_index`` of the same table, in the same run.

Usage::

    PYTHONPATH=python .venv/bin/python bench/drift.py --preset default

Writes ``bench/results/drift-<preset>-<time>.md``, ``.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
os.environ.setdefault("LANCE_LOG", "error")

import lance  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import lance_segmerge as ls  # noqa: E402

PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {"dim": 32, "centers": 16, "base": 6000, "rows": 600, "appends": 6, "step": 0.25,
              "partitions": 16, "sub_vectors": 8, "nprobes": 4, "queries": 50},
    "default": {"dim": 48, "centers": 16, "base": 20000, "rows": 1000, "appends": 50, "step": 0.12,
                "partitions": 32, "sub_vectors": 12, "nprobes": 4, "queries": 50},
}
CONTENDERS = ("fresh", "fresh-b", "pylance", "ours", "ours-auto")


def _table(x: np.ndarray, start: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + len(x), dtype=np.int64)),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1])})


def _recall(ds: lance.LanceDataset, allv: np.ndarray, qs: np.ndarray, nprobes: int, k: int = 10) -> float:
    hit = 0
    for q in qs:
        truth = set(np.argpartition(((allv - q) ** 2).sum(axis=1), k)[:k].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": nprobes}, columns=["id"])["id"].to_pylist()
        hit += len(truth & set(got))
    return hit / (k * len(qs))


def _segments(uri: str) -> int:
    return len(ls.open(uri).list_index_segments("vec_idx", with_stats=False))


def run(p: dict[str, Any], root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    centers = (rng.normal(size=(p["centers"], p["dim"])) * 3).astype(np.float32)
    direction = rng.normal(size=p["dim"]).astype(np.float32)
    direction /= np.linalg.norm(direction)

    def draw(n: int, shift: float) -> np.ndarray:
        c = centers[rng.integers(0, p["centers"], n)] + shift * 3 * direction * np.sqrt(p["dim"]) / 4
        return (c + rng.normal(size=(n, p["dim"]))).astype(np.float32)

    base = draw(p["base"], 0.0)
    uris = {c: str(root / c) for c in CONTENDERS}
    for c in CONTENDERS:
        ds = lance.write_dataset(_table(base, 0), uris[c])
    ds.create_index("vec", "IVF_PQ", num_partitions=p["partitions"], num_sub_vectors=p["sub_vectors"])
    for c in CONTENDERS[:-1]:
        shutil.rmtree(uris[c])
        shutil.copytree(uris["ours-auto"], uris[c])
    allv = base
    steps: list[dict[str, Any]] = []
    cost = {c: 0.0 for c in CONTENDERS}
    reindexes = 0
    for i in range(1, p["appends"] + 1):
        x = draw(p["rows"], p["step"] * i)
        start = len(allv)
        allv = np.concatenate([allv, x])
        for c in CONTENDERS:
            lance.write_dataset(_table(x, start), uris[c], mode="append")
        t = {}
        for c in ("fresh", "fresh-b"):
            t0 = time.perf_counter()
            lance.dataset(uris[c]).create_index("vec", "IVF_PQ", num_partitions=p["partitions"],
                                                num_sub_vectors=p["sub_vectors"], replace=True)
            t[c] = time.perf_counter() - t0
        t0 = time.perf_counter()
        lance.dataset(uris["pylance"]).optimize.optimize_indices()
        t["pylance"] = time.perf_counter() - t0
        # maintain merges segments; the new fragment is indexed first by a
        # pylance delta built with the index's model (what a writer that
        # calls optimize_indices(num_indices_to_merge=0) after each append
        # leaves), timed with the pass.
        for c, kw in (("ours", {}), ("ours-auto", {"retrain": "auto"})):
            t0 = time.perf_counter()
            lance.dataset(uris[c]).optimize.optimize_indices(num_indices_to_merge=0)
            rep = ls.maintain(uris[c], "vec_idx", executor="local", **kw)
            t[c] = time.perf_counter() - t0
        reindexes += int(rep.reindexed)
        for c in CONTENDERS:
            cost[c] += t[c]
        qs = x[rng.choice(len(x), p["queries"], replace=False)]
        row = {"step": i, "rows": len(allv), "health": rep.health_verdict or "-", "reindexed": rep.reindexed,
               "added": rep.partitions_added, "residual_ratio": rep.residual_ratio}
        for c in CONTENDERS:
            row[c] = _recall(lance.dataset(uris[c]), allv, qs, p["nprobes"])
            row[f"{c}_segments"] = _segments(uris[c])
            row[f"{c}_seconds"] = t[c]
        row["partitions"] = max(int(s.num_partitions or 0) for s in ls.open(uris["ours-auto"]).list_index_segments("vec_idx"))
        steps.append(row)
        print(f"step {i:3d}: rows {len(allv):7d}  " + "  ".join(f"{c} {row[c]:.3f}" for c in CONTENDERS)
              + f"  residual {rep.residual_ratio:.2f} +{rep.partitions_added}"
              + f"  health {rep.health_verdict or '-'}{' -> reindexed' if rep.reindexed else ''}"
              + "  seconds " + " ".join(f"{t[c]:.3f}" for c in CONTENDERS), flush=True)

    # One reindex against pylance's create_index of the same table.
    a, b = str(root / "rx-ours"), str(root / "rx-pylance")
    shutil.copytree(uris["ours"], a)
    shutil.copytree(uris["ours"], b)
    t0 = time.perf_counter()
    ls.reindex(a, "vec_idx", executor="processes", max_workers=2, progress=False)
    rx_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    lance.dataset(b).create_index("vec", "IVF_PQ", num_partitions=p["partitions"], num_sub_vectors=p["sub_vectors"], replace=True)
    rx_pylance = time.perf_counter() - t0
    return {"steps": steps, "cost": cost, "reindexes": reindexes, "reindex_seconds": rx_ours,
            "pylance_create_index_seconds": rx_pylance, "final_rows": len(allv)}


def report(p: dict[str, Any], preset: str, res: dict[str, Any]) -> str:
    steps = res["steps"]
    gap = [s["fresh"] - s["ours-auto"] for s in steps]
    floor = [abs(s["fresh"] - s["fresh-b"]) for s in steps]
    gap_b = [min(s["fresh"], s["fresh-b"]) - s["ours-auto"] for s in steps]
    lines = [
        f"# Drift benchmark, preset `{preset}`",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, pylance {lance.__version__}, lance-segmerge {ls.__version__}; "
        f"{p['dim']}-d, IVF_PQ {p['partitions']} partitions x {p['sub_vectors']} sub-vectors trained on {p['base']:,} rows, "
        f"then {p['appends']} appends of {p['rows']:,} rows moving {p['step']} per append; recall@10 at nprobes={p['nprobes']} "
        f"of {p['queries']} queries from the newest append, against brute force.",
        "",
        "| step | rows | fresh | fresh (b) | pylance default | ours, no retrain | ours, retrain=auto | residual ratio → centroids added | health | segments (pylance / ours / auto) | partitions (auto) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for s in steps:
        lines.append(
            f"| {s['step']} | {s['rows']:,} | {s['fresh']:.3f} | {s['fresh-b']:.3f} | {s['pylance']:.3f} | {s['ours']:.3f} | {s['ours-auto']:.3f} | "
            f"{s['residual_ratio']:.2f}{' → +' + str(s['added']) if s['added'] else ''} | "
            f"{s['health']}{' → reindex' if s['reindexed'] else ''} | {s['pylance_segments']} / {s['ours_segments']} / {s['ours-auto_segments']} | "
            f"{s['partitions']} |"
        )
    mean = {c: sum(s[c] for s in steps) / len(steps) for c in CONTENDERS}
    cost = res["cost"]
    lines += [
        "",
        "| | fresh | fresh (b) | pylance default | ours, no retrain | ours, retrain=auto |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        "| mean recall | " + " | ".join(f"{mean[c]:.3f}" for c in CONTENDERS) + " |",
        "| total maintenance time (s) | " + " | ".join(f"{cost[c]:.1f}" for c in CONTENDERS) + " |",
        "",
        f"- retrain=auto reindexed {res['reindexes']} times; its largest recall gap to a fresh build: {max(gap):.3f} "
        f"(target 0.02: {'met' if max(gap) <= 0.02 else 'missed'}); steps within 0.02: {sum(g <= 0.02 for g in gap)} of {len(gap)}.",
        f"- noise floor: two fresh builds of the same table differ by up to {max(floor):.3f} (mean {sum(floor) / len(floor):.3f}); "
        f"steps where retrain=auto is within 0.02 of the lower of the two: {sum(g <= 0.02 for g in gap_b)} of {len(gap_b)} "
        f"(largest gap {max(gap_b):.3f}); mean recall retrain=auto minus fresh: {sum(-g for g in gap) / len(gap):+.3f}.",
        f"- retrain=auto cost / no-retrain cost: {cost['ours-auto'] / max(cost['ours'], 1e-9):.2f} "
        f"(target 2: {'met' if cost['ours-auto'] <= 2 * cost['ours'] else 'missed'}).",
        f"- one reindex of the final {res['final_rows']:,} rows on 2 worker processes: {res['reindex_seconds']:.2f}s; "
        f"pylance create_index of the same table: {res['pylance_create_index_seconds']:.2f}s "
        f"(ratio {res['reindex_seconds'] / res['pylance_create_index_seconds']:.2f}).",
    ]
    return "\n".join(lines) + "\n"


def plot(res: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps = res["steps"]
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = {"fresh": "fresh create_index", "fresh-b": "fresh create_index (b)", "pylance": "pylance optimize_indices", "ours": "maintain",
              "ours-auto": "maintain(retrain='auto')"}
    for c in CONTENDERS:
        ax.plot([s["step"] for s in steps], [s[c] for s in steps], label=labels[c])
    for s in steps:
        if s["reindexed"]:
            ax.axvline(s["step"], color="grey", alpha=0.3, lw=1)
    ax.set_xlabel("append")
    ax.set_ylabel("recall@10 of recent rows")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--appends", type=int, help="override the preset's number of appends")
    ap.add_argument("--queries", type=int,
                    help="override the preset's queries per step (drawn from the newest append; more queries, less sampling noise)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    p = dict(PRESETS[args.preset])
    if args.appends:
        p["appends"] = args.appends
    if args.queries:
        p["queries"] = args.queries
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="drift-") as tmp:
        res = run(p, Path(tmp))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    stem = out / f"drift-{args.preset}-{stamp}"
    text = report(p, args.preset, res)
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"preset": p, **res}, indent=1))
    drew = plot(res, stem.with_suffix(".png"))
    print(text)
    print(f"wrote {stem}.md, .json{', .png' if drew else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
