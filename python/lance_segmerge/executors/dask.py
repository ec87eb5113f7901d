"""Run merge tasks on Dask distributed (the ``dask`` extra). Uses the
current client, or starts a local cluster of processes."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

from ..errors import UnsupportedError, WorkerError
from ._pool import cancel_running

logger = logging.getLogger(__name__)


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise UnsupportedError("executor='dask' needs Dask: pip install 'lance-segmerge[dask]'") from exc
    return distributed


class DaskExecutor:
    """Runs each item as a Dask future."""

    def __init__(self, max_workers: Optional[int] = None) -> None:
        distributed = _distributed()
        self._owned: Optional[Any] = None
        try:
            self._client = distributed.get_client()
        except ValueError:
            cluster = distributed.LocalCluster(
                n_workers=max_workers or 2, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self._client = distributed.Client(cluster)
            self._owned = cluster
        self._futures: list[Any] = []

    def map(
        self, fn: Callable[[Any], Any], items: Sequence[Any], on_done: Optional[Callable[[int], None]] = None
    ) -> list[Any]:
        distributed = _distributed()
        futures = self._client.map(fn, list(items), pure=False, retries=0)
        self._futures = futures
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for f in distributed.as_completed(futures):
                try:
                    f.result()
                except distributed.KilledWorker as exc:
                    i = index[f.key]
                    raise WorkerError(f"the Dask worker running item {i} of the batch died: {exc}", (i,)) from exc
                if on_done is not None:
                    on_done(index[f.key])
        except BaseException:
            self.cancel()
            raise
        return [f.result() for f in futures]

    def cancel(self) -> None:
        if self._futures:
            self._client.cancel(self._futures, force=True)
            # Dask cannot stop a running task: cancel the kernel operations
            # running in each worker (they remove their partial output) and
            # wait until they have stopped, so that the caller removes the
            # outputs after the last write.
            try:
                self._client.run(cancel_running)
            except Exception as exc:  # pragma: no cover - cluster gone
                logger.warning("could not cancel the kernel operations of Dask workers: %s", exc)

    def close(self) -> None:
        if self._owned is not None:
            self._client.close()
            self._owned.close()
