#!/usr/bin/env python3
"""The least write amplification any merge policy can have while keeping
at most N segments after each pass, for ingest_sim's schedule: a base of
``--base-rows``, then ``--passes`` passes each bringing ``--pass-rows`` new
rows (as deltas) that must be merged into something. Counted as ingest_sim
counts it: rows written by merges / rows ingested. An exact dynamic
program over which existing segments each pass merges with the new rows.

    python bench/ingest_bound.py                      # the default preset
    python bench/ingest_bound.py --base-rows 20000 --pass-rows 5000   # small
"""

from __future__ import annotations

import argparse
import itertools
from functools import lru_cache


def least_rewrites(passes: int, base: float, cap: int) -> float:
    """Rows rewritten per row ingested, minimised over every policy that
    leaves at most ``cap`` segments after each pass (sizes in pass units)."""

    @lru_cache(maxsize=None)
    def best(p: int, segs: tuple[float, ...]) -> float:
        if p == passes:
            return 0.0
        options = []
        for r in range(len(segs) + 1):
            for chosen in itertools.combinations(range(len(segs)), r):
                out = sum(segs[i] for i in chosen) + 1  # the merge writes these rows
                rest = [s for i, s in enumerate(segs) if i not in chosen]
                after = tuple(sorted(round(x, 9) for x in rest + [out]))
                if len(after) <= cap:
                    options.append(out + best(p + 1, after))
        return min(options)

    return best(0, (base,)) / passes


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--base-rows", type=int, default=100_000)
    ap.add_argument("--pass-rows", type=int, default=30_000)
    ap.add_argument("--max-cap", type=int, default=3)
    args = ap.parse_args()
    print("| segments after each pass (at most) | least rows rewritten / rows ingested |")
    print("| ---: | ---: |")
    for cap in range(1, args.max_cap + 1):
        print(f"| {cap} | {least_rewrites(args.passes, args.base_rows / args.pass_rows, cap):.2f} |")


if __name__ == "__main__":
    main()
