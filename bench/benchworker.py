"""Worker-side helpers for bench_merge.py (module-level, so they pickle)."""

from __future__ import annotations

from typing import Any


def peak_rss() -> int:
    """Peak resident set size of this process (VmHWM), in bytes. Unlike
    ru_maxrss, VmHWM starts afresh at exec, so it does not inherit the
    parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def merge_and_measure(job: dict[str, Any]) -> dict[str, Any]:
    from lance_segmerge import _jobs

    out = _jobs.merge_task(job)
    return {"segment": out, "peak_rss": peak_rss()}
