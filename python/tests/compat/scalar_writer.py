"""Runs inside an older release's environment: writes a table with one
scalar index of each type that release builds (BTREE, BITMAP of strings and
of numbers, LABEL_LIST, ZONEMAP, NGRAM, INVERTED, and INVERTED with
positions), appends to it and optimizes with that release's own defaults,
and deletes rows. A second table holds a struct column with
a BTREE and a BITMAP on its members, a dictionary column, and one append
no index covers.

Usage: python scalar_writer.py OUT_DIR  (prints one JSON line: the uris and
the indices written)
"""

from __future__ import annotations

import json
import sys

import lance
import numpy as np
import pyarrow as pa

ROWS = 2000
INDICES = [("k", "BTREE"), ("c", "BITMAP"), ("b", "BITMAP"), ("tags", "LABEL_LIST"), ("z", "ZONEMAP"), ("c", "NGRAM"), ("c", "INVERTED"), ("t", "INVERTED")]
WORDS = ["alpha", "beta", "gamma", "delta", "lance", "index", "merge", "segment"]


def text(i: np.ndarray, rng: np.random.Generator) -> list[str]:
    """Phrases of 3-13 words; every 97th row is 1,101 words, where a word
    has more than 128 positions (format 1 packs positions 128 at a time)."""
    out = []
    for x in i:
        n = 1100 if x % 97 == 0 else 2 + int(x) % 11
        out.append(" ".join(rng.choice(WORDS, n).tolist() + [f"w{x % 13}"]))
    return out


def number_keys(rng: np.random.Generator) -> pa.Array:
    """int64 keys with nulls: releases up to 2.0.1 wrote a BITMAP's keys
    in hash order, numbers as well as strings."""
    return pa.array(rng.integers(0, 300, ROWS), mask=rng.random(ROWS) < 0.03)


def table(start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    i = np.arange(start, start + ROWS)
    return pa.table({
        "id": pa.array(i),
        "k": pa.array(rng.integers(-500, 500, ROWS)),
        "z": pa.array(rng.integers(-500, 500, ROWS), mask=rng.random(ROWS) < 0.05),
        "c": pa.array([f"c{x % 37}" for x in i]),
        "b": number_keys(rng),
        "tags": pa.array([[int(x % 5), int(x % 3)] for x in i], type=pa.list_(pa.int64())),
        "t": pa.array(text(i, rng)),
    })


#: indices of the second table, on members of its struct column
NESTED = [("s.x", "BTREE"), ("s.c", "BITMAP")]


def nested(start: int) -> pa.Table:
    """id, s: struct<x int64 (nulls), c string>, and d: a dictionary of
    strings (nulls), which no release indexes here."""
    i = np.arange(start, start + ROWS)
    x = pa.array([None if v % 11 == 0 else int(v % 100) for v in i], pa.int64())
    c = pa.array([f"c{v % 7}" for v in i])
    # one dictionary for every write: a release refuses an append whose
    # dictionary differs from the schema's
    d = pa.DictionaryArray.from_arrays(pa.array([None if v % 13 == 0 else int(v % 5) for v in i], pa.int32()),
                                       pa.array([f"d{k}" for k in range(5)]))
    return pa.table({"id": pa.array(i), "s": pa.StructArray.from_arrays([x, c], names=["x", "c"]), "d": d})


def main() -> None:
    uri = sys.argv[1] + "/t"
    ds = lance.write_dataset(table(0), uri)
    made = []
    for col, kind in INDICES:
        name = f"{col}_{kind.lower()}"
        kw = {"with_position": True} if col == "t" else {}
        try:
            ds.create_scalar_index(col, kind, name=name, **kw)
            made.append(name)
        except Exception:  # noqa: BLE001 - a type this release does not build
            pass
    for a in range(2):
        ds = lance.write_dataset(table(ROWS * (a + 1)), uri, mode="append")
        ds.optimize.optimize_indices()
    lance.dataset(uri).delete("id % 31 = 0")
    nested_uri = sys.argv[1] + "/n"
    nds = lance.write_dataset(nested(0), nested_uri)
    nested_made = []
    for col, kind in NESTED:
        name = f"{col.replace('.', '')}_{kind.lower()}"
        try:
            nds.create_scalar_index(col, kind, name=name)
            nested_made.append(name)
        except Exception:  # noqa: BLE001 - the release does not index a struct's member
            pass
    lance.write_dataset(nested(ROWS), nested_uri, mode="append")
    print(json.dumps({"uri": uri, "indices": made, "version": lance.__version__,
                      "nested_uri": nested_uri, "nested_indices": nested_made}))


if __name__ == "__main__":
    main()
