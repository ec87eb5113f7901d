"""verify_index and repair_index: check a vector index against its data,
segment by segment, and rewrite the segments whose damage can be undone.

No Lance tool checks an index against the vectors it indexes. A segment
whose code layout was applied twice (the chained-merge bug: merged IVF_PQ
or IVF_RQ segments merged again) opens and answers queries with a
fraction of its recall, and nothing says so. :func:`verify_index` reads a
sample of each segment's rows back from the data files, encodes them with
the segment's own model and compares the codes it stores (under the
declared layout and under the known wrong ones), checks the segment's
files, structure and row ids, and estimates its recall with a Go search
that computes what a pylance query computes. :func:`repair_index` rewrites
every segment whose damage is an invertible layout error and commits the
rewrites as one version (on the run engine).

The verification verbs live in :mod:`lance_segmerge._verify`, the reports
in :mod:`lance_segmerge.reports`; their names here keep working.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Union

from . import _jobs
from ._args import checked
from ._engine import Run
from ._verify import (
    DEFAULT_K,
    DEFAULT_OUTPUT_SAMPLE_ROWS,
    DEFAULT_QUERIES,
    DEFAULT_SAMPLE_ROWS,
    _options,
    _verify,
    check_outputs,
    require_clean,
    search_segment,
    verify_index,
)
from .api import DatasetLike, as_dataset
from .executors import resolve_executor
from .reports import VERIFY_FORMAT_VERSION, RepairAction, RepairReport, SegmentVerdict, VerifyCheck, VerifyReport
from .types import IndexSegment

if TYPE_CHECKING:  # pragma: no cover
    import concurrent.futures as cf

    from .executors import Executor

logger = logging.getLogger(__name__)

__all__ = [
    "VerifyCheck",
    "SegmentVerdict",
    "VerifyReport",
    "RepairAction",
    "RepairReport",
    "verify_index",
    "repair_index",
    "search_segment",
    "check_outputs",
    "require_clean",
    "VERIFY_FORMAT_VERSION",
    "DEFAULT_SAMPLE_ROWS",
    "DEFAULT_QUERIES",
    "DEFAULT_K",
    "DEFAULT_OUTPUT_SAMPLE_ROWS",
]


@checked(converts=("dataset",))
def repair_index(
    dataset: DatasetLike,
    index_name: str,
    *,
    executor: Union[str, "cf.Executor", "Executor"] = "local",
    max_workers: Union[int, None] = None,
    dry_run: bool = True,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    queries: int = 0,
    seed: int = 0,
) -> RepairReport:
    """Rewrite every segment whose damage is an invertible layout error.

    The index is verified first (:func:`verify_index`). Each segment whose
    damage is only a layout error (codes transposed or packed twice, a
    layout flag that lies) is rewritten on the executor into a new segment
    (new uuid) with the layout applied once, and the rewrite is verified;
    the rewrites are then committed as one version with
    :func:`commit_existing_index_segments` (``replaces=`` the damaged
    segments). Segments that cannot be rescued are reported with the
    advice to rebuild them. A segment that verifies clean is never
    touched. With ``dry_run`` (the default) nothing is written.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    index_name : str
    executor : str or Executor, default "local"
        Where the rewrites run (``local``, ``processes``, ``ray``,
        ``dask``, or a ``concurrent.futures.Executor``).
    max_workers : int, optional
    dry_run : bool, default True
        Verify and report what would be done; write nothing.
    sample_rows, queries, seed
        Passed to :func:`verify_index` (and the rewrites' verification).

    Returns
    -------
    RepairReport
        ``version`` is the committed version; on a ``LanceDataset`` check
        it out with ``dataset.checkout_version(report.version)``.

    Raises
    ------
    CorruptError
        A rewrite does not verify (nothing is committed; its output is
        removed).
    """
    ds = as_dataset(dataset)
    t0 = time.perf_counter()
    rep = _verify(ds, index_name, _options(sample_rows, queries, DEFAULT_K, None, False, seed))
    fixable = rep.rescuable
    actions: dict[str, RepairAction] = {}
    for s in rep.damaged:
        if not s.rescuable:
            actions[s.uuid] = RepairAction(s.uuid, "rebuild", s.damage, s.layout_depth, advice=s.advice)
    version, committed = ds.version, False
    if dry_run or not fixable:
        for s in fixable:
            actions[s.uuid] = RepairAction(s.uuid, "rewrite", s.damage, s.layout_depth, advice=s.advice)
    else:
        if executor == "auto":
            executor = "local"  # rewrites are few; no cost model for them
        run = Run(ds, index_name, resolve_executor(executor, max_workers),
                  executor=executor if isinstance(executor, str) else type(executor).__name__, verb="repair_index")
        with run:
            jobs = [{"dataset": ds, "index_name": index_name, "uuid": s.uuid, "depth": s.layout_depth,
                     "output_uuid": run.new_output(), "sample_rows": sample_rows, "seed": seed} for s in fixable]
            results = run.batch(_jobs.repair_task, jobs, describe=lambda k: f"rewrite of segment {jobs[k]['uuid']}")
            done: list[IndexSegment] = []
            for s, r in zip(fixable, results):
                seg = IndexSegment._from_kernel(r["segment"])
                done.append(seg)
                actions[s.uuid] = RepairAction(s.uuid, "rewrite", s.damage, s.layout_depth, seg.uuid, r["report"]["verdict"], s.advice)
            version = run.commit(index_name, rep.column, done, replaces=[s.uuid for s in fixable]).version
            committed = True
        logger.info("repaired %s: rewrote %d segments, committed version %d", index_name, len(done), version)
    ordered = tuple(actions[s.uuid] for s in rep.damaged)
    return RepairReport(
        dataset_uri=ds.display_uri, index_name=index_name, read_version=ds.version, version=int(version),
        dry_run=dry_run, committed=committed, rewritten=len(fixable),
        to_rebuild=sum(1 for a in ordered if a.action == "rebuild"), seconds=time.perf_counter() - t0,
        actions=ordered, report=rep,
    )
