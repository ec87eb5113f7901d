"""Runs inside a release's environment: opens datasets and measures the
recall of their vector index against brute force over the dataset's own
vectors (numpy), with that release's query API (LanceDB's, in a LanceDB
environment).

Usage: python reader.py JOBS_JSON  (a list of {"uri", "metric", "kind"};
prints one JSON line per job: recall, or the error the release raised)
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

try:
    import lance
except ImportError:  # a LanceDB environment: its Lance is embedded
    lance = None

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


def opener(uri: str, metric: str, kind: str):
    """The table's rows and a query function, with this environment's API."""
    ef = {"ef": 100} if kind.startswith("IVF_HNSW") else {}
    if lance is not None:
        ds = lance.dataset(uri)

        def query(q: np.ndarray) -> list:
            nearest = {"column": "vec", "q": q, "k": K, "nprobes": 8, "metric": metric, **ef}
            return ds.to_table(nearest=nearest, columns=["id"]).column("id").to_pylist()

        return ds.to_table(columns=["id", "vec"]), query
    import lancedb

    parent, name = os.path.split(uri.rstrip("/"))
    tbl = lancedb.connect(parent).open_table(name.removesuffix(".lance"))

    def query(q: np.ndarray) -> list:
        s = tbl.search(q, vector_column_name="vec").distance_type(metric).nprobes(8).limit(K).select(["id"])
        if ef:
            s = s.ef(ef["ef"])
        return s.to_arrow().column("id").to_pylist()

    return tbl.to_arrow().select(["id", "vec"]), query


def recall(uri: str, metric: str, kind: str) -> dict:
    t, query = opener(uri, metric, kind)
    ids = t.column("id").to_numpy()
    data = np.stack(t.column("vec").to_numpy(zero_copy_only=False)).astype(np.float32)
    rng = np.random.default_rng(7)
    qs = data[rng.choice(len(data), QUERIES, replace=False)] + rng.normal(size=(QUERIES, data.shape[1])).astype(np.float32) * 0.1
    hits = 0
    for q in qs:
        truth = set(ids[brute(data, q, metric)].tolist())
        hits += len(truth & set(query(q)))
    return {"recall": hits / (K * QUERIES), "rows": len(ids)}


def main() -> None:
    for job in json.loads(sys.argv[1]):
        res = {"uri": job["uri"], "lance": getattr(lance, "__version__", "lancedb")}
        try:
            res.update(recall(job["uri"], job["metric"], job["kind"]))
        except BaseException as e:  # noqa: BLE001 - the release's refusal (or panic) is the answer
            if isinstance(e, KeyboardInterrupt):
                raise
            res["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
