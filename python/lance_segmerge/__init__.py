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
from .distributed import OptimizeProgress, choose_executor, optimize, run_plan
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
from .maintain import MaintainReport, maintain
from .types import IndexFile, IndexSegment, MergePlan, MergeTask, OperationProgress

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "open",
    "plan_index_segment_merge",
    "merge_existing_index_segments",
    "commit_existing_index_segments",
    "optimize",
    "run_plan",
    "cleanup",
    "maintain",
    "MaintainReport",
    "choose_executor",
    "IndexSegment",
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
