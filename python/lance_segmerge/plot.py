"""Pictures of an index's segments, its IVF partitions and merge trees.

Each function is one call that returns a ``matplotlib.figure.Figure``
(the optional ``plot`` extra: ``pip install 'lance-segmerge[plot]'``).
Figures are made without pyplot, so they hold no global state, work in
threads and scripts, and show once (not twice) as a notebook cell's
result; ``fig.savefig("x.png")`` writes them (the CLI's ``--plot FILE``).

- :func:`plot_segment_sizes`: segment sizes (rows and bytes) before and
  after a merge.
- :func:`plot_partition_sizes`: the distribution of IVF partition sizes of
  an index; imbalance is what slows queries down.
- :func:`plot_merge_tree`: the tree of merges a plan and
  ``optimize(fan_in=...)`` will run (or ran), level by level.
- :func:`plot_health`: an index's drift (:func:`lance_segmerge.health`):
  recall and residuals of training-era against recent rows, and each
  segment's partition skew.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from ._display import plural
from .errors import InvalidInputError
from .reports import HealthReport, MergeTree, OptimizeReport
from .tree import merge_tree
from .types import IndexSegment, MergePlan, SegmentList, _imbalance

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["plot_segment_sizes", "plot_partition_sizes", "plot_merge_tree", "plot_health", "save"]

logger = logging.getLogger(__name__)

BEFORE = ("#4C72B0", "#8FB0DB")  # alternating shades: segment boundaries stay visible
AFTER = ("#DD8452", "#F2B98F")


def _figure(width: float, height: float, ncols: int = 1) -> tuple["Figure", list[Any]]:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'lance-segmerge[plot]'") from exc
    _notebook_display(Figure)
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _notebook_display(figure_class: type) -> None:
    """In IPython, show a Figure returned by a cell as a PNG even when no
    matplotlib backend was activated (no pyplot import, no %matplotlib)."""
    import sys

    if "IPython" not in sys.modules:
        return
    try:
        from IPython import get_ipython
        from IPython.core import pylabtools

        print_figure: Any = pylabtools.print_figure
        ip = get_ipython()
        if ip is None:
            return
        png = ip.display_formatter.formatters["image/png"]
        try:
            png.lookup_by_type(figure_class)
        except KeyError:
            png.for_type(figure_class, lambda fig: print_figure(fig, "png", bbox_inches="tight"))
    except Exception as exc:  # display is a convenience, never an error
        logger.debug("could not register the figure formatter: %s", exc)


def _count(v: float) -> str:
    """Tick label of a row count: 950, 5k, 25k, 1.5M."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:,.0f}"


def _thousands(*axes: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    for axis in axes:
        axis.set_major_formatter(FuncFormatter(lambda v, _: _count(v)))


def _integer_ticks(*axes: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def _scale(max_bytes: float) -> tuple[float, str]:
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "B"


def _stats_segments(segments: Any, what: str) -> SegmentList:
    segs = SegmentList(segments)
    if any(not isinstance(s, IndexSegment) for s in segs):
        raise InvalidInputError(f"{what}: expected IndexSegments (list_index_segments())")
    if any(s.num_rows is None for s in segs):
        raise InvalidInputError(f"{what}: segments without statistics; list them with with_stats=True")
    return segs


def plot_segment_sizes(
    before: Union[Sequence[IndexSegment], OptimizeReport],
    after: Optional[Sequence[IndexSegment]] = None,
    *,
    title: Optional[str] = None,
) -> "Figure":
    """Segment sizes, in rows and in bytes, before and (optionally) after
    a merge.

    Each bar is one listing; each block in it one segment, largest first,
    so the bar's length is the index's total and the number of blocks how
    fragmented it is.

    Parameters
    ----------
    before : list of IndexSegment, or OptimizeReport
        A listing (``ds.list_index_segments(name)``); a report gives both
        its planned segments and the segments that replaced them.
    after : list of IndexSegment, optional
        The listing after the merge.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Two axes: rows (x label ``"rows"``) and bytes (``"size (MiB)"``
        or the unit that fits).
    """
    if isinstance(before, OptimizeReport):
        if after is not None:
            raise InvalidInputError("plot_segment_sizes: pass a report, or two listings")
        first, after = before.before(), before.after()
    else:
        first = SegmentList(before)
    bars = [("before", _stats_segments(first, "before"), BEFORE)]
    if after is not None:
        bars.append(("after", _stats_segments(after, "after"), AFTER))
    fig, (ax_rows, ax_bytes) = _figure(9.0, 1.6 + 0.7 * len(bars), 2)
    div, unit = _scale(max(s.size_bytes for _, segs, _ in bars for s in segs) if any(segs for _, segs, _ in bars) else 0)
    for ax, value, label in (
        (ax_rows, lambda s: float(s.num_rows or 0), "rows"),
        (ax_bytes, lambda s: s.size_bytes / div, f"size ({unit})"),
    ):
        for y, (_, segs, colors) in enumerate(bars):
            widths = sorted((value(s) for s in segs), reverse=True)
            lefts = [sum(widths[:i]) for i in range(len(widths))]
            shades = [colors[i % 2] for i in range(len(widths))]
            ax.barh([y] * len(widths), widths, left=lefts, color=shades, edgecolor="white", linewidth=0.3, height=0.6)
        ax.set_yticks(range(len(bars)), [f"{name}\n{plural(len(segs), 'segment')}" for name, segs, _ in bars])
        ax.invert_yaxis()
        ax.set_xlabel(label)
        ax.grid(axis="x", alpha=0.3)
    ax_bytes.tick_params(labelleft=False)
    _thousands(ax_rows.xaxis)
    names = sorted({s.name for _, segs, _ in bars for s in segs})
    counts = " → ".join(str(len(segs)) for _, segs, _ in bars)
    fig.suptitle(title or f"segment sizes of {', '.join(names) or 'the index'}: {counts} segments")
    return fig


def plot_partition_sizes(
    segments: Union[Sequence[IndexSegment], OptimizeReport],
    *,
    title: Optional[str] = None,
) -> "Figure":
    """The distribution of the IVF partition sizes of an index.

    A partition's size is its rows over every segment (a query that probes
    it scans it in each one). Left: partitions from largest to smallest,
    with the mean; right: a histogram of the sizes. The title gives the
    imbalance, largest over mean: queries that probe the large partitions
    scan that many times the rows of an average one.

    Parameters
    ----------
    segments : list of IndexSegment, or OptimizeReport
        The segments of one index, with statistics (a report: the merged
        segments).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Two axes: x labels ``"IVF partition (largest first)"`` and
        ``"rows per partition"``.
    """
    if isinstance(segments, OptimizeReport):
        segments = segments.after()
    segs = _stats_segments(segments, "plot_partition_sizes")
    if len({s.name for s in segs}) != 1:
        raise InvalidInputError("plot_partition_sizes: pass the segments of one index")
    parts = segs.partition_rows()
    if not parts:
        raise InvalidInputError("plot_partition_sizes: the segments have no partition statistics, or different partition counts")
    fig, (ax_rank, ax_hist) = _figure(9.0, 3.4, 2)
    ranked = sorted(parts, reverse=True)
    mean = sum(parts) / len(parts)
    ax_rank.bar(range(len(ranked)), ranked, width=1.0, color=BEFORE[0], edgecolor="white" if len(ranked) <= 64 else None, linewidth=0.3)
    ax_rank.axhline(mean, color="#C44E52", linestyle="--", linewidth=1, label=f"mean {mean:,.0f}")
    ax_rank.set_xlabel("IVF partition (largest first)")
    ax_rank.set_ylabel("rows")
    ax_rank.legend(loc="upper right", frameon=False)
    ax_rank.margins(x=0.01)
    ax_hist.hist(parts, bins=min(40, max(5, len(parts) // 4)), color=BEFORE[1], edgecolor=BEFORE[0], linewidth=0.5)
    ax_hist.axvline(mean, color="#C44E52", linestyle="--", linewidth=1)
    ax_hist.set_xlabel("rows per partition")
    ax_hist.set_ylabel("partitions")
    for ax in (ax_rank, ax_hist):
        ax.grid(axis="y", alpha=0.3)
    _integer_ticks(ax_rank.xaxis, ax_hist.yaxis)
    _thousands(ax_rank.yaxis, ax_hist.xaxis)
    imb = _imbalance(parts) or 0.0
    name = segs[0].name
    fig.suptitle(
        title
        or f"IVF partition sizes of {name}: {plural(len(parts), 'partition')} over {plural(len(segs), 'segment')}, "
        f"imbalance {imb:.2f} (largest / mean)"
    )
    return fig


def plot_merge_tree(
    tree: Union[MergeTree, MergePlan, OptimizeReport],
    *,
    fan_in: int = 32,
    target_segments: int = 1,
    title: Optional[str] = None,
) -> "Figure":
    """The tree of merges, level by level: the planned segments at the
    bottom (level 0), one node per merge above, edges from each merge's
    inputs; marker areas follow rows.

    Parameters
    ----------
    tree : MergeTree, MergePlan or OptimizeReport
        A plan is drawn as ``optimize(fan_in=..., target_segments=...)``
        will run it (:func:`lance_segmerge.merge_tree`); a report as it
        ran.
    fan_in, target_segments : int
        For a plan: the tree's shape parameters (ignored otherwise).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes: x label ``"planned segments (in merge order)"``, y label
        ``"level"``.
    """
    if isinstance(tree, OptimizeReport):
        tree = tree.tree
    elif isinstance(tree, MergePlan):
        tree = merge_tree(tree, fan_in=fan_in, target_segments=target_segments)
    if not isinstance(tree, MergeTree):
        raise InvalidInputError(f"plot_merge_tree: expected a MergeTree, MergePlan or OptimizeReport, got {type(tree).__name__}")
    from matplotlib.collections import LineCollection

    levels = tree.num_levels
    fig, (ax,) = _figure(9.0, 1.4 + 0.9 * max(levels, 1))
    producer = {t.output: t for t in tree.tasks}
    src_rows = dict(zip(tree.sources, tree.source_rows))
    # Leaves in merge order: depth first from the final segments, so that
    # every merge's inputs sit next to each other and edges do not cross.
    order: list[str] = []
    seen: set[str] = set()

    def visit(node: str) -> None:
        if node in seen:
            return
        seen.add(node)
        if node in producer:
            for child in producer[node].inputs:
                visit(child)
        elif node in src_rows:
            order.append(node)

    for out in tree.outputs or [t.output for t in tree.tasks]:
        visit(out)
    order += [s for s in tree.sources if s not in seen]
    pos: dict[str, tuple[float, float]] = {s: (float(i), 0.0) for i, s in enumerate(order)}
    rows: dict[str, int] = dict(src_rows)
    for t in sorted(tree.tasks, key=lambda t: (t.level, t.task_id)):
        xs = [pos[i][0] for i in t.inputs if i in pos]
        pos[t.output] = (sum(xs) / len(xs) if xs else 0.0, float(t.level))
        rows[t.output] = t.rows
    edges = [[pos[i], pos[t.output]] for t in tree.tasks for i in t.inputs if i in pos]
    ax.add_collection(LineCollection(edges, colors="#999999", linewidths=0.6, zorder=1))
    biggest = max(rows.values(), default=1) or 1

    def area(r: int) -> float:
        return 12.0 + 260.0 * math.sqrt(r / biggest)

    ax.scatter([pos[s][0] for s in order], [0.0] * len(order), s=[area(rows[s]) for s in order],
               color=BEFORE[0], edgecolor="white", linewidth=0.5, zorder=2, label="planned segment")
    outs = [t.output for t in tree.tasks]
    final = set(tree.outputs)
    ax.scatter([pos[o][0] for o in outs], [pos[o][1] for o in outs], s=[area(rows[o]) for o in outs],
               color=[AFTER[0] if o in final else AFTER[1] for o in outs], edgecolor="#8C4A22", linewidth=0.5,
               zorder=3, label="merge (committed output darker)")
    summary = tree.levels()
    ticks = [f"0: {plural(len(tree.sources), 'segment')}"]
    ticks += [f"{lv['level']}: {plural(lv['tasks'], 'task')}" + (f", {lv['waiting']} waiting" if lv["waiting"] else "") for lv in summary]
    ax.set_yticks(range(levels + 1), ticks)
    ax.set_ylim(-0.6, levels + 0.6)
    ax.set_xlim(-1, max(len(order), 1))
    _integer_ticks(ax.xaxis)
    ax.set_xlabel("planned segments (in merge order)")
    ax.set_ylabel("level")
    ax.legend(loc="upper left", frameon=False, fontsize=8, markerscale=0.5)
    ax.grid(axis="y", alpha=0.3)
    shape = " → ".join([str(len(tree.sources))] + [str(lv["segments_out"]) for lv in summary])
    how = "estimated" if tree.estimated else f"ran in {sum(tree.level_seconds):.2f}s"
    fig.suptitle(title or f"merge tree of {tree.index_name}, fan_in {tree.fan_in}: {shape} segments ({how})")
    return fig


def plot_health(report: HealthReport) -> "Figure":
    """An index's drift, from :func:`lance_segmerge.health`: on the left,
    estimated recall@k and mean distance to the nearest centroid of
    training-era rows against recent rows (the verdict in the title); on
    the right, each segment's partition skew (coefficient of variation) by
    the version it was built at, with the index's overall skew as a line.

    Parameters
    ----------
    report : HealthReport

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not isinstance(report, HealthReport):
        raise InvalidInputError(f"plot_health takes a HealthReport (lance_segmerge.health), got {type(report).__name__}")
    fig, (left, right) = _figure(10, 3.6, 2)
    eras = ("training era", "recent")
    recall = [max(report.recall_trained, 0.0), max(report.recall_recent, 0.0)]
    bars = left.bar([0, 1], recall, width=0.35, color=[BEFORE[0], AFTER[0]], label=f"recall@{report.k}")
    left.set_xticks([0, 1], eras)
    left.set_ylim(0, 1.05)
    left.set_ylabel(f"recall@{report.k} (nprobes={report.nprobes})")
    for b, v in zip(bars, recall):
        left.annotate(f"{v:.3f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    if report.residual_trained > 0 and report.residual_recent >= 0:
        twin = left.twinx()
        twin.plot([0, 1], [report.residual_trained, report.residual_recent], "o--", color="grey", label="residual")
        twin.set_ylim(0, max(report.residual_trained, report.residual_recent) * 1.3)
        twin.set_ylabel("mean distance to nearest centroid")
    left.set_title(f"{report.index_name}: {report.verdict} (recall drop {report.recall_drop:.3f}, "
                   f"residual ratio {report.residual_ratio:.2f})", fontsize=9)
    segs = list(report.segments)
    right.bar(range(len(segs)), [s.partition_cv for s in segs], color=[BEFORE[i % 2] for i in range(len(segs))])
    right.axhline(report.partition_cv, color=AFTER[0], lw=1, label=f"index: {report.partition_cv:.2f}")
    right.set_xticks(range(len(segs)), [f"v{s.dataset_version}" for s in segs], rotation=90 if len(segs) > 12 else 0,
                     fontsize=7)
    right.set_ylabel("partition size CV")
    right.set_title(f"{plural(len(segs), 'segment')}, {report.num_partitions} partitions; "
                    f"{report.share_since_training:.0%} of rows since training", fontsize=9)
    right.legend(fontsize=8)
    return fig


def save(fig: "Figure", path: str, dpi: int = 100) -> str:
    """Write a figure (PNG, SVG or PDF by the file's extension); returns
    the path."""
    fig.savefig(path, dpi=dpi)
    return path
