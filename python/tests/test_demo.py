"""`make demo` (python -m lance_segmerge.demo), small: deltas built with
our build path or with pylance's, merged, compared with pylance."""

from __future__ import annotations

from pathlib import Path

import pytest

from lance_segmerge import demo


@pytest.mark.parametrize("deltas_by", ["segmerge", "pylance"])
def test_demo_runs(tmp_path: Path, deltas_by: str, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "demo.lance")
    argv = ["--deltas", "4", "--base-rows", "2000", "--delta-rows", "200", "--dim", "16", "--executor", "local", "--uri", uri]
    assert demo.main(argv + ["--deltas-by", deltas_by]) == 0
    out = capsys.readouterr().out
    assert "4 deltas" in out and "5 segments" in out
    rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines() if line.startswith(("before", "lance-segmerge (", "pylance optimize"))}
    assert rows["before"][1] == "5" and rows["lance-segmerge (local x2)"][3] == "1"
    # the merge keeps the recall the segments had (one segment searched
    # instead of five: near ties may order differently)
    assert abs(float(rows["lance-segmerge (local x2)"][4]) - float(rows["before"][2])) <= 0.02
