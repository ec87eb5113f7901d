"""Progress reporting for long operations: a user callback, or a tqdm bar
(the optional ``progress`` extra). Both are driven from the calling thread
by polling the kernel."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Union

from .types import OperationProgress

logger = logging.getLogger(__name__)

ProgressArg = Union[None, bool, Callable[[OperationProgress], None]]


class Reporter:
    """Turns kernel counter snapshots into callback calls or a tqdm bar."""

    def __init__(self, progress: ProgressArg, desc: str) -> None:
        self._callback: Optional[Callable[[OperationProgress], None]] = None
        self._bar: Any = None
        self._desc = desc
        if progress is True:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                logger.warning("progress=True needs tqdm: pip install 'lance-segmerge[progress]'")
            else:
                self._bar = tqdm(desc=desc, unit="part", total=None)
        elif callable(progress):
            self._callback = progress
        self.last = OperationProgress()

    def __call__(self, snap: dict[str, Any]) -> None:
        p = OperationProgress.from_dict(snap)
        self.last = p
        if self._callback is not None:
            self._callback(p)
        if self._bar is not None:
            if p.partitions_total and self._bar.total != p.partitions_total:
                self._bar.total = p.partitions_total
            self._bar.n = p.partitions_done
            self._bar.set_postfix_str(f"{p.stage} {p.rows_written} rows", refresh=False)
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    @property
    def active(self) -> bool:
        return self._callback is not None or self._bar is not None
