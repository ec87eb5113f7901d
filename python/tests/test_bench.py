"""The benchmark's smoke preset runs end to end and reports every number
(the performance targets themselves live in bench/, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.slow
def test_bench_smoke(tmp_path):
    pytest.importorskip("matplotlib", reason="the benchmark plots with matplotlib")
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_merge.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("smoke-*.json")
    res = json.loads(report.read_text())
    summary = res["types"]["IVF_PQ"]["summary"]
    for name in ("ours_merge_1", "ours_merge_2", "pylance_merge", "copy_floor", "read_write_floor", "ours_optimize_2", "pylance_optimize"):
        assert summary[name]["seconds"] > 0 and summary[name]["peak_rss_mib"] > 0
    assert (tmp_path / report.name.replace(".json", ".png")).stat().st_size > 1000
    assert "pylance merge / ours" in (tmp_path / report.name.replace(".json", ".md")).read_text()


@pytest.mark.slow
def test_ingest_sim_smoke(tmp_path):
    """The ingestion simulation runs end to end at a tiny scale and reports
    every number per contender (the goals are judged on the lead's runs)."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "ingest_sim.py"), "--preset", "smoke", "--appends", "20",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("ingest-smoke-*.json")
    res = json.loads(report.read_text())
    assert [pt["appends"] for pt in res["points"]] == [10, 20]
    for pt in res["points"]:
        assert pt["never"]["segments"] == pt["appends"] + 1 and pt["pylance"]["segments"] == 1
        assert pt["maintain"]["segments"] < pt["never"]["segments"]
        for c in ("maintain", "never", "pylance"):
            assert pt[c]["median_ms"] > 0 and pt[c]["p95_ms"] >= pt[c]["median_ms"] and 0 < pt[c]["recall"] <= 1
    st = res["stats"]
    assert st["maintain"]["merges"] == st["pylance"]["merges"] == 2
    assert st["maintain"]["bytes_rewritten"] > 0 and st["maintain"]["bytes_ingested"] > 0
    assert "write amplification" in (tmp_path / report.name.replace(".json", ".md")).read_text()


@pytest.mark.slow
def test_executor_auto_smoke(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "executor_auto.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("auto-smoke-*.json")
    res = json.loads(report.read_text())
    assert len(res["points"]) == 2 and set(res["fit"]) == {"local", "processes"}
    for pt in res["points"]:
        assert all(pt["median"][e] > 0 for e in ("local", "processes", "auto"))
    assert "Constants for" in (tmp_path / report.name.replace(".json", ".md")).read_text()


def test_bench_hnsw_smoke(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_hnsw.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("hnsw-smoke-*.json")
    summary = json.loads(report.read_text())["types"]["IVF_HNSW_SQ"]["summary"]
    for name in ("pylance_optimize", "ours_reuse", "ours_rebuild", "ours_reuse_small_window"):
        assert summary[name]["seconds"] > 0 and summary[name]["peak_rss_mib"] > 0
    for name in ("pylance_optimize", "ours_reuse", "ours_rebuild"):
        assert all(0 < r <= 1 for r in summary[name]["recall"].values()), summary[name]
    assert summary["ours_reuse"]["rows_reused"] == 6000 and summary["ours_rebuild"]["rows_reused"] == 0
    assert summary["ours_reuse"]["distances_per_inserted_row"] > 0
    assert "optimize_indices" in (tmp_path / report.name.replace(".json", ".md")).read_text()


@pytest.mark.slow
def test_bench_verify_smoke(tmp_path):
    """The verification benchmark runs end to end and reports every number
    (the 10% goal is judged on the lead's runs)."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_verify.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("verify-smoke-*.json")
    summary = json.loads(report.read_text())["types"]["IVF_PQ"]["summary"]
    for name in ("optimize_noverify", "optimize_verify", "check_outputs", "pylance_optimize", "verify_index", "pylance_recall"):
        assert summary[name]["seconds"] > 0
    assert "check / merge" in (tmp_path / report.name.replace(".json", ".md")).read_text()


@pytest.mark.slow
def test_bench_scale_smoke(tmp_path):
    """The scale benchmark (issue 17: many partitions, cold cache, S3
    latency) runs end to end at a tiny scale and times every contender
    against the read-write floor."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_scale.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("scale-smoke-*.json")
    res = json.loads(report.read_text())["results"]
    assert res, "no configuration was measured"
    for cfg in res.values():
        summary = cfg["summary"]
        for name in ("merge_segments", "merge_deltas", "optimize_deltas", "optimize_deltas_noverify", "floor_segments",
                     "floor_deltas", "pylance_merge_segments"):
            assert summary[name]["seconds"] > 0 and summary[name]["peak_rss_mib"] > 0, name
        assert summary["input_bytes"]["segments"] > 0 and summary["input_bytes"]["deltas"] > 0
        for name in ("optimize_deltas", "optimize_deltas_noverify"):  # the optimize's time, split
            ph = summary[name]["phases"]
            assert ph["merge_verify"] > 0 and ph["commit"] > 0 and ph["open_list_plan"] > 0, (name, ph)
            assert sum(ph.values()) <= summary[name]["seconds"] * 1.5, (name, ph)
    text = (tmp_path / report.name.replace(".json", ".md")).read_text()
    assert "merge / read-write floor" in text and "open + list + plan" in text


def test_ingest_bound_matches_merge_everything() -> None:
    """bench/ingest_bound.py's least write amplification: with one segment
    allowed it is merging everything every pass (a closed form, and what
    ingest_sim measured for pylance: 18.83 rows per row on the default
    preset); allowing more segments never costs more."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from ingest_bound import least_rewrites
    finally:
        sys.path.pop(0)
    passes, base = 30, 100_000 / 30_000
    closed = sum(base + i for i in range(1, passes + 1)) / passes
    assert abs(least_rewrites(passes, base, 1) - closed) < 1e-9
    assert abs(closed - 18.83) < 0.01
    two, three = least_rewrites(passes, base, 2), least_rewrites(passes, base, 3)
    assert 3 < three < two < closed


def test_cost_model_fits_each_sweep() -> None:
    """bench/cost_model.py's fit on synthetic times t = a + (b + d·P)·deltas
    + c·rows over its three sweeps recovers every coefficient, and the
    extrapolation charges the per-partition cost at the target partitions."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import cost_model as cm
    finally:
        sys.path.pop(0)
    a, b, c, d = 0.2, 0.8e-3, 0.15e-6, 4e-6
    P0, R0, D0, PD = 128, 500_000, 10, 50
    cfgs = {(R0, x, P0) for x in (10, 50, 100, 200)} | {(r, D0, P0) for r in (500_000, 10**6, 2 * 10**6)}
    cfgs |= {(R0, PD, p) for p in (128, 512, 2048)}
    pts = [(dl, r, p, a + (b + d * p) * dl + c * r) for r, dl, p in sorted(cfgs)]
    fa, fb, fc, fd = cm.fit(pts, R0, D0, P0, PD)
    assert fa == pytest.approx(a, rel=1e-6) and fb == pytest.approx(b, rel=1e-6)
    assert fc == pytest.approx(c, rel=1e-6) and fd == pytest.approx(d, rel=1e-6)
    t1, _ = cm.tree_time((fa, fb, fc, fd), 1000, 10**9, 1, 1024, 1, 4096)
    t0, _ = cm.tree_time((fa, fb, fc, fd), 1000, 10**9, 1, 1024, 1, 0)
    assert t1 - t0 == pytest.approx(d * 4096 * 1001, rel=1e-6)
    # An old report (no partitions sweep) fits d = 0, b the whole per-delta cost.
    old = [(dl, r, P0, t) for dl, r, p, t in pts if p == P0]
    _, ob, _, od = cm.fit(old, R0, D0, P0, -1)
    assert od == 0 and ob == pytest.approx(b + d * P0, rel=1e-6)


@pytest.mark.slow
def test_bench_drift_smoke(tmp_path):
    """The drift benchmark (issue 29) runs end to end at a tiny scale and
    reports recall per step for every contender and the reindex's cost
    against pylance's create_index."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "drift.py"), "--preset", "smoke", "--appends", "3", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("drift-smoke-*.json")
    res = json.loads(report.read_text())
    assert len(res["steps"]) == 3
    for s in res["steps"]:
        for c in ("fresh", "fresh-b", "pylance", "ours", "ours-auto"):
            assert 0.0 <= s[c] <= 1.0 and s[f"{c}_segments"] >= 1
        # retrain="auto" measured the new rows' fit (health only when an
        # extension could not help) and says what it added
        assert s["residual_ratio"] > 0
        if not any(t["reindexed"] for t in res["steps"]):
            assert s["partitions"] == 16 + sum(t["added"] for t in res["steps"][: s["step"]])
        assert s["health"] in ("-", "ok", "degrading", "retrain")
    assert res["reindex_seconds"] > 0 and res["pylance_create_index_seconds"] > 0
    assert "retrain=auto" in (tmp_path / report.name.replace(".json", ".md")).read_text()


@pytest.mark.slow
def test_bench_btree_smoke(tmp_path):
    """The BTREE merge benchmark (issue 26) runs end to end at a tiny
    scale: ours, pylance and the read-write floor timed in one run, the
    answers of both merged tables compared."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_btree.py"), "--preset", "smoke", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (report,) = tmp_path.glob("btree-smoke-*.json")
    res = json.loads(report.read_text())
    assert res["same"] and res["input_bytes"] > 0
    for kind in ("ours", "pylance", "floor"):
        assert res["runs"][kind][0]["seconds"] > 0 and res["runs"][kind][0]["rss_mib"] > 0
