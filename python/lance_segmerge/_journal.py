"""Run journals: what lets an interrupted optimize or maintain run resume.

A journal records a run's plan (id, read version, parameters) and, for each
merge task of each level of its tree, the task's inputs, the output uuid it
was given before it started, and, once finished, the output's verified file
sizes. It lives in the dataset's index directory
(``_indices/_segmerge/<hash of the index name>.json``, written and validated
by the kernel, so it works on every store).

The next run with ``resume=True`` and the same plan and parameters reuses
every recorded output that still verifies (files present, sizes as
recorded, both files parse: see ``segment.VerifyOutput``; then the run's
own check, which is what a commit checks: see ``Run._check_reused``) and
redoes the rest: an output that fails is dropped from the journal, its
files removed (unless it turns out to be committed), and its task runs
afresh. A journal of another plan, version or parameters, or a corrupt
one, means a fresh start, logged with the reason; the outputs of an
abandoned journal are removed. Nothing is reused without verifying.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Mapping, Optional, Protocol, Sequence

from . import _ffi
from .api import Dataset, remove_uncommitted
from .errors import ConflictError, CorruptError, InvalidInputError, NotFoundError, SegmergeError
from .types import IndexSegment, MergeTask

logger = logging.getLogger(__name__)

__all__ = ["RunJournal", "read_journal"]


class RunKey(Protocol):
    """What names a run in its journal: a :class:`MergePlan`, or a
    reindex's ``ReindexRun``."""

    @property
    def dataset_uri(self) -> str: ...
    @property
    def index_name(self) -> str: ...
    @property
    def plan_id(self) -> str: ...
    @property
    def read_version(self) -> int: ...
    @property
    def sources(self) -> Sequence[str]: ...


def read_journal(ds: Dataset, index_name: str) -> tuple[Optional[dict[str, Any]], str]:
    """The index's journal as a dict (None when there is none or it is
    corrupt) and, when it cannot be used, why."""
    try:
        raw = _ffi.call("JournalRead", ds.uri, ds.options_json, index_name)
    except CorruptError as exc:
        return None, f"the journal is corrupt ({exc})"
    if not raw:
        return None, ""
    return dict(json.loads(raw)), ""


class RunJournal:
    """The journal of one run, kept by the driver."""

    def __init__(self, ds: Dataset, plan: RunKey, params: Mapping[str, Any], entries: list[dict[str, Any]]) -> None:
        self._ds = ds
        self._plan = plan
        self._params = dict(params)
        self._entries = entries
        self.reused = 0
        self.reused_rows = 0

    @classmethod
    def start(cls, ds: Dataset, plan: RunKey, params: Mapping[str, Any]) -> "RunJournal":
        """Open the journal for a run of ``plan``: carry over the entries of
        a journal of the same run, or start fresh (logging why) and remove
        the uncommitted outputs of any other."""
        old, why = read_journal(ds, plan.index_name)
        entries: list[dict[str, Any]] = []
        if old is not None:
            same = (
                old.get("dataset_uri") == plan.dataset_uri
                and old.get("plan_id") == plan.plan_id
                and int(old.get("read_version") or 0) == plan.read_version
                and old.get("params") == dict(params)
            )
            if same:
                entries = list(old.get("tasks") or [])
                done = sum(1 for e in entries if e.get("state") == "done")
                logger.info(
                    "resuming run of plan %s at version %d: %d tasks recorded (%d finished)",
                    plan.plan_id, plan.read_version, len(entries), done,
                )
            else:
                why = (
                    f"the journal is for plan {old.get('plan_id')} at version {old.get('read_version')} "
                    f"with {old.get('params')}; this run is plan {plan.plan_id} at version {plan.read_version} "
                    f"with {dict(params)}"
                )
                cls._abandon(ds, old)
        if why:
            logger.warning("fresh start of %s: %s", plan.index_name, why)
        j = cls(ds, plan, params, entries)
        j.flush()
        return j

    @classmethod
    def drop_stale(cls, ds: Dataset, index_name: str) -> None:
        """A run found nothing to merge: a journal left by an earlier run
        cannot be resumed by it; remove it and its uncommitted outputs."""
        old, why = read_journal(ds, index_name)
        if old is None and not why:
            return
        logger.info("%s: nothing to merge; removing the journal of an earlier run%s", index_name,
                    f" ({why})" if why else f" (plan {old.get('plan_id') if old else '?'})")
        if old is not None:
            cls._abandon(ds, old)
        _ffi.call("JournalDelete", ds.uri, ds.options_json, index_name)

    @staticmethod
    def _abandon(ds: Dataset, old: Mapping[str, Any]) -> None:
        outputs = [str(e["output"]) for e in old.get("tasks") or []]
        try:
            remove_uncommitted(ds, outputs)
        except SegmergeError as exc:  # e.g. one was committed after all; cleanup finishes the job
            logger.warning("could not remove the %d outputs of the abandoned journal: %s", len(outputs), exc)

    # -- entries -------------------------------------------------------------

    def _find(self, level: int, task: MergeTask) -> Optional[dict[str, Any]]:
        inputs = list(task.segment_ids)
        for e in self._entries:
            if int(e["level"]) == level and list(e["inputs"]) == inputs:
                return e
        return None

    @property
    def index_name(self) -> str:
        return self._plan.index_name

    def _verify(self, task: MergeTask, output: str, files: Optional[list[Any]]) -> IndexSegment:
        out = _ffi.call_json(
            "VerifyOutput",
            self._ds.uri,
            self._ds.options_json,
            json.dumps([s._entry_dict() for s in task.segments]),
            output,
            json.dumps(files) if files else "",
        )
        return IndexSegment._from_kernel(out)

    def reuse(self, level: int, task: MergeTask) -> Optional[IndexSegment]:
        """The recorded output of this task if it verifies (files present,
        sizes as recorded, both files parse), else None (and the entry and
        its output are dropped). The run checks it further before using
        it (:meth:`discard` what fails)."""
        e = self._find(level, task)
        if e is None:
            return None
        try:
            seg = self._verify(task, str(e["output"]), e.get("files") if e.get("state") == "done" else None)
        except (CorruptError, NotFoundError, InvalidInputError) as exc:
            self._drop(level, task, e, str(exc))
            return None
        self._mark_done(e, seg)
        self.reused += 1
        self.reused_rows += seg.num_rows or 0
        return seg

    def discard(self, level: int, task: MergeTask, why: str) -> None:
        """The run found the recorded output of this task unusable: drop the
        entry and remove the output's files (the kernel refuses to remove a
        committed segment), so that the task runs afresh."""
        e = self._find(level, task)
        if e is not None:
            self._drop(level, task, e, why)
            self.reused -= 1

    def _drop(self, level: int, task: MergeTask, e: dict[str, Any], why: str) -> None:
        logger.info("level %d task over %d segments: redoing it, its output %s does not verify: %s",
                    level, len(task.segments), e["output"], why)
        self._entries.remove(e)
        try:
            remove_uncommitted(self._ds, [str(e["output"])])
        except (InvalidInputError, ConflictError) as exc:
            logger.warning("could not remove %s: %s", e["output"], exc)

    # -- build tasks (level 0: a segment built over fragments) -----------------

    def _find_build(self, fragments: list[int]) -> Optional[dict[str, Any]]:
        for e in self._entries:
            if int(e["level"]) == 0 and list(e.get("fragments") or []) == fragments:
                return e
        return None

    def reuse_build(self, column: str, fragments: list[int]) -> Optional[IndexSegment]:
        """The recorded build output over exactly these fragments if it
        verifies (files present, sizes as recorded, both files parse, its
        row ids exactly the fragments' live rows: ``verify.VerifyBuild``),
        else None (the entry and its output are dropped)."""
        e = self._find_build(fragments)
        if e is None:
            return None
        try:
            seg = self._verify_build(column, fragments, str(e["output"]), e.get("files") if e.get("state") == "done" else None)
        except (CorruptError, NotFoundError, InvalidInputError) as exc:
            logger.info("build over fragments %s: redoing it, its output %s does not verify: %s", fragments, e["output"], exc)
            self._entries.remove(e)
            try:
                remove_uncommitted(self._ds, [str(e["output"])])
            except (InvalidInputError, ConflictError) as rm:
                logger.warning("could not remove %s: %s", e["output"], rm)
            return None
        self._mark_done(e, seg)
        self.reused += 1
        self.reused_rows += seg.num_rows or 0
        return seg

    def _verify_build(self, column: str, fragments: list[int], output: str, files: Optional[list[Any]]) -> IndexSegment:
        out = _ffi.call_json(
            "VerifyBuildOutput", self._ds.uri, self._ds.options_json, self._ds.version, self._plan.index_name, column,
            json.dumps(fragments), output, json.dumps(files) if files else "",
        )
        return IndexSegment._from_kernel(out)

    def discard_build(self, fragments: list[int], why: str) -> None:
        """Drop a reused build's entry and remove its output (see
        :meth:`discard`)."""
        if self.drop_build(fragments, why):
            self.reused -= 1

    def drop_build(self, fragments: list[int], why: str) -> bool:
        """Drop the recorded build over these fragments, if any, and remove
        its output unread (a build the run redoes whatever it holds).
        Returns whether there was one."""
        e = self._find_build(fragments)
        if e is None:
            return False
        logger.info("build over fragments %s: redoing it: %s", fragments, why)
        self._entries.remove(e)
        try:
            remove_uncommitted(self._ds, [str(e["output"])])
        except (InvalidInputError, ConflictError) as exc:
            logger.warning("could not remove %s: %s", e["output"], exc)
        return True

    def planned_build(self, fragments: list[int], output: str) -> None:
        """Record that ``output`` is assigned to the build over these
        fragments (before it starts); :meth:`flush` once all are recorded."""
        self._entries.append({"level": 0, "inputs": [], "fragments": list(fragments), "output": output, "state": "planned"})

    def done_build(self, fragments: list[int], seg: IndexSegment) -> None:
        """Record a finished build with its files' sizes, and flush."""
        e = self._find_build(fragments)
        if e is None or e["output"] != seg.uuid:
            return
        self._mark_done(e, seg)
        self.flush()

    def planned(self, level: int, task: MergeTask, output: str) -> None:
        """Record that ``output`` is assigned to this task (before it
        starts); call :meth:`flush` once a level's tasks are recorded."""
        self._entries.append(
            {"level": level, "inputs": list(task.segment_ids), "output": output, "state": "planned"}
        )

    def done(self, level: int, task: MergeTask, output: str) -> None:
        """Record a finished task with its verified sizes, and flush."""
        e = self._find(level, task)
        if e is None or e["output"] != output:
            return
        try:
            seg = self._verify(task, output, None)
        except SegmergeError as exc:  # the run itself will notice
            logger.debug("could not verify %s right after its merge: %s", output, exc)
            return
        self._mark_done(e, seg)
        self.flush()

    @staticmethod
    def _mark_done(e: dict[str, Any], seg: IndexSegment) -> None:
        e["state"] = "done"
        e["files"] = [{"path": f.path, "size_bytes": f.size_bytes} for f in seg.files]
        e["rows"] = seg.num_rows or 0

    def flush(self) -> None:
        j = {
            "dataset_uri": self._plan.dataset_uri,
            "index_name": self._plan.index_name,
            "plan_id": self._plan.plan_id,
            "read_version": self._plan.read_version,
            "params": self._params,
            "sources": list(self._plan.sources),
            "tasks": self._entries,
            "updated_ms": int(time.time() * 1000),
        }
        _ffi.call("JournalWrite", self._ds.uri, self._ds.options_json, json.dumps(j))

    def finish(self) -> None:
        """The run committed (or had nothing to do): remove the journal."""
        _ffi.call("JournalDelete", self._ds.uri, self._ds.options_json, self._plan.index_name)
