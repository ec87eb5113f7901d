"""Run merge tasks on Ray (the ``ray`` extra). Uses the running Ray
cluster, or starts a local one."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

from ..errors import UnsupportedError, WorkerError

logger = logging.getLogger(__name__)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise UnsupportedError("executor='ray' needs Ray: pip install 'lance-segmerge[ray]'") from exc
    return ray


class RayExecutor:
    """Runs each item as a Ray task (one CPU each)."""

    def __init__(self, max_workers: Optional[int] = None) -> None:
        ray = _ray()
        self._started = False
        if not ray.is_initialized():
            ray.init(num_cpus=max_workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
            self._started = True
        self._refs: list[Any] = []

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int], None]] = None
    ) -> list[Any]:
        ray = _ray()
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [remote.remote(item) for item in items]
        self._refs = refs
        index = {r: i for i, r in enumerate(refs)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for r in done:
                    try:
                        ray.get(r)  # raise the first failure
                    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                            ray.exceptions.OutOfMemoryError) as exc:
                        raise WorkerError(f"the Ray worker running item {index[r]} of the batch died: {exc}", (index[r],)) from exc
                    if on_done is not None:
                        on_done(index[r])
        except BaseException:
            self.cancel()
            raise
        return [ray.get(r) for r in refs]

    def cancel(self) -> None:
        ray = _ray()
        # Cancel only what has not finished: Ray 2.60's core worker can abort
        # the driver process ("Check failed: ... Tried to complete task that
        # was not pending", seen in CI) when a forced cancel meets a task
        # that is completing.
        try:
            _, running = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
        except Exception:  # pragma: no cover - cluster gone
            running = list(self._refs)
        for r in running:
            try:
                ray.cancel(r, force=True)
            except Exception:  # finished meanwhile
                pass
        # A forced cancel kills the task's worker asynchronously: wait for
        # every task to end, so that the caller removes their outputs after
        # the last write (bounded: a worker that does not stop is left to
        # lance_segmerge.cleanup).
        if self._refs:
            try:
                ray.wait(self._refs, num_returns=len(self._refs), timeout=60)
            except Exception as exc:  # pragma: no cover - cluster gone
                logger.warning("could not wait for cancelled Ray tasks: %s", exc)

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
