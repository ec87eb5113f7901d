"""lance_segmerge: plan, merge and commit the delta segments of Lance vector
indices, fanned out over Ray, Dask or processes.

The kernel is written in Go and reads and writes the Lance table and file
formats directly; datasets stay readable by pylance.
"""

from __future__ import annotations

from .api import (
    Dataset,
    cleanup,
    commit_existing_index_segments,
    merge_existing_index_segments,
    open,
    plan_index_segment_merge,
)
from .distributed import OptimizeProgress, optimize, optimize_with_report, run_plan, run_plan_with_report
from .errors import (
    CancelledError,
    ConflictError,
    CorruptError,
    InternalError,
    InvalidInputError,
    NotFoundError,
    SegmergeError,
    StorageError,
    UnsupportedError,
)
from .plot import plot_merge_tree, plot_partition_sizes, plot_segment_sizes
from .tree import MergeTree, OptimizeReport, TreeTask, merge_tree
from .types import IndexFile, IndexSegment, MergePlan, MergeTask, OperationProgress, SegmentList

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "open",
    "plan_index_segment_merge",
    "merge_existing_index_segments",
    "commit_existing_index_segments",
    "optimize",
    "run_plan",
    "optimize_with_report",
    "run_plan_with_report",
    "merge_tree",
    "plot_segment_sizes",
    "plot_partition_sizes",
    "plot_merge_tree",
    "MergeTree",
    "TreeTask",
    "OptimizeReport",
    "cleanup",
    "IndexSegment",
    "SegmentList",
    "MergePlan",
    "MergeTask",
    "OperationProgress",
    "OptimizeProgress",
    "IndexFile",
    "SegmergeError",
    "InvalidInputError",
    "NotFoundError",
    "CorruptError",
    "ConflictError",
    "CancelledError",
    "UnsupportedError",
    "StorageError",
    "InternalError",
    "kernel_version",
]


def kernel_version() -> str:
    """Version of the native Go kernel."""
    from . import _ffi

    return str(_ffi.call("Version"))
