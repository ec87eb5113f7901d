"""Cost model of the build path (``cost_model.py --build``): what
``create_index`` costs at a billion rows, next to pylance's ``create_index``.

Measured on one dataset (128-d clustered vectors, the issue's 1024
partitions by default), each run in a fresh process:

* training: ``train_index_model`` against pylance's ``train_ivf`` +
  ``train_pq`` at the same sample rate and iterations (the sample is
  ``partitions × sample_rate`` rows whatever the dataset's size, so this is
  a constant of the model);
* building: ``build_index_segment`` against ``create_index_uncommitted``
  with the same injected model, over 1/4, 1/2 and all of the fragments:
  ``t = a + c·rows`` per contender (one process, all its cores);
* merging: ``merge_existing_index_segments`` of the built segments (one
  per fragment), over half and all of them: ``t = a + b·segments + c·rows``
  by the same two-point slopes.

Extrapolated to R rows (default 1e9) on clusters of N workers (each worker
a machine like this one): ``create_index`` trains on the driver, builds
2·N segments in parallel, merges them with ``optimize``'s tree (to one
segment, or to N with ``target_segments=N``), commits once; pylance builds
on one machine: training, then every row through the same per-row work
(its in-process shuffle and merge are not charged: a lower bound for
pylance).
"""

from __future__ import annotations

import json
import math
import pickle
import time
from pathlib import Path
from typing import Any

import bench_merge as bm


def slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den) if den else 0.0


def line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, c) of t = a + c·x, both non-negative."""
    c = slope(xs, ys)
    a = max(0.0, sum(y - c * x for x, y in zip(xs, ys)) / len(xs))
    return a, c


def make_data(work: Path, rows: int, frags: int, dim: int) -> str:
    import lance

    uri = str(work / f"data-{rows}-{dim}")
    if Path(uri).exists():
        return uri
    per = rows // frags
    for f in range(frags):
        lance.write_dataset(bm.table(bm.vectors(per, dim, seed=500 + f), f * per), uri, mode="append" if f else "create")
    return uri


def train_models(uri: str, work: Path, t: str, p: dict[str, Any]) -> str:
    """A pylance-trained model, pickled as an IndexModel (both contenders
    build with it) and as pylance's create_index_uncommitted kwargs."""
    import lance
    import numpy as np
    from lance.indices import IndicesBuilder

    from lance_segmerge.model import IndexModel

    ib = IndicesBuilder(lance.dataset(uri), "vec")
    ivf = ib.train_ivf(p["partitions"], sample_rate=p["sample_rate"], max_iters=p["iters"])
    kw: dict[str, Any] = {"num_partitions": p["partitions"], "ivf_centroids": ivf.centroids.flatten().to_numpy().reshape(p["partitions"], -1)}
    ours: dict[str, Any] = {}
    if t == "IVF_PQ":
        pq = ib.train_pq(ivf, p["sub_vectors"], sample_rate=p["sample_rate"], max_iters=p["iters"])
        cb = pq.codebook.flatten().to_numpy().reshape(-1, p["dim"])
        kw.update(num_sub_vectors=p["sub_vectors"], pq_codebook=cb.reshape(p["sub_vectors"], -1, p["dim"] // p["sub_vectors"]))
        ours.update(codebook=cb, num_sub_vectors=p["sub_vectors"])
    if t == "IVF_RQ":
        from lance.lance import indices as native

        rq = native.build_rq_model(p["dim"])
        kw["rabitq_model"] = rq
        ours["rabitq_model"] = rq
    if t == "IVF_SQ":
        x = bm.vectors(10000, p["dim"], seed=500)
        ours["sq_bounds"] = (float(x.min()) - 1, float(x.max()) + 1)
    model = IndexModel.from_arrays(t, "l2", np.asarray(kw["ivf_centroids"]), **ours)
    path = str(work / f"model-{t}.pkl")
    Path(path).write_bytes(pickle.dumps({"model": model, "kw": kw}))
    return path


def time_train(uri: str, t: str, p: dict[str, Any], who: str) -> float:
    if who == "ours":
        setup = "import lance_segmerge as ls; ls.kernel_version()"
        kw = f"num_sub_vectors={p['sub_vectors']}," if t == "IVF_PQ" else ""
        work = (f"ls.train_index_model({uri!r}, 'vec', {t!r}, num_partitions={p['partitions']}, {kw} "
                f"sample_rate={p['sample_rate']}, max_iters={p['iters']}, seed=1)")
    else:
        setup = f"import lance; from lance.indices import IndicesBuilder; ib = IndicesBuilder(lance.dataset({uri!r}), 'vec')"
        work = f"ivf = ib.train_ivf({p['partitions']}, sample_rate={p['sample_rate']}, max_iters={p['iters']})"
        if t == "IVF_PQ":
            work += f"\nib.train_pq(ivf, {p['sub_vectors']}, sample_rate={p['sample_rate']}, max_iters={p['iters']})"
    return float(bm.run_child(setup, work)["seconds"])


def time_build(uri: str, t: str, model: str, frags: list[int], who: str) -> float:
    setup = f"import pickle, lance, lance_segmerge as ls; ls.kernel_version(); m = pickle.load(open({model!r}, 'rb'))"
    if who == "ours":
        work = f"ls.build_index_segment({uri!r}, 'vec', {t!r}, {frags!r}, m['model'], name='b')"
    else:
        work = f"lance.dataset({uri!r}).create_index_uncommitted('vec', {t!r}, name='b', fragment_ids={frags!r}, **m['kw'])"
    return float(bm.run_child(setup, work)["seconds"])


def time_merge(uri: str, segs_json: str) -> float:
    setup = (f"import json, lance_segmerge as ls; from lance_segmerge.types import IndexSegment; ls.kernel_version(); "
             f"segs = [IndexSegment.from_dict(d) for d in json.load(open({segs_json!r}))]")
    work = f"ls.merge_existing_index_segments({uri!r}, segs)"
    return float(bm.run_child(setup, work)["seconds"])


def tree(model: tuple[float, float, float], segs: int, rows: float, workers: int, fan_in: int, target: int) -> tuple[float, int]:
    """optimize's tree over ``segs`` equal segments (cost_model.tree_time,
    for segments that are all the same size)."""
    a, b, c = model
    total, levels = a, 0
    while segs > target and segs > 1:
        n_tasks = max(target, math.ceil(segs / fan_in))
        per = max(2, math.ceil(segs / n_tasks))
        tasks = math.ceil(segs / per)
        total += (b * segs + c * rows) / min(workers, tasks)
        segs, levels = tasks, levels + 1
    return total, levels


def run(args: Any, out_dir: Path, work: Path) -> dict[str, Any]:
    import lance_segmerge as ls

    t = args.type if args.type != "IVF_RQ" or args.build_type_given else "IVF_PQ"
    quick = args.quick
    p = {"rows": 200_000 if quick else 1_000_000, "frags": 8, "dim": 128, "partitions": 256 if quick else 1024,
         "sub_vectors": 16, "sample_rate": 64 if quick else 256, "iters": 10 if quick else 50, "repeats": args.repeats}
    uri = make_data(work, p["rows"], p["frags"], p["dim"])
    per = p["rows"] // p["frags"]
    print(f"[build {t}] {p}", flush=True)
    model = train_models(uri, work, t, p)
    res: dict[str, Any] = {"type": t, "machine": bm.machine(), "params": p}
    train: dict[str, list[float]] = {"ours": [], "pylance": []}
    for r in range(p["repeats"]):
        for who in (("ours", "pylance") if r % 2 == 0 else ("pylance", "ours")):
            train[who].append(time_train(uri, t, p, who))
    res["train"] = {k: bm.median(v) for k, v in train.items()}
    print(f"  train {res['train']}", flush=True)
    sizes = [p["frags"] // 4, p["frags"] // 2, p["frags"]]
    builds: list[dict[str, Any]] = []
    for n in sizes:
        frags = list(range(n))
        m: dict[str, list[float]] = {"ours": [], "pylance": []}
        for r in range(p["repeats"]):
            for who in (("ours", "pylance") if r % 2 == 0 else ("pylance", "ours")):
                m[who].append(time_build(uri, t, model, frags, who))
        builds.append({"rows": n * per, **{k: bm.median(v) for k, v in m.items()}})
        print(f"  build {builds[-1]}", flush=True)
    res["builds"] = builds
    # segments to merge: one per fragment, ours
    import pickle as pk

    mdl = pk.loads(Path(model).read_bytes())["model"]
    segs = [ls.build_index_segment(uri, "vec", t, [f], mdl, name="m").to_dict() for f in range(p["frags"])]
    merges = []
    for n in (p["frags"] // 2, p["frags"]):
        sj = str(work / f"segs-{n}.json")
        Path(sj).write_text(json.dumps(segs[:n]))
        ts = [time_merge(uri, sj) for _ in range(p["repeats"])]
        merges.append({"segments": n, "rows": n * per, "seconds": bm.median(ts)})
        print(f"  merge {merges[-1]}", flush=True)
    res["merges"] = merges
    # end to end at this size, to check the model: 2 processes vs pylance
    e2e: dict[str, list[float]] = {"ours": [], "pylance": []}
    kw = f", num_sub_vectors={p['sub_vectors']}" if t == "IVF_PQ" else ""
    for r in range(p["repeats"]):
        for who in (("ours", "pylance") if r % 2 == 0 else ("pylance", "ours")):
            u = bm.copy_dataset(uri, str(work / f"e2e-{who}"))
            if who == "ours":
                e2e[who].append(float(bm.run_child("import lance_segmerge as ls; ls.kernel_version()",
                    f"ls.create_index({u!r}, 'vec', {t!r}, num_partitions={p['partitions']}{kw}, sample_rate={p['sample_rate']}, "
                    f"max_iters={p['iters']}, executor='processes', max_workers=2, progress=False)")["seconds"]))
            else:
                e2e[who].append(float(bm.run_child("import lance",
                    f"lance.dataset({u!r}).create_index('vec', {t!r}, name='vec_idx', num_partitions={p['partitions']}{kw}, "
                    f"sample_rate={p['sample_rate']}, max_iters={p['iters']})")["seconds"]))
    res["create_index"] = {k: bm.median(v) for k, v in e2e.items()}
    print(f"  create_index {res['create_index']}", flush=True)
    analyse(res, args.target_rows)
    return res


def analyse(res: dict[str, Any], R: float) -> None:
    b = res["builds"]
    xs = [float(x["rows"]) for x in b]
    ours = line(xs, [x["ours"] for x in b])
    theirs = line(xs, [x["pylance"] for x in b])
    mg = res["merges"]
    c_m = slope([float(x["rows"]) for x in mg], [x["seconds"] for x in mg])
    # b and c move together here (segments ∝ rows): charge the slope to rows, the rest to a.
    a_m = max(0.0, sum(x["seconds"] - c_m * x["rows"] for x in mg) / len(mg))
    merge = (a_m, 0.003, c_m)  # 3 ms per input segment: the merge cost model's b (cost_model.py)
    res["fit"] = {"build_ours": {"a_s": ours[0], "c_s_per_row": ours[1]},
                  "build_pylance": {"a_s": theirs[0], "c_s_per_row": theirs[1]},
                  "merge": {"a_s": merge[0], "b_s_per_segment": merge[1], "c_s_per_row": merge[2]}}
    tr = res["train"]
    pylance_s = tr["pylance"] + theirs[0] + theirs[1] * R
    rows_out = []
    for n in (1, 8, 32, 128):
        tasks = 2 * n
        build_s = math.ceil(tasks / n) * (ours[0] + ours[1] * R / tasks)
        one, lv1 = min(tree(merge, tasks, R, n, f, 1) for f in (2, 4, 8, 16, 32, 64, 256))
        many, lvn = min(tree(merge, tasks, R, n, f, n) for f in (2, 4, 8, 16, 32, 64, 256))
        rows_out.append({"workers": n, "train_s": tr["ours"], "build_s": build_s, "to_1_s": tr["ours"] + build_s + one,
                         "levels_1": lv1, "to_n_s": tr["ours"] + build_s + (many if n > 1 else one), "levels_n": lvn})
    res["extrapolation"] = {"rows": R, "pylance_s": pylance_s, "ours": rows_out}


def hms(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def markdown(res: dict[str, Any]) -> str:
    m, p = res["machine"], res["params"]
    f = res["fit"]
    lines = [f"# Cost model: the build path, {res['type']} (pylance {m['pylance']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB. {p['rows']} rows × {p['dim']}-d in {p['frags']} "
             f"fragments, {p['partitions']} partitions, sample rate {p['sample_rate']}, {p['iters']} iterations; medians of "
             f"{p['repeats']} runs, each in a fresh process; both builds use the same (pylance-trained) model.", "",
             "| step | lance-segmerge (s) | pylance (s) |", "| --- | ---: | ---: |",
             f"| training (`train_index_model` / `train_ivf`+`train_pq`) | {res['train']['ours']:.2f} | {res['train']['pylance']:.2f} |"]
    for b in res["builds"]:
        lines.append(f"| build over {b['rows']} rows (`build_index_segment` / `create_index_uncommitted`) | {b['ours']:.2f} | {b['pylance']:.2f} |")
    for x in res["merges"]:
        lines.append(f"| merge of {x['segments']} segments, {x['rows']} rows | {x['seconds']:.2f} | – |")
    ci = res["create_index"]
    lines.append(f"| `create_index`, 2 processes / pylance `create_index` | {ci['ours']:.2f} | {ci['pylance']:.2f} |")
    lines += ["", "Fits (per process, all its cores):", "",
              "| cost | a (s) | c (µs per row) | rows/s |", "| --- | ---: | ---: | ---: |"]
    for k in ("build_ours", "build_pylance", "merge"):
        c = f[k]["c_s_per_row"]
        lines.append(f"| {k} | {f[k]['a_s']:.2f} | {c * 1e6:.3f} | {(1 / c if c else float('inf')):.0f} |")
    e = res["extrapolation"]
    lines += ["", f"Extrapolated to {e['rows']:.0e} rows. pylance `create_index` on one machine like this one "
              f"(training, then every row through `create_index_uncommitted`'s per-row cost; its shuffle and merge not "
              f"charged): **{hms(e['pylance_s'])}**.", "",
              "| workers N | training (driver) | build level (2N tasks) | `create_index` → 1 segment (merge levels) | → N segments, `target_segments=N` (levels) |",
              "| ---: | ---: | ---: | ---: | ---: |"]
    for x in e["ours"]:
        lines.append(f"| {x['workers']} | {hms(x['train_s'])} | {hms(x['build_s'])} | {hms(x['to_1_s'])} ({x['levels_1']}) | "
                     f"{hms(x['to_n_s'])} ({x['levels_n']}) |")
    lines += ["", "Training is a constant: its sample is partitions × sample rate rows whatever the dataset's size. "
              "The build level scales with the workers; merging to one segment ends with a level that rewrites every "
              "row on one worker (c_merge·rows), which `target_segments=N` avoids (a query then searches N segments). "
              "Each worker is assumed to keep its single-process throughput (its own cores, its own share of storage "
              "bandwidth); spawning and the commit (one manifest write) are not charged.", ""]
    return "\n".join(lines)
