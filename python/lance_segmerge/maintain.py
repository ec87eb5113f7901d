"""maintain: keep an index healthy while data keeps arriving.

One pass plans with a merge policy (tiered by default: only the merges
worth running now), merges and commits, on the run engine
(:func:`lance_segmerge.runs.execute_plan`). With ``watch``, passes repeat
as new versions appear, until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ._args import checked, policy_options
from ._health import DEFAULT_HEALTH_QUERIES, DEFAULT_HEALTH_SAMPLE_ROWS, _health
from ._display import human_bytes
from ._progress import OptimizeProgressArg
from .api import Dataset, DatasetLike, _list, _plan, _plan_options, as_dataset
from .errors import ConflictError, UnsupportedError
from .executors import Executor
from .reports import MaintainReport
from .runs import _resume_point, execute_plan
from .types import MergePlan

logger = logging.getLogger(__name__)

#: Names of Lance's own indices (the fragment reuse index, the MemWAL
#: index), which pylance writes and maintains: maintain_all passes over them.
SYSTEM_INDEX_PREFIX = "__lance_"

__all__ = ["maintain", "maintain_all", "MaintainReport"]


@dataclass(frozen=True)
class _Retrain:
    """maintain's retraining rule: ``mode`` (auto / never / always), the
    budget (rows), and reindex's arguments."""

    mode: str = "never"
    max_rows: Optional[int] = None
    reindex_kwargs: Mapping[str, Any] = field(default_factory=dict)


def _maybe_reindex(ds: Dataset, index_name: str, rule: _Retrain) -> dict[str, Any]:
    """Measure health (``auto``) and reindex when it says ``retrain`` (or
    always, with ``always``) and the table is within the budget; the
    MaintainReport fields of what happened."""
    if rule.mode == "never":
        return {}
    # numpy and pyarrow (training): only a retrain needs them.
    from .reindexing import REBUILDABLE, _extend, _reindex

    latest = ds.checkout()
    out: dict[str, Any] = {}
    if rule.mode == "auto":
        try:
            ext = _extend(latest, index_name, rule.reindex_kwargs.get("properties"))
        except UnsupportedError as exc:  # a dot-product model: health decides
            logger.info("%s: the model is not extended: %s", index_name, exc)
            ext = None
        except ConflictError as exc:  # a writer merged or replaced the deltas meanwhile
            logger.warning("%s: the model extension lost to a concurrent commit (%s); the pass merges without it",
                           index_name, exc)
            return out
        if ext is not None:
            out = {"partitions_added": ext.added, "residual_ratio": ext.residual_ratio}
            if not ext.capped:
                return out  # the new rows fit the model, or fit it now
            latest = latest.checkout()
        try:
            rep = _health(latest, index_name, {"sample_rows": DEFAULT_HEALTH_SAMPLE_ROWS, "queries": DEFAULT_HEALTH_QUERIES})
        except UnsupportedError as exc:  # a scalar index: no model to drift
            logger.info("%s: no drift to measure: %s", index_name, exc)
            return {}
        out = {**out, "health_verdict": rep.verdict, "health_reasons": rep.reasons}
        if not rep.needs_retrain:
            return out
        rows = rep.num_rows + rep.unindexed_rows
        if rule.max_rows is not None and rows > rule.max_rows:
            logger.warning("%s: health says retrain (%s) but the table's %d rows exceed retrain_max_rows=%d: not reindexed",
                           index_name, "; ".join(rep.reasons), rows, rule.max_rows)
            return out
        if rep.index_type not in REBUILDABLE:
            logger.warning("%s: health says retrain, but reindex does not rebuild %s indices yet", index_name, rep.index_type)
            return out
    logger.info("%s: reindexing (%s)", index_name, rule.mode if rule.mode == "always" else "health says retrain")
    _, stats = _reindex(latest, index_name, **rule.reindex_kwargs)
    return {**out, "reindexed": True, "reindex_seconds": stats.seconds, "reindex_version": stats.version}


def _maybe_index_new(ds: Dataset, index_name: str, run_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Index the rows no segment covers with one delta segment (maintain's
    ``index_new``); the MaintainReport fields of what happened. A build we
    cannot do, or a commit that loses to a writer, is a warning: the pass
    merges all the same."""
    from .reindexing import _index_new  # numpy and pyarrow: only builds need them

    try:
        _, rows = _index_new(ds.checkout(), index_name, "maintain-" + uuid.uuid4().hex[:24],
                             run_kwargs.get("properties"), run_kwargs.get("window_rows"), run_kwargs.get("memory_bytes"))
    except UnsupportedError as exc:
        logger.warning("%s: new rows not indexed: %s", index_name, exc)
        return {}
    except ConflictError as exc:
        logger.warning("%s: indexing the new rows lost to a concurrent commit (%s); the pass merges without it",
                       index_name, exc)
        return {}
    return {"indexed_rows": rows}


def _one_pass(
    ds: Dataset,
    index_name: str,
    plan_options: str,
    run_kwargs: Mapping[str, Any],
    resume: bool,
    max_conflicts: int,
    rule: _Retrain = _Retrain(),
    index_new: bool = False,
) -> MaintainReport:
    t0 = time.perf_counter()
    conflicts = 0
    indexed = _maybe_index_new(ds, index_name, run_kwargs) if index_new else {}
    retrained = _maybe_reindex(ds, index_name, rule)
    while True:
        latest = ds.checkout()

        def make_plan(d: Dataset) -> MergePlan:
            return _plan(d, index_name, plan_options)

        pinned, plan = _resume_point(latest, index_name, make_plan) if resume else (latest, make_plan(latest))
        before = len(_list(pinned, index_name, False))
        if plan.tasks:
            logger.info(
                "%s at version %d: %d segments; merging %d segments in %d tasks (%d rows, %s). %s",
                index_name, pinned.version, before, plan.num_segments, len(plan.tasks), plan.num_rows,
                human_bytes(plan.size_bytes), plan.summary,
            )
            for t in plan.tasks:
                logger.info("  task %d: %d segments, %d rows: %s", t.task_id, len(t.segments), t.rows, t.reason or "-")
        else:
            logger.info("%s at version %d: %d segments, nothing to merge. %s", index_name, pinned.version, before, plan.summary)
        try:
            res = execute_plan(pinned, plan, resume=resume, verb="maintain", **run_kwargs)
        except ConflictError as exc:
            conflicts += 1
            if conflicts > max_conflicts:
                raise
            logger.warning("%s: a concurrent commit invalidated this pass (%s); re-planning (%d/%d)",
                           index_name, exc, conflicts, max_conflicts)
            continue
        after = len(_list(res.dataset, index_name, False)) if res.committed and res.dataset is not None else before
        report = MaintainReport(
            dataset_uri=ds.display_uri,
            index_name=index_name,
            read_version=pinned.version,
            version=res.version,
            committed=res.committed,
            policy=plan.policy,
            segments_before=before,
            segments_after=after,
            tasks=res.tasks_run + res.tasks_reused,
            tasks_reused=res.tasks_reused,
            segments_merged=plan.num_segments,
            rows_read=res.rows_read,
            bytes_read=res.bytes_read,
            rows_written=res.rows_written,
            bytes_written=res.bytes_written,
            seconds=time.perf_counter() - t0,
            executor=res.executor,
            conflicts=conflicts,
            reasons=tuple(t.reason for t in plan.tasks),
            summary=plan.summary,
            **retrained,
            **indexed,
        )
        if report.committed:
            logger.info(
                "%s: committed version %d in %.1fs: %d -> %d segments; wrote %d rows, %s (%d tasks, %d reused; %s)",
                index_name, report.version, report.seconds, before, after, report.rows_written,
                human_bytes(report.bytes_written), report.tasks, report.tasks_reused, report.executor,
            )
        return report


class _Stop:
    """Turns SIGTERM into KeyboardInterrupt in the main thread while a
    watch loop runs, so that it stops as Ctrl-C does."""

    def __init__(self) -> None:
        self._old: Any = None
        self.installed = False

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGTERM, self._handle)
            self.installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc: Any) -> None:
        if self.installed:
            signal.signal(signal.SIGTERM, self._old)


@checked(converts=("dataset",))
def maintain(
    dataset: DatasetLike,
    index_name: str,
    *,
    policy: str = "tiered",
    segments_per_tier: Optional[int] = None,
    max_segment_rows: Optional[int] = None,
    floor_rows: Optional[int] = None,
    deletes_pct_allowed: Optional[float] = None,
    max_segments: Optional[int] = None,
    segments_per_task: int = 32,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    requantize_sq: bool = False,
    resume: bool = True,
    watch: Optional[float] = None,
    max_conflicts: int = 10,
    on_pass: Optional[Callable[[MaintainReport], None]] = None,
    progress: OptimizeProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    retrain: str = "never",
    retrain_max_rows: Optional[int] = None,
    index_new: bool = False,
    properties: Optional[dict[str, str]] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> MaintainReport:
    """Keep a vector index healthy while data keeps arriving.

    One pass: plan the latest version with ``policy`` (by default the
    tiered policy of :func:`plan_index_segment_merge`, which merges only
    what is worth merging now), merge, commit. Safe next to writers: appends
    committed meanwhile are rebased over, and a :class:`ConflictError` (a
    writer replaced a source segment, compacted covered fragments...) means
    re-plan, up to ``max_conflicts`` times. With ``resume=True`` (default) a
    pass keeps a run journal, so that the next pass after a crash reuses
    the merges that finished.

    With ``watch=seconds``, passes repeat: after each, the loop checks every
    ``watch`` seconds for a new version and passes again when one appears.
    Ctrl-C or SIGTERM stops it cleanly: a running merge is cancelled (its
    finished outputs are kept for the next run when ``resume``), nothing
    half-committed is left (a commit is one atomic manifest write).

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset; a pass always plans at the latest version.
    index_name : str
        The logical index.
    policy : {"tiered", "all"}, default "tiered"
        ``"all"`` merges every segment (as :func:`optimize`, into
        ``fan_in``-wide trees down to one segment).
    segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed, max_segments
        The tiered policy's options (see :func:`plan_index_segment_merge`);
        ``max_segments`` trades rewriting for query latency.
    segments_per_task : int, default 32
        Most segments one task merges.
    executor, max_workers, fan_in, requantize_sq, progress, window_rows, memory_bytes, hnsw_graph, verify
        As for :func:`optimize`; ``executor="auto"`` (default) picks in
        process or a process pool from the measured cost model.
    resume : bool, default True
        Keep a run journal (see :func:`run_plan`).
    watch : float, optional
        Seconds between checks for new versions; one pass when omitted.
    max_conflicts : int, default 10
        Re-plans after losing to concurrent writers before giving up.
    on_pass : callable, optional
        Receives each pass's :class:`MaintainReport` (on the caller's
        thread).
    retrain : {"never", "auto", "always"}, default "never"
        ``"auto"``: each pass first checks whether the model still fits
        the rows appended since the index's widest segment (their mean
        squared distance to their nearest centroid against the indexed
        rows', on a sample of 4,096 indexed rows and up to 16,384 new
        ones). When they lie more than 1.1x farther, centroids are trained where they went and appended
        to the model (IVF_FLAT, IVF_SQ, IVF_PQ, IVF_RQ; the codebook, SQ
        bounds and RQ rotation are kept), only the new rows are
        re-encoded, and the merge that follows joins them to the rest: the
        cost of a few thousand rows, not of a rebuild. When an extension
        would leave fewer than 64 rows per partition, or there are no new
        segments to compare, or the metric is dot, the pass measures
        :func:`lance_segmerge.health` instead and, when the verdict is
        ``retrain``, rebuilds the index with a model trained on today's
        data (:func:`lance_segmerge.reindex`, on ``executor``) before
        merging. ``"always"`` reindexes every pass.
    retrain_max_rows : int, optional
        The cost budget of a retrain: tables with more rows are not
        reindexed (a warning says that health asked for it).
    index_new : bool, default False
        Each pass first indexes the rows of fragments no segment covers,
        as pylance's ``optimize_indices(num_indices_to_merge=0)`` does:
        one delta segment built as the index's own (the index's model for
        IVF_*, pylance's build for IVF_HNSW_*, the index's parameters for
        scalar and full-text indices), committed before the merges. This
        also covers what pylance 14.0.2's own optimize fails on (a BTREE,
        BITMAP or ZONEMAP of a field inside a struct). Where we cannot
        build the index's type a warning says so and the pass merges.
    properties : dict of str to str, optional
        Key-values for every commit's transaction (see :func:`optimize`).
    storage_options : dict of str to str, optional
        With a URI, as pylance accepts them.

    Returns
    -------
    MaintainReport
        The report of the (last) pass.

    Raises
    ------
    InvalidInputError
        Bad policy numbers (negative, zero, a floor above the maximum...).
    ConflictError
        Concurrent writers won more than ``max_conflicts`` times in a row.
    """
    ds = as_dataset(dataset, storage_options)
    pol = policy_options(policy, segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed, max_segments)
    # policy="all" merges everything, in fan_in-wide trees (as optimize).
    plan_options = _plan_options(index_name, fan_in if policy == "all" else segments_per_task, requantize_sq=requantize_sq, policy=pol)
    run_kwargs: dict[str, Any] = {
        "executor": executor,
        "max_workers": max_workers,
        "fan_in": fan_in,
        "progress": progress,
        "window_rows": window_rows,
        "memory_bytes": memory_bytes,
        "hnsw_graph": hnsw_graph,
        "verify": verify,
        "properties": properties,
    }
    rule = _Retrain(retrain, retrain_max_rows, {
        "num_partitions": None, "sample_rate": 256, "max_iters": 50, "seed": None, "executor": executor,
        "max_workers": max_workers, "fragments_per_task": None, "fan_in": fan_in, "target_segments": 1,
        "catch_up": True, "resume": resume, "progress": progress, "window_rows": window_rows, "memory_bytes": memory_bytes,
        "properties": properties,
    })
    if watch is None:
        report = _one_pass(ds, index_name, plan_options, run_kwargs, resume, max_conflicts, rule, index_new)
        if on_pass is not None:
            on_pass(report)
        return report
    last: Optional[MaintainReport] = None
    with _Stop():
        try:
            while True:
                last = _one_pass(ds, index_name, plan_options, run_kwargs, resume, max_conflicts, rule, index_new)
                if on_pass is not None:
                    on_pass(last)
                seen = last.version
                logger.info("%s: watching for versions after %d (every %gs)", index_name, seen, watch)
                while ds.latest_version <= seen:
                    time.sleep(watch)
        except KeyboardInterrupt:
            logger.info("%s: stopped", index_name)
    if last is None:
        raise KeyboardInterrupt("maintain stopped before its first pass finished")
    return last


@checked(converts=("dataset",))
def maintain_all(
    dataset: DatasetLike,
    *,
    index_names: Optional[Sequence[str]] = None,
    policy: str = "tiered",
    segments_per_tier: Optional[int] = None,
    max_segment_rows: Optional[int] = None,
    floor_rows: Optional[int] = None,
    deletes_pct_allowed: Optional[float] = None,
    max_segments: Optional[int] = None,
    segments_per_task: int = 32,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    resume: bool = True,
    max_conflicts: int = 10,
    progress: OptimizeProgressArg = None,
    memory_bytes: Optional[int] = None,
    verify: bool = True,
    index_new: bool = False,
    properties: Optional[dict[str, str]] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> list[MaintainReport]:
    """One :func:`maintain` pass over every index of a table: vector,
    scalar (BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM) and
    full-text (INVERTED) alike.

    The indices are maintained one after the other, each planned at the
    latest version and committed on its own (a commit is one atomic
    manifest write per index, so an interrupted call leaves every index
    either as it was or merged).

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    index_names : list of str, optional
        The indices to maintain, in this order. By default every index of
        the latest version, in manifest order; those of a type merges do
        not handle (RTREE, JSON...) are then passed over, each with a
        warning naming it and its type, where naming one here raises
        :class:`UnsupportedError`. Lance's own indices (``__lance_*``, such
        as the fragment reuse index a compaction with
        ``defer_index_remap`` leaves) are passed over without one.
    policy, segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed, max_segments
        The merge policy (see :func:`maintain`); ``policy="all"`` brings
        each index to one segment.
    segments_per_task, executor, max_workers, fan_in, resume, max_conflicts, progress, verify, index_new, properties, storage_options
        As for :func:`maintain`.
    memory_bytes : int, optional
        What a full-text (INVERTED) merge holds of its posting lists at once
        (default 64 MiB; see :func:`merge_existing_index_segments`).

    Returns
    -------
    list of MaintainReport
        One per index maintained, in order.
    """
    ds = as_dataset(dataset, storage_options)
    names = list(index_names) if index_names is not None else ds.checkout().index_names
    reports = []
    for name in names:
        if index_names is None and name.startswith(SYSTEM_INDEX_PREFIX):
            logger.debug("%s: Lance's own index (pylance maintains it): passed over", name)
            continue
        try:
            rep = maintain(
                ds, name, policy=policy, segments_per_tier=segments_per_tier, max_segment_rows=max_segment_rows,
                floor_rows=floor_rows, deletes_pct_allowed=deletes_pct_allowed, max_segments=max_segments,
                segments_per_task=segments_per_task, executor=executor, max_workers=max_workers, fan_in=fan_in,
                resume=resume, max_conflicts=max_conflicts, progress=progress, memory_bytes=memory_bytes, verify=verify,
                index_new=index_new, properties=properties,
            )
        except UnsupportedError as exc:
            if index_names is not None:
                raise
            logger.warning("%s: passed over: %s", name, exc)
            continue
        reports.append(rep)
    return reports
