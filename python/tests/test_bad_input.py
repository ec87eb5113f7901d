"""Every public function and CLI verb, against a table of bad inputs: wrong
types, bools for ints, huge ints, NaN and infinities, empty values,
malformed JSON and base64. Each raises the SegmergeError subclass the table
says (never a KeyError, TypeError, OverflowError, RecursionError, ...),
leaves the dataset as it was, and the CLI prints one line and exits with
the class's documented code. The number of cases is printed at the end of
the session."""

from __future__ import annotations

import base64
import json
import math
import os
import random
import shutil
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Callable

import conftest
import pytest

import lance_segmerge as ls
from lance_segmerge import _cli, _ffi

E_IN, E_NF, E_UNS = ls.InvalidInputError, ls.NotFoundError, ls.UnsupportedError
HUGE = 10**30
UUID0 = "00000000-0000-4000-8000-000000000000"


class Opaque:
    """An object of no type the API knows, with a repr that is the same in
    every process (test ids must be, for pytest-xdist)."""

    def __repr__(self) -> str:
        return "<opaque>"


@pytest.fixture(scope="module")
def env(delta_datasets, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    uri = str(root / "ds")
    shutil.copytree(delta_datasets["IVF_PQ"].uri, uri)
    plain = root / "plain.txt"
    plain.write_text("not a dataset")
    ds = ls.open(uri)
    segs = ds.list_index_segments("vec_idx")
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2)
    return SimpleNamespace(uri=uri, ds=ds, segs=segs, plan=plan, plain=str(plain), root=root)


def seg_dict(env: Any, **changes: Any) -> dict[str, Any]:
    d = env.segs[1].to_dict()
    d.update(changes)
    return d


def stats(env: Any, **changes: Any) -> dict[str, Any]:
    d = env.segs[1].to_dict()
    d["stats"] = {**d["stats"], **changes}
    return d


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


Case = tuple[str, Callable[[Any], Any], type]

# fmt: off
CASES: list[Case] = [
    # -- open / Dataset ----------------------------------------------------
    *[(f"open uri={v!r:.30}", lambda e, v=v: ls.open(v), E_IN) for v in (None, 123, "", b"/x", "a\x00b", "\ud800", 1.5, ["/x"])],
    ("open uri=plain file", lambda e: ls.open(e.plain), E_NF),
    ("open uri=missing", lambda e: ls.open(e.uri + "-missing"), E_NF),
    ("open uri=ftp://", lambda e: ls.open("ftp://host/x.lance"), E_IN),
    *[(f"open version={v!r}", lambda e, v=v: ls.open(e.uri, version=v), E_IN)
      for v in (True, False, 0, -1, HUGE, 2**63, 1.5, "1", math.nan, math.inf, [1])],
    ("open version=999", lambda e: ls.open(e.uri, version=999), E_NF),
    *[(f"open storage_options={v!r:.30}", lambda e, v=v: ls.open(e.uri, storage_options=v), E_IN)
      for v in ("k=v", ["k", "v"], 5, {1: "x"}, {"k": None}, {"k": ["x"]}, {"": "x"}, {"a\x00": "b"}, {"k": "v\x00"})],
    ("checkout version=-1", lambda e: e.ds.checkout(-1), E_IN),
    ("checkout version=huge", lambda e: e.ds.checkout(HUGE), E_IN),
    # -- list_index_segments ------------------------------------------------
    *[(f"list index_name={v!r}", lambda e, v=v: e.ds.list_index_segments(v), E_IN) for v in (5, "", b"vec_idx", True, "a\x00")],
    ("list index_name=nope", lambda e: e.ds.list_index_segments("nope"), E_NF),
    *[(f"list with_stats={v!r}", lambda e, v=v: e.ds.list_index_segments(with_stats=v), E_IN) for v in ("yes", None, 1)],
    # -- plan_index_segment_merge -------------------------------------------
    *[(f"plan index_name={v!r}", lambda e, v=v: ls.plan_index_segment_merge(e.ds, v), E_IN) for v in (None, "", 5)],
    ("plan index_name=nope", lambda e: ls.plan_index_segment_merge(e.ds, "nope"), E_NF),
    *[(f"plan segments_per_task={v!r}", lambda e, v=v: ls.plan_index_segment_merge(e.ds, "vec_idx", v), E_IN)
      for v in (True, 1, 0, -1, HUGE, 2.5, "8", math.nan, None)],
    *[(f"plan max_segments_to_merge={v!r}", lambda e, v=v: ls.plan_index_segment_merge(e.ds, "vec_idx", 2, v), E_IN)
      for v in (1, 0, True, HUGE, "4", 2.0)],
    *[(f"plan target_rows_per_task={v!r}", lambda e, v=v: ls.plan_index_segment_merge(e.ds, "vec_idx", target_rows_per_task=v), E_IN)
      for v in (0, -1, True, 1e9, HUGE)],
    ("plan requantize_sq='yes'", lambda e: ls.plan_index_segment_merge(e.ds, "vec_idx", requantize_sq="yes"), E_IN),
    # -- merge_existing_index_segments --------------------------------------
    *[(f"merge segments={v!r:.30}", lambda e, v=v: ls.merge_existing_index_segments(e.ds, v), E_IN)
      for v in (None, "abc", 5, [None], [1, 2], [{}], {"a": 1}, [Opaque()], b"xy")],
    ("merge segments=[]", lambda e: ls.merge_existing_index_segments(e.ds, []), E_IN),
    ("merge segments=duplicates", lambda e: ls.merge_existing_index_segments(e.ds, [e.segs[1], e.segs[1]]), E_IN),
    ("merge segment of no dataset", lambda e: ls.merge_existing_index_segments(
        e.ds, [e.segs[1], ls.IndexSegment.from_dict(seg_dict(e, uuid=UUID0, metadata="", fragment_ids=[4]))]), E_NF),
    ("merge metadata=garbage protobuf", lambda e: ls.merge_existing_index_segments(
        e.ds, [e.segs[1], ls.IndexSegment.from_dict(seg_dict(e, metadata=base64.b64encode(b"\xff\xff\xff").decode()))]), E_IN),
    # Index details travel with a segment's entry and end up in the manifest:
    # garbage, or details that contradict the files, are refused.
    *[(f"merge index_details={name}", lambda e, v=v: ls.merge_existing_index_segments(
        e.ds, [e.segs[0], ls.IndexSegment.from_dict(seg_dict(e, metadata="", index_details=base64.b64encode(v).decode()))]), E_IN)
      for name, v in (("garbage", b"\xff\xfe garbage"), ("SQ for a PQ index", b"\x2a\x02\x08\x08"),
                      ("cosine for an l2 index", b"\x08\x01"))],
    ("commit index_details=garbage", lambda e: ls.commit_existing_index_segments(
        e.ds, "vec_idx", "vec", [ls.IndexSegment.from_dict(seg_dict(e, metadata="", index_details=base64.b64encode(b"\xff\xfe").decode()))],
        replaces=[e.segs[1].uuid]), E_IN),
    *[(f"merge index_uuid={v!r}", lambda e, v=v: ls.merge_existing_index_segments(e.ds, e.segs[1:3], index_uuid=v), E_IN)
      for v in ("nope", 5, "", "../../etc", b"x")],
    *[(f"merge {k}={v!r}", lambda e, k=k, v=v: ls.merge_existing_index_segments(e.ds, e.segs[1:3], **{k: v}), E_IN)
      for k in ("window_rows", "parallelism") for v in (0, -1, True, HUGE, 1.5, "8")],
    *[(f"merge progress={v!r}", lambda e, v=v: ls.merge_existing_index_segments(e.ds, e.segs[1:3], progress=v), E_IN) for v in ("yes", 5)],
    *[(f"merge requantize_sq={v!r}", lambda e, v=v: ls.merge_existing_index_segments(e.ds, e.segs[1:3], requantize_sq=v), E_IN)
      for v in ("x", None, 1)],
    # -- commit_existing_index_segments -------------------------------------
    *[(f"commit index_name={v!r}", lambda e, v=v: ls.commit_existing_index_segments(e.ds, v, "vec", e.segs[1:2]), E_IN)
      for v in (None, "", 5, "a\x00")],
    *[(f"commit column={v!r}", lambda e, v=v: ls.commit_existing_index_segments(e.ds, "vec_idx", v, e.segs[1:2]), E_IN)
      for v in (None, "", 5, "nope")],
    *[(f"commit segments={v!r:.20}", lambda e, v=v: ls.commit_existing_index_segments(e.ds, "vec_idx", "vec", v), E_IN)
      for v in ([], None, "x", [None], 7)],
    *[(f"commit replaces={v!r:.40}", lambda e, v=v: ls.commit_existing_index_segments(e.ds, "vec_idx", "vec", e.segs[1:2], replaces=v), E_IN)
      for v in ("abc", ["garbage"], [None], [5], 5, [UUID0], [""])],
    *[(f"commit max_retries={v!r}", lambda e, v=v: ls.commit_existing_index_segments(e.ds, "vec_idx", "vec", e.segs[1:2], max_retries=v), E_IN)
      for v in (-1, True, HUGE, "3", 1.0)],
    ("commit index_name=wrong, replaces=its segments", lambda e: ls.commit_existing_index_segments(
        e.ds, "other_idx", "vec", e.segs[1:2], replaces=e.segs[1:2]), E_IN),
    # -- cleanup -------------------------------------------------------------
    *[(f"cleanup older_than={v!r:.20}", lambda e, v=v: ls.cleanup(e.ds, v, dry_run=True), E_IN)
      for v in ("1h", None, math.inf, -math.inf, math.nan, -1, True, [1], 10**400, timedelta(days=-1), 10**12)],
    ("cleanup dry_run='yes'", lambda e: ls.cleanup(e.ds, 3600, dry_run="yes"), E_IN),
    ("cleanup plain file", lambda e: ls.cleanup(e.plain, 3600, dry_run=True), E_NF),
    # -- optimize / run_plan --------------------------------------------------
    *[(f"optimize index_name={v!r}", lambda e, v=v: ls.optimize(e.ds, v, progress=False), E_IN) for v in (None, 5, "")],
    ("optimize index_name=nope", lambda e: ls.optimize(e.ds, "nope", progress=False), E_NF),
    *[(f"optimize executor={v!r}", lambda e, v=v: ls.optimize(e.ds, "vec_idx", executor=v, progress=False), E_IN)
      for v in ("nope", 5, None, "")],
    *[(f"optimize {k}={v!r}", lambda e, k=k, v=v: ls.optimize(e.ds, "vec_idx", progress=False, **{k: v}), E_IN)
      for k, vs in (("max_workers", (-1, 0, True, HUGE, "2", 1.5)), ("fan_in", (1, 0, True, "32", HUGE)),
                    ("target_segments", (0, -1, True, HUGE)), ("max_segments_to_merge", (1, True)),
                    ("target_rows_per_task", (0, -1)), ("requantize_sq", ("x",)), ("window_rows", (0, True, HUGE)),
                    ("storage_options", ({"k": "v"}, "x"))) for v in vs],
    ("optimize progress=5", lambda e: ls.optimize(e.ds, "vec_idx", progress=5), E_IN),
    ("optimize uri + storage_options='x'", lambda e: ls.optimize(e.uri, "vec_idx", storage_options="x", progress=False), E_IN),
    ("run_plan dataset=int", lambda e: ls.run_plan(42, e.plan), E_IN),
    ("run_plan plan=dict", lambda e: ls.run_plan(e.ds, e.plan.to_dict()), E_IN),
    ("run_plan plan=None", lambda e: ls.run_plan(e.ds, None), E_IN),
    ("run_plan other version", lambda e: ls.run_plan(e.ds.checkout(e.ds.version - 1), e.plan), E_IN),
    # -- maintain, create_index, train_index_model: 0 is never a default -------
    *[(f"maintain {k}={v!r}", lambda e, k=k, v=v: ls.maintain(e.ds, "vec_idx", **{k: v}), E_IN)
      for k, vs in (("fan_in", (1, 0, True)), ("window_rows", (0, -1)), ("hnsw_graph", ("x", None)), ("max_workers", (0,)),
                    ("executor", (None, "nope")), ("policy", ("x", None)), ("verify", ("yes",)), ("watch", (0, -1, True)),
                    ("max_conflicts", (-1,)), ("segments_per_tier", (1,)), ("storage_options", ({"k": "v"},)))
      for v in vs],
    *[(f"create_index {k}={v!r}", lambda e, k=k, v=v: ls.create_index(e.ds, "vec", "IVF_PQ", name="new_idx", progress=False, **{k: v}), E_IN)
      for k, vs in (("num_partitions", (0, -1, True)), ("num_sub_vectors", (0,)), ("num_bits", (0,)), ("target_segments", (0, True)),
                    ("fan_in", (1,)), ("sample_rate", (0,)), ("max_iters", (0,)), ("fragments_per_task", (0,)), ("executor", ("x",)),
                    ("metric", ("manhattan",)), ("seed", (-1,)))
      for v in vs],
    ("create_index index_type=IVF_XX", lambda e: ls.create_index(e.ds, "vec", "IVF_XX", progress=False), E_IN),
    *[(f"train_index_model {k}={v!r}", lambda e, k=k, v=v: ls.train_index_model(e.ds, "vec", "IVF_PQ", **{"num_partitions": 4, k: v}), E_IN)
      for k, vs in (("num_partitions", (0, None)), ("num_sub_vectors", (0,)), ("num_bits", (0,)), ("fragment_ids", ([], [-1], "1")))
      for v in vs],
    # -- IndexSegment ---------------------------------------------------------
    *[(f"IndexSegment.from_dict({v!r:.20})", lambda e, v=v: ls.IndexSegment.from_dict(v), E_IN) for v in (None, [], "x", 5, {})],
    *[(f"IndexSegment.from_dict {k}={v!r:.20}", lambda e, k=k, v=v: ls.IndexSegment.from_dict(seg_dict(e, **{k: v})), E_IN)
      for k, vs in (("uuid", (5, "zzz", None, "")), ("name", (None, 5)), ("dataset_version", ("3", -1, 2**70, True, 1.5)),
                    ("fragment_ids", ("1", [1.5], [-1], [2**33], [3, 1], [1, 1], [True], {"a": 1}, 5)),
                    ("fields", (["x"], "1", [2**40])), ("index_version", (2**40, "x")),
                    ("created_at_ms", (-5, 10**20, "x", math.nan, True)), ("base_id", (-1, "x", 2**40)),
                    ("files", ("x", [{"path": 5, "size_bytes": 1}], [{}], [{"path": "a", "size_bytes": -1}], [5])),
                    ("metadata", ("!!!", 5, "YWJ", "%%%%")), ("index_details", ("@@", [1])),
                    ("index_details_type_url", (5,)), ("stats", ("x", 5, [1])), ("format_version", (2, "1", None)))
      for v in vs],
    *[(f"IndexSegment.from_dict missing {k}", lambda e, k=k: ls.IndexSegment.from_dict(without(seg_dict(e), k)), E_IN)
      for k in ("uuid", "name", "dataset_version")],
    *[(f"IndexSegment.from_dict stats.{k}={v!r}", lambda e, k=k, v=v: ls.IndexSegment.from_dict(stats(e, **{k: v})), E_IN)
      for k, vs in (("num_rows", ("x", -1, 2**70)), ("partition_rows", ([-1], "x", [2**40])), ("pq_transposed", ("yes", 1)),
                    ("num_partitions", (1.5,)), ("index_type", (5,)))
      for v in vs],
    *[(f"IndexSegment.from_json({v!r:.20})", lambda e, v=v: ls.IndexSegment.from_json(v), E_IN)
      for v in ("{", "", None, 5, b"\xff\xfe", "[" * 100_000, '{"uuid": 1e999}', "1" * 5000, "NaN", '{"a": ' * 50_000, "[]")],
    ("IndexSegment(uuid=None)", lambda e: ls.IndexSegment(None, "n", (), 1, (), 1), E_IN),
    ("IndexSegment(fragment_ids='12')", lambda e: ls.IndexSegment(UUID0, "n", (), 1, "12", 1), E_IN),
    ("IndexSegment(metadata='x')", lambda e: ls.IndexSegment(UUID0, "n", (), 1, (), 1, metadata="x"), E_IN),
    ("IndexSegment(files=[5])", lambda e: ls.IndexSegment(UUID0, "n", (), 1, (), 1, files=(5,)), E_IN),
    ("IndexFile(path=5)", lambda e: ls.IndexFile(5, 1), E_IN),
    ("IndexFile(size_bytes=-1)", lambda e: ls.IndexFile("a", -1), E_IN),
    *[(f"IndexSegment.from_lance_index({v!r:.20})", lambda e, v=v: ls.IndexSegment.from_lance_index(v), E_IN)
      for v in (5, None, Opaque(), SimpleNamespace(uuid=UUID0, name="n", fields=[1], dataset_version="x", fragment_ids=[1], index_version=1),
                SimpleNamespace(uuid="zz", name="n", fields=[1], dataset_version=1, fragment_ids=[1], index_version=1))],
    # -- MergeTask / MergePlan ------------------------------------------------
    *[(f"MergeTask.from_dict({v!r:.30})", lambda e, v=v: ls.MergeTask.from_dict(v), E_IN)
      for v in (None, {}, {"task_id": "x", "segments": []}, {"task_id": 0, "segments": None}, {"task_id": -1, "segments": []},
                {"task_id": 0, "segments": [5, 6]}, {"task_id": 0, "segments": "ab"})],
    ("MergeTask one segment", lambda e: ls.MergeTask.from_dict({"task_id": 0, "segments": [e.segs[1].to_dict()]}), E_IN),
    ("MergeTask rows=-1", lambda e: ls.MergeTask.from_dict({**e.plan.tasks[0].to_dict(), "rows": -1}), E_IN),
    *[(f"MergeTask.from_json({v!r:.20})", lambda e, v=v: ls.MergeTask.from_json(v), E_IN) for v in ("{", "[" * 50_000, 7)],
    *[(f"MergePlan.from_dict {k}={v!r:.20}", lambda e, k=k, v=v: ls.MergePlan.from_dict({**e.plan.to_dict(), k: v}), E_IN)
      for k, vs in (("plan_id", (5, None)), ("read_version", ("x", -1, 2**70, None)), ("tasks", ("x", 5, [5])),
                    ("untouched", ([5], "abc")), ("requantize_sq", ("yes", 1)), ("format_version", (99, "1")),
                    ("index_name", (None, 5)), ("dataset_uri", (5,)))
      for v in vs],
    ("MergePlan.from_dict segment in two tasks", lambda e: ls.MergePlan.from_dict(
        {**e.plan.to_dict(), "tasks": [e.plan.tasks[0].to_dict(), {**e.plan.tasks[0].to_dict(), "task_id": 1}]}), E_IN),
    *[(f"MergePlan.from_json({v!r:.20})", lambda e, v=v: ls.MergePlan.from_json(v), E_IN)
      for v in ("{", "", "null", "[" * 100_000, '{"plan_id": "x"}', 3.5)],
]
# fmt: on


@pytest.mark.parametrize("name,call,exc", CASES, ids=[c[0] for c in CASES])
def test_bad_input(env, name, call, exc):
    before = (ls.open(env.uri).latest_version, sorted(os.listdir(os.path.join(env.uri, "_indices"))))
    with pytest.raises(ls.SegmergeError) as ei:
        call(env)
    assert isinstance(ei.value, exc), f"{name}: {type(ei.value).__name__}: {ei.value}"
    assert str(ei.value)
    after = (ls.open(env.uri).latest_version, sorted(os.listdir(os.path.join(env.uri, "_indices"))))
    assert after == before, f"{name} changed the dataset"
    conftest.RELIABILITY["bad-input cases (public functions)"] += 1


def _mutations(text: str, rng: random.Random, n: int) -> list[str]:
    """Random damage to a JSON document: cut, flip a byte, swap a value for
    one of another type."""
    weird = [None, True, -1, 2**70, 1.5, "x", "", [], {}, [[[]]], "!!", -(2**63), 10**400]
    out = []
    for _ in range(n):
        kind = rng.randrange(3)
        if kind == 0:
            out.append(text[: rng.randrange(len(text))])
        elif kind == 1:
            i = rng.randrange(len(text))
            out.append(text[:i] + chr(rng.randrange(32, 127)) + text[i + 1 :])
        else:
            d = json.loads(text)
            node, path = d, []
            while isinstance(node, (dict, list)) and node and rng.random() < 0.8:
                key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
                path.append((node, key))
                node = node[key]
            if path:
                parent, key = path[-1]
                parent[key] = rng.choice(weird)
            out.append(json.dumps(d))
    return out


@pytest.mark.parametrize("what", ["plan", "task", "segment"])
def test_damaged_json(env, what):
    """Seeded random damage to a real plan, task and segment: each decodes
    or raises InvalidInputError; a damaged plan that decodes is refused by
    the kernel's check (or accepted) with a typed error, never another."""
    rng = random.Random(18)
    cls, text = {"plan": (ls.MergePlan, env.plan.to_json()), "task": (ls.MergeTask, env.plan.tasks[0].to_json()),
                 "segment": (ls.IndexSegment, env.segs[1].to_json())}[what]
    n = 0
    for bad in _mutations(text, rng, 150):
        try:
            obj = cls.from_json(bad)
        except ls.InvalidInputError:
            n += 1
            continue
        if isinstance(obj, ls.MergePlan):
            try:
                _ffi.call("CheckPlan", env.uri, "", env.ds.version, obj.to_json())
            except ls.SegmergeError as exc:
                assert isinstance(exc, (ls.InvalidInputError, ls.NotFoundError)), exc
        n += 1
    assert n == 150
    conftest.RELIABILITY["bad-input cases (damaged plan/task/segment JSON)"] += n


# fmt: off
CLI_CASES = [
    (["ls", "{plain}"], 4), (["ls", "{missing}"], 4), (["ls", "{uri}", "--version", "-1"], 3),
    (["ls", "{uri}", "--version", "999"], 4), (["ls", "{uri}", "--version", "x"], 2), (["ls", "{uri}", "--index", "nope"], 4),
    (["ls", "{uri}", "-o", "novalue"], 2), (["ls", "ftp://h/x"], 3), (["ls", "{uri}", "--version", str(HUGE)], 3),
    (["plan", "{uri}", "--index", "vec_idx", "--segments-per-task", "1"], 3), (["plan", "{uri}", "--index", "nope"], 4),
    (["plan", "{uri}", "--index", "vec_idx", "--max-segments", "1"], 3), (["plan", "{uri}", "--index", "vec_idx", "--target-rows", "0"], 3),
    (["plan", "{uri}"], 2), (["plan", "{plain}", "--index", "vec_idx"], 4),
    (["optimize", "{uri}", "--index", "vec_idx", "--workers", "-1", "--no-progress"], 3),
    (["optimize", "{uri}", "--index", "vec_idx", "--fan-in", "1", "--no-progress"], 3),
    (["optimize", "{uri}", "--index", "vec_idx", "--target-segments", "0", "--no-progress"], 3),
    (["optimize", "{uri}", "--index", "vec_idx", "--executor", "nope"], 2),
    (["optimize", "{uri}", "--index", "nope", "--no-progress"], 4),
    (["cleanup", "{uri}", "--older-than", "1x"], 2), (["cleanup", "{uri}", "--older-than", "-5"], 2),
    (["cleanup", "{plain}"], 4), ([], 2), (["frob"], 2), (["ls"], 2),
]
# fmt: on


@pytest.mark.parametrize("argv,code", CLI_CASES, ids=[" ".join(a) or "(none)" for a, _ in CLI_CASES])
def test_cli_bad_input(env, capsys, argv, code):
    argv = [a.format(uri=env.uri, plain=env.plain, missing=env.uri + "-missing") for a in argv]
    before = ls.open(env.uri).latest_version
    assert _cli.main(argv) == code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert ls.open(env.uri).latest_version == before
    conftest.RELIABILITY["bad-input cases (CLI)"] += 1


def test_cli_process_exit_codes(env):
    """The real entry point: exit codes, one line, a traceback only with -vv."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "lance_segmerge", *a], capture_output=True, text=True,  # noqa: E731
                                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    p = run("ls", env.plain)
    assert p.returncode == 4 and len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: not found")
    p = run("-vv", "ls", env.plain)
    assert p.returncode == 4 and "Traceback" in p.stderr
    p = run("cleanup", env.uri, "--older-than", "1x")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    conftest.RELIABILITY["bad-input cases (CLI)"] += 3
