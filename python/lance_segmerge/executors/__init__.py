"""Executors run worker functions over items and return results in order.

Every executor has the same shape: ``map(fn, items, on_done=None) ->
list``, where ``on_done(i)`` is called on the driver as item ``i``
finishes, and ``cancel()`` stops what is still running. ``fn`` must be a
module-level function (so that it pickles) and every item picklable.

Available: ``"local"`` (threads: the Go kernel releases the GIL, so merges
run in parallel), ``"processes"`` (a spawn-started process pool: a forked
Go runtime hangs), ``"ray"`` and ``"dask"`` (optional extras), or any
:class:`concurrent.futures.Executor`.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
import signal
import sys
import time
from typing import Any, Callable, Optional, Protocol, Sequence, Union

from .. import _ffi
from .._validate import _show
from ..errors import InvalidInputError, WorkerError
from . import _pool

logger = logging.getLogger(__name__)

__all__ = ["Executor", "resolve_executor", "FuturesExecutor"]


class Executor(Protocol):
    """What :func:`lance_segmerge.optimize` needs from an executor."""

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int], None]] = None
    ) -> list[Any]: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


class FuturesExecutor:
    """Adapts a :class:`concurrent.futures.Executor`.

    A worker process that dies (SIGKILL, the OOM killer, a crash) breaks a
    process pool: the failure becomes a :class:`WorkerError` naming the
    item that worker was running (for pools this module creates, whose
    workers report the item they start) or the items left unfinished, and
    the pool's other workers are stopped.
    """

    def __init__(self, pool: cf.Executor, owned: bool = False, started: Any = None) -> None:
        self._pool = pool
        self._owned = owned
        self._futures: list[cf.Future[Any]] = []
        # Every worker process seen during a map (a broken pool forgets its
        # processes; cancel must still stop them before the driver removes
        # their outputs).
        self._procs: dict[int, Any] = {}
        # A queue the pool's workers put (pid, item) on as they start an
        # item (see _worker.run_reporting), or None.
        self._started = started

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int], None]] = None
    ) -> list[Any]:
        futures: list[cf.Future[Any]] = []
        self._futures = futures
        index: dict[cf.Future[Any], int] = {}
        procs = self._procs
        try:
            for i, item in enumerate(items):
                if self._started is not None:
                    f = self._pool.submit(_pool.run_reporting, fn, i, item)
                else:
                    f = self._pool.submit(fn, item)
                index[f] = i
                futures.append(f)
                # A process pool starts its workers as items arrive.
                procs.update(getattr(self._pool, "_processes", None) or {})
        except cf.BrokenExecutor as exc:
            # The pool broke while items were still being submitted.
            err = self._lost(futures, index, procs, exc, total=len(items))
            self.cancel()
            raise err from exc
        try:
            pending = set(futures)
            while pending:
                # Keep every worker process seen (a pool may start one at any
                # time, and forgets a dead one when it breaks): its exit code
                # says how it died.
                finished, pending = cf.wait(pending, timeout=0.05, return_when=cf.FIRST_COMPLETED)
                procs.update(getattr(self._pool, "_processes", None) or {})
                for f in sorted(finished, key=index.__getitem__):
                    try:
                        f.result()  # raise the first failure
                    except cf.BrokenExecutor as exc:
                        raise self._lost(futures, index, procs, exc, total=len(futures)) from exc
                    if on_done is not None:
                        on_done(index[f])
        except BaseException:
            self.cancel()
            raise
        return [f.result() for f in futures]

    def _lost(self, futures: list[cf.Future[Any]], index: dict[cf.Future[Any], int], procs: dict[int, Any],
              exc: BaseException, total: int) -> WorkerError:
        """The WorkerError for a broken pool: which worker died, how, and
        what it was running, of ``total`` items (more than ``futures``
        when the pool broke during submission)."""
        running: dict[int, int] = {}  # pid -> item it started last
        while self._started is not None:
            try:
                if self._started.empty():
                    break
                pid, item = self._started.get()
            except (OSError, EOFError, ValueError):
                break
            running[pid] = item
        done = {index[f] for f in futures if f.done() and not f.cancelled() and f.exception() is None}
        dead = []
        deadline = time.monotonic() + 2
        for pid, p in procs.items():
            p.join(max(0.0, deadline - time.monotonic()))
            code = getattr(p, "exitcode", None)
            while code is None and time.monotonic() < deadline:
                # The pool's own thread may have reaped the process a moment
                # before: until it records the status, ours reads None.
                time.sleep(0.02)
                code = getattr(p, "exitcode", None)
            if code not in (None, 0, -signal.SIGTERM):  # the pool terminates the others itself
                dead.append((pid, code))
        hows = ", ".join(f"process {pid} {_how(code)}" for pid, code in dead) or "a worker process died"
        items = tuple(sorted({running[pid] for pid, _ in dead if pid in running} - done))
        if items:
            return WorkerError(f"{hows} while running item {', '.join(map(str, items))} of the batch", items)
        left = tuple(i for i in range(total) if i not in done)
        hint = ""
        if self._started is not None and not running and not done and dead and all(c == 1 for _, c in dead) \
                and getattr(sys.modules.get("__main__"), "__file__", None):
            # Spawned workers import the caller's script: one that calls us
            # at its top level makes each worker start a pool of its own
            # while it starts, which multiprocessing refuses (status 1).
            hint = (" No worker started an item: with executor='processes', a script must call lance_segmerge "
                    "under `if __name__ == '__main__':` (the workers are spawned and import the script)")
        return WorkerError(f"{hows}; items {', '.join(map(str, left))} of the batch did not finish ({exc}).{hint}", left)

    def warm(self, fn: Callable[[Any], Any], n: int) -> None:
        """Start a process pool's workers now, each running ``fn`` (an
        import, say) without waiting for it: the caller goes on with its
        own work while the processes spawn. Thread pools need nothing."""
        if isinstance(self._pool, cf.ProcessPoolExecutor):
            for _ in range(n):
                self._pool.submit(fn, None)

    def cancel(self) -> None:
        if isinstance(self._pool, cf.ProcessPoolExecutor):
            # A process pool's futures are not cancelled: when its workers
            # die, the pool fails every pending one (BrokenProcessPool),
            # and before Python 3.12 its manager thread raised
            # InvalidStateError, printed to the user, on each it found
            # cancelled. Running merges stop when their process dies; the driver
            # removes their partial outputs once every one is gone (a worker
            # still writing would leave files, or an empty directory, behind).
            procs = {**self._procs, **(getattr(self._pool, "_processes", None) or {})}
            for p in procs.values():
                p.kill()
            for p in procs.values():
                p.join(5)
            return
        for f in self._futures:
            f.cancel()
        if isinstance(self._pool, cf.ThreadPoolExecutor):
            _ffi.cancel_all()

    def close(self) -> None:
        if self._owned:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _how(code: Optional[int]) -> str:
    """How a process ended, from its exit code."""
    if code is None:
        return "is gone"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _workers(max_workers: Optional[int]) -> int:
    """The pool size: ``max_workers`` (checked at the public entry) or one
    worker per core, at most 8."""
    return max_workers or max(1, min(8, os.cpu_count() or 1))


def resolve_executor(executor: Union[str, cf.Executor, Executor], max_workers: Optional[int] = None) -> Executor:
    """Turn the ``executor`` argument of :func:`lance_segmerge.optimize`
    into an :class:`Executor`. Pools created here are closed by ``close``."""
    if isinstance(executor, cf.Executor):
        return FuturesExecutor(executor)
    if executor == "local":
        return FuturesExecutor(cf.ThreadPoolExecutor(_workers(max_workers), thread_name_prefix="segmerge"), owned=True)
    if executor == "processes":
        ctx = multiprocessing.get_context("spawn")
        started = ctx.SimpleQueue()
        pool = cf.ProcessPoolExecutor(_workers(max_workers), mp_context=ctx, initializer=_pool.init_reporting, initargs=(started,))
        return FuturesExecutor(pool, owned=True, started=started)
    if executor == "ray":
        from .ray import RayExecutor

        return RayExecutor(max_workers)
    if executor == "dask":
        from .dask import DaskExecutor

        return DaskExecutor(max_workers)
    if not isinstance(executor, str) and hasattr(executor, "map") and hasattr(executor, "cancel"):
        return executor
    raise InvalidInputError(
        f"executor must be 'local', 'processes', 'ray', 'dask' or a concurrent.futures.Executor, got {_show(executor)}"
    )
