"""optimize: plan, merge level by level as a tree on an executor, commit
once."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from . import _worker
from .api import (
    Dataset,
    commit_existing_index_segments,
    plan_index_segment_merge,
    plan_segments,
    remove_uncommitted,
)
from .errors import InvalidInputError
from .executors import Executor, resolve_executor
from .types import IndexSegment, MergePlan, MergeTask

logger = logging.getLogger(__name__)

__all__ = ["optimize", "OptimizeProgress", "run_plan"]


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
    def __init__(self, progress: ProgressArg) -> None:
        self._cb: Optional[Callable[[OptimizeProgress], None]] = progress if callable(progress) else None
        self._bar: Any = None
        if progress is True:
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(desc="optimize", unit="task")
            except ImportError:
                logger.info("progress=True: tqdm is not installed; logging progress instead")

    def __call__(self, p: OptimizeProgress) -> None:
        if self._cb is not None:
            self._cb(p)
        if self._bar is not None:
            self._bar.set_description(f"optimize level {p.level}")
            self._bar.total = p.tasks_total
            self._bar.n = p.tasks_done
            self._bar.refresh()
        logger.debug("level %d: %d/%d tasks", p.level, p.tasks_done, p.tasks_total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _run_level(
    ds: Dataset,
    tasks: tuple[MergeTask, ...],
    pool: Executor,
    level: int,
    report: _Reporter,
    created: list[str],
    options: dict[str, Any],
) -> list[IndexSegment]:
    jobs = []
    for t in tasks:
        out = str(uuid.uuid4())
        created.append(out)  # known before the worker starts: removable on failure
        jobs.append({"dataset": ds, "task": t.to_dict(), "index_uuid": out, **options})
    done = [0]
    nseg = sum(len(t.segments) for t in tasks)
    report(OptimizeProgress(level, 0, len(tasks), nseg))

    def on_done(_: int) -> None:
        done[0] += 1
        report(OptimizeProgress(level, done[0], len(tasks), nseg))

    results = pool.map(_worker.merge_task, jobs, on_done)
    return [IndexSegment.from_dict(r) for r in results]


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


def run_plan(
    dataset: Dataset,
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    hnsw_graph: str = "reuse",
) -> int:
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

    Returns
    -------
    int
        The new dataset version (the dataset's version when the plan has no
        tasks).
    """
    if dataset.version != plan.read_version:
        raise InvalidInputError(
            f"the plan was made at version {plan.read_version}, the dataset is pinned to {dataset.version}"
        )
    if not plan.tasks:
        return dataset.version
    if not isinstance(fan_in, int) or fan_in < 2:
        raise InvalidInputError(f"fan_in must be an integer >= 2, got {fan_in!r}")
    if not isinstance(target_segments, int) or target_segments < 1:
        raise InvalidInputError(f"target_segments must be a positive integer, got {target_segments!r}")
    if hnsw_graph not in ("reuse", "rebuild"):
        raise InvalidInputError(f"hnsw_graph must be 'reuse' or 'rebuild', got {hnsw_graph!r}")
    options: dict[str, Any] = {"requantize_sq": plan.requantize_sq, "hnsw_graph": hnsw_graph}
    if window_rows is not None:
        options["window_rows"] = window_rows
    pool = resolve_executor(executor, max_workers)
    report = _Reporter(progress)
    created: list[str] = []
    committed = False
    t0 = time.perf_counter()
    try:
        tasks = plan.tasks
        per_task = fan_in
        level = 1
        while True:
            carried: list[IndexSegment] = []
            if len(tasks) > target_segments:  # not the last level
                carried, rest = _defer_large(tasks, per_task, target_segments)
                if carried:
                    regrouped = plan_segments(dataset, rest, per_task, requantize_sq=plan.requantize_sq).tasks
                    if len(carried) + len(regrouped) > target_segments:  # they still meet a merge later
                        tasks = regrouped
                        logger.debug("level %d: %d large segments wait for a later level", level, len(carried))
                    else:
                        carried = []
            outputs = carried + _run_level(dataset, tasks, pool, level, report, created, options)
            if len(outputs) <= target_segments:
                break
            # As many tasks as the target asks for (or fan_in forces), each
            # merging an even share of the outputs.
            n_tasks = max(target_segments, -(-len(outputs) // fan_in))
            per_task = max(2, -(-len(outputs) // n_tasks))
            tasks = plan_segments(dataset, outputs, per_task, requantize_sq=plan.requantize_sq).tasks
            level += 1
        final = outputs
        version = commit_existing_index_segments(dataset, plan.index_name, plan.column, final, replaces=plan.sources)
        committed = True
        logger.info(
            "optimize %s: %d segments -> %d in %d levels, version %d, %.1fs",
            plan.index_name,
            plan.num_segments,
            len(final),
            level,
            version,
            time.perf_counter() - t0,
        )
    except BaseException:
        pool.cancel()
        raise
    finally:
        report.close()
        pool.close()
        leftovers = [u for u in created if not (committed and u in {f.uuid for f in final})]
        try:
            remove_uncommitted(dataset, leftovers)
        except Exception as exc:  # the cleanup verb can finish the job
            logger.warning("could not remove %d uncommitted segments: %s", len(leftovers), exc)
    return version


def optimize(
    dataset: Union[Dataset, str],
    index_name: str,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    max_segments_to_merge: Optional[int] = None,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = False,
    progress: ProgressArg = True,
    window_rows: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    hnsw_graph: str = "reuse",
) -> int:
    """Merge the segments of a vector index into one, distributed, and
    commit once.

    Plans (:func:`plan_index_segment_merge` with ``segments_per_task =
    fan_in``), merges level by level as a tree on ``executor`` (each level's
    tasks are independent), and commits the result as one new version that
    replaces exactly the planned segments.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset (a URI opens its latest version).
    index_name : str
        The logical index.
    executor : {"local", "processes", "ray", "dask"} or concurrent.futures.Executor
        Where merges run. ``"local"`` uses threads (the kernel releases the
        GIL), ``"processes"`` a spawn-started process pool; Ray and Dask are
        optional extras and use a running cluster or start a local one.
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
    requantize_sq : bool, default False
        Accept IVF_SQ segments with different bounds.
    progress : bool or callable, default True
        A tqdm bar (the ``progress`` extra), or a callable receiving
        :class:`OptimizeProgress` on the driver.
    window_rows : int, optional
        Rows each merge holds in memory at once.
    storage_options : dict of str to str, optional
        Options for the store when ``dataset`` is a URI (the keys pylance
        accepts, e.g. ``aws_endpoint``, ``aws_region``); a :class:`Dataset`
        carries its own.
    hnsw_graph : {"reuse", "rebuild"}, default "reuse"
        IVF_HNSW_* only: whether each merge starts every partition's graph
        from its largest input's graph, or builds it from nothing (see
        :func:`merge_existing_index_segments`).

    Returns
    -------
    int
        The new dataset version (unchanged when there was nothing to merge).
    """
    if isinstance(dataset, Dataset):
        if storage_options is not None:
            raise InvalidInputError("storage_options go with a URI; this Dataset already carries its own")
        ds = dataset
    else:
        ds = Dataset(str(dataset), storage_options=storage_options)
    plan = plan_index_segment_merge(
        ds,
        index_name,
        segments_per_task=fan_in,
        max_segments_to_merge=max_segments_to_merge,
        target_rows_per_task=target_rows_per_task,
        requantize_sq=requantize_sq,
    )
    return run_plan(
        ds,
        plan,
        executor=executor,
        max_workers=max_workers,
        fan_in=fan_in,
        target_segments=target_segments,
        progress=progress,
        window_rows=window_rows,
        hnsw_graph=hnsw_graph,
    )
