"""Full-text (INVERTED) index builds against pylance 14.0.2 (issue 27), on
the same data, in one run.

A table of generated text (bench_fts's documents: a Zipf-distributed
vocabulary of 20,000 made-up words, 5 to 80 words each) in ``--fragments``
fragments, no index. Then, each on a fresh copy, in fresh processes:

* ``ours``: ``lance_segmerge.create_index(..., "INVERTED",
  executor="processes", max_workers=2)``: a segment per group of
  fragments built on two worker processes, merged and committed;
* ``ours_local``: the same on one process (``executor="local"``);
* ``pylance``: ``create_scalar_index("text", "INVERTED")`` (its own
  threads);

with the driver's and the largest worker's peak RSS. The built tables
then answer the same full-text queries: the top 100 rows and their BM25
scores are compared. Usage::

    PYTHONPATH=python .venv/bin/python bench/bench_fts_build.py --preset default

Writes ``bench/results/fts-build-<preset>-<time>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_fts import INDEX, QUERIES, _answers, _same, text_tables  # noqa: E402

PRESETS = {
    "smoke": {"docs": 40_000, "fragments": 8, "repeats": 1},
    "medium": {"docs": 200_000, "fragments": 8, "repeats": 2},
    "default": {"docs": 1_000_000, "fragments": 16, "repeats": 2},
}

CHILD = r"""
import json, resource, sys, time
job = json.loads(sys.argv[1])
if job["kind"].startswith("ours"):
    import lance_segmerge as ls
    ls.kernel_version()
    ex = "processes" if job["kind"] == "ours" else "local"
    t0 = time.perf_counter()
    ls.create_index(job["uri"], "text", "INVERTED", executor=ex, max_workers=2, progress=False)
    dt = time.perf_counter() - t0
else:
    import lance
    ds = lance.dataset(job["uri"])
    t0 = time.perf_counter()
    ds.create_scalar_index("text", "INVERTED")
    dt = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": dt, "rss_mib": hwm / 1024, "worker_rss_mib": kids / 1024}))
"""


def _child(job: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "python"), LANCE_LOG="error")
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], capture_output=True, text=True, env=env, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{job['kind']}: {res['seconds']:.2f}s", file=sys.stderr, flush=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--repeats", type=int, help="runs of each contender (default: the preset's)")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    if args.repeats:
        p["repeats"] = args.repeats
    import lance

    kinds = ("ours", "ours_local", "pylance")
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="fts-build-") as tmp:
        src = os.path.join(tmp, "src")
        for i, t in enumerate(text_tables(p["docs"], p["fragments"])):
            lance.write_dataset(t, src, mode="append" if i else "create")
        text_bytes = sum(f.stat().st_size for f in Path(src, "data").iterdir())
        for r in range(p["repeats"]):
            for kind in kinds if r % 2 == 0 else reversed(kinds):
                dst = os.path.join(tmp, f"{kind}{r}")
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
                subprocess.run(["sync"], check=False)
                runs[kind].append(_child({"kind": kind, "uri": dst}))
        ours, theirs = _answers(os.path.join(tmp, "ours0")), _answers(os.path.join(tmp, "pylance0"))
        same = _same(ours, theirs) and _same(_answers(os.path.join(tmp, "ours_local0")), theirs)
    best = {k: min(v, key=lambda x: x["seconds"]) for k, v in runs.items()}
    lines = [
        f"# INVERTED build, preset `{args.preset}`",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, pylance {lance.__version__}; {p['docs']:,} documents of 5-80 words "
        f"(Zipf over 20,000 words) in {p['fragments']} fragments, {text_bytes / 2**20:.0f} MiB of data files; best of {p['repeats']}.",
        "",
        "| run | seconds | ratio to pylance | driver peak RSS (MiB) | largest worker peak RSS (MiB) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for k in kinds:
        b = best[k]
        worker = f"{b['worker_rss_mib']:.0f}" if k == "ours" else "-"
        lines.append(f"| {k} | {b['seconds']:.2f} | {b['seconds'] / best['pylance']['seconds']:.2f} | {b['rss_mib']:.0f} | {worker} |")
    lines += ["", f"top-100 rows and BM25 scores identical to pylance's build on {len(QUERIES)} queries: {'yes' if same else 'NO'}."]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"fts-build-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"preset": p, "runs": runs, "same": same}, indent=1))
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
