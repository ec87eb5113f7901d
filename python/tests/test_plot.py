"""Pictures (the plot extra): segment sizes before and after, IVF partition
sizes, merge trees; one call each returns a matplotlib Figure with the
expected axes and the data it claims; the CLI writes them as PNG."""

from __future__ import annotations

import shutil
import sys

import lancegen
import pytest

import lance_segmerge as ls
from lance_segmerge import _cli

pytest.importorskip("matplotlib", reason="the plot extra is not installed")

DELTAS = 12
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """A base and 12 deltas (IVF_SQ, 4 partitions), before and after an
    optimize with fan_in 4."""
    root = tmp_path_factory.mktemp("plot")
    built = lancegen.build_with_deltas(str(root / "sq"), "IVF_SQ", n_deltas=DELTAS, delta_rows=80, base_rows=2000)
    pristine = str(root / "pristine")
    shutil.copytree(built.uri, pristine)
    ds = ls.open(built.uri)
    before = ds.list_index_segments("vec_idx")
    report = ls.optimize_with_report(ds, "vec_idx", fan_in=4, progress=False)
    after = ls.open(built.uri).list_index_segments("vec_idx")
    return built, pristine, before, after, report


def _png(fig, tmp_path, name="f.png") -> bytes:
    path = tmp_path / name
    fig.savefig(path, dpi=60)
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 2000
    return data


def test_segment_sizes(optimized, tmp_path):
    built, _, before, after, report = optimized
    fig = ls.plot_segment_sizes(before, after)
    ax_rows, ax_bytes = fig.axes
    assert ax_rows.get_xlabel() == "rows"
    assert ax_bytes.get_xlabel() in ("size (KiB)", "size (MiB)")
    assert [t.get_text() for t in ax_rows.get_yticklabels()] == [f"before\n{DELTAS + 1} segments", "after\n1 segment"]
    # One block per segment; each bar as long as the index.
    blocks = ax_rows.patches
    assert len(blocks) == len(before) + len(after)
    ends = sorted({round(p.get_x() + p.get_width()) for p in blocks if p.get_x() + p.get_width() >= len(built.vectors) - 1})
    assert ends == [len(built.vectors)]
    assert sorted(round(p.get_width()) for p in blocks[: len(before)]) == sorted(s.num_rows for s in before)
    unit = 1024 if "KiB" in ax_bytes.get_xlabel() else 1024 * 1024
    assert sum(p.get_width() for p in ax_bytes.patches[: len(before)]) == pytest.approx(before.size_bytes / unit)
    assert f"{DELTAS + 1} → 1 segments" in fig._suptitle.get_text()
    _png(fig, tmp_path)
    # A report gives its planned segments and their replacement.
    from_report = ls.plot_segment_sizes(report)
    assert len(from_report.axes[0].patches) == report.plan.num_segments + len(report.outputs)
    # A single listing: one bar.
    assert len(ls.plot_segment_sizes(before).axes[0].get_yticklabels()) == 1


def test_partition_sizes(optimized, tmp_path):
    _, _, before, after, _ = optimized
    fig = ls.plot_partition_sizes(before)
    ax_rank, ax_hist = fig.axes
    assert ax_rank.get_xlabel() == "IVF partition (largest first)" and ax_rank.get_ylabel() == "rows"
    assert ax_hist.get_xlabel() == "rows per partition" and ax_hist.get_ylabel() == "partitions"
    heights = [p.get_height() for p in ax_rank.patches]
    assert heights == sorted(before.partition_rows(), reverse=True)
    assert sum(heights) == before.num_rows
    assert sum(p.get_height() for p in ax_hist.patches) == len(before.partition_rows())
    assert f"imbalance {before.partition_imbalance():.2f}" in fig._suptitle.get_text()
    # Merging does not change the partitions (same model), only the segments.
    assert [p.get_height() for p in ls.plot_partition_sizes(after).axes[0].patches] == heights
    _png(fig, tmp_path)
    with pytest.raises(ls.InvalidInputError, match="statistics"):
        ls.plot_partition_sizes(ls.open(optimized[1]).list_index_segments("vec_idx", with_stats=False))


def test_merge_tree_of_a_plan_and_of_a_run(optimized, tmp_path):
    _, pristine, before, _, report = optimized
    plan = ls.open(pristine).plan_index_segment_merge("vec_idx", 4)
    fig = ls.plot_merge_tree(plan, fan_in=4)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "planned segments (in merge order)" and ax.get_ylabel() == "level"
    tree = ls.merge_tree(plan, fan_in=4)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == tree.num_levels + 1 and labels[0] == f"0: {DELTAS + 1} segments"
    assert labels[1].startswith(f"1: {len(tree.level_tasks(1))} tasks")
    edges = ax.collections[0]
    assert len(edges.get_segments()) == sum(len(t.inputs) for t in tree.tasks)
    sources, merges = ax.collections[1], ax.collections[2]
    assert len(sources.get_offsets()) == len(before) and len(merges.get_offsets()) == len(tree.tasks)
    assert "(estimated)" in fig._suptitle.get_text()
    _png(fig, tmp_path)
    ran = ls.plot_merge_tree(report)
    assert "ran in" in ran._suptitle.get_text()
    assert len(ran.axes[0].collections[0].get_segments()) == sum(len(t.inputs) for t in report.tree.tasks)
    # A plan with nothing to merge draws an empty tree.
    done = ls.plot_merge_tree(ls.open(optimized[0].uri).plan_index_segment_merge("vec_idx", 4))
    assert [t.get_text() for t in done.axes[0].get_yticklabels()] == ["0: 0 segments"]
    with pytest.raises(ls.InvalidInputError):
        ls.plot_merge_tree("not a tree")  # type: ignore[arg-type]


def test_cli_writes_pictures(optimized, tmp_path, capsys):
    built, pristine, *_ = optimized
    uri = str(tmp_path / "ds")
    shutil.copytree(pristine, uri)
    cases = [
        (["ls", uri, "--plot", str(tmp_path / "ls.png")], "ls.png"),
        (["ls", uri, "--index", "vec_idx", "--plot", str(tmp_path / "parts.png"), "--plot-kind", "partitions"], "parts.png"),
        (["plan", uri, "--index", "vec_idx", "--segments-per-task", "4", "--plot", str(tmp_path / "plan.png")], "plan.png"),
        (["optimize", uri, "--index", "vec_idx", "--fan-in", "4", "--no-progress", "--plot", str(tmp_path / "opt.png")], "opt.png"),
    ]
    for argv, name in cases:
        assert _cli.main(argv) == 0, argv
        assert f"wrote {tmp_path / name}" in capsys.readouterr().out
        assert (tmp_path / name).read_bytes().startswith(PNG)
    uri2 = str(tmp_path / "ds2")
    shutil.copytree(pristine, uri2)
    assert _cli.main(["optimize", uri2, "--index", "vec_idx", "--fan-in", "4", "--no-progress",
                      "--plot", str(tmp_path / "tree.svg"), "--plot-kind", "tree"]) == 0
    assert "-> 1, version" in capsys.readouterr().out
    assert b"<svg" in (tmp_path / "tree.svg").read_bytes()[:400]


def test_without_matplotlib(optimized, tmp_path, monkeypatch, capsys):
    _, _, before, _, _ = optimized
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # as if the extra were not installed
    with pytest.raises(ImportError, match=r"lance-segmerge\[plot\]"):
        ls.plot_segment_sizes(before)
    assert _cli.main(["ls", optimized[1], "--plot", str(tmp_path / "x.png")]) == 2
    assert "lance-segmerge[plot]" in capsys.readouterr().err and not (tmp_path / "x.png").exists()
