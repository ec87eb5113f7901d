"""Full-text (INVERTED) index merges against pylance 14.0.2 (issue 27),
on the same data, in one run.

pylance writes a table of generated text (a Zipf-distributed vocabulary of
20,000 made-up words, documents of 5 to 80 words) with an INVERTED index
and ``--deltas`` appends, each indexed by
``optimize_indices(num_indices_to_merge=0)``. Then, each on a fresh copy,
in fresh processes (bench_btree's harness):

* ``ours``: ``lance_segmerge.optimize`` of the index (one worker, in
  process, defaults: the plan puts an INVERTED index's segments in one
  task), commit included; its peak RSS;
* ``ours_flat``: the same with ``fan_in`` above the segment count (the
  same plan now: kept to show it);
* ``pylance``: ``optimize_indices(num_indices_to_merge=<all>)``;
* ``floor``: the same input bytes read and written once in user space.

Both merged tables then answer the same full-text queries: the top 100
rows and their BM25 scores are compared. Usage::

    PYTHONPATH=python .venv/bin/python bench/bench_fts.py --preset default

Writes ``bench/results/fts-<preset>-<time>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_btree import contend  # noqa: E402  (one harness for the scalar benchmarks)

PRESETS = {
    "smoke": {"docs": 20_000, "deltas": 20, "repeats": 1},
    "medium": {"docs": 200_000, "deltas": 100, "repeats": 2},
    "default": {"docs": 1_000_000, "deltas": 200, "repeats": 2},
    "large": {"docs": 3_000_000, "deltas": 200, "repeats": 1},  # memory stays bounded as the corpus grows
}
INDEX = "text_idx"
QUERIES = ["w12", "w3 w77", "w1500 w2", "w19999", "w5 w6 w7 w8", "w40 w41"]


def _vocabulary(n: int = 20_000) -> list[str]:
    """Made-up words, w<i> spelled as syllables so the analyzer keeps them
    whole (no digits, no stop words), with query names w<i> mapped below."""
    syl = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "du", "zo", "fi", "gu", "ha", "je", "xo"]
    out = []
    for i in range(n):
        w, x = "", i + 1
        while x:
            w, x = syl[x % 16] + w, x // 16
        out.append(w + "q")
    return out


VOCAB = _vocabulary()


def _query(q: str) -> str:
    return " ".join(VOCAB[int(w[1:])] for w in q.split())


def text_tables(docs: int, parts: int) -> Any:
    """``parts`` tables of ``docs // parts`` generated documents each
    (ids running on), the same for every caller."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    vocab = np.array(VOCAB)
    p = 1.0 / np.arange(1, len(VOCAB) + 1) ** 1.07
    p /= p.sum()
    per = docs // parts
    for i in range(parts):
        lens = rng.integers(5, 81, per)
        words = vocab[rng.choice(len(VOCAB), int(lens.sum()), p=p)]
        cuts = np.cumsum(lens)[:-1]
        text = [" ".join(ws) for ws in np.split(words, cuts)]
        yield pa.table({"id": np.arange(per * i, per * (i + 1)), "text": text})


def _build(uri: str, docs: int, deltas: int) -> None:
    import lance

    for i, t in enumerate(text_tables(docs, deltas + 1)):
        ds = lance.write_dataset(t, uri, mode="append" if i else "create")
        if i == 0:
            ds.create_scalar_index("text", "INVERTED")
        else:
            ds.optimize.optimize_indices(index_names=[INDEX], num_indices_to_merge=0)


def _index_files(uri: str) -> list[str]:
    import lance

    ds = lance.dataset(uri)
    out = []
    for ix in ds.describe_indices():
        if ix.name == INDEX:
            for s in ix.segments:
                d = os.path.join(uri, "_indices", str(s.uuid))
                out += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    return out


def _answers(uri: str) -> list[list[tuple[int, float]]]:
    import lance

    ds = lance.dataset(uri)
    out = []
    for q in QUERIES:
        t = ds.to_table(full_text_query=_query(q), columns=["id", "_score"], limit=100)
        out.append(sorted(zip(t["id"].to_pylist(), t["_score"].to_pylist()), key=lambda x: (-x[1], x[0])))
    return out


def _same(a: list, b: list) -> bool:
    """Equal scores (float tolerance) and equal rows above the lowest
    score kept (ties at the cut are broken arbitrarily)."""
    for x, y in zip(a, b):
        sx, sy = [s for _, s in x], [s for _, s in y]
        if len(sx) != len(sy) or any(abs(u - v) > 1e-5 * max(1.0, abs(v)) for u, v in zip(sx, sy)):
            return False
        cut = min(sx, default=0) * (1 + 1e-5)
        if {r for r, s in x if s > cut} != {r for r, s in y if s > cut}:
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--repeats", type=int, help="runs of each contender (default: the preset's)")
    ap.add_argument("--timeout", type=float, help="stop a contender's run after this many seconds (recorded as a lower bound)")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    if args.repeats:
        p["repeats"] = args.repeats
    import lance

    with tempfile.TemporaryDirectory(prefix="fts-") as tmp:
        src = os.path.join(tmp, "src")
        t0 = time.perf_counter()
        _build(src, p["docs"], p["deltas"])
        build_s = time.perf_counter() - t0
        files = _index_files(src)
        in_bytes = sum(os.path.getsize(f) for f in files)
        runs = contend(src, tmp, files, p["repeats"], args.timeout, kinds=("ours", "ours_flat", "pylance", "floor"),
                       n=p["deltas"] + 1, index=INDEX)
        before = _answers(src)
        ours = _answers(os.path.join(tmp, "ours0"))
        same = _same(ours, before)
        if not runs["pylance"][0].get("stopped"):
            same = same and _same(ours, _answers(os.path.join(tmp, "pylance0")))
        same = same and _same(_answers(os.path.join(tmp, "ours_flat0")), ours)
        after = {n: len(_index_files(os.path.join(tmp, f"{n}0"))) for n in ("ours", "ours_flat", "pylance")}
    best = {k: min(v, key=lambda x: x["seconds"]) for k, v in runs.items()}
    lines = [
        f"# INVERTED merge, preset `{args.preset}`",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, pylance {lance.__version__}; {p['docs']:,} documents of 5-80 words "
        f"(Zipf over 20,000 words) in a base and {p['deltas']} optimize deltas, {in_bytes / 2**20:.1f} MiB in "
        f"{len(files):,} index files; built in {build_s:.0f}s; best of {p['repeats']}.",
        "",
        "| run | seconds | ratio to pylance | ratio to floor | peak RSS (MiB) | index files after |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k in ("ours", "ours_flat", "pylance", "floor"):
        s = best[k]["seconds"]
        more = ">" if best[k].get("stopped") else ""
        lines.append(f"| {k} | {more}{s:.2f} | {s / best['pylance']['seconds']:.2f} | {s / best['floor']['seconds']:.2f} | "
                     f"{best[k]['rss_mib']:.0f} | {after.get(k, '-')} |")
    lines += ["", f"top-100 rows and BM25 scores identical on {len(QUERIES)} queries (ours and ours_flat against the deltas"
              f"{'' if best['pylance'].get('stopped') else ' and against pylance'}): {'yes' if same else 'NO'}."]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"fts-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"preset": p, "runs": runs, "same": same, "input_bytes": in_bytes,
                                                     "files_before": len(files), "files_after": after}, indent=1))
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
