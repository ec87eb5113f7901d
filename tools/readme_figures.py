"""Draw the README's pictures (docs/images/*.png) from a fresh demo dataset.

    PYTHONPATH=python .venv/bin/python tools/readme_figures.py [--out docs/images]

Builds the demo's dataset (a base segment and 40 IVF_PQ deltas, see
lance_segmerge.demo), then draws the partition sizes and the merge tree
optimize(fan_in=8) will run, optimizes, and draws the segment sizes before
and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import lance_segmerge as ls
from lance_segmerge.demo import build


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "images"))
    ap.add_argument("--deltas", type=int, default=40)
    ap.add_argument("--dpi", type=int, default=80)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="segmerge-figures-")
    try:
        uri = os.path.join(tmp, "demo.lance")
        build(uri, deltas=args.deltas, base_rows=20_000, delta_rows=500, dim=64, index_type="IVF_PQ")
        ds = ls.open(uri)
        before = ds.list_index_segments("vec_idx")
        plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=8)
        figures = {
            "partition-sizes.png": ls.plot_partition_sizes(before),
            "merge-tree.png": ls.plot_merge_tree(plan, fan_in=8),
        }
        report = ls.optimize_with_report(ds, "vec_idx", fan_in=8, executor="processes", max_workers=2, progress=False)
        after = ls.open(uri).list_index_segments("vec_idx")
        figures["segment-sizes.png"] = ls.plot_segment_sizes(before, after)
        for name, fig in figures.items():
            path = os.path.join(args.out, name)
            fig.savefig(path, dpi=args.dpi)
            print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB)")
        print(repr(report))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
