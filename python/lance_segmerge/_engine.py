"""The run engine: one way to run a batch of jobs, a tree of merges and a
commit on an executor, for every orchestrator (optimize / run_plan,
create_index, repair_index, maintain).

A :class:`Run` is a context manager that owns, for one run:

- the executor (closed at the end) and the outputs the run creates: each
  output's uuid is recorded before its job starts, so that whatever
  happens (an error, Ctrl-C, a worker killed) every output that is not
  committed is removed when the block exits, and nothing else;
- the run journal, if any (``resume=True``): finished outputs are recorded
  as they finish, reused by a later run after the same checks a commit
  applies, and kept for the next run when this one fails;
- the progress of its levels, the tree it ran and its counters.

The shape of the tree (how many tasks per level, which large segments wait
for a later level) comes from :func:`lance_segmerge.tree._tree_walk`, the
same function that predicts it in :func:`lance_segmerge.merge_tree`.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Optional, Sequence

from . import _jobs
from ._journal import RunJournal
from ._progress import LevelReporter, OptimizeProgressArg
from ._verify import check_outputs, require_clean
from ._version import transaction_properties
from .api import Dataset, _commit, _list, plan_segments, remove_uncommitted
from .errors import ConflictError, CorruptError, InternalError, NotFoundError, SegmergeError, WorkerError
from .executors import Executor
from .reports import OptimizeProgress, TreeTask
from .tree import _tree_walk, segment_load
from .types import IndexSegment, MergeTask

logger = logging.getLogger(__name__)

__all__ = ["Run", "RunStats"]


@dataclass
class RunStats:
    """What one run did (the driver's own counters)."""

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
    commit_seconds: float = 0.0


class Run:
    """One run of jobs on an executor, with the cleanup of what it created.

    Parameters
    ----------
    ds : Dataset
        The dataset, pinned to the version the run works on.
    index_name : str
        The index the run works on.
    pool : Executor
        Where jobs run; closed when the block exits.
    executor : str
        The executor's name, for reports.
    progress : bool or callable
        Level progress (see :class:`~lance_segmerge._progress.LevelReporter`).
    merge_options : dict
        Passed to every merge job (requantize_sq, window_rows, hnsw_graph).
    journal : RunJournal, optional
        The run journal of a resumable run.
    """

    def __init__(
        self,
        ds: Dataset,
        index_name: str,
        pool: Executor,
        *,
        executor: str,
        progress: OptimizeProgressArg = None,
        merge_options: Optional[dict[str, Any]] = None,
        journal: Optional[RunJournal] = None,
        verb: str = "optimize",
        run_id: Optional[str] = None,
        properties: Optional[dict[str, str]] = None,
    ) -> None:
        self.ds = ds
        self.verb = verb
        self.run_id = run_id or uuidlib.uuid4().hex
        self.properties = dict(properties or {})
        self.index_name = index_name
        self.pool = pool
        self.journal = journal
        self.merge_options = dict(merge_options or {})
        self.report = LevelReporter(progress)
        self.created: list[str] = []
        self.keep: set[str] = set()
        self.records: list[TreeTask] = []
        self.level_seconds: list[float] = []
        self.stats = RunStats(version=ds.version, executor=executor)
        self._t0 = time.perf_counter()
        self._live: Optional[set[str]] = None

    # -- the block -------------------------------------------------------------

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if exc is not None:
            self.pool.cancel()
            if isinstance(exc, ConflictError) and self.journal is not None:
                # This plan can never commit: nothing to resume.
                self.journal.finish()
                self.journal = None
        self.report.close()
        self.pool.close()
        self._remove_leftovers()
        self.stats.seconds = time.perf_counter() - self._t0

    def _remove_leftovers(self) -> None:
        keep = set(self.keep)
        if self.journal is not None and not self.stats.committed:
            # The journal records them for the next run, which reuses
            # those that pass its checks and removes the others.
            keep |= set(self.created)
        leftovers = [u for u in self.created if u not in keep]
        if not leftovers:
            return
        try:
            if not self.stats.committed:
                # An output reused from a journal may have been committed
                # by the run that wrote it (killed before it could forget
                # its journal); it is not ours to remove.
                live = self.live_segments(fresh=True)
                leftovers = [u for u in leftovers if u not in live]
            remove_uncommitted(self.ds, leftovers)
        except Exception as exc:  # noqa: BLE001 - the cleanup verb can finish the job
            logger.warning("could not remove %d uncommitted segments: %s", len(leftovers), exc)

    def live_segments(self, fresh: bool = False) -> set[str]:
        """The segments of the index committed at the latest version (read
        once per run, or again with ``fresh``)."""
        if self._live is None or fresh:
            try:
                self._live = {s.uuid for s in _list(self.ds.checkout(), self.index_name, False)}
            except NotFoundError:  # an index being created: nothing of it is committed
                self._live = set()
        return self._live

    # -- jobs --------------------------------------------------------------------

    def new_output(self) -> str:
        """A fresh output uuid, recorded as created before any job writes it."""
        out = str(uuidlib.uuid4())
        self.created.append(out)
        return out

    def batch(
        self,
        fn: Callable[[dict[str, Any]], Any],
        jobs: Sequence[dict[str, Any]],
        *,
        describe: Callable[[int], str],
        on_done: Optional[Callable[[int], None]] = None,
    ) -> list[Any]:
        """Run ``fn`` over ``jobs`` on the pool, in order. A worker that dies
        is a WorkerError naming its jobs (``describe``); any other failure
        of the executor itself is an InternalError."""
        if not jobs:
            return []
        try:
            return list(self.pool.map(fn, list(jobs), on_done))
        except WorkerError as exc:
            which = "; ".join(describe(k) for k in exc.items if 0 <= k < len(jobs))
            raise WorkerError(f"{exc}: {which}" if which else str(exc), exc.items) from exc
        except SegmergeError:
            raise
        except Exception as exc:  # an executor's own failure (pickling, a lost cluster, ...)
            raise InternalError(f"the executor failed: {type(exc).__name__}: {exc}") from exc

    # -- merges ------------------------------------------------------------------

    def merge_level(self, level: int, tasks: tuple[MergeTask, ...]) -> list[IndexSegment]:
        """Merge one level's tasks (reusing journal outputs that pass the
        checks), recording the tree and the counters."""
        start = time.perf_counter()
        results: list[Optional[IndexSegment]] = [None] * len(tasks)
        if self.journal is not None:
            for i, t in enumerate(tasks):
                results[i] = self.journal.reuse(level, t)
            self._check_reused(level, tasks, results)
        jobs: list[dict[str, Any]] = []
        todo: list[int] = []  # the tasks that run (the others reuse a journal's output)
        for i, t in enumerate(tasks):
            seg = results[i]
            if seg is not None:
                self.created.append(seg.uuid)  # an intermediate output: removed after the commit
                continue
            out = self.new_output()
            if self.journal is not None:
                self.journal.planned(level, t, out)
            jobs.append({"dataset": self.ds, "task": t.to_dict(), "index_uuid": out, "level": level, **self.merge_options})
            todo.append(i)
        if self.journal is not None:
            self.journal.flush()
        nseg = sum(len(t.segments) for t in tasks)
        done = [len(tasks) - len(todo)]
        self.report(OptimizeProgress(level, done[0], len(tasks), nseg))
        finished: dict[int, float] = {}

        def on_done(k: int) -> None:
            finished[todo[k]] = time.perf_counter() - start
            done[0] += 1
            if self.journal is not None:
                self.journal.done(level, tasks[todo[k]], jobs[k]["index_uuid"])
            self.report(OptimizeProgress(level, done[0], len(tasks), nseg))

        def describe(k: int) -> str:
            t = tasks[todo[k]]
            inputs = ", ".join(s.uuid for s in t.segments[:4]) + (", …" if len(t.segments) > 4 else "")
            return f"task {t.task_id} of level {level} (output {jobs[k]['index_uuid']}, merging {len(t.segments)} segments: {inputs})"

        # Looked up at run time: tests replace the job body.
        for k, r in enumerate(self.batch(_jobs.merge_task, jobs, describe=describe, on_done=on_done)):
            results[todo[k]] = IndexSegment._from_kernel(r)
        outputs = [r for r in results if r is not None]
        st = self.stats
        st.tasks_run += len(jobs)
        st.tasks_reused += len(tasks) - len(jobs)
        for i in todo:
            seg = results[i]
            assert seg is not None
            st.rows_written += seg.num_rows or 0
            st.bytes_written += seg.size_bytes
            st.rows_read += tasks[i].rows
            st.bytes_read += tasks[i].bytes
        for i, (t, seg) in enumerate(zip(tasks, outputs)):
            self.records.append(TreeTask(level, t.task_id, t.segment_ids, seg.uuid, seg.num_rows or 0, segment_load(seg), finished.get(i)))
        self.level_seconds.append(time.perf_counter() - start)
        return outputs

    def _check_reused(self, level: int, tasks: tuple[MergeTask, ...], outputs: list[Optional[IndexSegment]]) -> None:
        """What a journal's outputs must pass before a run reuses them,
        beyond the journal's own size check: not a committed segment, and
        every check a commit applies to a merge output and more (row ids
        all of the task's fragments, the model equal to the index's, a
        sample of codes against the data). An output that fails is
        discarded (``outputs[i] = None``) and its task runs afresh."""
        assert self.journal is not None
        found = {s.uuid: i for i, s in enumerate(outputs) if s is not None}
        if not found:
            return
        why: dict[str, str] = {}
        live = self.live_segments()
        for u in found:
            if u in live:
                why[u] = "it is a committed segment of the index"
        rest = [outputs[i] for u, i in found.items() if u not in why]
        if rest:
            report = check_outputs(self.ds, [s for s in rest if s is not None], thorough=True)
            for v in report.damaged:
                why[v.uuid] = f"{', '.join(v.damage)}: {next((c.message for c in v.checks if c.verdict == 'failed'), v.verdict)}"
        for u, reason in why.items():
            i = found[u]
            self.journal.discard(level, tasks[i], reason)
            outputs[i] = None

    def regroup(self, segments: list[IndexSegment], per_task: int) -> tuple[MergeTask, ...]:
        """The next level's tasks over ``segments`` (the kernel's planner)."""
        return plan_segments(self.ds, segments, per_task, requantize_sq=bool(self.merge_options.get("requantize_sq", True))).tasks

    def tree(self, tasks: tuple[MergeTask, ...], fan_in: int, target_segments: int) -> list[IndexSegment]:
        """Merge ``tasks`` and then their outputs level by level until at most
        ``target_segments`` are left (large segments wait for a later level;
        see :func:`lance_segmerge.tree._tree_walk`)."""
        if not tasks:
            return []
        outputs, self.stats.levels = _tree_walk(tasks, fan_in, target_segments, self.regroup, self.merge_level)
        return outputs

    def reduce(self, segments: list[IndexSegment], fan_in: int, target_segments: int) -> list[IndexSegment]:
        """Merge ``segments`` (outputs of this run) as a tree down to at most
        ``target_segments``: the first level as the later ones are grouped."""
        if len(segments) <= target_segments:
            return segments
        n_tasks = max(target_segments, -(-len(segments) // fan_in))
        per_task = max(2, -(-len(segments) // n_tasks))
        return self.tree(self.regroup(segments, per_task), fan_in, target_segments)

    # -- the end -------------------------------------------------------------------

    def finish_uncommitted(self) -> None:
        """The run is complete with nothing to commit (every output came back
        unchanged): its journal goes."""
        if self.journal is not None:
            self.journal.finish()
            self.journal = None

    def commit(
        self,
        index_name: str,
        column: str,
        segments: list[IndexSegment],
        *,
        replaces: Optional[Sequence[str]] = None,
        verify: bool = False,
        facts: Optional[dict[str, Any]] = None,
    ) -> Dataset:
        """Commit ``segments`` (after checking them, with ``verify``: one that
        fails is never committed, CorruptError names it); they are kept,
        everything else this run created is removed. ``facts`` join the
        transaction's properties (a reindex's model hash...)."""
        if verify:
            t0 = time.perf_counter()
            require_clean(check_outputs(self.ds, segments))
            self.stats.verify_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        props = transaction_properties(self.verb, self.run_id, self.properties, **(facts or {}))
        out = _commit(self.ds, index_name, column, segments, replaces, properties=props)
        self.stats.commit_seconds = time.perf_counter() - t0
        self.keep = {s.uuid for s in segments}
        self.stats.committed = True
        self.stats.version = out.version
        self.stats.dataset = out
        self.stats.segments_after = len(segments)
        if self.journal is not None:
            self.journal.finish()
            self.journal = None
        return out

