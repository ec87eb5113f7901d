"""Progress reporting: a user callback, or tqdm bars (the optional
``progress`` extra), driven from the calling thread.

- :class:`Reporter` turns the kernel's counter snapshots of one long call
  (a merge, a build, a verification), polled from the calling thread, into
  :class:`~lance_segmerge.types.OperationProgress` callbacks or one bar;
- :class:`LevelReporter` reports a run's levels (optimize, create_index)
  as :class:`~lance_segmerge.reports.OptimizeProgress` callbacks or one bar
  per level.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Union

from .reports import OptimizeProgress
from .types import OperationProgress

logger = logging.getLogger(__name__)

#: ``progress=`` of one long call: a bar (True), nothing, or a callback of
#: kernel snapshots.
OperationProgressArg = Union[None, bool, Callable[[OperationProgress], None]]
#: ``progress=`` of a run: a bar per level (True), nothing, or a callback of
#: level snapshots.
OptimizeProgressArg = Union[None, bool, Callable[[OptimizeProgress], None]]


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

    def __init__(self, progress: OperationProgressArg, desc: str) -> None:
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

    @property
    def poll(self) -> Optional[Callable[[dict[str, Any]], None]]:
        """What ``_ffi.run_operation`` polls with: this reporter, or None
        when nothing listens (the kernel is then not polled at all)."""
        return self if self.active else None

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LevelReporter:
    """Drives the callback, or one tqdm bar per tree level (a widget in
    notebooks: each level's bar stays, filled, when the next one starts)."""

    def __init__(self, progress: OptimizeProgressArg) -> None:
        self._cb: Optional[Callable[[OptimizeProgress], None]] = progress if callable(progress) else None
        self._bars = progress is True
        self._bar: Any = None
        self._level = 0  # level 0 (create_index's builds) gets no bar

    def __call__(self, p: OptimizeProgress) -> None:
        if self._cb is not None:
            self._cb(p)
        if self._bars and p.level != self._level:
            self.close()
            self._level = p.level
            self._bar = new_bar(f"optimize level {p.level}", "task", p.tasks_total)
            self._bars = self._bar is not None
        if self._bar is not None:
            move_bar(self._bar, p.tasks_done, p.tasks_total, f"{p.segments} segments")
        logger.debug("level %d: %d/%d tasks", p.level, p.tasks_done, p.tasks_total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
