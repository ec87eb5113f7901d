"""The shape of a merge tree: how :func:`lance_segmerge.optimize` folds a
plan's tasks and their outputs level by level (:func:`_tree_walk`, shared
by the run engine and the prediction), and the tree a plan will run,
predicted from segment sizes before anything is merged
(:func:`merge_tree`).

The tree and report types live in :mod:`lance_segmerge.reports`; their
names here keep working.
"""

from __future__ import annotations

import json
import logging
import uuid as uuidlib
from typing import Callable, Optional, Sequence

from . import _ffi
from ._args import checked
from .reports import REPORT_FORMAT_VERSION, MergeTree, OptimizeReport, TreeTask
from .types import IndexFile, IndexSegment, MergePlan, MergeTask

__all__ = ["TreeTask", "MergeTree", "OptimizeReport", "merge_tree", "REPORT_FORMAT_VERSION"]

logger = logging.getLogger(__name__)


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


def segment_load(s: IndexSegment) -> int:
    """The bytes the planner balances for a segment: its two index files
    (what the kernel's planner reads from them), else the manifest's sizes."""
    if s.index_file_bytes is not None or s.auxiliary_file_bytes is not None:
        return (s.index_file_bytes or 0) + (s.auxiliary_file_bytes or 0)
    return s.size_bytes


def _group_by_size(segments: Sequence[IndexSegment], per_task: int) -> tuple[MergeTask, ...]:
    """Group segments as the kernel's planner would, from their sizes only."""
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


@checked(converts=("plan",))
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
