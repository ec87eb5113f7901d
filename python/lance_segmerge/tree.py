"""The merge tree of :func:`lance_segmerge.optimize`: the tree a plan will
run (predicted from segment sizes, before anything is merged) and the one
it ran, and the report of an optimize.

Both are frozen dataclasses of plain fields: they pickle, round-trip
through JSON, convert to tables (one row per task) and show as tables in
notebooks; :mod:`lance_segmerge.plot` draws them.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from ._display import Column, TableSpec, Tabular, human_bytes, plural
from .errors import InvalidInputError
from .types import IndexFile, IndexSegment, MergePlan, MergeTask, SegmentList

__all__ = ["TreeTask", "MergeTree", "OptimizeReport", "merge_tree", "REPORT_FORMAT_VERSION"]

#: Version of the MergeTree / OptimizeReport serialisation.
REPORT_FORMAT_VERSION = 1


@dataclass(frozen=True)
class TreeTask:
    """One merge of a tree.

    Parameters
    ----------
    level : int
        Tree level (1 merges planned segments; level ``n`` merges outputs
        of earlier levels, and large segments that skipped levels).
    task_id : int
        Position of the task in its level.
    inputs : tuple of str
        UUIDs of the merged segments (planned segments or earlier outputs).
    output : str
        UUID of the merged segment (predicted trees name outputs with
        stable placeholder UUIDs).
    rows, bytes : int
        Rows and bytes of the output (predicted: the inputs' sums).
    seconds : float, optional
        Executed trees: when the task finished, in seconds after its level
        started (driver clock).
    """

    level: int
    task_id: int
    inputs: tuple[str, ...]
    output: str
    rows: int
    bytes: int
    seconds: Optional[float] = None


@dataclass(frozen=True)
class MergeTree(Tabular):
    """The tree of merges an optimize runs: level by level, each task
    merging planned segments or earlier outputs, until at most
    ``target_segments`` are left.

    Parameters
    ----------
    index_name : str
    read_version : int
        Version the plan was made at.
    fan_in, target_segments : int
        The tree's shape parameters.
    sources : tuple of str
        The planned segments, in plan order.
    source_rows, source_bytes : tuple of int
        Their rows and bytes.
    tasks : tuple of TreeTask
        Every merge, level by level.
    outputs : tuple of str
        What the commit puts in place of the sources.
    estimated : bool
        True for a tree predicted from sizes (:func:`merge_tree`), False
        for the tree an optimize ran.
    level_seconds : tuple of float
        Executed trees: the wall time of each level.
    """

    index_name: str
    read_version: int
    fan_in: int
    target_segments: int
    sources: tuple[str, ...]
    source_rows: tuple[int, ...]
    source_bytes: tuple[int, ...]
    tasks: tuple[TreeTask, ...]
    outputs: tuple[str, ...]
    estimated: bool = True
    level_seconds: tuple[float, ...] = ()
    format_version: int = REPORT_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version != REPORT_FORMAT_VERSION:
            raise InvalidInputError(f"MergeTree format_version {self.format_version} is not supported")
        if not (len(self.sources) == len(self.source_rows) == len(self.source_bytes)):
            raise InvalidInputError("MergeTree: sources, source_rows and source_bytes differ in length")

    @property
    def num_levels(self) -> int:
        """Levels of merges (0 when there is nothing to merge)."""
        return max((t.level for t in self.tasks), default=0)

    def level_tasks(self, level: int) -> tuple[TreeTask, ...]:
        """The tasks of one level."""
        return tuple(t for t in self.tasks if t.level == level)

    def levels(self) -> list[dict[str, int]]:
        """Per level: its tasks, the segments it merges, the segments
        waiting for a later level, and the segments left after it."""
        out = []
        alive = len(self.sources)
        for lv in range(1, self.num_levels + 1):
            tasks = self.level_tasks(lv)
            merged = sum(len(t.inputs) for t in tasks)
            after = alive - merged + len(tasks)
            out.append({"level": lv, "tasks": len(tasks), "segments_in": merged, "waiting": alive - merged, "segments_out": after})
            alive = after
        return out

    def __repr__(self) -> str:
        shape = " -> ".join([str(len(self.sources))] + [str(lv["segments_out"]) for lv in self.levels()])
        kind = "estimated" if self.estimated else "executed"
        return (
            f"MergeTree(index={self.index_name!r}, version={self.read_version}, fan_in={self.fan_in}, "
            f"levels={self.num_levels}, tasks={len(self.tasks)}, segments={shape}, {kind})"
        )

    def _table_spec(self) -> TableSpec:
        executed = not self.estimated
        columns = (
            Column("level", "int"),
            Column("task_id", "int", label="task"),
            Column("segments", "int", label="inputs", total=True),
            Column("rows", "int", label="rows out", total=True),
            Column("bytes", "bytes", label="size out", total=True),
            Column("output", "uuid"),
            Column("seconds", "seconds", label="done after", show=executed),
            Column("inputs", "list", label="input segments"),
        )
        rows = tuple((t.level, t.task_id, len(t.inputs), t.rows, t.bytes, t.output, t.seconds, t.inputs) for t in self.tasks)
        shape = " -> ".join([str(len(self.sources))] + [str(lv["segments_out"]) for lv in self.levels()])
        summary = (
            ("segments", shape),
            ("levels", str(self.num_levels)),
            ("fan_in", str(self.fan_in)),
            ("target_segments", str(self.target_segments)),
            ("", "executed" if executed else "estimated from segment sizes"),
        )
        title = f"merge tree of {self.index_name} at version {self.read_version}: {plural(len(self.tasks), 'task')} in {plural(self.num_levels, 'level')}"
        return TableSpec(title, columns, rows, summary, "task")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "index_name": self.index_name,
            "read_version": self.read_version,
            "fan_in": self.fan_in,
            "target_segments": self.target_segments,
            "sources": list(self.sources),
            "source_rows": list(self.source_rows),
            "source_bytes": list(self.source_bytes),
            "tasks": [
                {"level": t.level, "task_id": t.task_id, "inputs": list(t.inputs), "output": t.output,
                 "rows": t.rows, "bytes": t.bytes, "seconds": t.seconds}
                for t in self.tasks
            ],
            "outputs": list(self.outputs),
            "estimated": self.estimated,
            "level_seconds": list(self.level_seconds),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergeTree":
        return cls(
            index_name=str(d["index_name"]),
            read_version=int(d["read_version"]),
            fan_in=int(d["fan_in"]),
            target_segments=int(d["target_segments"]),
            sources=tuple(str(x) for x in d.get("sources") or ()),
            source_rows=tuple(int(x) for x in d.get("source_rows") or ()),
            source_bytes=tuple(int(x) for x in d.get("source_bytes") or ()),
            tasks=tuple(
                TreeTask(int(t["level"]), int(t["task_id"]), tuple(str(x) for x in t["inputs"]), str(t["output"]),
                         int(t["rows"]), int(t["bytes"]), None if t.get("seconds") is None else float(t["seconds"]))
                for t in d.get("tasks") or ()
            ),
            outputs=tuple(str(x) for x in d.get("outputs") or ()),
            estimated=bool(d.get("estimated", True)),
            level_seconds=tuple(float(x) for x in d.get("level_seconds") or ()),
            format_version=int(d.get("format_version", REPORT_FORMAT_VERSION)),
        )


def segment_load(s: IndexSegment) -> int:
    """The bytes the planner balances for a segment: its two index files
    (what the kernel's planner reads from them), else the manifest's sizes."""
    if s.index_file_bytes is not None or s.auxiliary_file_bytes is not None:
        return (s.index_file_bytes or 0) + (s.auxiliary_file_bytes or 0)
    return s.size_bytes


def _group_by_size(segments: Sequence[IndexSegment], per_task: int) -> tuple[MergeTask, ...]:
    """Group segments as the kernel's planner would, from their sizes only."""
    from . import _ffi

    request = {
        "bytes": [segment_load(s) for s in segments],
        "rows": [s.num_rows or 0 for s in segments],
        "segments_per_task": per_task,
    }
    groups = _ffi.call_json("GroupSizes", json.dumps(request))
    tasks = []
    for i, members in enumerate(groups):
        segs = tuple(segments[m] for m in members)
        tasks.append(MergeTask(i, segs, rows=sum(s.num_rows or 0 for s in segs), bytes=sum(segment_load(s) for s in segs)))
    return tuple(tasks)


def size_model(segments: Sequence[IndexSegment]) -> Optional[tuple[float, float]]:
    """Fit ``bytes = fixed + per_row * rows`` over segments of one index
    (the fixed part is the model every segment repeats: centroids, PQ
    codebook, file headers), by least squares. ``None`` when the rows do
    not vary enough to tell the parts apart, or the fit is not physical."""
    pts = [(float(s.num_rows), float(segment_load(s))) for s in segments if s.num_rows]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    if var <= 0:
        return None
    per_row = sum((x - mx) * (y - my) for x, y in pts) / var
    fixed = my - per_row * mx
    if per_row <= 0 or fixed < 0:
        return None
    return fixed, per_row


def _predicted_output(plan: MergePlan, level: int, task: MergeTask, model: Optional[tuple[float, float]]) -> IndexSegment:
    """What merging a task would give: the inputs' rows, and their bytes
    under the size model (their sum without one)."""
    first = task.segments[0]
    rows = sum(s.num_rows or 0 for s in task.segments)
    size = sum(segment_load(s) for s in task.segments)
    if model is not None:
        size = min(size, int(model[0] + model[1] * rows))
    name = uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"lance-segmerge:{plan.plan_id}:{level}:{task.task_id}")
    return IndexSegment(
        uuid=str(name),
        name=first.name,
        fields=first.fields,
        dataset_version=max(s.dataset_version for s in task.segments),
        fragment_ids=tuple(sorted({f for s in task.segments for f in s.fragment_ids})),
        index_version=first.index_version,
        files=(IndexFile("auxiliary.idx", size),),
        index_type=first.index_type,
        num_partitions=first.num_partitions,
        num_rows=rows,
        index_file_bytes=0,
        auxiliary_file_bytes=size,
    )


def merge_tree(plan: MergePlan, fan_in: int = 32, target_segments: int = 1) -> MergeTree:
    """The tree ``run_plan(plan, fan_in=..., target_segments=...)`` (and so
    ``optimize``) will run, predicted without merging anything.

    Level 1 is the plan's tasks (exactly, or regrouped as optimize does
    when a large segment waits for a later level); later levels group the
    predicted outputs (rows and bytes: the sums of their inputs) with the
    kernel's own planner, so the shape (levels, tasks per level, segments
    per task) is the one optimize runs on data without deletions. An
    output's bytes are predicted by a linear model (a fixed part per
    segment plus bytes per row) fitted over the planned segments. Only the
    kernel's grouping is called: no file is opened.

    Parameters
    ----------
    plan : MergePlan
        A plan (``plan_index_segment_merge(..., segments_per_task=fan_in)``
        is what optimize makes).
    fan_in : int, default 32
        Segments merged per task at the levels after the first.
    target_segments : int, default 1
        Stop at this many segments.

    Returns
    -------
    MergeTree
        With ``estimated=True``.
    """
    from .distributed import _check_tree_args, _tree_walk

    _check_tree_args(fan_in, target_segments)
    records: list[TreeTask] = []
    model = size_model(plan.segments())

    def run_level(level: int, tasks: tuple[MergeTask, ...]) -> list[IndexSegment]:
        outs = []
        for t in tasks:
            out = _predicted_output(plan, level, t, model)
            outs.append(out)
            records.append(TreeTask(level, t.task_id, t.segment_ids, out.uuid, out.num_rows or 0, out.size_bytes))
        return outs

    final: list[IndexSegment] = []
    if plan.tasks:
        final, _ = _tree_walk(plan.tasks, fan_in, target_segments, _group_by_size, run_level)
    return tree_record(plan, fan_in, target_segments, records, final, estimated=True)


def tree_record(
    plan: MergePlan,
    fan_in: int,
    target_segments: int,
    tasks: Sequence[TreeTask],
    final: Sequence[IndexSegment],
    *,
    estimated: bool,
    level_seconds: Sequence[float] = (),
) -> MergeTree:
    """Build the MergeTree of a plan from its recorded tasks."""
    segs = plan.segments()
    return MergeTree(
        index_name=plan.index_name,
        read_version=plan.read_version,
        fan_in=fan_in,
        target_segments=target_segments,
        sources=tuple(s.uuid for s in segs),
        source_rows=tuple(s.num_rows or 0 for s in segs),
        source_bytes=tuple(segment_load(s) for s in segs),
        tasks=tuple(tasks),
        outputs=tuple(s.uuid for s in final),
        estimated=estimated,
        level_seconds=tuple(level_seconds),
    )


@dataclass(frozen=True)
class OptimizeReport(Tabular):
    """What an optimize did: from how many segments to how many, the tree
    it ran (one table row per task), sizes and times.

    :func:`lance_segmerge.optimize_with_report` returns one;
    ``optimize(..., on_report=callback)`` hands one to a callback whatever
    optimize returns.

    Parameters
    ----------
    dataset_uri, index_name : str
    read_version : int
        Version the plan was made at.
    version : int
        The version committed (``read_version`` when nothing was merged).
    executor : str
        Where the merges ran.
    segments_before, segments_after : int
        Segments of the index before and after (untouched ones included).
    rows : int
        Rows of the merged (planned) segments.
    bytes_before, bytes_after : int
        Bytes of the planned segments, and of what replaced them.
    seconds : float
        Wall time of the merges and the commit.
    commit_seconds : float
        Of which the commit.
    tree : MergeTree
        The tree as executed.
    plan : MergePlan
        The plan it ran.
    outputs : tuple of IndexSegment
        The committed segments that replaced the planned ones.
    """

    dataset_uri: str
    index_name: str
    read_version: int
    version: int
    executor: str
    segments_before: int
    segments_after: int
    rows: int
    bytes_before: int
    bytes_after: int
    seconds: float
    commit_seconds: float
    tree: MergeTree
    plan: MergePlan
    outputs: tuple[IndexSegment, ...] = ()
    format_version: int = REPORT_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version != REPORT_FORMAT_VERSION:
            raise InvalidInputError(f"OptimizeReport format_version {self.format_version} is not supported")

    def before(self) -> SegmentList:
        """The planned segments (what the commit replaced)."""
        return self.plan.segments()

    def after(self) -> SegmentList:
        """The segments that replaced them."""
        return SegmentList(self.outputs)

    def __repr__(self) -> str:
        return (
            f"OptimizeReport(index={self.index_name!r}, version={self.read_version} -> {self.version}, "
            f"segments={self.segments_before} -> {self.segments_after}, levels={self.tree.num_levels}, "
            f"tasks={len(self.tree.tasks)}, rows={self.rows:,}, seconds={self.seconds:.2f})"
        )

    def _table_spec(self) -> TableSpec:
        tree = self.tree._table_spec()
        summary = (
            ("segments", f"{self.segments_before:,} -> {self.segments_after:,}"),
            ("version", f"{self.read_version} -> {self.version}"),
            ("rows", f"{self.rows:,}"),
            ("size", f"{human_bytes(self.bytes_before)} -> {human_bytes(self.bytes_after)}"),
            ("levels", f"{self.tree.num_levels} (fan_in {self.tree.fan_in})"),
            ("executor", self.executor),
            ("time", f"{self.seconds:.2f}s (commit {self.commit_seconds:.2f}s)"),
        )
        title = f"optimize of {self.index_name} in {self.dataset_uri}"
        return TableSpec(title, tree.columns, tree.rows, summary, "task")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "dataset_uri": self.dataset_uri,
            "index_name": self.index_name,
            "read_version": self.read_version,
            "version": self.version,
            "executor": self.executor,
            "segments_before": self.segments_before,
            "segments_after": self.segments_after,
            "rows": self.rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "seconds": self.seconds,
            "commit_seconds": self.commit_seconds,
            "tree": self.tree.to_dict(),
            "plan": self.plan.to_dict(),
            "outputs": [s.to_dict() for s in self.outputs],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OptimizeReport":
        return cls(
            dataset_uri=str(d["dataset_uri"]),
            index_name=str(d["index_name"]),
            read_version=int(d["read_version"]),
            version=int(d["version"]),
            executor=str(d.get("executor") or ""),
            segments_before=int(d["segments_before"]),
            segments_after=int(d["segments_after"]),
            rows=int(d["rows"]),
            bytes_before=int(d["bytes_before"]),
            bytes_after=int(d["bytes_after"]),
            seconds=float(d["seconds"]),
            commit_seconds=float(d.get("commit_seconds") or 0.0),
            tree=MergeTree.from_dict(d["tree"]),
            plan=MergePlan.from_dict(d["plan"]),
            outputs=tuple(IndexSegment.from_dict(s) for s in d.get("outputs") or ()),
            format_version=int(d.get("format_version", REPORT_FORMAT_VERSION)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "OptimizeReport":
        return cls.from_dict(json.loads(s))
