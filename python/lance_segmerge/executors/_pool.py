"""Plumbing that runs inside pool workers, whatever the job: reporting
which item a worker starts (so that the driver can name the task of a
worker that dies), and cancelling the kernel operations a worker runs.

Module-level functions only: they pickle to spawned processes, Ray and
Dask workers. Nothing here imports a job body or a verb."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Optional

# Set in pool workers by init_reporting: where they report the item they
# start.
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


def cancel_running(timeout: float = 60.0) -> int:
    """Cancel the kernel operations running in this worker process and wait
    (up to ``timeout`` seconds) until they have stopped and cleaned up;
    returns how many were running. Nothing is loaded if the kernel is not."""
    ffi = sys.modules.get("lance_segmerge._ffi")
    if ffi is None:
        return 0
    n = int(ffi.cancel_all())
    deadline = time.monotonic() + timeout
    while ffi.running() and time.monotonic() < deadline:
        time.sleep(0.02)
    return n
