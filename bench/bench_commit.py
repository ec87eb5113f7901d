#!/usr/bin/env python3
"""What the commit's coverage check costs, against pylance's commit of the
same segments, in one run.

The commit reads the row ids of every new segment that no merge of ours
verified (pylance's create_index_uncommitted segments, for example) and
checks that each holds rows of every fragment it claims. This measures,
on the segment datasets of bench_merge.py (one row-major segment per
fragment, a shared model), every run in a fresh process:

* ``ours_commit_foreign``: our commit of every segment (row ids read, in
  parallel);
* ``ours_check_only``: that check on its own (the segments opened, their
  row ids read and counted), committing nothing;
* ``pylance_commit``: pylance's commit of the same segments (no check);
* ``ours_commit_verified``: our commit of merged segments covering the same
  rows (our merge verified them: nothing is read again), next to
  ``pylance_commit_merged``, pylance's commit of those same merged segments;
* ``rowid_floor``: the row-id bytes the check reads, as a plain read of that
  many bytes of the segments' files.

    python bench/bench_commit.py --preset smoke
    python bench/bench_commit.py --preset medium
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_merge as bm  # noqa: E402  (the datasets, the child runner, the copies)


def ours_commit(uri: str, seg_json: str, replaces: str = "") -> dict[str, Any]:
    setup = f"""
        import json, lance_segmerge as ls
        segs = [ls.IndexSegment.from_dict(d) for d in json.load(open({seg_json!r}))]
        replaces = json.load(open({replaces!r})) if {bool(replaces)!r} else None
        ds = ls.open({uri!r})
    """
    work = "ds.commit_existing_index_segments('vec_idx', 'vec', segs, replaces=replaces)"
    return bm.run_child(setup, work)


def ours_check_only(uri: str, seg_json: str) -> dict[str, Any]:
    """The coverage check alone (open every segment, read its row ids,
    check), as the commit runs it, committing nothing."""
    setup = f"""
        import json, lance_segmerge as ls
        from lance_segmerge import _ffi
        from lance_segmerge.api import segments_json as _segments_json
        segs = [ls.IndexSegment.from_dict(d) for d in json.load(open({seg_json!r}))]
    """
    work = f"_ffi.call('CheckCoverage', {uri!r}, '', 0, _segments_json(segs), 4)"
    return bm.run_child(setup, work)


def pylance_commit(uri: str, seg_json: str) -> dict[str, Any]:
    setup = f"""
        import json, lance, lance_segmerge as ls
        segs = [ls.IndexSegment.from_dict(d).to_lance_index() for d in json.load(open({seg_json!r}))]
        ds = lance.dataset({uri!r})
    """
    work = "ds.commit_existing_index_segments('vec_idx', 'vec', segs)"
    return bm.run_child(setup, work)


def rowid_floor(uri: str, uuids: list[str], rows: int) -> dict[str, Any]:
    """Reads 8 bytes per row from the segments' auxiliary files (the size of
    the row-id columns), in 2 MiB reads."""
    setup = f"""
        import os
        paths = [os.path.join({uri!r}, "_indices", u, "auxiliary.idx") for u in {uuids!r}]
        per = 8 * {rows} // len(paths)
        buf = bytearray(2 << 20)
    """
    work = """
        for p in paths:
            with open(p, "rb", buffering=0) as f:
                left = min(per, os.path.getsize(p))
                while left > 0:
                    left -= f.readinto(memoryview(buf)[: min(left, len(buf))]) or left
    """
    return bm.run_child(setup, work)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small", choices=sorted(bm.PRESETS))
    ap.add_argument("--type", default="IVF_PQ")
    ap.add_argument("--repeats", type=int, help="override the preset's repeats")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    p = bm.PRESETS[args.preset]
    repeats = args.repeats or p.repeats
    work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-bench-commit-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t = args.type

    print(f"[{t}] building {p.fragments} segments over {p.rows} rows …", flush=True)
    seg = bm.build_segments(work, t, p)
    foreign = str(work / f"segments-{t}.json")
    # Merged segments over the same rows (ours, verified by the merge), in
    # a copy of the dataset where the per-fragment segments are committed.
    import lance_segmerge as ls

    merged_uri = bm.copy_dataset(seg["uri"], str(work / "merged-base"))
    segs = [ls.IndexSegment.from_dict(d) for d in json.load(open(foreign))]
    by = {s.uuid: s for s in segs}
    ls.commit_existing_index_segments(merged_uri, "vec_idx", "vec", segs)
    merged = [ls.merge_existing_index_segments(merged_uri, [by[u] for u in g], requantize_sq=t == "IVF_SQ") for g in seg["groups"]]
    merged_json, replaces_json = str(work / "merged.json"), str(work / "replaces.json")
    Path(merged_json).write_text(json.dumps([m.to_dict() for m in merged]))
    Path(replaces_json).write_text(json.dumps([s.uuid for s in segs]))

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in
                                              ("ours_commit_foreign", "ours_check_only", "pylance_commit", "ours_commit_verified",
                                               "pylance_commit_merged", "rowid_floor")}
    for r in range(repeats):
        order = ["ours", "pylance"] if r % 2 == 0 else ["pylance", "ours"]
        for who in order:
            if who == "ours":
                runs["ours_commit_foreign"].append(ours_commit(bm.copy_dataset(seg["uri"], str(work / "c")), foreign))
                runs["ours_check_only"].append(ours_check_only(seg["uri"], foreign))
                runs["ours_commit_verified"].append(
                    ours_commit(bm.copy_dataset(merged_uri, str(work / "c")), merged_json, replaces_json))
            else:
                runs["pylance_commit"].append(pylance_commit(bm.copy_dataset(seg["uri"], str(work / "c")), foreign))
                runs["pylance_commit_merged"].append(pylance_commit(bm.copy_dataset(merged_uri, str(work / "c")), merged_json))
        runs["rowid_floor"].append(rowid_floor(seg["uri"], [s.uuid for s in segs], seg["rows"]))
        print(f"[{t}] repeat {r + 1}/{repeats} done", flush=True)

    summary = {k: {"seconds": bm.median([x["seconds"] for x in v]), "runs": v} for k, v in runs.items()}
    res = {"preset": args.preset, "type": t, "config": asdict(p), "repeats": repeats, "machine": bm.machine(),
           "segments": len(segs), "merged_segments": len(merged), "rows": seg["rows"],
           "rowid_bytes": 8 * seg["rows"], "summary": summary}
    s = {k: v["seconds"] for k, v in summary.items()}
    m = res["machine"]
    lines = [f"# commit coverage check vs pylance {m['pylance']} — preset `{args.preset}`, {t}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB. Medians of {repeats} repeats, "
             f"every run in a fresh process (interpreter start-up and imports not timed).", "",
             f"{len(segs)} create_index_uncommitted segments over {seg['rows']} rows "
             f"({8 * seg['rows'] / 2**20:.1f} MiB of row ids); {len(merged)} merged segments over the same rows.", "",
             "| run | wall s |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.3f} |" for k, v in s.items()]
    lines += ["", "| ratio | value |", "| --- | ---: |",
              f"| ours (foreign, row ids checked) / pylance commit | {s['ours_commit_foreign'] / s['pylance_commit']:.2f} |",
              f"| ours (merged, verified) / pylance commit of the merged | {s['ours_commit_verified'] / s['pylance_commit_merged']:.2f} |",
              f"| check alone / ours commit (foreign) | {s['ours_check_only'] / s['ours_commit_foreign']:.2f} |",
              f"| check alone, s per million rows | {s['ours_check_only'] / seg['rows'] * 1e6:.3f} |",
              f"| check alone / row-id read floor | {s['ours_check_only'] / s['rowid_floor']:.1f} |", ""]
    md = "\n".join(lines)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = out_dir / f"commit-{args.preset}-{stamp}"
    base.with_suffix(".json").write_text(json.dumps(res, indent=2))
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md / .json")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
