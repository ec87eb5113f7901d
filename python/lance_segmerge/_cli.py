"""Command line: ``python -m lance_segmerge`` / ``lance-segmerge``.

A thin argparse layer over the public API: ``ls``, ``plan``, ``optimize``
and ``cleanup`` (a dry run unless ``--delete``). Every error class has its
own exit code; Ctrl-C cancels the running operation and cleans up.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import Any, Optional, Sequence

from . import errors
from .api import Dataset, cleanup, plan_index_segment_merge
from .distributed import optimize

EXIT_CODES: dict[type[errors.SegmergeError], int] = {
    errors.InvalidInputError: 3,
    errors.NotFoundError: 4,
    errors.CorruptError: 5,
    errors.ConflictError: 6,
    errors.UnsupportedError: 7,
    errors.StorageError: 8,
    errors.CancelledError: 130,
    errors.InternalError: 1,
}


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 10m, 1h, 2d)")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def _human(n: Optional[int]) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _frags(ids: Sequence[int]) -> str:
    text = ",".join(map(str, ids[:8]))
    return text + (f",… ({len(ids)})" if len(ids) > 8 else "")


def _storage_options(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key.strip(), value


def _open(args: argparse.Namespace, version: Optional[int] = None) -> Dataset:
    return Dataset(args.uri, version, dict(args.storage_option) or None)


def cmd_ls(args: argparse.Namespace) -> int:
    ds = _open(args, args.version)
    segs = ds.list_index_segments(args.index)
    if args.json:
        print(json.dumps([s.to_dict() for s in segs], indent=2))
        return 0
    print(f"{ds.uri} version {ds.version} ({ds.manifest_scheme} names, storage {ds.data_storage_version})")
    rows = [("index", "uuid", "type", "fragments", "rows", "parts", "layout", "size", "ver")]
    for s in segs:
        flag = s.pq_transposed if s.pq_transposed is not None else s.rq_packed
        layout = {True: "query", False: "row-major", None: "-"}[flag]
        rows.append(
            (s.name, s.uuid, s.index_type or "?", _frags(s.fragment_ids), str(s.num_rows if s.num_rows is not None else "-"),
             str(s.num_partitions or "-"), layout, _human(s.size_bytes), str(s.dataset_version))
        )
    print(_table(rows))
    print(f"{len(segs)} segments")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    ds = _open(args, args.version)
    plan = plan_index_segment_merge(
        ds, args.index, args.segments_per_task, args.max_segments, target_rows_per_task=args.target_rows
    )
    if args.json:
        print(plan.to_json())
        return 0
    print(f"plan {plan.plan_id}: {plan.index_name} ({plan.index_type}) at version {plan.read_version}")
    rows = [("task", "segments", "rows", "size")]
    for t in plan.tasks:
        rows.append((str(t.task_id), str(len(t.segments)), str(t.rows), _human(t.bytes)))
    print(_table(rows))
    print(f"{len(plan.tasks)} tasks over {plan.num_segments} segments; {len(plan.untouched)} left untouched")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    ds = _open(args)
    before = len(ds.list_index_segments(args.index, with_stats=False))
    version = optimize(
        ds,
        args.index,
        executor=args.executor,
        max_workers=args.workers,
        fan_in=args.fan_in,
        target_segments=args.target_segments,
        max_segments_to_merge=args.max_segments,
        progress=not args.no_progress,
        hnsw_graph=args.hnsw_graph,
    )
    after = len(_open(args).list_index_segments(args.index, with_stats=False))
    print(f"{args.index}: {before} segments -> {after}, version {ds.version} -> {version}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    orphans: list[dict[str, Any]] = cleanup(_open(args), args.older_than, dry_run=not args.delete)
    if not orphans:
        print("no orphaned segment directories")
        return 0
    rows = [("uuid", "files", "size", "modified", "removed")]
    for o in orphans:
        rows.append((o["uuid"], str(o["files"]), _human(o["bytes"]), str(o["modified"]), "yes" if o["removed"] else "no"))
    print(_table(rows))
    if not args.delete:
        print(f"{len(orphans)} orphaned segment directories (dry run; pass --delete to remove them)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lance-segmerge", description="Plan, merge and commit Lance vector index segments.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True)
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "-o",
        "--storage-option",
        type=_storage_options,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a storage option, as pylance takes them (repeatable; e.g. -o aws_region=eu-west-1)",
    )

    ls_ = sub.add_parser("ls", parents=[store], help="list the segments of vector indices")
    ls_.add_argument("uri")
    ls_.add_argument("--index", help="one index (default: every vector index)")
    ls_.add_argument("--version", type=int, help="dataset version (default: latest)")
    ls_.add_argument("--json", action="store_true", help="print JSON")
    ls_.set_defaults(fn=cmd_ls)

    pl = sub.add_parser("plan", parents=[store], help="plan a merge of an index's segments")
    pl.add_argument("uri")
    pl.add_argument("--index", required=True)
    pl.add_argument("--version", type=int)
    pl.add_argument("--segments-per-task", type=int, default=32)
    pl.add_argument("--max-segments", type=int, help="merge only the newest N segments")
    pl.add_argument("--target-rows", type=int, help="target rows per task")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.set_defaults(fn=cmd_plan)

    op = sub.add_parser("optimize", parents=[store], help="merge an index's segments and commit")
    op.add_argument("uri")
    op.add_argument("--index", required=True)
    op.add_argument("--executor", default="local", choices=["local", "processes", "ray", "dask"])
    op.add_argument("--workers", type=int, help="pool size")
    op.add_argument("--fan-in", type=int, default=32)
    op.add_argument("--target-segments", type=int, default=1, help="stop at this many segments (default 1)")
    op.add_argument("--max-segments", type=int, help="merge only the newest N segments")
    op.add_argument("--no-progress", action="store_true")
    op.add_argument("--hnsw-graph", default="reuse", choices=["reuse", "rebuild"],
                    help="IVF_HNSW_*: start each partition's graph from its largest input's (default) or rebuild it")
    op.set_defaults(fn=cmd_optimize)

    cl = sub.add_parser("cleanup", parents=[store], help="find (and with --delete remove) segment directories no version references")
    cl.add_argument("uri")
    cl.add_argument("--older-than", type=_duration, default=3600.0, help="grace period, e.g. 30m, 1h (default 1h)")
    cl.add_argument("--delete", action="store_true", help="remove them (default: dry run)")
    cl.set_defaults(fn=cmd_cleanup)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.fn(args))
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except errors.SegmergeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CODES.get(type(exc), 1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
