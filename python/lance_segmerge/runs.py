"""optimize and run_plan: plan, merge level by level as a tree on an
executor, commit once (on the run engine, :mod:`lance_segmerge._engine`).

:func:`execute_plan` is the engine entry the orchestrators share
(optimize, run_plan, maintain): it takes arguments already checked at
their public entry.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union, overload

from . import _ffi
from ._args import checked
from ._costmodel import choose_executor
from ._engine import Run, RunStats
from ._handles import at_version
from ._journal import RunJournal, read_journal
from ._progress import OptimizeProgressArg
from ._validate import _show
from .api import Dataset, DatasetLike, _plan, _plan_options, as_dataset
from .errors import InvalidInputError, SegmergeError
from .executors import Executor, resolve_executor
from .reports import OptimizeProgress, OptimizeReport, TreeTask
from .tree import segment_load, tree_record
from .types import IndexSegment, MergePlan

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import LanceDataset

logger = logging.getLogger(__name__)

__all__ = [
    "optimize",
    "optimize_with_report",
    "OptimizeProgress",
    "run_plan",
    "run_plan_with_report",
    "RunStats",
    "choose_executor",
    "execute_plan",
]

#: The counters of a run (kept under its former name).
RunResult = RunStats


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
    progress: OptimizeProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
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
    progress: OptimizeProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
) -> "LanceDataset": ...


@checked(converts=("dataset", "plan"))
def run_plan(
    dataset: DatasetLike,
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: OptimizeProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
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
    properties : dict of str to str, optional
        Key-values written into the commit's transaction (see
        :func:`optimize`).

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
    ds = as_dataset(given, version=plan.read_version if isinstance(given, (str, os.PathLike)) else None)
    # A plan may have travelled: the kernel checks it against the dataset
    # (segments of its index, fragment bitmaps the dataset can have) before
    # any worker starts.
    if ds.version == plan.read_version and plan.tasks:
        _ffi.call("CheckPlan", ds.uri, ds.options_json, ds.version, plan.to_json())
    stats = execute_plan(
        ds, plan, executor=executor, max_workers=max_workers, fan_in=fan_in, target_segments=target_segments,
        progress=progress, window_rows=window_rows, memory_bytes=memory_bytes, on_report=on_report, resume=resume, hnsw_graph=hnsw_graph,
        verify=verify, properties=properties,
    )
    return at_version(given, ds, stats.version, stats.dataset)


def execute_plan(
    ds: Dataset,
    plan: MergePlan,
    *,
    executor: Union[str, cf.Executor, Executor] = "local",
    max_workers: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: OptimizeProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
    verb: str = "optimize",
) -> RunStats:
    """Run a plan on the engine (arguments checked by the caller's public
    entry; ``ds`` pinned to the plan's version) and return its counters."""
    if ds.version != plan.read_version:
        raise InvalidInputError(
            f"the plan was made at version {plan.read_version}, the dataset is pinned to {ds.version}"
        )
    if not plan.tasks:
        if resume:
            RunJournal.drop_stale(ds, plan.index_name)
        if on_report is not None:
            on_report(_make_report(ds, plan, executor, ds.version, fan_in, target_segments, [], [], [], 0.0, 0.0))
        return RunStats(version=ds.version)
    if plan.policy == "tiered":
        target_segments = max(target_segments, len(plan.tasks))
    options: dict[str, Any] = {"requantize_sq": plan.requantize_sq, "hnsw_graph": hnsw_graph}
    if window_rows is not None:
        options["window_rows"] = window_rows
    if memory_bytes is not None:
        options["memory_bytes"] = memory_bytes
    if isinstance(executor, str) and executor == "auto":
        executor = choose_executor(plan, max_workers)
    journal = None
    if resume:
        params = {"fan_in": fan_in, "target_segments": target_segments, "requantize_sq": plan.requantize_sq, "hnsw_graph": hnsw_graph}
        journal = RunJournal.start(ds, plan, params)
    run = Run(ds, plan.index_name, resolve_executor(executor, max_workers), executor=_executor_name(executor),
              progress=progress, merge_options=options, journal=journal, verb=verb, run_id=plan.plan_id,
              properties=properties)
    final: list[IndexSegment] = []
    with run:
        outputs = run.tree(plan.tasks, fan_in, target_segments)
        # A single-segment task whose input had nothing to drop comes back
        # unchanged: it neither replaces nor is replaced.
        unchanged = {s.uuid for s in outputs} & set(plan.sources)
        final = [s for s in outputs if s.uuid not in unchanged]
        if final:
            # Every output is checked before the commit (structure and a
            # sample of its codes against the data) with ``verify``: one
            # that fails is never committed, and the run's outputs go.
            run.commit(plan.index_name, plan.column, final,
                       replaces=[u for u in plan.sources if u not in unchanged], verify=verify)
        else:
            run.finish_uncommitted()
    stats = run.stats
    logger.info(
        "optimize %s: %d segments -> %d in %d levels, version %d, %.1fs (%d tasks run, %d reused from the journal)",
        plan.index_name, plan.num_segments, len(final), stats.levels, stats.version, stats.seconds,
        stats.tasks_run, stats.tasks_reused,
    )
    if on_report is not None:
        on_report(_make_report(ds, plan, executor, stats.version, fan_in, target_segments, run.records, final,
                               run.level_seconds, stats.seconds, stats.commit_seconds))
    return stats


def run_plan_with_report(dataset: Any, plan: MergePlan, **kwargs: Any) -> OptimizeReport:
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
    progress: OptimizeProgressArg = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
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
    progress: OptimizeProgressArg = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
) -> "LanceDataset": ...


@checked(converts=("dataset",))
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
    progress: OptimizeProgressArg = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    on_report: Optional[Callable[[OptimizeReport], None]] = None,
    resume: bool = False,
    hnsw_graph: str = "reuse",
    verify: bool = True,
    properties: Optional[dict[str, str]] = None,
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
    memory_bytes : int, optional
        INVERTED merges: the posting lists each merge holds at once (see
        :func:`merge_existing_index_segments`; default 64 MiB).
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
    properties : dict of str to str, optional
        Key-values written into the commit's transaction next to the
        package's (``lance_segmerge.version``, ``.verb``, ``.run`` = the
        plan id); ``read_transaction`` and ``list_index_segments(
        with_provenance=True)`` show them.

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
    ds = as_dataset(dataset, storage_options)
    opts = _plan_options(index_name, fan_in, max_segments_to_merge, target_rows_per_task, requantize_sq)

    def make_plan(d: Dataset) -> MergePlan:
        return _plan(d, index_name, opts)

    # A resumed run's plan is made again where its journal says it was.
    pinned, plan = _resume_point(ds, index_name, make_plan) if resume else (ds, make_plan(ds))
    stats = execute_plan(
        pinned, plan, executor=executor, max_workers=max_workers, fan_in=fan_in, target_segments=target_segments,
        progress=progress, window_rows=window_rows, memory_bytes=memory_bytes, on_report=on_report, resume=resume, hnsw_graph=hnsw_graph,
        verify=verify, properties=properties,
    )
    return at_version(dataset, ds, stats.version, stats.dataset)


def optimize_with_report(dataset: Any, index_name: str, **kwargs: Any) -> OptimizeReport:
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
