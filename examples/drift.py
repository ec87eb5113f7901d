"""A real example of drift: an IVF_PQ index trained on last month's data,
then appends from a distribution that moved, each indexed by pylance with
``optimize_indices(num_indices_to_merge=0)`` (the model is never retrained).
``health`` names the drifted index, ``reindex`` retrains and swaps it, and
recall of the newest rows (against numpy brute force) comes back.

    PYTHONPATH=python .venv/bin/python examples/drift.py [DIR]
"""

from __future__ import annotations

import sys
import tempfile

import lance
import numpy as np
import pyarrow as pa

import lance_segmerge as ls

DIM, ROWS, APPENDS, APPEND_ROWS = 32, 8000, 4, 1500


def table(x: np.ndarray, start: int) -> pa.Table:
    return pa.table({"id": np.arange(start, start + len(x)), "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})


def recall_of_newest(ds: lance.LanceDataset, vecs: np.ndarray, nprobes: int = 4, k: int = 10) -> float:
    qs = vecs[-1000::20]
    hits = 0
    for q in qs:
        truth = set(np.argsort(((vecs - q) ** 2).sum(axis=1))[:k].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": nprobes}, columns=["id"])["id"]
        hits += len(truth & set(got.to_pylist()))
    return hits / (k * len(qs))


def main(root: str) -> None:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(16, DIM)).astype(np.float32) * 3
    def draw(n: int, shift: float) -> np.ndarray:
        return (centers[rng.integers(0, 16, n)] + shift + rng.normal(size=(n, DIM))).astype(np.float32)

    uri = f"{root}/events.lance"
    vecs = draw(ROWS, 0.0)
    ds = lance.write_dataset(table(vecs, 0), uri)
    ds.create_index("vec", "IVF_PQ", num_partitions=16, num_sub_vectors=8)
    for i in range(1, APPENDS + 1):
        x = draw(APPEND_ROWS, 1.5 * i)  # the data moves
        ds = lance.write_dataset(table(x, len(vecs)), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        vecs = np.concatenate([vecs, x])

    print(f"recall@10 of the newest rows at nprobes=4: {recall_of_newest(lance.dataset(uri), vecs):.3f}")
    print(ls.health(uri, "vec_idx").to_text())

    ds = ls.reindex(lance.dataset(uri), "vec_idx", progress=False, properties={"reason": "health said retrain"})
    print(f"\nreindexed: version {ds.version}; "
          f"recall@10 of the newest rows at nprobes=4: {recall_of_newest(ds, vecs):.3f}")
    print(ls.health(ds, "vec_idx").to_text())
    props = ds.read_transaction(ds.version).transaction_properties
    print("\nthe transaction pylance reads:", {k: v for k, v in sorted(props.items())})


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
