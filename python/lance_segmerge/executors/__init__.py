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
from typing import Any, Callable, Optional, Protocol, Sequence, Union

from ..errors import InvalidInputError

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
    """Adapts a :class:`concurrent.futures.Executor`."""

    def __init__(self, pool: cf.Executor, owned: bool = False) -> None:
        self._pool = pool
        self._owned = owned
        self._futures: list[cf.Future[Any]] = []

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int], None]] = None
    ) -> list[Any]:
        futures = [self._pool.submit(fn, item) for item in items]
        self._futures = futures
        index = {f: i for i, f in enumerate(futures)}
        try:
            for f in cf.as_completed(futures):
                f.result()  # raise the first failure
                if on_done is not None:
                    on_done(index[f])
        except BaseException:
            self.cancel()
            raise
        return [f.result() for f in futures]

    def warm(self, fn: Callable[[Any], Any], n: int) -> None:
        """Start a process pool's workers now, each running ``fn`` (an
        import, say) without waiting for it: the caller goes on with its
        own work while the processes spawn. Thread pools need nothing."""
        if isinstance(self._pool, cf.ProcessPoolExecutor):
            for _ in range(n):
                self._pool.submit(fn, None)

    def cancel(self) -> None:
        for f in self._futures:
            f.cancel()
        if isinstance(self._pool, cf.ThreadPoolExecutor):
            from .. import _ffi

            _ffi.cancel_all()
        elif isinstance(self._pool, cf.ProcessPoolExecutor):
            # Running merges stop when their process dies; the driver
            # removes their partial outputs.
            for p in list(getattr(self._pool, "_processes", {}).values()):
                p.kill()

    def close(self) -> None:
        if self._owned:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _workers(max_workers: Optional[int]) -> int:
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
        return FuturesExecutor(cf.ProcessPoolExecutor(_workers(max_workers), mp_context=ctx), owned=True)
    if executor == "ray":
        from .ray import RayExecutor

        return RayExecutor(max_workers)
    if executor == "dask":
        from .dask import DaskExecutor

        return DaskExecutor(max_workers)
    if not isinstance(executor, str) and hasattr(executor, "map") and hasattr(executor, "cancel"):
        return executor
    raise InvalidInputError(
        f"executor must be 'local', 'processes', 'ray', 'dask' or a concurrent.futures.Executor, got {executor!r}"
    )
