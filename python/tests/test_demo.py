"""`make demo` (`lance-segmerge demo`), small: deltas built with
our build path or with pylance's, merged, compared with pylance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lance_segmerge._cli import main


@pytest.mark.parametrize("deltas_by", ["segmerge", "pylance"])
def test_demo_runs(tmp_path: Path, deltas_by: str, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "demo.lance")
    # `lance-segmerge demo --small`, smaller still; executor as auto picks
    argv = ["demo", "--small", "--deltas", "4", "--base-rows", "2000", "--delta-rows", "200", "--dim", "16", "--uri", uri]
    assert main(argv + ["--deltas-by", deltas_by]) == 0
    out = capsys.readouterr().out
    assert "4 deltas" in out and "5 segments" in out
    rows = {line.split("  ")[0].strip(): line.split() for line in out.splitlines() if line.startswith(("before", "lance-segmerge optimize", "pylance optimize"))}
    ours = rows["lance-segmerge optimize (local)"]  # auto stays in process for 5 small segments
    assert rows["before"][1] == "5" and ours[3] == "1" and rows["pylance optimize_indices"][2] == "1"
    # the merge keeps the recall the segments had (one segment searched
    # instead of five: near ties may order differently)
    assert abs(float(ours[4]) - float(rows["before"][2])) <= 0.02
    # the closing line compares the two merge times printed in the table
    m = re.search(r"merge was ([\d.]+)x (faster|slower) than pylance's on the same data \(([\d.]+)s vs ([\d.]+)s\)", out)
    assert m, out
    assert (m.group(3), m.group(4)) == (ours[-1].rstrip("s"), rows["pylance optimize_indices"][-1].rstrip("s"))
