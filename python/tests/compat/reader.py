"""Runs inside a release's environment: opens datasets and measures the
recall of their vector index against brute force over the dataset's own
vectors (numpy), with that release's query API.

Usage: python reader.py JOBS_JSON  (a list of {"uri", "metric", "kind"};
prints one JSON line per job: recall, or the error the release raised)
"""

from __future__ import annotations

import json
import sys

import lance
import numpy as np

K = 10
QUERIES = 40


def brute(data: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    if metric == "cosine":
        d = 1 - (data @ q) / (np.linalg.norm(data, axis=1) * np.linalg.norm(q) + 1e-30)
    elif metric == "dot":
        d = -(data @ q)
    else:
        d = ((data - q) ** 2).sum(axis=1)
    return np.argsort(d, kind="stable")[:K]


def recall(uri: str, metric: str, kind: str) -> dict:
    ds = lance.dataset(uri)
    t = ds.to_table(columns=["id", "vec"])
    ids = t.column("id").to_numpy()
    data = np.stack(t.column("vec").to_numpy(zero_copy_only=False)).astype(np.float32)
    rng = np.random.default_rng(7)
    qs = data[rng.choice(len(data), QUERIES, replace=False)] + rng.normal(size=(QUERIES, data.shape[1])).astype(np.float32) * 0.1
    hits = 0
    for q in qs:
        truth = set(ids[brute(data, q, metric)].tolist())
        nearest = {"column": "vec", "q": q, "k": K, "nprobes": 8, "metric": metric}
        if kind.startswith("IVF_HNSW"):
            nearest["ef"] = 100
        got = ds.to_table(nearest=nearest, columns=["id"]).column("id").to_pylist()
        hits += len(truth & set(got))
    return {"recall": hits / (K * QUERIES), "rows": len(ids)}


def main() -> None:
    for job in json.loads(sys.argv[1]):
        res = {"uri": job["uri"], "lance": lance.__version__}
        try:
            res.update(recall(job["uri"], job["metric"], job["kind"]))
        except BaseException as e:  # noqa: BLE001 - the release's refusal (or panic) is the answer
            if isinstance(e, KeyboardInterrupt):
                raise
            res["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
