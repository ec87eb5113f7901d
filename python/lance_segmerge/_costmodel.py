"""The cost model behind ``executor="auto"``.

``t = a + b * segments + c * rows`` (seconds) predicts how long a plan takes
to run on one executor: ``a`` is the fixed cost (for a process pool:
spawning the workers and importing the kernel in each), ``b`` the cost per
input segment (opening its files, validating its model), ``c`` the cost per
input row (reading and writing codes).

The coefficients are medians measured on the 2-core VM this was built on:
``bench/results/cost-IVF_RQ-20261130-013445.md`` (``bench/cost_model.py``:
sweeps up to 4M rows and 200 deltas, medians of 5 runs, each in a fresh
process) gives in process ``a = 0.13 s, b = 2.9 ms, c = 0.155 µs`` and for
2 spawned processes ``a = 0.39 s, b = 2.1 ms, c = 0.211 µs``;
``bench/results/auto-quick-20261130-163135.md`` (``bench/executor_auto.py
--preset quick``, medians of 3 while other jobs shared the machine) agrees
on the start-up (0.25 s against 0.86 s, the pool 3-4x slower at 50k-400k
rows). The pool's per-row cost is higher too (two Go runtimes on two cores
against goroutines in one); only its per-segment cost is lower, so with
these constants ``"auto"`` stays in process unless a plan has more than
about ``1300 + 0.4 * rows / 1000`` segments (the pool then wins by the
margin), far beyond the 200 deltas measured: treat that end as
extrapolation. Re-measure on your hardware with

    python bench/executor_auto.py            # prints the fit and the threshold

and paste the constants it prints, or pass an explicit ``executor=``.

``"auto"`` picks the pool only when its predicted time is below
``1 - MARGIN`` of the in-process one, so that noise in the fit never sends
a plan to a pool that does not pay.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

from .types import MergePlan

logger = logging.getLogger(__name__)

__all__ = ["Cost", "LOCAL", "PROCESSES", "MARGIN", "choose_executor", "predict"]


@dataclass(frozen=True)
class Cost:
    """``t = a + b * segments + c * rows`` in seconds, for ``workers``
    workers."""

    a: float
    b: float
    c: float
    workers: int

    def seconds(self, segments: int, rows: int) -> float:
        return self.a + self.b * segments + self.c * rows


#: In process (``executor="local"``: threads; the kernel releases the GIL).
LOCAL = Cost(a=0.13, b=2.9e-3, c=0.155e-6, workers=2)
#: A spawn-started pool of 2 processes, start-up included.
PROCESSES = Cost(a=0.39, b=2.1e-3, c=0.211e-6, workers=2)
#: The pool must be predicted this much faster to be chosen.
MARGIN = 0.2


def predict(plan: MergePlan, cost: Cost, workers: Optional[int] = None) -> float:
    """Predicted seconds to run ``plan`` with ``cost``'s executor. The
    per-segment and per-row terms scale with the workers available beyond
    those the coefficients were fitted with (at most one per core)."""
    rows = sum(t.rows for t in plan.tasks)
    segments = plan.num_segments
    cores = os.cpu_count() or 1
    have = max(1, min(workers or cores, cores, len(plan.tasks)))
    scale = min(have, cost.workers) / have
    return cost.a + scale * (cost.b * segments + cost.c * rows)


def choose_executor(plan: MergePlan, max_workers: Optional[int] = None) -> str:
    """``"local"`` or ``"processes"``, whichever the cost model predicts is
    faster for ``plan`` (the pool only when it wins by more than MARGIN)."""
    local = predict(plan, LOCAL, max_workers)
    pool = predict(plan, PROCESSES, max_workers)
    choice = "processes" if pool < (1 - MARGIN) * local else "local"
    logger.info(
        "executor auto: %s (predicted %.2fs in process, %.2fs on a process pool; %d segments, %d rows)",
        choice, local, pool, plan.num_segments, sum(t.rows for t in plan.tasks),
    )
    return choice
