"""Command line: ``python -m lance_segmerge`` / ``lance-segmerge``.

A thin argparse layer over the public API: ``ls``, ``plan``, ``optimize``,
``maintain`` (one pass, or ``--watch``; ``--retrain auto``), ``health``
(an index's drift: exit code 11 when it says retrain), ``reindex``
(retrain and swap an index), ``cleanup`` (a dry run unless
``--delete``), ``verify`` (exit code 10 when damage is found) and
``repair`` (a dry run unless ``--apply``). Every error class has its
own exit code; Ctrl-C cancels the running operation and cleans up.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import traceback
from typing import Any, Callable, NoReturn, Optional, Sequence

from . import _ffi, demo, errors, plot
from ._display import compact_ids, human_bytes
from ._health import health
from ._version import __version__
from .api import Dataset, cleanup, plan_index_segment_merge
from .maintain import maintain, maintain_all
from .reports import MaintainReport
from .runs import optimize_with_report
from .verify import repair_index, verify_index

#: Exit codes: 0 success, 1 internal error (a bug), 2 bad command line
#: (argparse), then one per error class. Documented in the README.
EXIT_CODES: dict[type[errors.SegmergeError], int] = {
    errors.InvalidInputError: 3,
    errors.NotFoundError: 4,
    errors.CorruptError: 5,
    errors.ConflictError: 6,
    errors.UnsupportedError: 7,
    errors.StorageError: 8,
    errors.WorkerError: 9,
    errors.CancelledError: 130,
    errors.InternalError: 1,
}
EXIT_USAGE = 2
#: verify and repair: the index has damage (repair: left after it ran).
EXIT_DAMAGED = 10
#: health: the verdict is retrain.
EXIT_RETRAIN = 11


def exit_code(exc: BaseException) -> int:
    """The exit code of an exception (by class, so that subclasses, such as
    Ray's wrappers of a worker's error, map as their base)."""
    for cls, code in EXIT_CODES.items():
        if isinstance(exc, cls):
            return code
    return 1


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors on one line (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 10m, 1h, 2d)")
    return float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _storage_options(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    return key.strip(), value


def _open(args: argparse.Namespace, version: Optional[int] = None) -> Dataset:
    return Dataset(args.uri, version, dict(args.storage_option) or None)


def _write_plot(make: Callable[[], Any], path: str) -> int:
    """Draw a figure and write it to path (PNG, SVG, PDF by extension)."""
    try:
        fig = make()
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")
    return 0


def _plot_listing(kind: str, segs: Any, after: Any = None) -> Callable[[], Any]:
    if kind == "partitions":
        return lambda: plot.plot_partition_sizes(after if after is not None else segs)
    return lambda: plot.plot_segment_sizes(segs, after)


def cmd_ls(args: argparse.Namespace) -> int:
    ds = _open(args, args.version)
    segs = ds.list_index_segments(args.index)
    if args.plot:
        return _write_plot(_plot_listing(args.plot_kind, segs), args.plot)
    if args.json:
        print(json.dumps([s.to_dict() for s in segs], indent=2))
        return 0
    print(f"{ds.display_uri} version {ds.version} ({ds.manifest_scheme} names, storage {ds.data_storage_version})")
    rows = [("index", "uuid", "type", "fragments", "rows", "stale", "parts", "layout", "size", "ver")]
    for s in segs:
        flag = s.pq_transposed if s.pq_transposed is not None else s.rq_packed
        layout = {True: "query", False: "row-major", None: "-"}[flag]
        rows.append(
            (s.name, s.uuid, s.index_type or "?", compact_ids(s.fragment_ids), str(s.num_rows if s.num_rows is not None else "-"),
             str(s.stale_rows if s.stale_rows is not None else "-"),
             str(s.num_partitions or "-"), layout, human_bytes(s.size_bytes), str(s.dataset_version))
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
    if args.plot:
        fan_in = args.fan_in or args.segments_per_task
        return _write_plot(lambda: plot.plot_merge_tree(plan, fan_in=fan_in, target_segments=args.target_segments), args.plot)
    print(f"plan {plan.plan_id}: {plan.index_name} ({plan.index_type}) at version {plan.read_version}")
    rows = [("task", "segments", "rows", "size")]
    for t in plan.tasks:
        rows.append((str(t.task_id), str(len(t.segments)), str(t.rows), human_bytes(t.bytes)))
    print(_table(rows))
    print(f"{len(plan.tasks)} tasks over {plan.num_segments} segments; {len(plan.untouched)} left untouched")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    ds = _open(args)
    listed = ds.list_index_segments(args.index, with_stats=bool(args.plot))
    before = len(listed)
    report = optimize_with_report(
        ds,
        args.index,
        executor=args.executor,
        max_workers=args.workers,
        fan_in=args.fan_in,
        target_segments=args.target_segments,
        max_segments_to_merge=args.max_segments,
        progress=not args.no_progress,
        resume=args.resume,
        hnsw_graph=args.hnsw_graph,
        verify=not args.no_verify,
    )
    version = report.version
    after_segs = _open(args, version).list_index_segments(args.index, with_stats=bool(args.plot))
    print(f"{args.index}: {before} segments -> {len(after_segs)}, version {ds.version} -> {version}")
    if args.plot:
        if args.plot_kind == "tree":
            return _write_plot(lambda: plot.plot_merge_tree(report), args.plot)
        return _write_plot(_plot_listing(args.plot_kind, listed, after_segs), args.plot)
    return 0


def _params(pairs: list[str]) -> Optional[dict[str, Any]]:
    """KEY=JSON pairs as a dict (a bare word is a string)."""
    if not pairs:
        return None
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, val = pair.partition("=")
        if not sep:
            raise errors.InvalidInputError(f"--param {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(val)
        except ValueError:
            out[key] = val
    return out


def cmd_build(args: argparse.Namespace) -> int:
    from .build import create_index  # numpy and pyarrow (the lance extra): only the build path needs them

    ds = _open(args)
    out = create_index(
        ds,
        args.column,
        args.index_type,
        name=args.name,
        metric=args.metric,
        num_partitions=args.num_partitions,
        num_sub_vectors=args.num_sub_vectors,
        num_bits=args.num_bits,
        sample_rate=args.sample_rate,
        max_iters=args.max_iters,
        seed=args.seed,
        executor=args.executor,
        max_workers=args.workers,
        fragments_per_task=args.fragments_per_task,
        fan_in=args.fan_in,
        progress=not args.no_progress,
        params=_params(args.param),
    )
    print(f"{args.name or args.column + '_idx'}: {args.index_type} on {args.column}, version {ds.version} -> {out.version}")
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    if args.verbose == 0:  # a person follows what each pass does
        logging.getLogger("lance_segmerge").setLevel(logging.INFO)

    def show(r: MaintainReport) -> None:
        what = f"version {r.read_version} -> {r.version}" if r.committed else f"version {r.version}, nothing to merge"
        print(
            f"{r.index_name}: {what}; segments {r.segments_before} -> {r.segments_after}; "
            f"{r.tasks} tasks ({r.tasks_reused} reused), {r.rows_written} rows, {human_bytes(r.bytes_written)} written "
            f"in {r.seconds:.1f}s [{r.executor}]" + (f"; {r.indexed_rows} new rows indexed" if r.indexed_rows else ""),
            flush=True,
        )

    if args.index is None:  # one pass over every index of the table
        if args.watch is not None or args.retrain != "never":
            raise errors.InvalidInputError("--watch and --retrain maintain one index: name it with --index")
        for rep in maintain_all(
            _open(args), policy=args.policy, segments_per_tier=args.segments_per_tier, max_segment_rows=args.max_segment_rows,
            floor_rows=args.floor_rows, deletes_pct_allowed=args.deletes_pct_allowed, max_segments=args.max_segments,
            executor=args.executor, max_workers=args.workers, fan_in=args.fan_in, resume=not args.no_resume,
            index_new=args.index_new,
        ):
            show(rep)
        return 0
    maintain(
        _open(args),
        args.index,
        policy=args.policy,
        segments_per_tier=args.segments_per_tier,
        max_segment_rows=args.max_segment_rows,
        floor_rows=args.floor_rows,
        deletes_pct_allowed=args.deletes_pct_allowed,
        max_segments=args.max_segments,
        executor=args.executor,
        max_workers=args.workers,
        fan_in=args.fan_in,
        resume=not args.no_resume,
        watch=args.watch,
        on_pass=show,
        retrain=args.retrain,
        retrain_max_rows=args.retrain_max_rows,
        index_new=args.index_new,
    )
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    rep = health(_open(args, args.version), args.index, sample_rows=args.sample_rows, queries=args.queries, k=args.k,
                 nprobes=args.nprobes, seed=args.seed)
    print(json.dumps(rep.to_dict(), indent=2) if args.json else rep.to_text())
    return EXIT_RETRAIN if rep.needs_retrain else 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from .reindexing import reindex  # numpy and pyarrow (training): only the build path needs them

    ds = _open(args)
    before = len(ds.list_index_segments(args.index, with_stats=False))
    out = reindex(ds, args.index, num_partitions=args.num_partitions, seed=args.seed, executor=args.executor,
                  max_workers=args.workers, fragments_per_task=args.fragments_per_task, fan_in=args.fan_in,
                  catch_up=not args.no_catch_up, resume=not args.no_resume, progress=not args.no_progress)
    after = len(out.list_index_segments(args.index, with_stats=False))
    print(f"{args.index}: retrained and rebuilt; version {ds.version} -> {out.version}; segments {before} -> {after}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    orphans: list[dict[str, Any]] = cleanup(_open(args), args.older_than, dry_run=not args.delete)
    if not orphans:
        print("no orphaned segment directories")
        return 0
    rows = [("uuid", "files", "size", "modified", "removed", "why")]
    for o in orphans:
        rows.append(
            (o["uuid"], str(o["files"]), human_bytes(o["bytes"]), str(o["modified"]), "yes" if o["removed"] else "no",
             o.get("reason") or "unreferenced")
        )
    print(_table(rows))
    if not args.delete:
        print(f"{len(orphans)} orphaned segment directories (dry run; pass --delete to remove them)")
    return 0


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3f}"


def _print_verdicts(report: Any) -> None:
    rows = [("segment", "type", "rows", "verdict", "damage", "codes mismatch", "recall", "fresh recall")]
    for s in report.segments:
        num = _num
        rows.append((s.uuid, s.index_type or "?", str(s.num_rows), s.verdict, ",".join(s.damage) or "-",
                     num(s.codes_mismatch), num(s.recall), num(s.fresh_recall)))
    print(_table(rows))
    for s in report.segments:
        if s.verdict == "clean":
            continue
        print(f"{s.uuid}: {s.verdict}")
        for c in s.checks:
            if c.verdict != "ok":
                print(f"  {c.name}: {c.verdict}{' (' + c.damage + ')' if c.damage else ''}: {c.message}")
        if s.advice:
            print(f"  advice: {s.advice}")


def cmd_verify(args: argparse.Namespace) -> int:
    ds = _open(args, args.version)
    report = verify_index(ds, args.index, sample_rows=args.sample_rows, queries=args.queries, k=args.k,
                          nprobes=args.nprobes, deep=args.deep, seed=args.seed, progress=not args.json and sys.stderr.isatty())
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"{report.dataset_uri} version {report.version}: index {report.index_name} ({report.index_type}, {report.metric}), "
              f"{len(report.segments)} segments, sample {report.sample_rows} rows, {report.queries} queries, k {report.k}, "
              f"nprobes {report.nprobes}{', deep' if report.deep else ''}")
        _print_verdicts(report)
        print(f"{len(report.damaged)} damaged ({len(report.rescuable)} rescuable by `repair --apply`) in {report.seconds:.1f}s")
    return EXIT_DAMAGED if report.damaged else 0


def cmd_repair(args: argparse.Namespace) -> int:
    ds = _open(args)
    rep = repair_index(ds, args.index, executor=args.executor, max_workers=args.workers, dry_run=not args.apply,
                       sample_rows=args.sample_rows)
    if args.json:
        print(json.dumps({k: v for k, v in rep.to_dict().items() if k != "report"}, indent=2))
    else:
        if rep.report is not None:
            _print_verdicts(rep.report)
        for a in rep.actions:
            if a.action == "rewrite":
                done = f" -> {a.new_uuid} ({a.verdict_after})" if a.new_uuid else " (dry run)"
                print(f"rewrite {a.uuid} ({', '.join(a.damage)}){done}")
            else:
                print(f"rebuild {a.uuid} ({', '.join(a.damage)}): {a.advice}")
        if rep.dry_run:
            print(f"dry run: {rep.rewritten} segments would be rewritten; pass --apply to rewrite and commit them")
        elif rep.committed:
            print(f"rewrote {rep.rewritten} segments; committed version {rep.version}")
        else:
            print("nothing to rewrite")
    left = rep.to_rebuild + (rep.rewritten if rep.dry_run else 0)
    return EXIT_DAMAGED if left else 0


class _VersionAction(argparse.Action):
    # The kernel is asked only when --version is given: building the parser
    # (for --help, say) does not load the native library.
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Optional[str] = None) -> NoReturn:
        print(f"lance-segmerge {__version__} (kernel {_ffi.call('Version')})")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lance-segmerge", description="Plan, merge and commit Lance vector index segments.",
                epilog="exit codes: 0 ok, 1 internal error, 2 bad command line, 3 invalid input, 4 not found, "
                       "5 corrupt data, 6 conflict (re-plan and retry), 7 unsupported, 8 storage error, "
                       "9 a worker died, 10 damage found (verify, repair), 11 retrain (health), 130 cancelled")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    p.add_argument("--version", action=_VersionAction, nargs=0, help="print the package's and the kernel's version and exit")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    store = _Parser(add_help=False)
    store.add_argument(
        "-o",
        "--storage-option",
        type=_storage_options,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a storage option, as pylance takes them (repeatable; e.g. -o aws_region=eu-west-1)",
    )

    ls_ = sub.add_parser("ls", parents=[store], help="list the segments of an index (default: every vector index)")
    ls_.add_argument("uri")
    ls_.add_argument("--index", help="one index (default: every vector index)")
    ls_.add_argument("--version", type=int, help="dataset version (default: latest)")
    ls_.add_argument("--json", action="store_true", help="print JSON")
    ls_.add_argument("--plot", metavar="FILE", help="write a picture instead (PNG, SVG or PDF; needs the plot extra)")
    ls_.add_argument("--plot-kind", choices=["sizes", "partitions"], default="sizes",
                     help="sizes: segment sizes (default); partitions: the IVF partition sizes of the index")
    ls_.set_defaults(fn=cmd_ls)

    pl = sub.add_parser("plan", parents=[store], help="plan a merge of an index's segments")
    pl.add_argument("uri")
    pl.add_argument("--index", required=True)
    pl.add_argument("--version", type=int)
    pl.add_argument("--segments-per-task", type=int, default=32)
    pl.add_argument("--max-segments", type=int, help="merge only the newest N segments")
    pl.add_argument("--target-rows", type=int, help="target rows per task")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.add_argument("--plot", metavar="FILE", help="write the merge tree optimize would run (PNG, SVG or PDF)")
    pl.add_argument("--fan-in", type=int, help="fan-in of the tree's later levels (default: --segments-per-task)")
    pl.add_argument("--target-segments", type=int, default=1, help="the tree stops at this many segments (default 1)")
    pl.set_defaults(fn=cmd_plan)

    op = sub.add_parser("optimize", parents=[store], help="merge an index's segments and commit")
    op.add_argument("uri")
    op.add_argument("--index", required=True)
    op.add_argument("--executor", default="auto", choices=["auto", "local", "processes", "ray", "dask"])
    op.add_argument("--workers", type=int, help="pool size")
    op.add_argument("--fan-in", type=int, default=32)
    op.add_argument("--target-segments", type=int, default=1, help="stop at this many segments (default 1)")
    op.add_argument("--max-segments", type=int, help="merge only the newest N segments")
    op.add_argument("--no-progress", action="store_true")
    op.add_argument("--resume", action="store_true", help="keep a run journal; resume an interrupted run")
    op.add_argument("--no-verify", action="store_true", help="commit without checking the merge outputs against the data first")
    op.add_argument("--hnsw-graph", default="reuse", choices=["reuse", "rebuild"],
                    help="IVF_HNSW_*: start each partition's graph from its largest input's (default) or rebuild it")
    op.add_argument("--plot", metavar="FILE", help="write a picture of the result (PNG, SVG or PDF)")
    op.add_argument("--plot-kind", choices=["sizes", "tree", "partitions"], default="sizes",
                    help="sizes: segment sizes before and after (default); tree: the merges run; partitions: IVF partition sizes")
    op.set_defaults(fn=cmd_optimize)

    bd = sub.add_parser("build", parents=[store], help="build an index's segments on workers, merge and commit it (vector: trained first)")
    bd.add_argument("uri")
    bd.add_argument("--column", required=True)
    bd.add_argument("--index-type", required=True, type=str.upper,
                    choices=["IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ", "BTREE", "BITMAP", "LABEL_LIST", "ZONEMAP", "BLOOMFILTER", "NGRAM",
                             "INVERTED", "FTS"])
    bd.add_argument("--param", action="append", default=[], metavar="KEY=JSON",
                    help="an INVERTED analyzer parameter as JSON or a bare word, e.g. with_position=true or base_tokenizer=whitespace (repeatable)")
    bd.add_argument("--name", help="index name (default: <column>_idx)")
    bd.add_argument("--metric", default="l2", choices=["l2", "cosine", "dot"])
    bd.add_argument("--num-partitions", type=int, help="IVF partitions (default: about sqrt(rows))")
    bd.add_argument("--num-sub-vectors", type=int, help="PQ sub-vectors (default: dimension/16)")
    bd.add_argument("--num-bits", type=int, help="PQ (4, 8), SQ (8) or RQ (1-9) bits")
    bd.add_argument("--sample-rate", type=int, default=256)
    bd.add_argument("--max-iters", type=int, default=50)
    bd.add_argument("--seed", type=int)
    bd.add_argument("--executor", default="local", choices=["local", "processes", "ray", "dask"])
    bd.add_argument("--workers", type=int, help="pool size")
    bd.add_argument("--fragments-per-task", type=int)
    bd.add_argument("--fan-in", type=int, default=32)
    bd.add_argument("--no-progress", action="store_true")
    bd.set_defaults(fn=cmd_build)

    mt = sub.add_parser("maintain", parents=[store], help="merge what the policy says is worth merging now; --watch to keep at it")
    mt.add_argument("uri")
    mt.add_argument("--index", help="the index to maintain (default: one pass over every index of the table)")
    mt.add_argument("--watch", type=_duration, help="check for new versions this often and pass again (e.g. 60, 5m)")
    mt.add_argument("--policy", default="tiered", choices=["tiered", "all"])
    mt.add_argument("--segments-per-tier", type=int)
    mt.add_argument("--max-segment-rows", type=int)
    mt.add_argument("--floor-rows", type=int)
    mt.add_argument("--deletes-pct-allowed", type=float)
    mt.add_argument("--max-segments", type=int, help="latency first: leave at most this many segments after each pass")
    mt.add_argument("--executor", default="auto", choices=["auto", "local", "processes", "ray", "dask"])
    mt.add_argument("--workers", type=int, help="pool size")
    mt.add_argument("--fan-in", type=int, default=32)
    mt.add_argument("--no-resume", action="store_true", help="keep no run journal")
    mt.add_argument("--retrain", default="never", choices=["never", "auto", "always"],
                    help="auto: measure drift each pass and reindex when health says retrain")
    mt.add_argument("--retrain-max-rows", type=int, help="never reindex tables with more rows than this")
    mt.add_argument("--index-new", action="store_true",
                    help="first index the rows no segment covers with one delta segment (as pylance's optimize_indices)")
    mt.set_defaults(fn=cmd_maintain)

    hl = sub.add_parser("health", parents=[store], help="measure an index's drift against today's data (exit code 11 when it says retrain)")
    hl.add_argument("uri")
    hl.add_argument("--index", required=True)
    hl.add_argument("--version", type=int, help="dataset version (default: latest)")
    hl.add_argument("--json", action="store_true", help="print the report as JSON")
    hl.add_argument("--sample-rows", type=int, default=20000, help="rows that stand for the table (default 20000)")
    hl.add_argument("--queries", type=int, default=128, help="queries per era (default 128)")
    hl.add_argument("--k", type=int, default=10)
    hl.add_argument("--nprobes", type=int, help="partitions per query (default 20)")
    hl.add_argument("--seed", type=int, default=0)
    hl.set_defaults(fn=cmd_health)

    ri = sub.add_parser("reindex", parents=[store], help="retrain an index's model on today's data, rebuild on workers and swap it in one commit")
    ri.add_argument("uri")
    ri.add_argument("--index", required=True)
    ri.add_argument("--num-partitions", type=int, help="partitions of the new model (default: the index's)")
    ri.add_argument("--seed", type=int)
    ri.add_argument("--executor", default="auto", choices=["auto", "local", "processes", "ray", "dask"])
    ri.add_argument("--workers", type=int, help="pool size")
    ri.add_argument("--fragments-per-task", type=int)
    ri.add_argument("--fan-in", type=int, default=32)
    ri.add_argument("--no-catch-up", action="store_true", help="leave rows appended during the rebuild unindexed")
    ri.add_argument("--no-resume", action="store_true", help="keep no run journal")
    ri.add_argument("--no-progress", action="store_true")
    ri.set_defaults(fn=cmd_reindex)

    vf = sub.add_parser("verify", parents=[store], help="check an index's segments against their data (exit code 10 when damage is found)")
    vf.add_argument("uri")
    vf.add_argument("--index", required=True)
    vf.add_argument("--version", type=int, help="dataset version (default: latest)")
    vf.add_argument("--deep", action="store_true", help="also check every row id against its fragment's rows")
    vf.add_argument("--json", action="store_true", help="print the report as JSON")
    vf.add_argument("--sample-rows", type=int, default=1024, help="rows per segment read back and re-encoded (default 1024)")
    vf.add_argument("--queries", type=int, default=64, help="queries per segment of the recall estimate; 0 skips it (default 64)")
    vf.add_argument("--k", type=int, default=10)
    vf.add_argument("--nprobes", type=int, help="partitions per query (default 20)")
    vf.add_argument("--seed", type=int, default=0)
    vf.set_defaults(fn=cmd_verify)

    rp = sub.add_parser("repair", parents=[store], help="rewrite segments whose damage is a layout error (a dry run unless --apply)")
    rp.add_argument("uri")
    rp.add_argument("--index", required=True)
    rp.add_argument("--apply", action="store_true", help="rewrite and commit (default: dry run)")
    rp.add_argument("--executor", default="local", choices=["local", "processes", "ray", "dask"])
    rp.add_argument("--workers", type=int, help="pool size")
    rp.add_argument("--sample-rows", type=int, default=1024)
    rp.add_argument("--json", action="store_true", help="print JSON")
    rp.set_defaults(fn=cmd_repair)

    dm = sub.add_parser("demo", help="build a dataset with many delta segments, merge it, compare with pylance "
                                     "(needs the lance extra; --small for a quick look)")
    demo.add_arguments(dm)
    dm.set_defaults(fn=demo.run)

    cl = sub.add_parser("cleanup", parents=[store], help="find (and with --delete remove) segment directories no version references")
    cl.add_argument("uri")
    cl.add_argument("--older-than", type=_duration, default=3600.0, help="grace period, e.g. 30m, 1h (default 1h)")
    cl.add_argument("--delete", action="store_true", help="remove them (default: dry run)")
    cl.set_defaults(fn=cmd_cleanup)
    return p


def _one_line(exc: BaseException) -> str:
    """An error message on one line (kernel messages may carry a stack)."""
    text = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:2000] + "…"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI. Every failure prints one line on stderr (the traceback
    too with -vv) and returns its exit code (EXIT_CODES)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.fn(args))
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's one place for every failure
        if args.verbose >= 2:
            traceback.print_exc()
        kind = "error" if isinstance(exc, errors.SegmergeError) and not isinstance(exc, errors.InternalError) else "internal error"
        if not isinstance(exc, errors.SegmergeError):
            exc = errors.InternalError(f"{type(exc).__name__}: {exc}")
        print(f"{kind}: {_one_line(exc)}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
