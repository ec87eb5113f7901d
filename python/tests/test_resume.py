"""Resumable runs: the run journal, what a rerun reuses (only outputs that
verify), fresh starts that say why, pylance next to a journal, cleanup of
stale journals, and SIGKILL at random points of a multi-level run."""

from __future__ import annotations

import datetime
import glob
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import lance
import lancegen
import pytest

import lance_segmerge as ls
from lance_segmerge import _jobs

DELTAS = 16
RUN = {"policy": "all", "fan_in": 2, "executor": "local", "resume": True}


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    built = lancegen.build_with_deltas(str(root / "pq"), "IVF_PQ", n_deltas=DELTAS, delta_rows=100, base_rows=2000)
    fresh = str(root / "fresh")
    shutil.copytree(built.uri, fresh)
    rep = ls.maintain(fresh, "vec_idx", **RUN)
    queries = lancegen.vectors(20, seed=8)
    return built, rep, lancegen.recall(lance.dataset(fresh), built.vectors, queries, nprobes=4), queries


@pytest.fixture
def copy(deltas, tmp_path):
    dst = str(tmp_path / "ds")
    shutil.copytree(deltas[0].uri, dst)
    return dst


def _journal(uri: str) -> dict:
    (path,) = glob.glob(os.path.join(uri, "_indices", "_segmerge", "*.json"))
    with open(path) as f:
        return json.load(f)


def _check_final(deltas, uri, rep):
    built, fresh, r_fresh, queries = deltas
    pds = lance.dataset(uri)
    segs = pds.describe_indices()[0].segments
    assert len(segs) == 1 and sorted(segs[0].fragment_ids) == [f.fragment_id for f in pds.get_fragments()]
    assert abs(lancegen.recall(pds, built.vectors, queries, nprobes=4) - r_fresh) <= 0.01
    assert rep.tasks == fresh.tasks  # the same tree, reused or run
    assert ls.cleanup(uri, 0, dry_run=True) == []  # nothing left behind, journal included
    assert not glob.glob(os.path.join(uri, "_indices", "_segmerge", "*.json"))


def _fail_after(monkeypatch, n: int) -> None:
    real = _jobs.merge_task
    calls = [0]

    def flaky(job):
        calls[0] += 1
        if calls[0] > n:
            raise OSError("worker died")
        return real(job)

    monkeypatch.setattr(_jobs, "merge_task", flaky)


def _failed_run(uri, monkeypatch, n=6, **kw):
    _fail_after(monkeypatch, n)
    # A task's own exception reaches the driver as the executor's failure
    # (an InternalError naming it).
    with pytest.raises(ls.InternalError, match="worker died"):
        ls.maintain(uri, "vec_idx", **{**RUN, "max_workers": 1, **kw})
    monkeypatch.undo()
    return _journal(uri)


def test_rerun_reuses_what_finished(deltas, copy, monkeypatch):
    j = _failed_run(copy, monkeypatch)
    done = [t for t in j["tasks"] if t["state"] == "done"]
    assert len(done) == 6 and all(t["files"] and t["rows"] for t in done)
    for t in done:  # kept for the next run, not removed
        assert os.path.exists(os.path.join(copy, "_indices", t["output"], "auxiliary.idx"))
    rep = ls.maintain(copy, "vec_idx", **RUN)
    assert rep.committed and rep.tasks_reused == 6 and rep.tasks - rep.tasks_reused == deltas[1].tasks - 6
    _check_final(deltas, copy, rep)


def test_outputs_that_do_not_verify_are_redone(deltas, copy, monkeypatch, caplog):
    j = _failed_run(copy, monkeypatch)
    done = [t for t in j["tasks"] if t["state"] == "done"]
    grown = os.path.join(copy, "_indices", done[0]["output"], "auxiliary.idx")
    with open(grown, "ab") as f:
        f.write(b"\0")  # not the recorded size
    os.remove(os.path.join(copy, "_indices", done[1]["output"], "index.idx"))
    with open(os.path.join(copy, "_indices", done[2]["output"], "index.idx"), "r+b") as f:
        f.truncate(100)  # does not parse
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(copy, "vec_idx", **RUN)
    redone = [r.message for r in caplog.records if "redoing it" in r.message]
    for t, why in zip(done[:3], ("the journal recorded", "has no index.idx", "the journal recorded 8")):
        assert any(t["output"] in m and why in m for m in redone), (t["output"], redone)
    # The tasks that had not finished (planned, never done) are redone too.
    assert len(redone) == 3 + sum(1 for t in j["tasks"] if t["state"] == "planned")
    assert rep.tasks_reused == 3
    committed = {s.uuid for s in ls.open(copy).list_index_segments("vec_idx")}
    assert not committed & {t["output"] for t in done[:3]}
    _check_final(deltas, copy, rep)


def _write_journal(uri: str, j: dict) -> None:
    (path,) = glob.glob(os.path.join(uri, "_indices", "_segmerge", "*.json"))
    with open(path, "w") as f:
        json.dump(j, f)


@pytest.mark.parametrize("damage", ["rot in place", "committed segment", "another segment's files"])
def test_unusable_outputs_are_discarded_and_redone(deltas, copy, monkeypatch, caplog, damage):
    """A finished output that is no longer usable, in ways the journal's own
    size check does not see, must not block the next pass: it is dropped
    from the journal (its files removed, unless it is a committed
    segment) and its task runs afresh."""
    j = _failed_run(copy, monkeypatch)
    done = [t for t in j["tasks"] if t["state"] == "done"]
    target = done[0]
    out_dir = os.path.join(copy, "_indices", target["output"])
    committed = ls.open(copy).list_index_segments("vec_idx")
    if damage == "rot in place":
        # Same size, bytes flipped in the codes: sizes and parsing still pass.
        aux = os.path.join(out_dir, "auxiliary.idx")
        size = os.path.getsize(aux)
        with open(aux, "r+b") as f:
            f.seek(size // 4)
            chunk = f.read(size // 4)
            f.seek(size // 4)
            f.write(bytes(b ^ 0x5A for b in chunk))
    elif damage == "committed segment":
        shutil.rmtree(out_dir)  # the entry names another segment from now on
        victim = committed[3]
        target["output"] = victim.uuid
        target["files"] = [{"path": f.path, "size_bytes": f.size_bytes} for f in victim.files]
        _write_journal(copy, j)
    else:
        # Another (committed) segment's files, with the sizes recorded to match.
        other = committed[5]
        for f in other.files:
            shutil.copyfile(os.path.join(copy, "_indices", other.uuid, f.path), os.path.join(out_dir, f.path))
        target["files"] = [{"path": f.path, "size_bytes": f.size_bytes} for f in other.files]
        _write_journal(copy, j)
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(copy, "vec_idx", **RUN)
    assert rep.committed
    assert any(target["output"] in r.message and "redoing it" in r.message for r in caplog.records)
    assert rep.tasks_reused == len(done) - 1
    if damage == "committed segment":
        # Not this run's to remove: older versions still reference it.
        assert os.path.exists(os.path.join(copy, "_indices", target["output"], "auxiliary.idx"))
    _check_final(deltas, copy, rep)


def test_corrupt_journal_is_a_fresh_start(deltas, copy, monkeypatch, caplog):
    j = _failed_run(copy, monkeypatch)
    (path,) = glob.glob(os.path.join(copy, "_indices", "_segmerge", "*.json"))
    with open(path, "w") as f:
        f.write('{"format": "lance-segmerge-journal", "format_version": 1, "tasks": [')
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(copy, "vec_idx", **RUN)
    assert any("fresh start" in r.message and "corrupt" in r.message for r in caplog.records)
    assert rep.tasks_reused == 0
    # The corrupt journal's outputs are unknown to the run: cleanup finds
    # them (unreferenced) once the grace period has passed.
    orphans = ls.cleanup(copy, 0)
    assert {o["uuid"] for o in orphans} >= {t["output"] for t in j["tasks"] if t["state"] == "done"}
    _check_final(deltas, copy, rep)


def test_journal_of_another_run_is_a_fresh_start(deltas, copy, monkeypatch, caplog):
    j = _failed_run(copy, monkeypatch)
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(copy, "vec_idx", **{**RUN, "fan_in": 4})
    why = [r.message for r in caplog.records if "fresh start" in r.message]
    assert why and "'fan_in': 2" in why[0] and "'fan_in': 4" in why[0], why
    assert rep.tasks_reused == 0 and rep.committed
    for t in j["tasks"]:  # the abandoned run's outputs are gone
        assert not os.path.exists(os.path.join(copy, "_indices", t["output"]))
    assert ls.cleanup(copy, 0, dry_run=True) == []


@pytest.mark.parametrize("edit", ["version", "dataset"])
def test_journal_of_another_version_or_dataset_is_a_fresh_start(deltas, copy, monkeypatch, caplog, tmp_path, edit):
    _failed_run(copy, monkeypatch)
    (path,) = glob.glob(os.path.join(copy, "_indices", "_segmerge", "*.json"))
    uri = copy
    if edit == "version":  # a version at which the same parameters plan otherwise
        with open(path) as f:
            j = json.load(f)
        j["read_version"] -= 1
        with open(path, "w") as f:
            json.dump(j, f)
    else:  # the dataset was copied with its journal: the journal names the original
        uri = str(tmp_path / "other")
        shutil.copytree(copy, uri)
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(uri, "vec_idx", **RUN)
    why = [r.message for r in caplog.records if "fresh start" in r.message]
    assert len(why) == 1 and "the journal is for plan" in why[0], why
    assert rep.tasks_reused == 0 and rep.committed
    assert len(lance.dataset(uri).describe_indices()[0].segments) == 1


def test_resume_at_the_journals_version(deltas, copy, monkeypatch, caplog):
    """An append lands after the crash: the rerun resumes the run planned
    at the journal's version, and its commit rebases over the append."""
    j = _failed_run(copy, monkeypatch)
    x = lancegen.vectors(100, seed=77)
    lance.write_dataset(lancegen.table(x, lance.dataset(copy).count_rows()), copy, mode="append")
    lance.dataset(copy).optimize.optimize_indices(num_indices_to_merge=0)
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        rep = ls.maintain(copy, "vec_idx", **RUN)
    assert any(f"planned at version {j['read_version']}" in r.message for r in caplog.records)
    assert rep.read_version == j["read_version"] and rep.tasks_reused == 6 and rep.committed
    pds = lance.dataset(copy)
    segs = pds.describe_indices()[0].segments
    assert len(segs) == 2  # the merged segment and the new delta
    assert sorted(f for s in segs for f in s.fragment_ids) == [f.fragment_id for f in pds.get_fragments()]


def test_pylance_next_to_a_journal(deltas, copy, monkeypatch):
    """pylance opens, queries, merges and cleans up a dataset that has a
    run journal; its cleanup keeps a young journal (it removes unreferenced
    index files only after 7 days or with delete_unverified); our cleanup
    keeps a live journal's outputs and removes a stale one with them."""
    built, _, _, queries = deltas
    j = _failed_run(copy, monkeypatch)
    outputs = {t["output"] for t in j["tasks"]}
    pds = lance.dataset(copy)
    assert pds.count_rows() == len(built.vectors)
    lancegen.recall(pds, built.vectors, queries[:3], nprobes=4)
    assert ls.cleanup(copy, 3600, dry_run=True) == []  # live: young, sources committed
    pds.cleanup_old_versions(older_than=datetime.timedelta(0))
    assert glob.glob(os.path.join(copy, "_indices", "_segmerge", "*.json"))
    # pylance merges everything: the journal's plan can no longer commit.
    lance.dataset(copy).optimize.optimize_indices(num_indices_to_merge=DELTAS + 1)
    existing = {u for u in outputs if os.path.isdir(os.path.join(copy, "_indices", u))}
    orphans = ls.cleanup(copy, 3600)
    journals = [o for o in orphans if o.get("journal")]
    assert len(journals) == 1 and "no longer committed" in journals[0]["reason"] and journals[0]["removed"]
    # Its outputs go with it, young as they are (a plain orphan waits an hour).
    assert {o["uuid"] for o in orphans if not o.get("journal")} == existing and existing
    assert not any(os.path.isdir(os.path.join(copy, "_indices", u)) for u in outputs)
    assert not glob.glob(os.path.join(copy, "_indices", "_segmerge", "*.json"))
    lancegen.recall(lance.dataset(copy), built.vectors, queries[:3], nprobes=4)
    # pylance's own cleanup with delete_unverified removes a journal like
    # any unreferenced index file, without failing; the next run starts
    # fresh.
    for i in range(4):
        x = lancegen.vectors(100, seed=300 + i)
        lance.write_dataset(lancegen.table(x, lance.dataset(copy).count_rows()), copy, mode="append")
        lance.dataset(copy).optimize.optimize_indices(num_indices_to_merge=0)
    _failed_run(copy, monkeypatch, n=1)
    lance.dataset(copy).cleanup_old_versions(older_than=datetime.timedelta(0), delete_unverified=True)
    assert not glob.glob(os.path.join(copy, "_indices", "_segmerge", "*.json"))
    rep = ls.maintain(copy, "vec_idx", **RUN)
    assert rep.committed and rep.tasks_reused == 0
    assert len(lance.dataset(copy).describe_indices()[0].segments) == 1


CHILD = """
import sys
import lance_segmerge as ls
ls.kernel_version()  # load the kernel before timing
print("ready", flush=True)
ls.maintain(sys.argv[1], "vec_idx", policy="all", fan_in=2, executor="local", resume=True, max_workers=1,
            window_rows=int(sys.argv[2]), progress=None)
print("done", flush=True)
"""


def _child(uri: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, uri, "64"], stdout=subprocess.PIPE, text=True, env=env)


def test_sigkill_at_random_points(deltas, tmp_path, capsys):
    """Kill the driver (SIGKILL) at random points of a multi-level run and
    rerun: the rerun reuses what finished, does the rest, and commits the
    same index as a run that was never interrupted. SEGMERGE_KILL_TRIALS
    sets the number of trials (default 3)."""
    trials = int(os.environ.get("SEGMERGE_KILL_TRIALS", "3"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # How long an uninterrupted child run takes, here and now.
    timing = str(tmp_path / "timing")
    shutil.copytree(deltas[0].uri, timing)
    p = _child(timing, env)
    assert p.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    assert p.stdout.readline().strip() == "done"
    span = time.perf_counter() - t0
    p.wait(60)
    rng = random.Random(int(os.environ.get("SEGMERGE_KILL_SEED", "16")))
    fresh_tasks = deltas[1].tasks
    rows = []
    trial, extra = 0, 0
    while trial < trials + extra:
        uri = str(tmp_path / f"kill{trial}")
        shutil.copytree(deltas[0].uri, uri)
        p = _child(uri, env)
        assert p.stdout.readline().strip() == "ready"
        delay = rng.uniform(0.1, 0.9) * span
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(60)
        try:
            j = _journal(uri)
            done = sum(1 for t in j["tasks"] if t["state"] == "done")
        except ValueError:
            done = -1  # no journal: killed before it was written, or after the commit
        rep = ls.maintain(uri, "vec_idx", **RUN)
        if rep.committed:
            _check_final(deltas, uri, rep)
            assert rep.tasks_reused >= max(done, 0)
        else:  # the child committed before it was killed
            assert len(lance.dataset(uri).describe_indices()[0].segments) == 1
            if extra < 3:  # the timing run was slower than this one (a loaded machine): kill earlier
                span, extra = span / 2, extra + 1
        rows.append((trial, delay, done, rep.tasks_reused, rep.tasks - rep.tasks_reused if rep.committed else 0))
        trial += 1
    with capsys.disabled():
        print(f"\nSIGKILL trials (fresh run: {fresh_tasks} merge tasks, {span:.2f}s):")
        print("trial  kill at (s)  done at kill  reused  redone by the rerun  rerun work / fresh run")
        for trial, delay, done, reused, ran in rows:
            print(f"{trial:5d}  {delay:11.2f}  {done:12d}  {reused:6d}  {ran:19d}  {ran / fresh_tasks:22.2f}")
    assert any(reused > 0 for _, _, _, reused, _ in rows) or trials < 3
