"""Module-level worker functions: importable by name, so they pickle to
spawned processes, Ray workers and Dask workers. The native kernel is
imported lazily, inside the worker."""

from __future__ import annotations

from typing import Any


def merge_task(job: dict[str, Any]) -> dict[str, Any]:
    """Merge one task; ``job`` holds the dataset (a picklable
    :class:`Dataset`), the task, the output uuid and merge options. Returns
    the merged segment as a dict (plain data crosses process boundaries)."""
    from .api import merge_existing_index_segments
    from .types import MergeTask

    task = job["task"] if isinstance(job["task"], MergeTask) else MergeTask.from_dict(job["task"])
    seg = merge_existing_index_segments(
        job["dataset"],
        task,
        index_uuid=job.get("index_uuid"),
        requantize_sq=bool(job.get("requantize_sq", False)),
        window_rows=job.get("window_rows"),
        parallelism=job.get("parallelism"),
        hnsw_graph=job.get("hnsw_graph", "reuse"),
    )
    return seg.to_dict()


def ping(_: Any = None) -> str:
    """Load the native kernel in a worker and return its version (to warm a
    pool up before timing, or to check a worker's installation)."""
    from . import kernel_version

    return kernel_version()
