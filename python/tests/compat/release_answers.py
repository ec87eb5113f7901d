"""Runs inside an older release's environment: answers filters or
full-text queries on a table as that release's pylance does.

Usage: python release_answers.py URI filters|fts:COLUMN QUERIES_JSON  (prints one
JSON line: each query's ids (with scores, rounded, for fts), or the type of
the error the release raised)
"""

from __future__ import annotations

import json
import sys

import lance


def main() -> None:
    uri, mode, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    ds = lance.dataset(uri)
    out: dict = {}
    for q in queries:
        try:
            if mode.startswith("fts:"):
                t = ds.to_table(full_text_query={"query": q, "columns": [mode[4:]]}, columns=["id"])
                out[q] = sorted([i, round(s, 4)] for i, s in zip(t["id"].to_pylist(), t["_score"].to_pylist()))
            else:
                out[q] = sorted(ds.to_table(filter=q, columns=["id"])["id"].to_pylist())
        except Exception as e:  # noqa: BLE001 - the release's answer is its error
            out[q] = type(e).__name__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
