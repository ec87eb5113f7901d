"""Progress reporting for long operations: a user callback, or a tqdm bar
(the optional ``progress`` extra). Both are driven from the calling thread
by polling the kernel."""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Union

from .types import OperationProgress

logger = logging.getLogger(__name__)

ProgressArg = Union[None, bool, Callable[[OperationProgress], None]]


def new_bar(desc: str, unit: str, total: Optional[int] = None) -> Any:
    """A progress bar from ``tqdm.auto``: a widget in Jupyter (with
    ipywidgets), text on a terminal; ``None`` when tqdm is not installed.
    Every long operation (merges, optimize levels, and the builds and
    verifications to come) makes its bars here."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        logger.warning("progress=True needs tqdm: pip install 'lance-segmerge[progress]'")
        return None
    return tqdm(desc=desc, unit=unit, total=total or None)


def move_bar(bar: Any, n: int, total: Optional[int] = None, postfix: Optional[str] = None) -> None:
    """Move a bar to ``n`` of ``total``. A new total goes through
    ``reset``: notebook widgets only take a new length from it (assigning
    ``bar.total`` leaves the widget's length as it was)."""
    if total and bar.total != total:
        bar.reset(total=total)
    bar.n = n
    if postfix is not None:
        bar.set_postfix_str(postfix, refresh=False)
    bar.refresh()


class Reporter:
    """Turns kernel counter snapshots into callback calls or a tqdm bar."""

    def __init__(self, progress: ProgressArg, desc: str) -> None:
        self._callback: Optional[Callable[[OperationProgress], None]] = None
        self._bar: Any = None
        self._desc = desc
        if progress is True:
            self._bar = new_bar(desc, "part")
        elif callable(progress):
            self._callback = progress
        self.last = OperationProgress()

    def __call__(self, snap: dict[str, Any]) -> None:
        p = OperationProgress.from_dict(snap)
        self.last = p
        if self._callback is not None:
            self._callback(p)
        if self._bar is not None:
            move_bar(self._bar, p.partitions_done, p.partitions_total, f"{p.stage} {p.rows_written} rows")

    def finish(self, partitions: Optional[int], rows_written: Optional[int]) -> None:
        """Fill the bar once the operation succeeded: an operation faster
        than one poll never reported its length (callbacks only ever get
        the kernel's own snapshots)."""
        if self._bar is not None and partitions:
            move_bar(self._bar, partitions, partitions, f"done {rows_written or 0} rows")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    @property
    def active(self) -> bool:
        return self._callback is not None or self._bar is not None
