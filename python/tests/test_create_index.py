"""create_index, train_index_model, incremental deltas, models from
elsewhere (Arrow C Data Interface) and the CLI `build`, against pylance
14.0.2."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.indices import IndicesBuilder

import lancegen
import lance_segmerge as ls
from lance_segmerge._cli import main as cli_main
from lance_segmerge.errors import InvalidInputError
from lance_segmerge.model import IndexModel

DIM = 32
N = 8000


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    root = str(tmp_path_factory.mktemp("create") / "base")
    x = lancegen.vectors(N, dim=DIM, seed=5)
    lance.write_dataset(lancegen.table(x), root, max_rows_per_file=2000)
    return root, x


def copy(src: str, tmp_path: Path, name: str) -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


QUERIES = lancegen.vectors(100, dim=DIM, seed=77)


def _pylance_recall(uri: str, index_type: str, metric: str, x: np.ndarray, queries: np.ndarray, **kw: Any) -> list[float]:
    """Recall of three pylance builds of the index over uri: pylance
    trains from a random start (it cannot be seeded), so a test holds our
    seeded build to their mean, not to one draw."""
    runs = []
    for _ in range(3):
        lance.dataset(uri).create_index("vec", index_type, name="vec_idx", metric=metric, replace=True, **kw)
        runs.append(lancegen.recall(lance.dataset(uri), x, queries, metric=metric, nprobes=8))
    return runs


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ"])
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_recall_against_pylance_create_index(tmp_path: Path, base: tuple[str, np.ndarray], index_type: str, metric: str) -> None:
    src, x = base
    kw = {"num_partitions": 8}
    if index_type == "IVF_PQ":
        kw["num_sub_vectors"] = 8
    ours, theirs = copy(src, tmp_path, "ours"), copy(src, tmp_path, "theirs")
    out = ls.create_index(ours, "vec", index_type, metric=metric, progress=False, seed=1, fragments_per_task=1, **kw)
    assert out.version == 2
    r_ours = lancegen.recall(lance.dataset(ours), x, QUERIES, metric=metric, nprobes=8)
    runs = _pylance_recall(theirs, index_type, metric, x, QUERIES, **kw)
    r_theirs = sum(runs) / len(runs)
    # Both sides train at random (pylance cannot be seeded): k-means, PQ
    # codebooks and RQ rotations differ, so recall differs by that noise.
    # PQ recall is the noisiest: over 24 trainings each (nprobes = all
    # partitions, so only the codebook matters), dot PQ gave 0.4245 ± 0.020
    # (pylance) and 0.4204 ± 0.025 (ours), single runs 0.37-0.47 on both
    # sides: no systematic gap (the rules are pylance's, see
    # test_dot_pq_follows_pylance_create_index), but two single runs can
    # differ by 0.07. RQ too: its rotation is random, and l2 IVF_RQ here
    # gave 0.851-0.908 over our seeds 1-6 (mean 0.885) and 0.877-0.905 over
    # six pylance trainings (mean 0.892); seed 1 is our lowest, and a CI run
    # drew pylance's 0.905 against it (one build then; a mean of three now).
    slack = 0.08 if index_type in ("IVF_PQ", "IVF_RQ") else 0.05
    assert r_ours >= r_theirs - slack, (r_ours, runs)
    segs = ls.open(ours).list_index_segments("vec_idx")
    assert len(segs) == 1 and segs[0].num_rows == N
    assert segs[0].pq_transposed in (None, True) and segs[0].rq_packed in (None, True)  # query layout after the merge
    assert not [p for p in Path(ours, "_indices").iterdir() if p.name != segs[0].uuid]  # intermediates removed


def test_dot_pq_codebook_stays_on_raw_vector_scale(base: tuple[str, np.ndarray]) -> None:
    """RFC review: dot PQ trains on raw vectors, l2 on residuals; a dot
    codebook is on the raw vectors' scale, not residual-centred."""
    src, x = base
    dot = ls.train_index_model(src, "vec", "IVF_PQ", metric="dot", num_partitions=8, num_sub_vectors=8, sample_rate=32, seed=3)
    l2 = ls.train_index_model(src, "vec", "IVF_PQ", metric="l2", num_partitions=8, num_sub_vectors=8, sample_rate=32, seed=3)
    raw = np.abs(x).mean()
    assert dot.codebook is not None and l2.codebook is not None
    assert 0.5 * raw <= np.abs(dot.codebook).mean() <= 1.5 * raw
    assert np.abs(l2.codebook).mean() < 0.8 * np.abs(dot.codebook).mean()  # residuals are smaller
    # pylance's own trainer agrees on the scales
    ib = IndicesBuilder(lance.dataset(src), "vec")
    ivf = ib.train_ivf(8, distance_type="dot", sample_rate=32)
    theirs = ib.train_pq(ivf, 8, sample_rate=16).codebook.flatten().to_numpy()
    assert 0.7 <= np.abs(dot.codebook).mean() / np.abs(theirs).mean() <= 1.3


def test_create_index_float16(tmp_path: Path, base: tuple[str, np.ndarray]) -> None:
    """float16 columns: pylance 14 indexes them, and so do we (float16
    centroids and codebooks, float16 residuals and IVF_FLAT rows); pylance
    opens what we commit and its recall matches its own index's."""
    _, x32 = base
    x = x32.astype(np.float16)
    src = str(tmp_path / "src16")
    vec = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel(), pa.float16()), DIM)
    lance.write_dataset(pa.table({"id": pa.array(np.arange(N)), "vec": vec}), src, max_rows_per_file=2000)
    xf = x.astype(np.float32)
    for index_type, metric in (("IVF_FLAT", "cosine"), ("IVF_PQ", "l2"), ("IVF_RQ", "dot"), ("IVF_SQ", "l2")):
        kw = {"num_partitions": 8}
        if index_type == "IVF_PQ":
            kw["num_sub_vectors"] = 8
        ours, theirs = copy(src, tmp_path, f"o-{index_type}"), copy(src, tmp_path, f"t-{index_type}")
        ls.create_index(ours, "vec", index_type, metric=metric, progress=False, seed=2, **kw)
        r_ours = lancegen.recall(lance.dataset(ours), xf, QUERIES[:50], metric=metric, nprobes=8)
        runs = _pylance_recall(theirs, index_type, metric, xf, QUERIES[:50], **kw)
        r_theirs = sum(runs) / len(runs)
        # IVF_PQ, measured over eight builds each: our seeds 0.452-0.526
        # (mean 0.487; seed 2 gives 0.472), pylance 0.474-0.556 (mean 0.503,
        # one build's standard deviation 0.027); 0.1 is over three standard
        # deviations of a mean of three above our seed's recall.
        slack = 0.1 if index_type == "IVF_PQ" else 0.05
        assert r_ours >= r_theirs - slack, (index_type, r_ours, runs)


def test_dot_pq_follows_pylance_create_index(tmp_path: Path, base: tuple[str, np.ndarray]) -> None:
    """What pylance's create_index does for dot PQ, and that we do the
    same: partitions by largest inner product, the codebook trained by L2
    k-means on the raw vectors (each entry is the mean of the sub-vectors
    nearest to it in L2), codes by the nearest entry in L2 on the raw
    vectors. Our build with pylance's model reproduces every code."""
    src, x = base
    theirs = copy(src, tmp_path, "theirs")
    ds = lance.dataset(theirs).create_index("vec", "IVF_PQ", name="vec_idx", metric="dot", num_partitions=8, num_sub_vectors=8)
    model = ls.read_index_model(theirs, "vec_idx")
    assert model.metric == "dot" and model.codebook is not None
    sd, cb = DIM // 8, np.asarray(model.codebook).reshape(8, 256, DIM // 8)
    subs = x.reshape(N, 8, sd)
    fixed = []
    for s in range(8):  # L2 k-means fixed point: entries are their L2 members' means
        member = ((subs[:, s, None, :] - cb[s][None]) ** 2).sum(-1).argmin(1)
        for c in np.unique(member)[:64]:
            fixed.append(np.abs(subs[member == c, s].mean(0) - cb[s, c]).max())
    assert np.median(fixed) < 1e-4
    seg = ls.build_index_segment(theirs, "vec", "IVF_PQ", [f.fragment_id for f in ds.get_fragments()], model, name="o")
    pseg = next(s for s in ls.open(theirs).list_index_segments("vec_idx"))
    assert pseg.pq_transposed and not seg.pq_transposed
    ours_codes = aux_codes(theirs, seg.uuid, transposed=False)
    their_codes = aux_codes(theirs, pseg.uuid, transposed=True)
    assert ours_codes.keys() == their_codes.keys()
    assert all(ours_codes[r] == their_codes[r] for r in their_codes)  # codes, and partitions (the row's place)
    cent = np.asarray(model.centroids)
    part = {r: p for r, (p, _) in their_codes.items()}
    rows = np.array(sorted(part))
    xi = x[(rows >> 32) * 2000 + (rows & 0xFFFFFFFF)]
    assert (np.argmax(xi @ cent.T, 1) == np.array([part[r] for r in rows])).all()


def aux_codes(root: str, uuid: str, transposed: bool) -> dict[int, tuple[int, bytes]]:
    """Row id -> (partition, PQ code bytes) of a segment's auxiliary file,
    row-major or transposed per partition."""
    import base64

    from lance_segmerge import _ffi

    path = f"{root}/_indices/{uuid}/auxiliary.idx"
    info = _ffi.call_json("InspectFile", path, 0, -1, "")
    ivf = _ffi.call_json("DescribeIVF", path)
    rid = np.frombuffer(base64.b64decode(info["columns"]["_rowid"]["values"]), np.uint64)
    raw = np.frombuffer(base64.b64decode(info["columns"]["__pq_code"]["values"]), np.uint8)
    width = len(raw) // max(1, len(rid))
    out: dict[int, tuple[int, bytes]] = {}
    for p, (off, n) in enumerate(zip(ivf["offsets"], ivf["lengths"])):
        blk = raw[off * width : (off + n) * width]
        codes = blk.reshape(width, n).T if transposed else blk.reshape(n, width)
        for i in range(n):
            out[int(rid[off + i])] = (p, codes[i].tobytes())
    return out


def test_train_index_model(base: tuple[str, np.ndarray]) -> None:
    src, x = base
    m = ls.train_index_model(src, "vec", "IVF_SQ", metric="l2", num_partitions=4, sample_rate=64, seed=1, fragment_ids=[0, 1])
    assert m.num_partitions == 4 and m.dimension == DIM and m.num_bits == 8
    assert m.sq_bounds is not None and m.sq_bounds[0] >= x[:4000].min() - 1e-6 and m.sq_bounds[1] <= x[:4000].max() + 1e-6
    again = ls.train_index_model(src, "vec", "IVF_SQ", metric="l2", num_partitions=4, sample_rate=64, seed=1, fragment_ids=[0, 1])
    assert again.content_hash == m.content_hash  # seeded: reproducible
    rq = ls.train_index_model(src, "vec", "IVF_RQ", num_partitions=4, seed=2)
    assert rq.num_bits == 5 and len(rq.rq_signs) == 4 * DIM // 8
    with pytest.raises(InvalidInputError):
        ls.train_index_model(src, "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=5)
    with pytest.raises(InvalidInputError):
        ls.train_index_model(src, "vec", "IVF_FLAT", num_partitions=N + 1, sample_rate=1)


def _partition_quality(x: np.ndarray, q: np.ndarray, truth: np.ndarray, centroids: np.ndarray, nprobes: int) -> tuple[float, float]:
    """Partition sizes' coefficient of variation, and recall@10 of an exact
    search within the nprobes nearest partitions (the model's part of an
    IVF index's recall, without quantization)."""
    c = np.asarray(centroids, dtype=np.float32).reshape(-1, x.shape[1])
    assign = ((x**2).sum(1)[:, None] - 2 * x @ c.T + (c**2).sum(1)[None]).argmin(1)
    sizes = np.bincount(assign, minlength=len(c))
    probes = np.argsort((q**2).sum(1)[:, None] - 2 * q @ c.T + (c**2).sum(1)[None], 1)[:, :nprobes]
    hits = 0
    for i in range(len(q)):
        cand = np.nonzero(np.isin(assign, probes[i]))[0]
        top = cand[np.argsort(((x[cand] - q[i]) ** 2).sum(1))[:10]]
        hits += len(set(top.tolist()) & set(truth[i].tolist()))
    return float(sizes.std() / sizes.mean()), hits / (10 * len(q))


def test_hierarchical_ivf_training_against_pylance(tmp_path: Path) -> None:
    """Above 256 partitions both train hierarchically: on skewed data (a few
    dense clusters, many sparse) our partitions are as even as pylance
    14's proportional tree makes them, and probing them finds the same
    neighbours (two trainings each; measured: sizes CV ours 0.27, pylance
    0.39-0.40, recall 0.90 both)."""
    rng = np.random.default_rng(3)
    dim, parts, groups = 16, 512, 120
    sizes = ((rng.pareto(1.2, groups) + 1) * 100).astype(np.float64)
    sizes = (sizes / sizes.sum() * 40_000).astype(int) + 10
    centres = rng.normal(size=(groups, dim)).astype(np.float32) * 3
    x = np.concatenate([centres[g] + rng.normal(size=(s, dim)).astype(np.float32) for g, s in enumerate(sizes)])
    x = x[rng.permutation(len(x))]
    uri = str(tmp_path / "skew")
    ds = lance.write_dataset(lancegen.table(x), uri)
    q = x[rng.choice(len(x), 100, replace=False)] + rng.normal(size=(100, dim)).astype(np.float32) * 0.5
    truth = np.argpartition((x**2).sum(1)[None] - 2 * q @ x.T, 10, axis=1)[:, :10]
    ours, theirs = [], []
    for seed in (1, 2):
        m = ls.train_index_model(uri, "vec", "IVF_FLAT", metric="l2", num_partitions=parts, sample_rate=64, max_iters=30, seed=seed)
        ours.append(_partition_quality(x, q, truth, m.centroids, 6))
        pm = IndicesBuilder(ds, "vec").train_ivf(parts, sample_rate=64, max_iters=30)
        theirs.append(_partition_quality(x, q, truth, pm.centroids.values.to_numpy(), 6))
    cv_ours, cv_theirs = np.mean([o[0] for o in ours]), np.mean([t[0] for t in theirs])
    r_ours, r_theirs = np.mean([o[1] for o in ours]), np.mean([t[1] for t in theirs])
    # The tree that split the largest cluster first (before pylance 14)
    # left partitions 2.4x as uneven (CV 0.92 against 0.39), whose larger
    # partitions scanned more rows per probe.
    print(f"sizes CV ours {cv_ours:.3f} pylance {cv_theirs:.3f}; recall ours {r_ours:.3f} pylance {r_theirs:.3f}")
    assert cv_ours <= 1.2 * cv_theirs + 0.05, (ours, theirs)
    assert r_ours >= r_theirs - 0.03, (ours, theirs)


def test_incremental_delta_from_existing_index(tmp_path: Path, base: tuple[str, np.ndarray]) -> None:
    """A delta built on appended fragments with the model of the existing
    index merges with it, in our merge and in pylance's eyes."""
    src, x = base
    uri = copy(src, tmp_path, "inc")
    ds = lance.dataset(uri)
    ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=8, num_sub_vectors=8)
    extra = lancegen.vectors(1500, dim=DIM, seed=11)
    ds = lance.write_dataset(lancegen.table(extra, N), uri, mode="append")
    new_frag = max(f.fragment_id for f in ds.get_fragments())
    model = ls.read_index_model(uri, "vec_idx")
    assert model.index_type == "IVF_PQ" and model.num_partitions == 8
    seg = ls.build_index_segment(uri, "vec", "IVF_PQ", [new_frag], model, name="vec_idx")
    v = ls.commit_existing_index_segments(uri, "vec_idx", "vec", [seg]).version
    ds = lance.dataset(uri)
    assert ds.version == v and len(ds.describe_indices()[0].segments) == 2
    allx = np.concatenate([x, extra])
    r_delta = lancegen.recall(ds, allx, QUERIES, nprobes=8)
    # our merge accepts the base and the delta together
    v2 = ls.optimize(uri, "vec_idx", progress=False).version
    ds = lance.dataset(uri)
    assert ds.version == v2 and len(ds.describe_indices()[0].segments) == 1
    assert lancegen.recall(ds, allx, QUERIES, nprobes=8) >= r_delta - 0.01


def test_models_from_elsewhere(tmp_path: Path, base: tuple[str, np.ndarray]) -> None:
    src, _ = base
    ds = lance.dataset(src)
    ib = IndicesBuilder(ds, "vec")
    ivf = ib.train_ivf(8, sample_rate=32)
    pq = ib.train_pq(ivf, 8, sample_rate=16)
    cent = ivf.centroids.flatten().to_numpy().reshape(8, DIM)
    forms = {
        "IvfModel/PqModel": (ivf, pq),
        "numpy": (cent, pq.codebook.flatten().to_numpy().reshape(-1, DIM)),
        "FixedSizeList": (pa.FixedSizeListArray.from_arrays(pa.array(cent.ravel()), DIM), pq.codebook),
        "FixedShapeTensor": (pa.FixedShapeTensorArray.from_numpy_ndarray(cent), pq.codebook),
        "float64 numpy": (cent.astype(np.float64), pq.codebook),
    }
    models = {k: IndexModel.from_arrays("IVF_PQ", "l2", c, codebook=cb, num_sub_vectors=8) for k, (c, cb) in forms.items()}
    assert len({m.content_hash for m in models.values()}) == 1
    uri = copy(src, tmp_path, "forms")
    for k, m in models.items():
        seg = ls.build_index_segment(uri, "vec", "IVF_PQ", [0], m, name=f"i{len(k)}")
        assert seg.num_rows == 2000


def test_bad_model_arrays_are_refused(base: tuple[str, np.ndarray]) -> None:
    """Arrays are validated (in Go, before import) whatever Python lets
    through."""
    from lance_segmerge import _ffi
    from lance_segmerge._cdata import CStructs
    import json

    src, _ = base
    ds = ls.open(src)

    def build(arrays: dict[str, pa.Array], **spec: object) -> None:
        keep = {n: CStructs().export(a) for n, a in arrays.items()}
        full = {"index_type": "IVF_FLAT", "metric": "l2", "dim": DIM, **spec, "arrays": {n: s.pair() for n, s in keep.items()}}
        try:
            _ffi.run_operation("BuildSegment", (ds.uri, "", ds.version, json.dumps(full), json.dumps({"column": "vec", "name": "bad", "fragment_ids": [0]})))
        finally:
            assert all(s.released() for s in keep.values())  # taken over, released even on error

    good = np.ones((4, DIM), np.float32)
    fsl = pa.FixedSizeListArray.from_arrays(pa.array(good.ravel()), DIM)
    cases = {
        "ints": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(4 * DIM, np.int32)), DIM),
        "strings": pa.array(["a", "b"]),
        "nulls": pa.FixedSizeListArray.from_arrays(pa.array(good.ravel()), DIM, mask=pa.array([False, True, False, False])),
        "null values": pa.FixedSizeListArray.from_arrays(pa.array([None] + [1.0] * (4 * DIM - 1), pa.float32()), DIM),
        "wrong width": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(4 * 16, np.float32)), 16),
        "flat not dividing": pa.array(np.ones(DIM + 3, np.float32)),
        "nan": pa.FixedSizeListArray.from_arrays(pa.array(np.full(4 * DIM, np.nan, np.float32)), DIM),
    }
    for what, arr in cases.items():
        with pytest.raises(InvalidInputError):
            build({"centroids": arr})
        assert what  # for the failure message
    # a slice is read from its offset
    sliced = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6 * DIM, dtype=np.float32)), DIM).slice(2, 4)
    build({"centroids": sliced})
    with pytest.raises(InvalidInputError):
        build({"centroids": fsl, "codebook": fsl})  # a FLAT model takes no codebook
    with pytest.raises(InvalidInputError):
        build({})  # no centroids
    ls.cleanup(src, 0)  # the sliced model's segment: other tests copy this dataset


def test_create_index_processes_and_cli(tmp_path: Path, base: tuple[str, np.ndarray]) -> None:
    src, x = base
    uri = copy(src, tmp_path, "procs")
    out = ls.create_index(uri, "vec", "IVF_SQ", num_partitions=8, executor="processes", max_workers=2, progress=False, seed=4)
    assert out.version == 2
    ds = lance.dataset(uri)
    assert ds.describe_indices()[0].num_rows_indexed == N
    assert lancegen.recall(ds, x, QUERIES, nprobes=8) > 0.9
    with pytest.raises(InvalidInputError):
        ls.create_index(uri, "vec", "IVF_SQ", num_partitions=8, progress=False)  # exists
    cli = copy(src, tmp_path, "cli")
    assert cli_main(["build", cli, "--column", "vec", "--index-type", "IVF_RQ", "--metric", "cosine",
                     "--num-partitions", "8", "--seed", "1", "--no-progress", "--fragments-per-task", "2"]) == 0
    ds = lance.dataset(cli)
    assert ds.describe_indices()[0].name == "vec_idx" and ds.describe_indices()[0].num_rows_indexed == N
    assert cli_main(["build", cli, "--column", "nope", "--index-type", "IVF_RQ", "--no-progress"]) != 0


@pytest.fixture(scope="module")
def ray_cluster():  # type: ignore[no-untyped-def]
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    ray.init(num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def dask_client():  # type: ignore[no-untyped-def]
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def segment_bytes(uri: str) -> dict[str, bytes]:
    """The committed index's code bytes, file by file (what executors must
    not change)."""
    seg = ls.open(uri).list_index_segments("vec_idx")[0]
    d = Path(uri, "_indices", seg.uuid)
    return {p.name: p.read_bytes() for p in d.iterdir()}


@pytest.mark.parametrize("executor", ["ray", "dask"])
def test_create_index_on_ray_and_dask(tmp_path: Path, base: tuple[str, np.ndarray], executor: str, request: pytest.FixtureRequest) -> None:
    """The same seeded model built on Ray or Dask workers gives the same
    index as on local threads, committed once, intermediates removed."""
    src, x = base
    request.getfixturevalue("ray_cluster" if executor == "ray" else "dask_client")
    model = ls.train_index_model(src, "vec", "IVF_PQ", num_partitions=8, num_sub_vectors=8, seed=11)
    local, remote = copy(src, tmp_path, "local"), copy(src, tmp_path, executor)
    ls.create_index(local, "vec", "IVF_PQ", model=model, progress=False, fragments_per_task=1)
    seen: list[ls.OptimizeProgress] = []
    out = ls.create_index(remote, "vec", "IVF_PQ", model=model, executor=executor, max_workers=2, progress=seen.append, fragments_per_task=1)
    assert out.version == 2
    assert [p for p in seen if p.level == 0][-1].tasks_done == 4  # one build task per fragment
    segs = ls.open(remote).list_index_segments("vec_idx")
    assert len(segs) == 1 and segs[0].num_rows == N
    assert ls.cleanup(remote, 0, dry_run=True) == []
    r = lancegen.recall(lance.dataset(remote), x, QUERIES[:50], nprobes=8)
    assert r == lancegen.recall(lance.dataset(local), x, QUERIES[:50], nprobes=8) and r > 0.3
    ours, theirs = segment_bytes(local), segment_bytes(remote)
    assert ours.keys() == theirs.keys()
    # auxiliary.idx holds the codes: the same bytes whatever ran the builds
    assert ours["auxiliary.idx"] == theirs["auxiliary.idx"]


@pytest.mark.parametrize("executor", ["local", "processes", "ray", "dask"])
def test_ctrl_c_during_build_leaves_the_dataset(tmp_path: Path, base: tuple[str, np.ndarray], executor: str, request: pytest.FixtureRequest) -> None:
    """Ctrl-C (a KeyboardInterrupt on the driver) while build tasks run:
    the workers are cancelled, every segment the call wrote is removed, and
    the dataset is as it was, with no index."""
    src, _ = base
    if executor in ("ray", "dask"):
        request.getfixturevalue("ray_cluster" if executor == "ray" else "dask_client")
    uri = copy(src, tmp_path, f"cancel-{executor}")
    before = ls.open(uri).version
    indices = Path(uri, "_indices")
    existing = sorted(p.name for p in indices.iterdir()) if indices.exists() else []
    model = ls.train_index_model(src, "vec", "IVF_RQ", num_partitions=8, seed=12)

    def interrupt(p: ls.OptimizeProgress) -> None:
        if p.level == 0 and p.tasks_done >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ls.create_index(uri, "vec", "IVF_RQ", model=model, executor=executor, max_workers=2, progress=interrupt, fragments_per_task=1, window_rows=256)
    assert ls.open(uri).version == before
    assert lance.dataset(uri).describe_indices() == []
    left = sorted(p.name for p in indices.iterdir()) if indices.exists() else []
    assert left == existing, left
    # the dataset still takes an index
    out = ls.create_index(uri, "vec", "IVF_RQ", model=model, progress=False)
    assert out.version == before + 1
