"""Former home of optimize and run_plan, kept so that
``lance_segmerge.distributed.<name>`` imports keep working: the code is in
:mod:`lance_segmerge.runs` (this module's name also read as Dask's
``distributed`` package)."""

from __future__ import annotations

from ._costmodel import choose_executor
from ._progress import OptimizeProgressArg as ProgressArg
from .reports import OptimizeProgress
from .runs import RunResult, optimize, optimize_with_report, run_plan, run_plan_with_report
from .tree import _defer_large

__all__ = [
    "optimize",
    "optimize_with_report",
    "OptimizeProgress",
    "ProgressArg",
    "run_plan",
    "run_plan_with_report",
    "RunResult",
    "choose_executor",
    "_defer_large",
]
