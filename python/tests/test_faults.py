"""The fault suite: a disk that fills up (a file-size limit, and a small
tmpfs where the machine lets us mount one), a worker killed in the middle
of an optimize, and SIGKILL at random points of merges and commits. After
every trial pylance opens the dataset, validates it and answers queries,
and nothing half-written is visible. The number of trials is printed at the
end of the session (the Go side runs its own: gokernel/segment
fault_test.go, kill_test.go)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import conftest
import lance
import lancegen
import pytest

import lance_segmerge as ls

PYENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LANCE_LOG": "error"}


def check_intact(uri: str, rows: int, frags: list[int], x=None) -> int:
    """pylance's integrity check, a query, and the index's coverage: every
    fragment exactly once. Returns the latest version."""
    d = lance.dataset(uri)
    d.validate()
    assert d.count_rows() == rows
    (desc,) = [i for i in d.describe_indices() if i.name == "vec_idx"]
    covered = sorted(f for s in desc.segments for f in s.fragment_ids)
    assert covered == frags, covered
    q = x[0] if x is not None else lancegen.vectors(1, seed=3)[0]
    assert len(d.to_table(nearest={"column": "vec", "q": q, "k": 5}, columns=["id"])) == 5
    for s in ls.open(uri).list_index_segments("vec_idx"):  # every committed file complete
        for f in s.files:
            assert os.path.getsize(os.path.join(uri, "_indices", s.uuid, f.path)) == f.size_bytes
    return d.version


def index_dirs(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "_indices")))


# -- a disk that fills up ---------------------------------------------------------

# Merges two delta segments and commits the result, the merge under a file
# size limit of argv[2] bytes (RLIMIT_FSIZE: a write past it fails with
# EFBIG, the way ENOSPC fails it on a full disk), the commit under argv[3].
_FSIZE = r"""
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
import lance_segmerge as ls
uri, merge_limit, commit_limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = ls.open(uri)
segs = ds.list_index_segments("vec_idx")
inf = resource.RLIM_INFINITY
out = {}
def limited(limit, fn):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, inf))
    try:
        return fn()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (inf, inf))
try:
    m = limited(merge_limit, lambda: ds.merge_existing_index_segments(segs[1:3]))
    out["merge"] = "ok"
except ls.SegmergeError as e:
    out["merge"] = type(e).__name__ + ": " + str(e)[-300:]
    m = None
if m is not None:
    try:
        limited(commit_limit, lambda: ds.commit_existing_index_segments("vec_idx", "vec", [m], replaces=segs[1:3]))
        out["commit"] = "ok"
    except ls.SegmergeError as e:
        out["commit"] = type(e).__name__ + ": " + str(e)[-300:]
print(json.dumps(out))
"""


def test_disk_full_file_size_limit(delta_datasets, tmp_path):
    built = delta_datasets["IVF_PQ"]
    frags = [0, 1, 2, 3, 4]
    trials = [(0, 0), (100, 0), (4_000, 0), (30_000, 0), (1 << 30, 0), (1 << 30, 100), (1 << 30, 2_000), (1 << 30, 1 << 20)]
    seen = set()
    for i, (merge_limit, commit_limit) in enumerate(trials):
        uri = str(tmp_path / f"t{i}")
        shutil.copytree(built.uri, uri)
        dirs, v0 = index_dirs(uri), lance.dataset(uri).version
        p = subprocess.run([sys.executable, "-c", _FSIZE, uri, str(merge_limit), str(commit_limit)], env=PYENV,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        for step, res in out.items():
            assert res == "ok" or (res.startswith("StorageError: ") and "file too large" in res), (merge_limit, commit_limit, out)
            seen.add((step, res == "ok"))
        v = check_intact(uri, 2900, frags, built.vectors)
        if out.get("commit") == "ok":
            assert v == v0 + 1
        else:
            assert v == v0
            if out["merge"] != "ok":
                assert index_dirs(uri) == dirs  # the failed merge removed its output
        conftest.RELIABILITY["fault trials (disk full: file-size limit)"] += 1
    # The sweep crossed both the merge's and the commit's writes.
    assert {("merge", False), ("merge", True), ("commit", False), ("commit", True)} <= seen, seen


# The same, on a tmpfs of argv[3] bytes mounted in a private mount namespace
# (nothing outside this process tree sees it): the dataset is copied in,
# merged and committed until the space runs out, and checked by pylance
# there.
_TMPFS = r"""
import json, os, shutil, sys
sys.path.insert(0, sys.argv[4])
import lance, lance_segmerge as ls
src, mnt = sys.argv[1], sys.argv[2]
uri = os.path.join(mnt, "ds")
shutil.copytree(src, uri)
ds = ls.open(uri)
segs = ds.list_index_segments("vec_idx")
out = {"free": shutil.disk_usage(mnt).free}
try:
    m = ds.merge_existing_index_segments(segs[1:3])
    out["merge"] = "ok"
    ds.commit_existing_index_segments("vec_idx", "vec", [m], replaces=segs[1:3])
    out["commit"] = "ok"
except ls.SegmergeError as e:
    out["error"] = type(e).__name__ + ": " + str(e)[-300:]
d = lance.dataset(uri)
d.validate()
out["version"], out["rows"] = d.version, d.count_rows()
out["covered"] = sorted(f for i in d.describe_indices() for s in i.segments for f in s.fragment_ids)
out["dirs"] = sorted(os.listdir(os.path.join(uri, "_indices")))
print(json.dumps(out))
"""


def _tmpfs_works(mnt: str) -> bool:
    if shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                        f"mount -t tmpfs -o size=64k tmpfs {mnt} && touch {mnt}/x"], capture_output=True)
    return p.returncode == 0


def test_disk_full_tmpfs(delta_datasets, tmp_path):
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    if not _tmpfs_works(mnt):
        pytest.skip("this machine does not let an unprivileged user mount a tmpfs in a user namespace")
    built = delta_datasets["IVF_PQ"]
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(built.uri) for f in fs)
    blocks = sum(-(-os.path.getsize(os.path.join(d, f)) // 4096) for d, _, fs in os.walk(built.uri) for f in fs)
    dirs0 = sorted(os.listdir(os.path.join(built.uri, "_indices")))
    outcomes = set()
    for headroom in (0, 12 << 10, 48 << 10, 96 << 10, 1 << 20):
        tmpfs = blocks * 4096 + headroom
        p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c",
                            f"import os, subprocess, sys; subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size={tmpfs}', 'tmpfs', {mnt!r}], check=True);"
                            f"sys.exit(subprocess.run([sys.executable, '-c', {_TMPFS!r}, {built.uri!r}, {mnt!r}, '', {os.pathsep.join(sys.path)!r}]).returncode)"],
                           env=PYENV, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        err = out.get("error")
        assert err is None or (err.startswith("StorageError: ") and "no space left on device" in err), out
        assert out["rows"] == 2900 and out["covered"] == [0, 1, 2, 3, 4], out
        if err and "merge" not in out:
            assert out["dirs"] == dirs0, out  # the failed merge removed its output
        outcomes.add("ok" if err is None else "merge failed" if "merge" not in out else "commit failed")
        conftest.RELIABILITY["fault trials (disk full: tmpfs)"] += 1
    assert "merge failed" in outcomes and "ok" in outcomes, (outcomes, size)


# -- a worker killed during optimize -------------------------------------------------


def _pool_workers() -> list[int]:
    """Live multiprocessing children of this process (spawned pool workers,
    not the resource tracker)."""
    me, out = os.getpid(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if ppid == me and state != "Z" and b"spawn_main" in cmd and b"resource_tracker" not in cmd:
            out.append(int(pid))
    return out


@pytest.mark.parametrize("where", ["before", "after"], ids=["mid-task", "before-returning"])
def test_worker_killed(tmp_path, monkeypatch, where):
    """A worker SIGKILLed while it runs a task of level 1 (before its merge,
    or after it, its output written but not returned): optimize raises a
    WorkerError naming the task, stops the other workers, removes every
    output of the run, and the dataset is exactly as it was."""
    built = lancegen.build_with_deltas(str(tmp_path / "ds"), "IVF_PQ", n_deltas=5)
    uri = built.uri
    frags = [0, 1, 2, 3, 4, 5, 6]
    v0, dirs = check_intact(uri, 3500, frags, built.vectors), index_dirs(uri)
    assert not _pool_workers()
    monkeypatch.setenv("LANCE_SEGMERGE_FAILPOINT", f"kill-worker:1:0:{where}")
    with pytest.raises(ls.WorkerError) as ei:
        ls.optimize(uri, "vec_idx", executor="processes", max_workers=2, fan_in=2, progress=False)
    msg = str(ei.value)
    assert "task 0 of level 1" in msg, msg
    # How the worker died comes from its exit code, when the pool still
    # lists the process: it usually does; when it has already forgotten it
    # (a race inside concurrent.futures, seen once on CI), the error still
    # names every task that did not finish, the killed one first.
    if "was killed by" in msg:
        assert "was killed by SIGKILL while running item 0" in msg, msg
        assert ei.value.items == (0,)
    else:
        assert "a worker process died" in msg and ei.value.items[0] == 0, msg
    deadline = time.monotonic() + 10
    while _pool_workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _pool_workers(), "a pool worker outlived the failed optimize"
    assert index_dirs(uri) == dirs, "outputs of the failed run were left behind"
    assert check_intact(uri, 3500, frags, built.vectors) == v0
    # The same optimize, the failpoint gone, goes through.
    monkeypatch.delenv("LANCE_SEGMERGE_FAILPOINT")
    assert ls.optimize(uri, "vec_idx", executor="processes", max_workers=2, fan_in=2, progress=False).version == v0 + 1
    check_intact(uri, 3500, frags, built.vectors)
    conftest.RELIABILITY["fault trials (worker killed)"] += 1


def test_a_script_without_a_main_guard_is_told_why_its_workers_died(tmp_path):
    """executor='processes' spawns its workers, which import the caller's
    script: one that calls optimize at its top level makes every worker
    start a pool of its own while it starts, which multiprocessing refuses.
    The WorkerError says so, and the dataset is left as it was."""
    built = lancegen.build_with_deltas(str(tmp_path / "ds"), "IVF_PQ", n_deltas=3)
    v0 = lance.dataset(built.uri).version
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import sys\nimport lance_segmerge as ls\n"
        "try:\n"
        f"    ls.optimize({built.uri!r}, 'vec_idx', executor='processes', max_workers=2, fan_in=2, progress=False)\n"
        "except ls.WorkerError as e:\n"
        "    print('WorkerError:', e)\n    sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LANCE_LOG": "error"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 3, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "if __name__ == '__main__':" in out.stdout, out.stdout
    assert lance.dataset(built.uri).version == v0


class _ReapedElsewhere:
    """A dead worker the pool's own thread reaped a moment before: its exit
    status reads None until that thread records it."""

    def __init__(self, code: int, nones: int) -> None:
        self.code, self.nones = code, nones

    def join(self, timeout=None) -> None:
        pass

    @property
    def exitcode(self):
        if self.nones:
            self.nones -= 1
            return None
        return self.code


class _NoneStarted:
    def empty(self) -> bool:
        return True


def test_a_worker_status_recorded_late_still_names_how_it_died(monkeypatch):
    """The pool's manager thread and ours both wait on a dead worker; the
    one that loses the race reads no exit status for a moment. The
    WorkerError still says how the worker died, and gives the main-guard
    hint its status calls for."""
    from lance_segmerge.executors import FuturesExecutor
    import concurrent.futures as cf

    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))
    sys.modules["__main__"].__file__ = "/tmp/script.py"
    with cf.ThreadPoolExecutor(1) as pool:
        ex = FuturesExecutor(pool, started=_NoneStarted())
        pending: cf.Future = cf.Future()
        err = ex._lost([pending], {pending: 0}, {7: _ReapedElsewhere(1, 3)}, cf.BrokenExecutor("broken"), total=1)
    assert "process 7 exited with status 1" in str(err), err
    assert "if __name__ == '__main__':" in str(err), err
    assert err.items == (0,)


# -- SIGKILL at random points of merges and commits --------------------------------

# Merges the last two segments and commits, until one segment is left;
# prints "ready" once the kernel is loaded, "m" before each merge and "c" before each
# commit.
_KILL_LOOP = r"""
import sys, lance_segmerge as ls
uri = sys.argv[1]
ls.kernel_version()  # load the native kernel before the clock starts
print("ready", flush=True)
while True:
    ds = ls.open(uri)
    segs = ds.list_index_segments("vec_idx", with_stats=False)
    if len(segs) < 2:
        break
    a, b = segs[-2], segs[-1]
    print("m", flush=True)
    m = ds.merge_existing_index_segments([a, b], window_rows=16)
    print("c", flush=True)
    ds.commit_existing_index_segments("vec_idx", "vec", [m], replaces=[a, b])
print("done", flush=True)
"""


def test_sigkill_at_random_points(tmp_path):
    trials = int(os.environ.get("LANCE_SEGMERGE_KILL_TRIALS", "10"))
    n, per = 16, 1000
    x = lancegen.vectors(n * per, seed=17)
    base = str(tmp_path / "base")
    pds = lance.write_dataset(lancegen.table(x), base, max_rows_per_file=per)
    kw = lancegen.train_shared_model(pds, "IVF_PQ")
    segs = [pds.create_index_uncommitted("vec", "IVF_PQ", name="vec_idx", fragment_ids=[f], **kw) for f in range(n)]
    lance.dataset(base).commit_existing_index_segments("vec_idx", "vec", segs)
    # How long a whole run takes, to spread the kills over it.
    t0 = time.monotonic()
    full = str(tmp_path / "full")
    shutil.copytree(base, full)
    p = subprocess.Popen([sys.executable, "-c", _KILL_LOOP, full], env=PYENV, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    t_ready = time.monotonic()
    while p.stdout.readline().strip() not in ("done", ""):
        pass
    span = time.monotonic() - t_ready
    p.wait(120)
    assert p.returncode == 0 and time.monotonic() - t0 < 120
    check_intact(full, n * per, list(range(n)), x)
    rng = random.Random(1818)
    stages = {"merge": 0, "commit": 0, "other": 0}
    for trial in range(trials):
        uri = str(tmp_path / f"t{trial}")
        shutil.copytree(base, uri)
        p = subprocess.Popen([sys.executable, "-c", _KILL_LOOP, uri], env=PYENV, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        last = ""
        if trial % 3:
            # Two trials in three aim at a stage, a moment after one of the
            # first merges or commits starts (random times alone can miss
            # every commit, or every merge, depending on which the machine
            # runs slower that day): commits a few milliseconds in, merges
            # a millisecond in.
            stage, delay = ("c", 0.005) if trial % 3 == 1 else ("m", 0.001)
            want, seen = rng.randint(1, 5), 0
            while seen < want:
                line = p.stdout.readline().strip()
                if not line:
                    break
                last = line
                seen += line == stage
            time.sleep(rng.uniform(0, delay))
        else:
            time.sleep(rng.uniform(0, span))
        p.send_signal(signal.SIGKILL)
        out = p.stdout.read().split()
        p.wait()
        last = out[-1] if out else last
        stages["merge" if last == "m" else "commit" if last == "c" else "other"] += 1
        # Whatever the moment: pylance opens and validates the latest
        # version, every fragment is covered exactly once, every version
        # opens, and cleanup finds only unreferenced directories.
        v = check_intact(uri, n * per, list(range(n)), x)
        for old in range(1, v + 1):
            lance.dataset(uri, version=old).count_rows()
        live = {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")}
        orphans = ls.cleanup(uri, 0, dry_run=False)
        assert not live & {o["uuid"] for o in orphans}
        assert index_dirs(uri) >= live
        check_intact(uri, n * per, list(range(n)), x)
        conftest.RELIABILITY["fault trials (SIGKILL during merge/commit)"] += 1
    # The kills landed in merges and in commits.
    print("kill stages", stages)
    assert trials < 6 or (stages["merge"] and stages["commit"]), stages
