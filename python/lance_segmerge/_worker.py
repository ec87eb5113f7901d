"""Module-level worker functions: importable by name, so they pickle to
spawned processes, Ray workers and Dask workers. The native kernel is
imported lazily, inside the worker."""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

# Set in pool workers by init_reporting: where they report the item they
# start, so that the driver can name the task of a worker that dies.
_started: Optional[Any] = None


def init_reporting(started: Any) -> None:
    """Process pool initializer: remember the driver's queue."""
    global _started
    _started = started


def run_reporting(fn: Callable[[Any], Any], i: int, item: Any) -> Any:
    """Report (pid, i) to the driver, then run fn(item)."""
    if _started is not None:
        _started.put((os.getpid(), i))
    return fn(item)


def merge_task(job: dict[str, Any]) -> dict[str, Any]:
    """Merge one task; ``job`` holds the dataset (a picklable
    :class:`Dataset`), the task, the output uuid and merge options. Returns
    the merged segment as a dict (plain data crosses process boundaries)."""
    from .api import merge_existing_index_segments
    from .types import MergeTask

    task = job["task"] if isinstance(job["task"], MergeTask) else MergeTask.from_dict(job["task"])
    _failpoint("before", job, task)
    seg = merge_existing_index_segments(
        job["dataset"],
        task,
        index_uuid=job.get("index_uuid"),
        requantize_sq=bool(job.get("requantize_sq", True)),
        window_rows=job.get("window_rows"),
        parallelism=job.get("parallelism"),
        hnsw_graph=job.get("hnsw_graph", "reuse"),
    )
    _failpoint("after", job, task)
    return seg.to_dict()


def _failpoint(where: str, job: dict[str, Any], task: Any) -> None:
    """A test hook (the fault suite's worker kill): with
    LANCE_SEGMERGE_FAILPOINT=kill-worker:<level>:<task_id>:<before|after>,
    the worker running that task SIGKILLs itself at that point, as the OOM
    killer would."""
    spec = os.environ.get("LANCE_SEGMERGE_FAILPOINT", "")
    if spec and spec == f"kill-worker:{job.get('level')}:{task.task_id}:{where}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def ping(_: Any = None) -> str:
    """Load the native kernel in a worker and return its version (to warm a
    pool up before timing, or to check a worker's installation)."""
    from . import kernel_version

    return kernel_version()


def cancel_running(timeout: float = 60.0) -> int:
    """Cancel the kernel operations running in this worker process and wait
    (up to ``timeout`` seconds) until they have stopped and cleaned up;
    returns how many were running. Nothing is loaded if the kernel is not."""
    import sys
    import time

    ffi = sys.modules.get(__package__ + "._ffi")
    if ffi is None:
        return 0
    n = int(ffi.cancel_all())
    deadline = time.monotonic() + timeout
    while ffi.running() and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


def warm_build(_: Any = None) -> str:
    """Import the build path (numpy, pyarrow, the model and the native
    kernel) in a worker, so that a pool started early is ready when the
    build tasks arrive (create_index does this while it trains)."""
    from . import build  # noqa: F401
    from . import kernel_version

    return kernel_version()


def build_task(job: dict[str, Any]) -> dict[str, Any]:
    """Build one segment over a group of fragments; ``job`` holds the
    dataset, column, index type, fragments, the (picklable) IndexModel, the
    index name and the output uuid. Returns the segment as a dict."""
    from .build import build_index_segment

    seg = build_index_segment(
        job["dataset"],
        job["column"],
        job["index_type"],
        job["fragment_ids"],
        job["model"],
        name=job["name"],
        index_uuid=job.get("index_uuid"),
        window_rows=job.get("window_rows"),
        memory_bytes=job.get("memory_bytes"),
    )
    return seg.to_dict()


def repair_task(job: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one damaged segment with its layout applied once and verify
    the rewrite; ``job`` holds the dataset, index name, segment uuid, the
    layout depth found, the output uuid and the verification's sample.
    Returns {"segment": ..., "report": ...} as plain dicts."""
    from .verify import _repair_task

    return _repair_task(job)
