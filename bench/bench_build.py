"""Benchmark the build path against pylance 14.0.2 on the same data, in the
same run:

* build throughput per worker: ``build_index_segment`` against
  ``create_index_uncommitted`` with the same injected (pylance-trained)
  model, IVF_PQ / IVF_SQ / IVF_RQ, rows per second;
* IVF training time: ``train_index_model`` against pylance's
  ``IndicesBuilder.train_ivf`` at the same sample rate and iterations;
* ``create_index`` on 2 worker processes against pylance's
  ``create_index`` (wall time, recall@10 of both against brute force);
* peak RSS of one build worker (a fresh process per run).

Every timed run is a fresh process; the clock starts after the imports
(pylance's native library loads with ``import lance``, ours is loaded
before the clock too). Usage::

    PYTHONPATH=python .venv/bin/python bench/bench_build.py --preset small

Presets: ``small`` (fast, proves the bench works), ``large`` (1M x 128,
1024 partitions: the issue's numbers; needs a quiet machine and tens of
minutes). Writes ``bench/results/build-<preset>-<time>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

PRESETS: dict[str, dict[str, Any]] = {
    "small": {"rows": 60_000, "dim": 64, "partitions": 64, "sub_vectors": 8, "fragments": 6, "sample_rate": 64, "iters": 10, "repeats": 3, "queries": 50},
    "medium": {"rows": 300_000, "dim": 128, "partitions": 256, "sub_vectors": 16, "fragments": 8, "sample_rate": 128, "iters": 20, "repeats": 3, "queries": 100},
    "large": {"rows": 1_000_000, "dim": 128, "partitions": 1024, "sub_vectors": 16, "fragments": 10, "sample_rate": 256, "iters": 50, "repeats": 3, "queries": 100},
}

# One timed operation, run in a fresh interpreter; prints a JSON line.
CHILD = r'''
import json, os, resource, sys, time
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("LANCE_LOG", "error")
import numpy as np, pyarrow as pa, lance
import lance_segmerge as ls
from lance_segmerge.model import IndexModel
ls.kernel_version()  # load the native kernel, as `import lance` loads pylance's
job = json.loads(sys.argv[1])
uri, kind = job["uri"], job["kind"]
m = None
if "model" in job:
    d = np.load(job["model"], allow_pickle=True)
    kw = {}
    if "codebook" in d:
        kw["codebook"] = d["codebook"]; kw["num_sub_vectors"] = int(d["nsub"])
    if "sq" in d:
        kw["sq_bounds"] = tuple(d["sq"])
    if "rq" in d:
        kw["rabitq_model"] = str(d["rq"])
    m = IndexModel.from_arrays(job["index_type"], "l2", d["centroids"], **kw)
t0 = time.perf_counter()
if kind == "ours_build":
    ls.build_index_segment(uri, "vec", job["index_type"], job["fragments"], m, name="b")
elif kind == "theirs_build":
    d = np.load(job["model"], allow_pickle=True)
    kw = {"num_partitions": len(d["centroids"]), "ivf_centroids": d["centroids"]}
    if "codebook" in d:
        ns = int(d["nsub"]); cb = d["codebook"]
        kw.update(num_sub_vectors=ns, pq_codebook=cb.reshape(ns, -1, cb.shape[1] // ns))
    if "rq" in d:
        kw["rabitq_model"] = str(d["rq"])
    lance.dataset(uri).create_index_uncommitted("vec", job["index_type"], name="b", fragment_ids=job["fragments"], **kw)
elif kind == "ours_train":
    ls.train_index_model(uri, "vec", "IVF_FLAT", num_partitions=job["partitions"], sample_rate=job["sample_rate"], max_iters=job["iters"], seed=1)
elif kind == "theirs_train":
    from lance.indices import IndicesBuilder
    IndicesBuilder(lance.dataset(uri), "vec").train_ivf(job["partitions"], sample_rate=job["sample_rate"], max_iters=job["iters"])
elif kind == "ours_create":
    kw = {"num_partitions": job["partitions"]}
    if job["index_type"] == "IVF_PQ":
        kw["num_sub_vectors"] = job["sub_vectors"]
    ls.create_index(uri, "vec", job["index_type"], executor="processes", max_workers=2, progress=False, sample_rate=job["sample_rate"], max_iters=job["iters"], **kw)
elif kind == "theirs_create":
    kw = {"num_partitions": job["partitions"]}
    if job["index_type"] == "IVF_PQ":
        kw["num_sub_vectors"] = job["sub_vectors"]
    lance.dataset(uri).create_index("vec", job["index_type"], name="vec_idx", sample_rate=job["sample_rate"], max_iters=job["iters"], **kw)
dt = time.perf_counter() - t0
# VmHWM, not ru_maxrss: a child spawned by the (large) driver inherits the
# driver's high-water mark in ru_maxrss across exec.
with open("/proc/self/status") as f:
    rss = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "rss_mb": rss, "children_rss_mb": kids}))
'''


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    code = f"REPO = {str(REPO)!r}\n" + CHILD
    out = subprocess.run([sys.executable, "-c", code, json.dumps(job)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{job['kind']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_data(root: Path, p: dict[str, Any]) -> tuple[str, Any]:
    import lance
    import numpy as np
    import pyarrow as pa

    sys.path.insert(0, str(REPO / "python" / "tests"))
    import lancegen

    uri = str(root / "data")
    x = lancegen.vectors(p["rows"], dim=p["dim"], seed=1)
    per = p["rows"] // p["fragments"]
    lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=per)
    return uri, x


def train_models(uri: str, p: dict[str, Any], root: Path) -> dict[str, str]:
    import lance
    import numpy as np
    from lance.indices import IndicesBuilder
    from lance.lance import indices as native

    ib = IndicesBuilder(lance.dataset(uri), "vec")
    ivf = ib.train_ivf(p["partitions"], sample_rate=p["sample_rate"], max_iters=p["iters"])
    cent = ivf.centroids.flatten().to_numpy().reshape(-1, p["dim"])
    pq = ib.train_pq(ivf, p["sub_vectors"], sample_rate=max(1, min(256, p["rows"] // 256)), max_iters=p["iters"])
    out = {}
    for t in ("IVF_PQ", "IVF_SQ", "IVF_RQ"):
        path = str(root / f"model-{t}.npz")
        kw: dict[str, Any] = {"centroids": cent}
        if t == "IVF_PQ":
            kw.update(codebook=pq.codebook.flatten().to_numpy().reshape(-1, p["dim"]), nsub=p["sub_vectors"])
        if t == "IVF_RQ":
            kw["rq"] = np.array(native.build_rq_model(p["dim"]))
        if t == "IVF_SQ":
            pass  # filled below from pylance's own segment bounds
        np.savez(path, **kw)
        out[t] = path
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    p = PRESETS[args.preset]
    os.environ.setdefault("LANCE_LOG", "error")
    sys.path.insert(0, str(REPO / "python"))
    sys.path.insert(0, str(REPO / "python" / "tests"))
    import lance
    import lancegen
    import numpy as np

    work = Path(tempfile.mkdtemp(prefix="bench-build-"))
    results: dict[str, Any] = {"preset": args.preset, "params": p, "machine": platform.platform(), "cpus": os.cpu_count()}
    try:
        uri, x = make_data(work, p)
        models = train_models(uri, p, work)
        # SQ: pylance trains bounds per segment; inject one range for both.
        np.savez(models["IVF_SQ"], centroids=np.load(models["IVF_PQ"])["centroids"], sq=np.array([float(x.min()), float(x.max())]))
        frags = list(range(p["fragments"] // 2))  # one worker's share
        rows = len(frags) * (p["rows"] // p["fragments"])
        build: dict[str, Any] = {}
        for t in ("IVF_PQ", "IVF_SQ", "IVF_RQ"):
            times: dict[str, list[float]] = {"ours": [], "theirs": []}
            rss: list[float] = []
            for _ in range(p["repeats"]):
                for who in ("ours", "theirs"):  # alternate contenders
                    r = run_child({"uri": uri, "kind": f"{who}_build", "index_type": t, "fragments": frags, "model": models[t]})
                    times[who].append(r["seconds"])
                    if who == "ours":
                        rss.append(r["rss_mb"])
            build[t] = {
                "rows": rows,
                "ours_s": median(times["ours"]),
                "theirs_s": median(times["theirs"]),
                "ours_rows_per_s": rows / median(times["ours"]),
                "theirs_rows_per_s": rows / median(times["theirs"]),
                "ratio": median(times["theirs"]) / median(times["ours"]),
                "ours_peak_rss_mb": max(rss),
                "all": times,
            }
        results["build"] = build
        train = {"ours": [], "theirs": []}
        for _ in range(p["repeats"]):
            for who in ("ours", "theirs"):
                train[who].append(run_child({"uri": uri, "kind": f"{who}_train", "partitions": p["partitions"], "sample_rate": p["sample_rate"], "iters": p["iters"]})["seconds"])
        results["train"] = {"ours_s": median(train["ours"]), "theirs_s": median(train["theirs"]), "ratio": median(train["ours"]) / median(train["theirs"]), "all": train}
        create: dict[str, Any] = {}
        q = lancegen.vectors(p["queries"], dim=p["dim"], seed=99)
        for t in ("IVF_PQ",):
            tt: dict[str, list[float]] = {"ours": [], "theirs": []}
            rec: dict[str, float] = {}
            for _ in range(max(1, p["repeats"] - 1)):
                for who in ("ours", "theirs"):
                    copy = str(work / f"create-{who}")
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(uri, copy)
                    r = run_child({"uri": copy, "kind": f"{who}_create", "index_type": t, "partitions": p["partitions"], "sub_vectors": p["sub_vectors"], "sample_rate": p["sample_rate"], "iters": p["iters"]})
                    tt[who].append(r["seconds"])
                    rec[who] = lancegen.recall(lance.dataset(copy), x, q, nprobes=max(1, p["partitions"] // 16))
            create[t] = {"ours_s": median(tt["ours"]), "theirs_s": median(tt["theirs"]), "ratio": median(tt["ours"]) / median(tt["theirs"]), "recall": rec, "all": tt}
        results["create"] = create
    finally:
        shutil.rmtree(work, ignore_errors=True)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"build-{args.preset}-{stamp}.json").write_text(json.dumps(results, indent=2))
    lines = [f"# build benchmark, preset {args.preset} ({stamp})", "", f"{p}", "", f"machine: {results['machine']}, {results['cpus']} CPUs", ""]
    lines += ["## Build throughput per worker (same injected model)", "", "| kind | rows | lance-segmerge rows/s | pylance create_index_uncommitted rows/s | ratio (≥ 1.0) | peak RSS (MiB, < 1024) |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for t, b in results["build"].items():
        lines.append(f"| {t} | {b['rows']} | {b['ours_rows_per_s']:.0f} | {b['theirs_rows_per_s']:.0f} | {b['ratio']:.2f}× | {b['ours_peak_rss_mb']:.0f} |")
    tr = results["train"]
    lines += ["", "## IVF training (same sample rate and iterations)", "", "| lance-segmerge s | pylance train_ivf s | ratio (≤ 1.0) |", "| ---: | ---: | ---: |", f"| {tr['ours_s']:.2f} | {tr['theirs_s']:.2f} | {tr['ratio']:.2f} |"]
    lines += ["", "## create_index, 2 worker processes vs pylance create_index", "", "| kind | lance-segmerge s | pylance s | ratio (≤ 0.6) | recall@10 ours | recall@10 pylance |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for t, c in results["create"].items():
        lines.append(f"| {t} | {c['ours_s']:.2f} | {c['theirs_s']:.2f} | {c['ratio']:.2f} | {c['recall']['ours']:.3f} | {c['recall']['theirs']:.3f} |")
    text = "\n".join(lines) + "\n"
    (out / f"build-{args.preset}-{stamp}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
