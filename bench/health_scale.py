"""What ``health`` costs on a large table (issue 29: "a few seconds on 10M
rows on one core").

Writes ``--rows`` vectors (``--fragments`` fragments, a base index built
with ``lance_segmerge.create_index`` over the first half, and the second
half appended and indexed as one pylance delta, so that half the rows are
"since training"), then times ``health`` with its defaults in fresh
processes pinned to one core (``taskset -c 0`` when available), cold
(page cache dropped when run as root, else noted) and warm, against
pylance's own cheapest full-table read of the same column (a scan of the
vector column, which health avoids).

    PYTHONPATH=python .venv/bin/python bench/health_scale.py --rows 10000000

Writes ``bench/results/health-<rows>-<time>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = r"""
import json, sys, time
import lance_segmerge as ls
ls.kernel_version()
t0 = time.perf_counter()
rep = ls.health(sys.argv[1], "vec_idx")
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "verdict": rep.verdict, "sample_rows": rep.sample_rows, "queries": rep.queries,
                  "rows": rep.num_rows + rep.unindexed_rows, "recall_drop": rep.recall_drop}))
"""

SCAN = r"""
import json, sys, time
import lance
ds = lance.dataset(sys.argv[1])
t0 = time.perf_counter()
n = 0
for b in ds.to_batches(columns=["vec"], batch_size=65536):
    n += b.num_rows
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": n}))
"""


def _write(uri: str, rows: int, dim: int, fragments: int) -> None:
    import lance
    import numpy as np
    import pyarrow as pa

    import lance_segmerge as ls

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(64, dim)).astype(np.float32) * 3
    per = rows // fragments

    def batch(i: int, shift: float) -> pa.Table:
        x = (centers[rng.integers(0, 64, per)] + shift + rng.normal(size=(per, dim))).astype(np.float32)
        return pa.table({"id": np.arange(i * per, (i + 1) * per), "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)})

    half = fragments // 2
    for i in range(half):
        lance.write_dataset(batch(i, 0.0), uri, mode="append" if i else "create", max_rows_per_file=per)
    ls.create_index(uri, "vec", "IVF_PQ", num_partitions=1024, num_sub_vectors=dim // 4, executor="processes",
                    max_workers=2, sample_rate=64, max_iters=10, progress=False)
    for i in range(half, fragments):
        lance.write_dataset(batch(i, 1.0), uri, mode="append", max_rows_per_file=per)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)


def _run(code: str, uri: str, pin: bool) -> dict:
    cmd = [sys.executable, "-c", code, uri]
    if pin and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LANCE_LOG="error")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--fragments", type=int, default=20)
    ap.add_argument("--dir", help="keep the dataset here (default: a temporary directory)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "python"))
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="health-"))
    uri = str(root / "t.lance")
    t0 = time.perf_counter()
    if not os.path.exists(uri):
        _write(uri, args.rows, args.dim, args.fragments)
    built = time.perf_counter() - t0
    cold = _drop_caches()
    h_cold = _run(CHILD, uri, True)
    h_warm = _run(CHILD, uri, True)
    _drop_caches()
    s_cold = _run(SCAN, uri, True)
    s_warm = _run(SCAN, uri, True)
    lines = [
        f"# health on {h_warm['rows']:,} rows x {args.dim}-d (IVF_PQ, 1,024 partitions; half the rows since training)",
        "",
        f"one core (`taskset -c 0`), {os.cpu_count()} cores on the machine; dataset built in {built:.0f}s; "
        f"{'page cache dropped before the cold runs' if cold else 'page cache NOT dropped (not root): cold = first run'}",
        "",
        "| run | cold (s) | warm (s) |",
        "| --- | ---: | ---: |",
        f"| `health` (sample {h_warm['sample_rows']:,} rows, {h_warm['queries']} queries per era) | {h_cold['seconds']:.2f} | {h_warm['seconds']:.2f} |",
        f"| pylance scan of the vector column (for scale) | {s_cold['seconds']:.2f} | {s_warm['seconds']:.2f} |",
        "",
        f"verdict {h_warm['verdict']}, recall drop {h_warm['recall_drop']:.3f}.",
    ]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"health-{args.rows}-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"cold": h_cold, "warm": h_warm, "scan_cold": s_cold, "scan_warm": s_warm,
                                                     "build_seconds": built, "caches_dropped": cold}, indent=1))
    print(text)
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
