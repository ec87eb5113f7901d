"""The notebook experience: listings, plans, trees and reports as tables
(Arrow, pandas, HTML, text), partition statistics checked against
pylance's own index statistics, the predicted merge tree against the one
optimize runs, notebook progress bars."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
from datetime import datetime, timezone
from html.parser import HTMLParser

import lance
import lancegen
import pytest
from conftest import INDEX_TYPES

import lance_segmerge as ls
from lance_segmerge import _display

os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")  # pylance's stats, without the centroids

DELTAS = 20


@pytest.fixture(scope="module")
def deltas20(tmp_path_factory):
    """A base segment (2000 rows) and 20 delta segments of 60 rows."""
    root = tmp_path_factory.mktemp("display")
    return lancegen.build_with_deltas(str(root / "pq"), "IVF_PQ", n_deltas=DELTAS, delta_rows=60, base_rows=2000)


class _TagBalance(HTMLParser):
    VOID = {"br", "hr", "img", "meta", "link", "input", "col"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def parse_html(text: str) -> str:
    p = _TagBalance()
    p.feed(text)
    p.close()
    assert not p.errors and not p.stack, (p.errors, p.stack)
    return " ".join(" ".join(p.text).split())


# -- statistics: what the tables show, checked against pylance ----------------------------


def _pylance_partitions(built: lancegen.Built) -> dict[str, list[int]]:
    stats = built.dataset().stats.index_stats("vec_idx")
    return {i["uuid"]: [p["size"] for p in i["partitions"]] for i in stats["indices"]}


@pytest.mark.parametrize("index_type", INDEX_TYPES)
def test_partition_rows_match_pylance_index_stats(delta_datasets, index_type):
    built = delta_datasets[index_type]
    segs = ls.open(built.uri).list_index_segments("vec_idx")
    theirs = _pylance_partitions(built)
    assert sorted(theirs) == sorted(s.uuid for s in segs)
    for s in segs:
        assert list(s.partition_rows) == theirs[s.uuid]
        assert sum(s.partition_rows) == s.num_rows
    # Over the index: what a query probing partition p scans, in every segment.
    assert segs.partition_rows() == tuple(map(sum, zip(*theirs.values())))
    assert sum(segs.partition_rows()) == built.dataset().count_rows() == segs.num_rows
    parts = segs.partition_rows()
    assert segs.partition_imbalance() == pytest.approx(max(parts) / (sum(parts) / len(parts)))


def test_partition_rows_of_hnsw_and_merged_segments(deltas20, tmp_path):
    hnsw = lancegen.build_with_deltas(str(tmp_path / "hnsw"), "IVF_HNSW_SQ", n_deltas=1)
    segs = ls.open(hnsw.uri).list_index_segments("vec_idx")
    assert {s.uuid: list(s.partition_rows) for s in segs} == _pylance_partitions(hnsw)
    # Segments we wrote: pylance's statistics of our merge agree with ours.
    uri = str(tmp_path / "merged")
    shutil.copytree(deltas20.uri, uri)
    ls.optimize(uri, "vec_idx", fan_in=8, progress=False)
    (merged,) = ls.open(uri).list_index_segments("vec_idx")
    built = lancegen.Built(uri, deltas20.vectors)
    assert _pylance_partitions(built) == {merged.uuid: list(merged.partition_rows)}
    assert sum(merged.partition_rows) == merged.num_rows == len(deltas20.vectors)


def test_dataset_counts_match_pylance(deltas20, tmp_path):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    lance.dataset(uri).delete("id < 150")
    ds = ls.open(uri)
    pds = lance.dataset(uri)
    assert ds.num_rows == pds.count_rows() == len(deltas20.vectors) - 150
    assert ds.num_fragments == len(pds.get_fragments())
    assert ds.index_segments == {"vec_idx": DELTAS + 1} == {"vec_idx": len(pds.describe_indices()[0].segments)}
    text = parse_html(ds._repr_html_())
    assert uri in text and "vec_idx" in text and f"{ds.num_rows:,}" in text and str(DELTAS + 1) in text
    assert "storage_options" not in repr(ds)


# -- listings ----------------------------------------------------------------------------------


def test_segment_list_is_a_list_and_a_table(deltas20):
    ds = ls.open(deltas20.uri)
    segs = ds.list_index_segments("vec_idx")
    assert isinstance(segs, list) and isinstance(segs, ls.SegmentList)
    assert segs == list(segs) and len(segs) == DELTAS + 1
    assert isinstance(segs[2:5], ls.SegmentList) and segs[2:5] == list(segs)[2:5]
    assert isinstance(segs[0], ls.IndexSegment)
    again = pickle.loads(pickle.dumps(segs))
    assert type(again) is ls.SegmentList and again == segs

    t = segs.to_arrow()
    assert t.num_rows == len(segs)
    assert t.column("uuid").to_pylist() == [s.uuid for s in segs]
    assert t.column("num_rows").to_pylist() == [s.num_rows for s in segs]
    assert t.column("size_bytes").to_pylist() == [s.size_bytes for s in segs]
    assert t.column("fragment_ids").to_pylist() == [list(s.fragment_ids) for s in segs]
    assert t.column("layout").to_pylist() == ["query"] * len(segs)
    assert str(t.schema.field("created_at").type) == "timestamp[ms, tz=UTC]"
    imb = t.column("partition_imbalance").to_pylist()
    assert imb == pytest.approx([max(s.partition_rows) * 4 / s.num_rows for s in segs])

    df = segs.to_pandas()
    assert list(df["uuid"]) == [s.uuid for s in segs] and int(df["num_rows"].sum()) == segs.num_rows

    text = parse_html(segs._repr_html_())
    assert f"{DELTAS + 1} segments of vec_idx (IVF_PQ)" in text
    assert f"total: {DELTAS + 1} segments" in text and f"{segs.num_rows:,}" in text
    assert "… 1 segment more …" in text  # 21 rows: the first 15, the last 5
    r = repr(segs)
    assert r.splitlines()[0] == f"{DELTAS + 1} segments of vec_idx (IVF_PQ)"
    assert f"... {DELTAS + 1 - 10} segments more ..." in r and len(r.splitlines()) <= 16
    assert segs[0].uuid[:8] in r and segs[-1].uuid[:8] in r
    one = parse_html(segs[0]._repr_html_())
    assert segs[0].uuid in one and "imbalance" in one


def _fake_segment(i: int, rows: int) -> ls.IndexSegment:
    return ls.IndexSegment(
        uuid=f"{i:08d}-0000-4000-8000-000000000000", name="vec_idx", fields=(1,), dataset_version=i + 1,
        fragment_ids=(i,), index_version=1, created_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
        files=(ls.IndexFile("index.idx", 100), ls.IndexFile("auxiliary.idx", 10 * rows)),
        index_type="IVF_PQ", distance_type="l2", num_partitions=2, partition_rows=(rows - rows // 3, rows // 3),
        num_rows=rows, pq_transposed=True, index_file_bytes=100, auxiliary_file_bytes=10 * rows,
    )


def test_a_thousand_segments_truncate_with_totals():
    segs = ls.SegmentList(_fake_segment(i, 100 + i) for i in range(1000))
    rows = sum(100 + i for i in range(1000))
    html = segs._repr_html_()
    text = parse_html(html)
    assert html.count("<tr>") == 15 + 1 + 5 + 1 + 1  # header, 15 first, the mark, 5 last, totals
    assert "980 segments more" in text and "total: 1,000 segments" in text and f"{rows:,}" in text
    assert segs[0].uuid[:8] in text and segs[999].uuid[:8] in text and segs[500].uuid[:8] not in text
    assert len(html) < 20_000
    lines = repr(segs).splitlines()
    assert len(lines) <= 16 and "990 segments more" in repr(segs)
    assert lines[-1].startswith("  total: 1,000 segments, rows " + f"{rows:,}")
    assert segs.to_arrow().num_rows == 1000  # the tables are never truncated
    assert segs.partition_rows() == (sum(r - r // 3 for r in range(100, 1100)), sum(r // 3 for r in range(100, 1100)))
    _display.options.max_rows = 40
    try:
        assert "960 segments more" in parse_html(segs._repr_html_())
    finally:
        _display.options.max_rows = 20


# -- plans, trees and reports ----------------------------------------------------------------------


def test_plan_table_and_repr(deltas20):
    ds = ls.open(deltas20.uri)
    plan = ds.plan_index_segment_merge("vec_idx", 4)
    r = repr(plan)
    assert r.startswith("MergePlan(index='vec_idx', type=IVF_PQ") and "\n" not in r and len(r) < 200
    assert f"tasks={len(plan.tasks)}" in r and f"segments={plan.num_segments}" in r
    t = plan.to_arrow()
    assert t.column("task_id").to_pylist() == [x.task_id for x in plan.tasks]
    assert t.column("segments").to_pylist() == [len(x.segments) for x in plan.tasks]
    assert t.column("rows").to_pylist() == [x.rows for x in plan.tasks]
    assert t.column("segment_ids").to_pylist() == [list(x.segment_ids) for x in plan.tasks]
    assert sum(t.column("rows").to_pylist()) == plan.num_rows == ds.list_index_segments("vec_idx").num_rows
    text = parse_html(plan._repr_html_())
    assert f"total: {len(plan.tasks)} tasks" in text and f"{plan.num_segments}" in text
    assert plan.segments() == [s for x in plan.tasks for s in x.segments]
    assert str(plan).splitlines()[0].startswith("MergePlan of vec_idx (IVF_PQ)")
    task = plan.tasks[0]
    assert repr(task).startswith("MergeTask(task_id=0") and task.to_arrow().num_rows == len(task.segments)
    # Display never changes what a plan is.
    assert ls.MergePlan.from_json(plan.to_json()) == plan and pickle.loads(pickle.dumps(plan)) == plan


@pytest.mark.parametrize("fan_in, target", [(4, 1), (4, 3), (32, 1), (3, 2)])
def test_predicted_tree_is_the_tree_optimize_runs(deltas20, tmp_path, fan_in, target):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    ds = ls.open(uri)
    before = ds.list_index_segments("vec_idx")
    plan = ds.plan_index_segment_merge("vec_idx", fan_in)
    predicted = ls.merge_tree(plan, fan_in=fan_in, target_segments=target)
    assert predicted.estimated
    report = ls.optimize_with_report(ds, "vec_idx", fan_in=fan_in, target_segments=target, progress=False)
    ran = report.tree
    assert not ran.estimated
    # The same shape, level by level: tasks, segments merged and waiting.
    assert predicted.levels() == ran.levels()
    assert ran.levels()[-1]["segments_out"] == len(ran.outputs) <= target
    # The first level is exactly the planned one.
    assert [t.inputs for t in predicted.level_tasks(1)] == [t.inputs for t in ran.level_tasks(1)]
    # Predicted rows equal what the merges wrote (no deletions here).
    assert [sorted(t.rows for t in predicted.level_tasks(lv)) for lv in range(1, ran.num_levels + 1)] == [
        sorted(t.rows for t in ran.level_tasks(lv)) for lv in range(1, ran.num_levels + 1)
    ]
    # The report agrees with the dataset, and with pylance.
    after = ls.open(uri).list_index_segments("vec_idx")
    assert report.version == lance.dataset(uri).version == ds.version + 1
    assert report.segments_before == len(before) and report.segments_after == len(after)
    assert sorted(s.uuid for s in report.outputs) == sorted(s.uuid for s in after) == sorted(ran.outputs)
    assert report.rows == before.num_rows and report.bytes_after == sum(
        s.index_file_bytes + s.auxiliary_file_bytes for s in after
    )
    assert len(ran.level_seconds) == ran.num_levels and all(t.seconds is not None for t in ran.tasks)


def test_report_is_a_frozen_picklable_table(deltas20, tmp_path):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    got = []
    out = ls.optimize(uri, "vec_idx", fan_in=8, progress=False, on_report=got.append)
    assert isinstance(out, ls.Dataset)  # optimize still returns the dataset at the new version
    (report,) = got
    v = out.version
    assert report.version == v
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.version = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(report)) == report
    assert ls.OptimizeReport.from_json(report.to_json()) == report
    json.loads(report.to_json())
    t = report.to_arrow()
    assert t.num_rows == len(report.tree.tasks)
    assert t.column("level").to_pylist() == [x.level for x in report.tree.tasks]
    assert t.column("segments").to_pylist() == [len(x.inputs) for x in report.tree.tasks]
    assert t.column("output").to_pylist() == [x.output for x in report.tree.tasks]
    assert report.to_pandas().shape[0] == len(report.tree.tasks)
    r = repr(report)
    assert r == (
        f"OptimizeReport(index='vec_idx', version={v - 1} -> {v}, segments={DELTAS + 1} -> 1, "
        f"levels={report.tree.num_levels}, tasks={len(report.tree.tasks)}, rows={report.rows:,}, seconds={report.seconds:.2f})"
    )
    text = parse_html(report._repr_html_())
    assert f"{DELTAS + 1} -> 1" in text and f"total: {len(report.tree.tasks)} tasks" in text
    assert "done after" in text  # executed trees show when each task finished
    assert "done after" not in parse_html(ls.merge_tree(report.plan, fan_in=8)._repr_html_())
    assert report.before() == report.plan.segments() and report.after() == list(report.outputs)
    # Nothing left to merge: a report all the same.
    again = ls.optimize_with_report(uri, "vec_idx", progress=False)
    assert again.version == v and again.segments_before == again.segments_after == 1
    assert again.tree.num_levels == 0 and again.to_arrow().num_rows == 0
    # run_plan_with_report drives a plan made beforehand.
    uri2 = str(tmp_path / "ds2")
    shutil.copytree(deltas20.uri, uri2)
    ds2 = ls.open(uri2)
    rep2 = ls.run_plan_with_report(ds2, ds2.plan_index_segment_merge("vec_idx", 8), fan_in=8)
    assert rep2.version == ds2.version + 1 and rep2.segments_after == 1


@dataclasses.dataclass(frozen=True)
class _Check:
    segment_uuid: str
    recall: float
    rows: int
    bytes_read: int
    seconds: float
    ok: bool
    fragments: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _VerifyLikeReport(_display.Tabular):
    index_name: str
    passed: bool
    checks: tuple[_Check, ...]
    format_version: int = 1


def test_reports_to_come_get_tables_by_introspection():
    u = "00000000-0000-4000-8000-00000000000{}"
    rep = _VerifyLikeReport(
        "vec_idx", True, tuple(_Check(u.format(i), 0.9 + i / 100, 10 * i, 1000 * i, 0.5, True, (i, i + 1)) for i in range(3))
    )
    t = rep.to_arrow()
    assert t.column_names == ["segment_uuid", "recall", "rows", "bytes_read", "seconds", "ok", "fragments"]
    assert t.column("fragments").to_pylist() == [[0, 1], [1, 2], [2, 3]]
    assert str(t.schema.field("ok").type) == "bool" and t.schema.metadata[b"summary.index_name"] == b"vec_idx"
    assert rep.to_pandas()["rows"].sum() == 30
    text = parse_html(rep._repr_html_())
    assert "_VerifyLikeReport" in text and "index_name: vec_idx" in text and "passed: yes" in text
    assert "total: 3 rows" in text and "2.9 KiB" in text and "1.50s" in text  # totals of rows, bytes, seconds
    assert "00000000" in text and u.format(1) not in text  # uuids shortened (in full in the title attribute)
    assert f'title="{u.format(1)}"' in rep._repr_html_()
    assert str(rep).splitlines()[0] == "_VerifyLikeReport"


# -- progress in notebooks -----------------------------------------------------------------------


@pytest.fixture
def notebook_bars(monkeypatch):
    """tqdm.auto as Jupyter resolves it (the ipywidgets bar); records bars."""
    pytest.importorskip("ipywidgets")
    import tqdm.auto
    import tqdm.notebook

    made = []

    class Bar(tqdm.notebook.tqdm):  # type: ignore[misc]
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    return made


def test_optimize_shows_one_widget_bar_per_level(deltas20, tmp_path, notebook_bars):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    report = ls.optimize_with_report(uri, "vec_idx", fan_in=4, progress=True)
    levels = report.tree.levels()
    assert [b.desc for b in notebook_bars] == [f"optimize level {lv['level']}" for lv in levels]
    for bar, lv in zip(notebook_bars, levels):
        _, widget, _ = bar.container.children
        assert bar.total == lv["tasks"] and widget.max == lv["tasks"]  # the widget's length, not only tqdm's
        assert bar.n == widget.value == lv["tasks"]
        assert widget.bar_style == "success"  # closed complete, not red


def test_merge_widget_bar_gets_its_length(deltas20, tmp_path, notebook_bars):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    ds = ls.open(uri)
    segs = ds.list_index_segments("vec_idx")
    out = ls.merge_existing_index_segments(ds, segs[1:], progress=True, window_rows=60)
    assert out.num_rows == DELTAS * 60
    (bar,) = notebook_bars
    _, widget, _ = bar.container.children
    assert bar.total == widget.max == segs[1].num_partitions
    assert bar.n == widget.value == bar.total


def test_text_bars_name_the_level(deltas20, tmp_path, capsys):
    uri = str(tmp_path / "ds")
    shutil.copytree(deltas20.uri, uri)
    ls.optimize(uri, "vec_idx", fan_in=4, progress=True)
    err = capsys.readouterr().err
    assert "optimize level 1" in err and "optimize level 3" in err and "5/5" in err


def _reports(plan: ls.MergePlan) -> dict[str, list]:
    """An empty and a filled instance of every report class."""
    u = "00000000-0000-4000-8000-00000000000{}"
    tree = ls.merge_tree(plan, fan_in=4)
    empty_tree = ls.MergeTree("vec_idx", 3, 4, 1, (), (), (), (), ())
    check = ls.VerifyCheck("codes", "failed", "3 of 10 rows", "codes_mismatch", {"rows": 10.0})
    verdict = ls.SegmentVerdict(u.format(1), "IVF_PQ", 100, (0, 1), "damaged", ("codes_mismatch",), False, 2, 0.5, 0.9, 0.3, "rebuild", (check,))
    verify = ls.VerifyReport("/d", "vec_idx", "vec", 3, "IVF_PQ", "l2", False, 64, 8, 10, 4, False, 0.5, (verdict,))
    empty_verify = ls.VerifyReport("/d", "vec_idx", "vec", 3, "IVF_PQ", "l2", False, 64, 8, 10, 4, True, 0.5)
    action = ls.RepairAction(u.format(1), "rebuild", ("codes_mismatch",), -1, advice="rebuild it")
    maintain = dict(dataset_uri="/d", index_name="vec_idx", read_version=3, version=4, committed=True, policy="tiered",
                    segments_before=5, segments_after=2, tasks=2, tasks_reused=0, segments_merged=4, rows_read=100,
                    bytes_read=1000, rows_written=100, bytes_written=900, seconds=0.2, executor="local", conflicts=0)
    opt = dict(dataset_uri="/d", index_name="vec_idx", read_version=3, version=4, executor="local", segments_before=5,
               segments_after=1, rows=100, bytes_before=1000, bytes_after=900, seconds=0.3, commit_seconds=0.1, plan=plan)
    return {
        "MergeTree": [empty_tree, tree],
        "OptimizeReport": [ls.OptimizeReport(**opt, tree=empty_tree), ls.OptimizeReport(**opt, tree=tree, outputs=tuple(plan.segments()[:1]))],
        "VerifyReport": [empty_verify, verify],
        "RepairReport": [
            ls.RepairReport("/d", "vec_idx", 3, 3, True, False, 0, 0, 0.1),
            ls.RepairReport("/d", "vec_idx", 3, 3, True, False, 0, 1, 0.1, (action,), verify),
        ],
        "MaintainReport": [ls.MaintainReport(**{**maintain, "committed": False, "tasks": 0}),
                           ls.MaintainReport(**maintain, reasons=("tier: a", "cap: b"), summary="tiered: 5 segments")],
    }


@pytest.mark.parametrize("kind", ["MergeTree", "OptimizeReport", "VerifyReport", "RepairReport", "MaintainReport"])
def test_every_report_renders_empty_or_not(deltas20, kind):
    """Every report is a table in every form (Arrow, pandas, HTML, text),
    with its columns even when it has no rows, and round-trips through
    JSON and pickle."""
    ds = ls.open(deltas20.uri)
    empty, full = _reports(ds.plan_index_segment_merge("vec_idx", 8))[kind]
    cols = None
    for rep in (empty, full):
        t = rep.to_arrow()
        assert t.num_columns > 0, f"{kind}: a table without columns"
        cols = cols or t.column_names
        assert t.column_names == cols  # the same columns, empty or not
        assert list(rep.to_pandas().columns) == cols
        html = rep._repr_html_()
        assert "<table" in html and all(c.label or c.name for c in rep._table_spec().columns)
        assert str(rep).splitlines()[0]
        assert type(rep).from_json(rep.to_json()) == rep
        assert pickle.loads(pickle.dumps(rep)) == rep
    assert empty.to_arrow().num_rows == 0 and full.to_arrow().num_rows > 0


def test_report_json_is_checked():
    d = ls.MaintainReport("/d", "i", 1, 1, False, "tiered", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0.0, "local", 0).to_dict()
    with pytest.raises(ls.InvalidInputError):
        ls.MaintainReport.from_dict({**d, "rows_read": -1})
    with pytest.raises(ls.InvalidInputError):
        ls.VerifyReport.from_dict({"index_name": "i", "version": "x"})
