"""optimize: plan, merge level by level as a tree on an executor, commit
once."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union, overload

from . import _ffi, _progress, _worker
from .api import (
    Dataset,
    DatasetLike,
    _at_version,
    as_dataset,
    commit_existing_index_segments,
    plan_index_segment_merge,
    plan_segments,
    remove_uncommitted,
)
from ._validate import _bool, _int, _opt_pos_int, _show
from ._validate import _progress as _check_progress
from ._costmodel import choose_executor
from ._journal import RunJournal, read_journal
from .errors import ConflictError, InternalError, InvalidInputError, SegmergeError, WorkerError
from .executors import Executor, resolve_executor
from .tree import OptimizeReport, TreeTask, segment_load, tree_record
from .types import IndexSegment, MergePlan, MergeTask

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import LanceDataset

logger = logging.getLogger(__name__)

__all__ = [
    "optimize",
    "optimize_with_report",
    "OptimizeProgress",
    "run_plan",
    "run_plan_with_report",
    "RunResult",
    "choose_executor",
]


@dataclass(frozen=True)
class OptimizeProgress:
    """Progress of :func:`optimize`, reported on the driver.

    Parameters
    ----------
    level : int
        Tree level being merged (1 = the planned segments).
    tasks_done, tasks_total : int
        Tasks finished and planned at this level.
    segments : int
        Segments this level reduces.
    """

    level: int
    tasks_done: int
    tasks_total: int
    segments: int


ProgressArg = Union[None, bool, Callable[[OptimizeProgress], None]]


class _Reporter:
    """Drives the callback, or one tqdm bar per tree level (a widget in
    notebooks: each level's bar stays, filled, when the next one starts)."""

    def __init__(self, progress: ProgressArg) -> None:
        self._cb: Optional[Callable[[OptimizeProgress], None]] = progress if callable(progress) else None
        self._bars = progress is True
        self._bar: Any = None
        self._level = 0

    def __call__(self, p: OptimizeProgress) -> None:
        if self._cb is not None:
            self._cb(p)
        if self._bars and p.level != self._level:
            self.close()
            self._level = p.level
            self._bar = _progress.new_bar(f"optimize level {p.level}", "task", p.tasks_total)
            self._bars = self._bar is not None
        if self._bar is not None:
            _progress.move_bar(self._bar, p.tasks_done, p.tasks_total, f"{p.segments} segments")
        logger.debug("level %d: %d/%d tasks", p.level, p.tasks_done, p.tasks_total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _run_level(
    ds: Dataset,
    tasks: tuple[MergeTask, ...],
    pool: Executor,
    level: int,
    report: _Reporter,
    created: list[str],
    options: dict[str, Any],
    records: Optional[list[TreeTask]] = None,
    journal: Optional[RunJournal] = None,
    stats: Optional["RunResult"] = None,
) -> list[IndexSegment]:
    results: list[Optional[IndexSegment]] = [None] * len(tasks)
    jobs = []
    todo: list[int] = []  # the tasks that run (the others reuse a journal's output)
    for i, t in enumerate(tasks):
        if journal is not None:
            seg = journal.reuse(level, t)
            if seg is not None:
                results[i] = seg
                created.append(seg.uuid)  # an intermediate output: removed after the commit
                continue
        out = str(uuid.uuid4())
        created.append(out)  # known before the worker starts: removable on failure
        if journal is not None:
            journal.planned(level, t, out)
        jobs.append({"dataset": ds, "task": t.to_dict(), "index_uuid": out, "level": level, **options})
        todo.append(i)
    if journal is not None:
        journal.flush()
    done = [len(tasks) - len(todo)]
    nseg = sum(len(t.segments) for t in tasks)
    report(OptimizeProgress(level, done[0], len(tasks), nseg))
    t0 = time.perf_counter()
    finished: dict[int, float] = {}

    def on_done(k: int) -> None:
        finished[todo[k]] = time.perf_counter() - t0
        done[0] += 1
        if journal is not None:
            journal.done(level, tasks[todo[k]], jobs[k]["index_uuid"])
        report(OptimizeProgress(level, done[0], len(tasks), nseg))

    if jobs:
        try:
            ran = pool.map(_worker.merge_task, jobs, on_done)
        except WorkerError as exc:
            which = "; ".join(
                f"task {tasks[todo[k]].task_id} of level {level} (output {jobs[k]['index_uuid']}, merging {len(tasks[todo[k]].segments)} segments: "
                f"{', '.join(s.uuid for s in tasks[todo[k]].segments[:4])}{', …' if len(tasks[todo[k]].segments) > 4 else ''})"
                for k in exc.items
                if 0 <= k < len(jobs)
            )
            raise WorkerError(f"{exc}: {which}" if which else str(exc), exc.items) from exc
        except SegmergeError:
            raise
        except Exception as exc:  # an executor's own failure (pickling, a lost cluster, ...)
            raise InternalError(f"level {level}: the executor failed: {type(exc).__name__}: {exc}") from exc
        for k, r in enumerate(ran):
            results[todo[k]] = IndexSegment.from_dict(r)
    outputs = [r for r in results if r is not None]
    if stats is not None:
        stats.tasks_run += len(jobs)
        stats.tasks_reused += len(tasks) - len(jobs)
        for i in todo:
            seg = results[i]
            assert seg is not None
            stats.rows_written += seg.num_rows or 0
            stats.bytes_written += seg.size_bytes
            stats.rows_read += tasks[i].rows
            stats.bytes_read += tasks[i].bytes
    if records is not None:
        for i, (t, seg) in enumerate(zip(tasks, outputs)):
            records.append(TreeTask(level, t.task_id, t.segment_ids, seg.uuid, seg.num_rows or 0, segment_load(seg), finished.get(i)))
    return outputs


@dataclass
class RunResult:
    """What one execution of a plan did (the driver's own counters)."""

    version: int
    committed: bool = False
    levels: int = 0
    tasks_run: int = 0
    tasks_reused: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    segments_after: int = 0
    seconds: float = 0.0
    executor: str = ""
    dataset: Optional[Dataset] = field(default=None, repr=False)  # at the committed version
    verify_seconds: float = 0.0


def _defer_large(
    tasks: tuple[MergeTask, ...], per_task: int, target_segments: int
) -> tuple[list[IndexSegment], list[IndexSegment]]:
    """Pick the segments of a level that is not the last one that should
    skip it: each row a level merges is rewritten, so a segment larger than
    an average task of the others (the base segment of an optimize, next to
    its deltas) is cheaper merged once, at a later level, than at every
    level on the way. Largest first, as long as at least two segments are
    left to merge and the level still leaves more than ``target_segments``
    (a skipped segment must meet a merge later). Returns (skipping, the
    rest in plan order)."""
    segs = [s for t in tasks for s in t.segments]
    rows = {s.uuid: s.num_rows or 0 for s in segs}
    rest_rows = sum(rows.values())
    carried: list[IndexSegment] = []
    for s in sorted(segs, key=lambda s: (-rows[s.uuid], s.uuid)):
        left = len(segs) - len(carried) - 1
        if left < 2:
            break
        left_tasks = -(-left // per_task)
        if len(carried) + 1 + left_tasks <= target_segments:
            break
        if rows[s.uuid] * left_tasks <= rest_rows - rows[s.uuid]:
            break  # no larger than an average task of the rest
        carried.append(s)
        rest_rows -= rows[s.uuid]
    skip = {s.uuid for s in carried}
    return carried, [s for s in segs if s.uuid not in skip]


def _check_tree_args(fan_in: Any, target_segments: Any) -> None:
    _int(fan_in, "fan_in", 2, 2**31 - 1)
    _int(target_segments, "target_segments", 1, 2**31 - 1)


def _tree_walk(
    tasks: tuple[MergeTask, ...],
    fan_in: int,
    target_segments: int,
    regroup: Callable[[list[IndexSegment], int], tuple[MergeTask, ...]],
    run_level: Callable[[int, tuple[MergeTask, ...]], list[IndexSegment]],
) -> tuple[list[IndexSegment], int]:
    """The shape of optimize's tree, shared by the run (``run_level``
    merges, ``regroup`` plans with the kernel) and its prediction
    (:func:`lance_segmerge.tree.merge_tree`: sizes only). Returns the final
    segments and the number of levels."""
    per_task = fan_in
    level = 1
    while True:
        carried: list[IndexSegment] = []
        if len(tasks) > target_segments:  # not the last level
            carried, rest = _defer_large(tasks, per_task, target_segments)
            if carried:
                regrouped = regroup(rest, per_task)
                if len(carried) + len(regrouped) > target_segments:  # they still meet a merge later
                    tasks = regrouped
                    logger.debug("level %d: %d large segments wait for a later level", level, len(carried))
                else:
                    carried = []
        outputs = carried + run_level(level, tasks)
        if len(outputs) <= target_segments:
            return outputs, level
        # As many tasks as the target asks for (or fan_in forces), each
        # merging an even share of the outputs.
        n_tasks = max(target_segments, -(-len(outputs) // fan_in))
        per_task = max(2, -(-len(outputs) // n_tasks))
        tasks = regroup(outputs, per_task)
        level += 1


def _executor_name(executor: Any) -> str:
    return executor if isinstance(executor, str) else type(executor).__name__


def _make_report(
    dataset: Dataset,
    plan: MergePlan,
    executor: Any,
    version: int,
    fan_in: int,
    target_segments: int,
    records: list[TreeTask],
    final: list[IndexSegment],
    level_seconds: list[float],
    seconds: float,
    commit_seconds: float,
) -> OptimizeReport:
    tree = tree_record(plan, fan_in, target_segments, records, final, estimated=False, level_seconds=level_seconds)
    before = dataset.index_segments.get(plan.index_name, plan.num_segments + len(plan.untouched))
    return OptimizeReport(
        dataset_uri=dataset.uri,
        index_name=plan.index_name,
        read_version=plan.read_version,
        version=version,
        executor=_executor_name(executor),
        segments_before=before,
        segments_after=before - plan.num_segments + len(final),
        rows=plan.num_rows,
        bytes_before=sum(tree.source_bytes),
        bytes_after=sum(segment_load(s) for s in final),
        seconds=seconds,
        commit_seconds=commit_seconds,
        tree=tree,
        plan=plan,
        outputs=tuple(final),
    )


@overload
def run_plan(
    dataset: Union[Dataset, str, "os.PathLike[str]"],
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    _planned_here: bool = False,
) -> Dataset: ...


@overload
def run_plan(
    dataset: "LanceDataset",
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    _planned_here: bool = False,
) -> "LanceDataset": ...


def run_plan(
    dataset: DatasetLike,
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    _planned_here: bool = False,
) -> Any:
    """Execute a plan as a tree and commit once.

    Level 1 merges the plan's tasks; each further level merges the previous
    level's outputs in groups of at most ``fan_in`` until at most
    ``target_segments`` are left, which are committed in place of every
    planned segment. A segment larger than an average task of the others
    (typically the base segment next to its deltas) skips the levels before
    the last, and the tasks of its level are regrouped without it, so that
    its rows are rewritten once rather than once per level. Intermediate
    outputs are removed after the commit. On any failure or interrupt,
    running work is cancelled, every output this call created is removed,
    and the dataset is left as it was.

    With ``target_segments = 1`` the last level is one task that rewrites
    every row on one worker; ``target_segments = N`` keeps every level
    parallel over N workers and leaves N segments over disjoint fragments.
    :func:`lance_segmerge.tree.merge_tree` predicts the tree without
    running it. A tiered plan (``plan.policy == "tiered"``) is run with
    ``target_segments = len(plan.tasks)``: each of its tasks is one merge.

    With ``resume=True`` the run keeps a journal in the dataset's index
    directory (see :mod:`lance_segmerge._journal`): a run of the same plan
    with the same parameters after a crash of the driver or a worker reuses
    every finished output that still verifies, and on failure the finished
    outputs are kept for the next run instead of removed.

    ``executor="auto"`` runs in process or on a process pool, whichever the
    measured cost model predicts is faster for this plan (see
    :func:`choose_executor`).

    Parameters
    ----------
    on_report : callable, optional
        Receives the :class:`~lance_segmerge.tree.OptimizeReport` of the
        run (the tree as executed, sizes, times) once it is committed.
    resume : bool, default False
        Keep a run journal and reuse a crashed run's finished outputs.
    verify : bool, default True
        Check every output before the commit: its files and structure, and
        a sample of its codes read back from the data and re-encoded (see
        :func:`lance_segmerge.verify_index`). An output that fails is never
        committed: :class:`CorruptError` names it.

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the new version, of the kind given (a
        ``lance.LanceDataset`` for one, else a :class:`Dataset`); at the
        plan's version when the plan has no tasks.
    """
    if not isinstance(plan, MergePlan):
        raise InvalidInputError(f"plan must be a MergePlan, got {_show(plan)}")
    given = dataset
    # A URI opens at the plan's version; a handle must be pinned to it.
    dataset = as_dataset(given, version=plan.read_version if isinstance(given, (str, os.PathLike)) else None)
    if dataset.version != plan.read_version:
        raise InvalidInputError(
            f"the plan was made at version {plan.read_version}, the dataset is pinned to {dataset.version}"
        )
    # A plan may have travelled: the kernel checks it against the dataset
    # (segments of its index, fragment bitmaps the dataset can have) before
    # any worker starts. Not one optimize made a moment ago from this
    # dataset at this version (_planned_here): the kernel built it from
    # the same manifest it would check it against.
    if plan.tasks and not _planned_here:
        _ffi.call("CheckPlan", dataset.uri, _ffi.options_json(dataset.storage_options), dataset.version, plan.to_json())
    _check_tree_args(fan_in, target_segments)
    _opt_pos_int(max_workers, "max_workers", 4096)
    _check_progress(progress)
    _bool(verify, "verify")
    if window_rows is not None:
        _int(window_rows, "window_rows", 1, 2**31 - 1)
    if hnsw_graph not in ("reuse", "rebuild"):
        raise InvalidInputError(f"hnsw_graph must be 'reuse' or 'rebuild', got {_show(hnsw_graph)}")
    result = _run_plan(
        dataset,
        plan,
        executor=executor,
        max_workers=max_workers,
        fan_in=fan_in,
        target_segments=target_segments,
        progress=progress,
        window_rows=window_rows,
        on_report=on_report,
        resume=resume,
        hnsw_graph=hnsw_graph,
        verify=verify,
    )
    return _at_version(given, dataset, result.version, result.dataset)


def _run_plan(
    dataset: Dataset,
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
) -> RunResult:
    """run_plan on a checked Dataset pinned to the plan's version, returning
    the run's counters (maintain reads them)."""
    if dataset.version != plan.read_version:
        raise InvalidInputError(
            f"the plan was made at version {plan.read_version}, the dataset is pinned to {dataset.version}"
        )
    result = RunResult(version=dataset.version)
    if not plan.tasks:
        if resume:
            RunJournal.drop_stale(dataset, plan.index_name)
        if on_report is not None:
            on_report(_make_report(dataset, plan, executor, dataset.version, fan_in, target_segments, [], [], [], 0.0, 0.0))
        return result
    if plan.policy == "tiered":
        target_segments = max(target_segments, len(plan.tasks))
    options: dict[str, Any] = {"requantize_sq": plan.requantize_sq, "hnsw_graph": hnsw_graph}
    if window_rows is not None:
        options["window_rows"] = window_rows
    if isinstance(executor, str) and executor == "auto":
        executor = choose_executor(plan, max_workers)
    result.executor = _executor_name(executor)
    journal: Optional[RunJournal] = None
    if resume:
        params = {"fan_in": fan_in, "target_segments": target_segments, "requantize_sq": plan.requantize_sq, "hnsw_graph": hnsw_graph}
        journal = RunJournal.start(dataset, plan, params)
    pool = resolve_executor(executor, max_workers)
    report = _Reporter(progress)
    created: list[str] = []
    records: list[TreeTask] = []
    level_seconds: list[float] = []
    committed = False
    final: list[IndexSegment] = []
    commit_seconds = 0.0
    t0 = time.perf_counter()

    def run_level(level: int, tasks: tuple[MergeTask, ...]) -> list[IndexSegment]:
        start = time.perf_counter()
        outputs = _run_level(dataset, tasks, pool, level, report, created, options, records, journal, result)
        level_seconds.append(time.perf_counter() - start)
        return outputs

    def regroup(segments: list[IndexSegment], per_task: int) -> tuple[MergeTask, ...]:
        return plan_segments(dataset, segments, per_task, requantize_sq=plan.requantize_sq).tasks

    try:
        outputs, result.levels = _tree_walk(plan.tasks, fan_in, target_segments, regroup, run_level)
        # A single-segment task whose input had nothing to drop comes back
        # unchanged: it neither replaces nor is replaced.
        unchanged = {s.uuid for s in outputs} & set(plan.sources)
        final = [s for s in outputs if s.uuid not in unchanged]
        replaces = [u for u in plan.sources if u not in unchanged]
        if final and verify:
            # Every output is checked before the commit (structure and a
            # sample of its codes against the data): one that fails is
            # never committed, and the run's outputs are removed.
            result.verify_seconds = _verify_outputs(dataset, final)
        if final:
            t_commit = time.perf_counter()
            result.dataset = commit_existing_index_segments(
                dataset, plan.index_name, plan.column, final, replaces=replaces
            )
            result.version = result.dataset.version
            committed = True
            commit_seconds = time.perf_counter() - t_commit
        result.committed = committed
        result.segments_after = len(final)
        result.seconds = time.perf_counter() - t0
        if journal is not None:
            journal.finish()
        logger.info(
            "optimize %s: %d segments -> %d in %d levels, version %d, %.1fs (%d tasks run, %d reused from the journal)",
            plan.index_name,
            plan.num_segments,
            len(final),
            result.levels,
            result.version,
            result.seconds,
            result.tasks_run,
            result.tasks_reused,
        )
    except ConflictError:
        pool.cancel()
        if journal is not None:  # this plan can never commit: nothing to resume
            journal.finish()
            journal = None
        raise
    except BaseException:
        pool.cancel()
        raise
    finally:
        report.close()
        pool.close()
        keep = {f.uuid for f in final} if committed else set()
        if journal is not None and not committed:
            # Keep what the journal records for the next run; outputs that
            # do not verify then are removed by it (or by cleanup).
            keep = set(created)
        leftovers = [u for u in created if u not in keep]
        try:
            if leftovers and not committed:
                # An output reused from a journal may have been committed
                # by the run that wrote it (killed before it could forget
                # its journal); it is not ours to remove.
                live = {s.uuid for s in dataset.checkout().list_index_segments(plan.index_name, with_stats=False)}
                leftovers = [u for u in leftovers if u not in live]
            remove_uncommitted(dataset, leftovers)
        except Exception as exc:  # the cleanup verb can finish the job
            logger.warning("could not remove %d uncommitted segments: %s", len(leftovers), exc)
    if on_report is not None:
        on_report(
            _make_report(
                dataset, plan, executor, result.version, fan_in, target_segments, records, final, level_seconds,
                time.perf_counter() - t0, commit_seconds,
            )
        )
    return result


def _verify_outputs(dataset: Dataset, outputs: list[IndexSegment]) -> float:
    """Check merge outputs before their commit (verify.check_outputs);
    CorruptError names those that fail. Returns the seconds it took."""
    from .verify import check_outputs, require_clean

    t0 = time.perf_counter()
    require_clean(check_outputs(dataset, outputs))
    return time.perf_counter() - t0


def run_plan_with_report(dataset: DatasetLike, plan: MergePlan, **kwargs: Any) -> OptimizeReport:
    """:func:`run_plan`, returning its :class:`~lance_segmerge.tree.OptimizeReport`
    (whose ``version`` is the committed version). Takes run_plan's
    keyword arguments."""
    box: list[OptimizeReport] = []
    run_plan(dataset, plan, on_report=box.append, **kwargs)
    return box[0]


def _resume_point(ds: Dataset, index_name: str, make_plan: Callable[[Dataset], MergePlan]) -> tuple[Dataset, MergePlan]:
    """Plan at the latest version, unless the index's journal is of a run
    planned at an earlier version that the same parameters plan the same
    way there: then resume that run (its commit rebases over what was
    committed since, or raises ConflictError if its sources were
    replaced)."""
    old, _ = read_journal(ds, index_name)
    if old is not None:
        v = int(old.get("read_version") or 0)
        if 0 < v < ds.version:
            try:
                pinned = ds.checkout(v)
                plan = make_plan(pinned)
            except SegmergeError as exc:
                logger.info("cannot resume the run planned at version %d: %s", v, exc)
            else:
                if plan.plan_id == old.get("plan_id"):
                    logger.info("resuming the run planned at version %d (latest is %d)", v, ds.version)
                    return pinned, plan
    return ds, make_plan(ds)


@overload
def optimize(
    dataset: Union[Dataset, str, "os.PathLike[str]"],
    index_name: str,
    *,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    max_segments_to_merge: Optional[int] = None,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = True,
    progress: ProgressArg = True,
    window_rows: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
) -> Dataset: ...


@overload
def optimize(
    dataset: "LanceDataset",
    index_name: str,
    *,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    max_segments_to_merge: Optional[int] = None,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = True,
    progress: ProgressArg = True,
    window_rows: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
) -> "LanceDataset": ...


def optimize(
    dataset: DatasetLike,
    index_name: str,
    *,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    max_segments_to_merge: Optional[int] = None,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = True,
    progress: ProgressArg = True,
    window_rows: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
) -> Any:
    """Merge the segments of a vector index into one, distributed, and
    commit once.

    Plans (:func:`plan_index_segment_merge` with ``segments_per_task =
    fan_in``), merges level by level as a tree on ``executor`` (each level's
    tasks are independent), and commits the result as one new version that
    replaces exactly the planned segments.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset (a URI opens its latest version; a handle is used at its
        version).
    index_name : str
        The logical index.
    executor : {"auto", "local", "processes", "ray", "dask"} or concurrent.futures.Executor
        Where merges run. ``"local"`` uses threads (the kernel releases the
        GIL), ``"processes"`` a spawn-started process pool; Ray and Dask are
        optional extras and use a running cluster or start a local one.
        ``"auto"`` (the default) runs locally unless the measured cost
        model predicts that a process pool pays for its start-up (see
        :func:`choose_executor`).
    max_workers : int, optional
        Size of pools this call creates.
    fan_in : int, default 32
        Segments merged per task at every level.
    target_segments : int, default 1
        Stop merging at this many segments (over disjoint fragments). One
        segment makes the last level a single task that rewrites every row;
        as many as there are workers keeps the whole tree parallel.
    max_segments_to_merge : int, optional
        Merge only the newest N segments; leave the rest untouched.
    target_rows_per_task : int, optional
        More, smaller first-level tasks.
    requantize_sq : bool, default True
        Merge IVF_SQ segments with different bounds by re-quantizing them to
        the union of the bounds (logged at INFO); ``False`` refuses them.
    progress : bool or callable, default True
        A tqdm bar (the ``progress`` extra), or a callable receiving
        :class:`OptimizeProgress` on the driver.
    window_rows : int, optional
        Rows each merge holds in memory at once.
    storage_options : dict of str to str, optional
        Options for the store when ``dataset`` is a URI (the keys pylance
        accepts, e.g. ``aws_endpoint``, ``aws_region``); a :class:`Dataset`
        or ``lance.LanceDataset`` carries its own.
    on_report : callable, optional
        Receives the :class:`~lance_segmerge.tree.OptimizeReport` of the
        run (see :func:`optimize_with_report`).
    hnsw_graph : {"reuse", "rebuild"}, default "reuse"
        IVF_HNSW_* only: whether each merge starts every partition's graph
        from its largest input's graph, or builds it from nothing (see
        :func:`merge_existing_index_segments`).
    resume : bool, default False
        Keep a run journal (see :func:`run_plan`): after a crash, the next
        ``optimize(..., resume=True)`` with the same parameters reuses the
        finished merges that still verify. When the journal's run was
        planned at an earlier version and plans the same there, that run is
        resumed and its commit rebases over the versions since.
    verify : bool, default True
        Check every merge output before the commit (see :func:`run_plan`);
        an output that fails is never committed (:class:`CorruptError`).

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the new version (``.version``), of the kind given: a
        ``lance.LanceDataset`` for one, else a :class:`Dataset`. Unchanged
        when there was nothing to merge.

    Examples
    --------
    >>> ds = lance.dataset("/data/vectors.lance")  # doctest: +SKIP
    >>> ds = lance_segmerge.optimize(ds, "vec_idx", executor="processes")  # doctest: +SKIP
    >>> ds.version  # doctest: +SKIP
    """
    _check_tree_args(fan_in, target_segments)
    _opt_pos_int(max_workers, "max_workers", 4096)
    _opt_pos_int(window_rows, "window_rows", 2**31 - 1)
    _check_progress(progress)
    _bool(verify, "verify")
    ds = as_dataset(dataset, storage_options)

    def make_plan(d: Dataset) -> MergePlan:
        return plan_index_segment_merge(
            d,
            index_name,
            segments_per_task=fan_in,
            max_segments_to_merge=max_segments_to_merge,
            target_rows_per_task=target_rows_per_task,
            requantize_sq=requantize_sq,
        )

    # A resumed run's plan comes from its journal (a file): checked.
    pinned, plan = _resume_point(ds, index_name, make_plan) if resume else (ds, make_plan(ds))
    out = run_plan(
        pinned,
        plan,
        _planned_here=not resume,
        executor=executor,
        max_workers=max_workers,
        fan_in=fan_in,
        target_segments=target_segments,
        progress=progress,
        window_rows=window_rows,
        on_report=on_report,
        resume=resume,
        hnsw_graph=hnsw_graph,
        verify=verify,
    )
    return _at_version(dataset, ds, out.version, out)


def optimize_with_report(dataset: DatasetLike, index_name: str, **kwargs: Any) -> OptimizeReport:
    """:func:`optimize`, returning its report instead: segments before and
    after, the tree it ran (one row per task in ``to_arrow()`` /
    ``to_pandas()``), sizes and times; ``report.version`` is the committed
    version. Takes optimize's keyword arguments.

    The report is also available from ``optimize(..., on_report=callback)``,
    whatever optimize itself returns.
    """
    box: list[OptimizeReport] = []
    optimize(dataset, index_name, on_report=box.append, **kwargs)
    return box[0]
