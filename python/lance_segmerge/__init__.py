"""lance_segmerge: plan, merge and commit the delta segments of Lance vector
indices, fanned out over Ray, Dask or processes.

The kernel is written in Go and reads and writes the Lance table and file
formats directly; datasets stay readable by pylance. docs/architecture.md
maps every public name to the module that holds it.
"""

from __future__ import annotations

from typing import Any

from . import _ffi
from .api import (
    Dataset,
    cleanup,
    commit_existing_index_segments,
    merge_existing_index_segments,
    open,
    plan_index_segment_merge,
)
from ._costmodel import choose_executor
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
    WorkerError,
)
from ._health import health
from .maintain import maintain, maintain_all
from .plot import plot_health, plot_merge_tree, plot_partition_sizes, plot_segment_sizes
from .reports import (
    HealthReport,
    MaintainReport,
    MergeTree,
    OptimizeProgress,
    OptimizeReport,
    RepairAction,
    RepairReport,
    SegmentHealth,
    SegmentVerdict,
    TreeTask,
    VerifyCheck,
    VerifyReport,
)
from .runs import optimize, optimize_with_report, run_plan, run_plan_with_report
from .tree import merge_tree
from .types import IndexFile, IndexSegment, MergePlan, MergeTask, OperationProgress, SegmentList
from .verify import repair_index, search_segment, verify_index

from ._version import __version__

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
    "plot_health",
    "MergeTree",
    "TreeTask",
    "OptimizeReport",
    "cleanup",
    "train_index_model",
    "read_index_model",
    "build_index_segment",
    "create_index",
    "IndexModel",
    "maintain",
    "maintain_all",
    "MaintainReport",
    "choose_executor",
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
    "WorkerError",
    "kernel_version",
    "verify_index",
    "repair_index",
    "search_segment",
    "VerifyReport",
    "SegmentVerdict",
    "VerifyCheck",
    "RepairReport",
    "RepairAction",
    "health",
    "HealthReport",
    "SegmentHealth",
    "reindex",
]


_BUILD_NAMES = {
    "build_index_segment": "build",
    "create_index": "build",
    "read_index_model": "build",
    "train_index_model": "build",
    "IndexModel": "model",
    "reindex": "reindexing",
}


def __getattr__(name: str) -> Any:
    """The build path needs numpy and pyarrow (the ``lance`` extra): its
    names are imported on first use, so that the merge path works without
    them."""
    mod = _BUILD_NAMES.get(name)
    if mod is None:
        raise AttributeError(f"module 'lance_segmerge' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{mod}", __name__), name)


def kernel_version() -> str:
    """Version of the native Go kernel."""
    return str(_ffi.call("Version"))
