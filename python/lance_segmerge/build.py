"""The build path: train a model once, build fragment-scoped uncommitted
segments with it (anywhere), merge them with the tree merge, commit once."""

from __future__ import annotations

import json
import logging
from typing import Any, Optional, Sequence, Union

from . import _ffi
from ._cdata import CStructs
from ._progress import ProgressArg, Reporter
from .api import Dataset, DatasetLike, _at_version, as_dataset
from .errors import InvalidInputError
from .model import IndexModel, normalize_index_type, normalize_metric
from .types import IndexSegment

logger = logging.getLogger(__name__)

__all__ = ["build_index_segment", "read_index_model", "train_index_model"]


def _dataset(dataset: DatasetLike) -> Dataset:
    return as_dataset(dataset)


def _fragments(fragment_ids: Any) -> list[int]:
    if fragment_ids is None or isinstance(fragment_ids, (str, bytes)):
        raise InvalidInputError("fragment_ids must be a non-empty list of fragment ids")
    out: list[int] = []
    for f in fragment_ids:
        f = getattr(f, "fragment_id", f)  # a LanceFragment
        if isinstance(f, bool) or not isinstance(f, int) or f < 0:
            raise InvalidInputError(f"fragment ids must be non-negative integers, got {f!r}")
        out.append(int(f))
    if not out:
        raise InvalidInputError("fragment_ids must be a non-empty list of fragment ids")
    return out


def _check_model(model: Any, index_type: str, metric: Optional[str]) -> IndexModel:
    if not isinstance(model, IndexModel):
        raise InvalidInputError(
            f"model must be an IndexModel (train_index_model, read_index_model or IndexModel.from_arrays), got {type(model).__name__}"
        )
    if model.index_type != index_type:
        raise InvalidInputError(f"the model is for {model.index_type}, not {index_type}")
    if metric is not None and normalize_metric(metric) != model.metric:
        raise InvalidInputError(f"the model is for the {model.metric} metric, not {normalize_metric(metric)}")
    return model


def build_index_segment(
    dataset: DatasetLike,
    column: str,
    index_type: str,
    fragment_ids: Sequence[int],
    model: IndexModel,
    *,
    name: str,
    metric: Optional[str] = None,
    index_uuid: Optional[str] = None,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
) -> IndexSegment:
    """Build one uncommitted vector index segment over some fragments.

    Reads only the given fragments' vectors from the data files (deleted
    rows, null vectors and vectors holding NaN or infinity skipped, as
    pylance skips them), assigns IVF partitions and encodes with ``model``,
    and writes the segment under ``_indices/<uuid>/`` in the layout
    pylance's ``create_index_uncommitted`` writes (row-major codes). The
    manifest is not touched: merge the segments with
    :func:`merge_existing_index_segments` and commit them with
    :func:`commit_existing_index_segments` (or pylance's own).

    Parameters
    ----------
    dataset : Dataset or str
        The dataset, at the version to index.
    column : str
        The vector column (fixed-size list of float32 or float16; float16
        segments are computed and stored in float16, as pylance's).
    index_type : str
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ`` or ``IVF_RQ``; must be the
        model's.
    fragment_ids : list of int
        The fragments this segment covers.
    model : IndexModel
        The shared model (:func:`train_index_model`, :func:`read_index_model`
        or :meth:`IndexModel.from_arrays`).
    name : str
        The logical index name.
    metric : str, optional
        Checked against the model's when given.
    index_uuid : str, optional
        The segment's uuid; a new one when omitted.
    progress : bool or callable, optional
        A tqdm bar, or a callable receiving :class:`OperationProgress`.
    window_rows : int, optional
        Rows read and encoded at once (default 32768).
    memory_bytes : int, optional
        Encoded rows held in memory before spilling to a temporary file
        (default 64 MiB).

    Returns
    -------
    IndexSegment

    Raises
    ------
    InvalidInputError
        A model that does not fit (kind, metric, dimension, parameters),
        unknown or repeated fragments, a column that is not a float vector.
    UnsupportedError
        Vectors of another element type, stable row ids, shallow clones.
    CancelledError
        The build was cancelled; nothing it wrote is left.
    """
    ds = _dataset(dataset)
    t = normalize_index_type(index_type)
    m = _check_model(model, t, metric)
    if not isinstance(column, str) or not column:
        raise InvalidInputError(f"column must be a non-empty string, got {column!r}")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"name must be a non-empty string, got {name!r}")
    opts: dict[str, Any] = {"column": column, "name": name, "fragment_ids": _fragments(fragment_ids)}
    if index_uuid is not None:
        opts["index_uuid"] = str(index_uuid)
    for key, val in (("window_rows", window_rows), ("memory_bytes", memory_bytes)):
        if val is not None:
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise InvalidInputError(f"{key} must be a positive integer, got {val!r}")
            opts[key] = val
    spec, keep = m.export()
    reporter = Reporter(progress, "build")
    try:
        out = _ffi.run_operation(
            "BuildSegment",
            (ds.uri, _ffi.options_json(ds.storage_options), ds.version, spec, json.dumps(opts)),
            reporter if reporter.active else None,
        )
    finally:
        reporter.close()
        del keep  # the kernel released the exported arrays
    seg = IndexSegment.from_dict(json.loads(out))
    logger.info("built segment %s over %d fragments (%s rows)", seg.uuid, len(opts["fragment_ids"]), seg.num_rows)
    return seg


def read_index_model(dataset: DatasetLike, index_name: str) -> IndexModel:
    """The model of an existing index (read from its first segment): build
    new segments with it for appended fragments, and they merge with the
    index's segments, as ``optimize_indices(num_indices_to_merge=0)``
    deltas do."""
    ds = _dataset(dataset)
    if not isinstance(index_name, str) or not index_name:
        raise InvalidInputError(f"index_name must be a non-empty string, got {index_name!r}")
    structs = {n: CStructs() for n in ("centroids", "codebook", "rotation")}
    out = _ffi.call_json(
        "ReadIndexModel",
        ds.uri,
        _ffi.options_json(ds.storage_options),
        ds.version,
        index_name,
        json.dumps({n: s.pair() for n, s in structs.items()}),
    )
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    return IndexModel.from_spec(out, arrays, params=(("source", f"{ds.uri}@{ds.version}:{index_name}"),))


def train_index_model(
    dataset: DatasetLike,
    column: str,
    index_type: str,
    *,
    metric: str = "l2",
    num_partitions: int,
    num_sub_vectors: Optional[int] = None,
    num_bits: Optional[int] = None,
    sample_rate: int = 256,
    max_iters: int = 50,
    fragment_ids: Optional[Sequence[int]] = None,
    seed: Optional[int] = None,
) -> IndexModel:
    """Train the model every segment of an index shares, once, on a sample
    of the dataset's vectors read from its data files.

    IVF: k-means over ``num_partitions * sample_rate`` sampled vectors
    (cosine: normalised vectors under L2; dot: by inner product). IVF_PQ:
    one k-means codebook per sub-vector over ``2**num_bits * sample_rate``
    vectors, on residuals to the nearest centroid for l2 and cosine and on
    the raw vectors for dot (as Lance). IVF_SQ: the sample's value range.
    IVF_RQ: a fast-rotation sign vector (num_bits per dimension, default 5 as
    pylance's ``build_rq_model``).

    Parameters
    ----------
    dataset, column, index_type, metric
        What the index will be.
    num_partitions : int
        IVF partitions.
    num_sub_vectors, num_bits : int, optional
        PQ (default dimension/16, 8 bits), SQ (8), RQ (5) parameters.
    sample_rate : int, default 256
        Sample size per centroid.
    max_iters : int, default 50
        k-means iterations.
    fragment_ids : list of int, optional
        Train on these fragments only.
    seed : int, optional
        Makes the sample and the initialisation reproducible.

    Returns
    -------
    IndexModel
    """
    ds = _dataset(dataset)
    t = normalize_index_type(index_type)
    metric = normalize_metric(metric)
    for key, val in (("num_partitions", num_partitions), ("sample_rate", sample_rate), ("max_iters", max_iters)):
        if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
            raise InvalidInputError(f"{key} must be a positive integer, got {val!r}")
    for key, opt in (("num_sub_vectors", num_sub_vectors), ("num_bits", num_bits), ("seed", seed)):
        if opt is not None and (not isinstance(opt, int) or isinstance(opt, bool) or opt < 0):
            raise InvalidInputError(f"{key} must be a non-negative integer, got {opt!r}")
    import secrets

    seed_val = secrets.randbits(63) if seed is None else int(seed)
    params: dict[str, Any] = {
        "index_type": t,
        "metric": metric,
        "num_partitions": num_partitions,
        "num_sub_vectors": num_sub_vectors or 0,
        "num_bits": num_bits or 0,
        "sample_rate": sample_rate,
        "max_iters": max_iters,
        "fragment_ids": None if fragment_ids is None else _fragments(fragment_ids),
        "seed": seed_val,
    }
    structs = {n: CStructs() for n in ("centroids", "codebook")}
    out = json.loads(
        _ffi.run_operation(
            "TrainModel",
            (ds.uri, _ffi.options_json(ds.storage_options), ds.version, column, json.dumps(params), json.dumps({n: s.pair() for n, s in structs.items()})),
        )
    )
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    stats = out.get("stats") or {}
    prov = (
        ("sample_rate", sample_rate),
        ("max_iters", max_iters),
        ("seed", seed_val),
        ("sample_rows", int(stats.get("sample_rows", 0))),
        ("ivf_iters", int(stats.get("ivf_iters", 0))),
        ("dataset", f"{ds.uri}@{ds.version}"),
    )
    model = IndexModel.from_spec(out, arrays, params=prov)
    logger.info("trained %r on %s vectors", model, stats.get("sample_rows"))
    return model


def fragment_rows(dataset: DatasetLike) -> list[tuple[int, int]]:
    """(fragment id, live rows) of every fragment of the dataset version."""
    ds = _dataset(dataset)
    return [(int(f), int(n)) for f, n in _ffi.call_json("FragmentRows", ds.uri, _ffi.options_json(ds.storage_options), ds.version)]


def _group_fragments(frags: list[tuple[int, int]], fragments_per_task: Optional[int], workers: int) -> list[list[int]]:
    """Consecutive fragments in groups: ``fragments_per_task`` each, or, by
    default, about two groups per worker balanced by rows."""
    if fragments_per_task is not None:
        if not isinstance(fragments_per_task, int) or isinstance(fragments_per_task, bool) or fragments_per_task <= 0:
            raise InvalidInputError(f"fragments_per_task must be a positive integer, got {fragments_per_task!r}")
        return [[f for f, _ in frags[i : i + fragments_per_task]] for i in range(0, len(frags), fragments_per_task)]
    n_groups = max(1, min(len(frags), 2 * workers))
    total = sum(n for _, n in frags) or 1
    groups: list[list[int]] = [[]]
    acc = 0
    for f, n in frags:
        if groups[-1] and acc >= total * len(groups) / n_groups:
            groups.append([])
        groups[-1].append(f)
        acc += n
    return groups


def create_index(
    dataset: DatasetLike,
    column: str,
    index_type: str,
    *,
    name: Optional[str] = None,
    metric: str = "l2",
    model: Optional[IndexModel] = None,
    num_partitions: Optional[int] = None,
    num_sub_vectors: Optional[int] = None,
    num_bits: Optional[int] = None,
    sample_rate: int = 256,
    max_iters: int = 50,
    seed: Optional[int] = None,
    executor: Any = "local",
    max_workers: Optional[int] = None,
    fragments_per_task: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    progress: Any = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    storage_options: Optional[dict[str, str]] = None,
) -> Any:
    """Build a vector index over the whole dataset, distributed, and commit
    it once.

    Trains the model on the driver (or takes ``model``), builds one
    uncommitted segment per group of fragments on ``executor``'s workers,
    merges them with the tree merge of :func:`optimize` (the query layout
    is applied once, at the last level), and commits the result as one new
    version. On any failure or interrupt, running work is cancelled, every
    segment this call wrote is removed, and the dataset is left as it was.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    column : str
        The vector column.
    index_type : str
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ`` or ``IVF_RQ``.
    name : str, optional
        Index name; ``<column>_idx`` when omitted. It must not exist yet.
    metric : str, default "l2"
    model : IndexModel, optional
        A model trained beforehand; training parameters are then ignored.
    num_partitions, num_sub_vectors, num_bits, sample_rate, max_iters, seed
        Training parameters (:func:`train_index_model`); num_partitions
        defaults to about sqrt(rows).
    executor : {"local", "processes", "ray", "dask"} or concurrent.futures.Executor
    max_workers : int, optional
    fragments_per_task : int, optional
        Fragments per build task; by default about two tasks per worker,
        balanced by rows.
    fan_in, target_segments
        The merge tree (see :func:`optimize`).
    progress : bool or callable, default True
        A tqdm bar, or a callable receiving :class:`OptimizeProgress` (build
        tasks are reported as level 0).

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the new version, of the kind given (a
        ``lance.LanceDataset`` for one, else a :class:`Dataset`).
    """
    import math
    import uuid as uuidlib

    from . import _worker
    from .api import commit_existing_index_segments, plan_segments, remove_uncommitted
    from .distributed import OptimizeProgress, _Reporter, _run_level
    from .executors import resolve_executor

    ds = as_dataset(dataset, storage_options)
    t = normalize_index_type(index_type)
    name = name or f"{column}_idx"
    if name in ds.index_names:
        raise InvalidInputError(f"the dataset already has an index named {name!r}")
    if not isinstance(fan_in, int) or fan_in < 2:
        raise InvalidInputError(f"fan_in must be an integer >= 2, got {fan_in!r}")
    frags = [(f, n) for f, n in fragment_rows(ds)]
    if not frags:
        raise InvalidInputError("the dataset has no fragments to index")
    if model is not None:
        _check_model(model, t, metric)
    pool = resolve_executor(executor, max_workers)
    workers = max_workers or getattr(getattr(pool, "_pool", None), "_max_workers", None) or 2
    try:
        # Worker processes spawn and import the build path while the
        # driver trains.
        warm = getattr(pool, "warm", None)
        if callable(warm):
            warm(_worker.warm_build, int(workers))
        if model is None:
            total = sum(n for _, n in frags)
            parts = num_partitions or max(1, int(round(math.sqrt(total))))
            model = train_index_model(
                ds, column, t, metric=metric, num_partitions=parts, num_sub_vectors=num_sub_vectors,
                num_bits=num_bits, sample_rate=sample_rate, max_iters=max_iters, seed=seed,
            )
        m = _check_model(model, t, metric)
    except BaseException:
        pool.cancel()
        pool.close()
        raise
    groups = _group_fragments(frags, fragments_per_task, int(workers))
    report = _Reporter(progress)
    created: list[str] = []
    committed = False
    final: list[IndexSegment] = []
    try:
        jobs = []
        for g in groups:
            out = str(uuidlib.uuid4())
            created.append(out)
            jobs.append({"dataset": ds, "column": column, "index_type": t, "fragment_ids": g, "model": m,
                         "name": name, "index_uuid": out, "window_rows": window_rows, "memory_bytes": memory_bytes})
        done = [0]
        report(OptimizeProgress(0, 0, len(jobs), len(jobs)))

        def on_done(_: int) -> None:
            done[0] += 1
            report(OptimizeProgress(0, done[0], len(jobs), len(jobs)))

        outputs = [IndexSegment.from_dict(r) for r in pool.map(_worker.build_task, jobs, on_done)]
        level = 1
        options: dict[str, Any] = {"requantize_sq": False}
        if window_rows is not None:
            options["window_rows"] = window_rows
        while len(outputs) > target_segments:
            n_tasks = max(target_segments, -(-len(outputs) // fan_in))
            per_task = max(2, -(-len(outputs) // n_tasks))
            tasks = plan_segments(ds, outputs, per_task).tasks
            outputs = _run_level(ds, tasks, pool, level, report, created, options)
            level += 1
        final = outputs
        version = commit_existing_index_segments(ds, name, column, final).version
        committed = True
        logger.info("create_index %s: %d build tasks, %d merge levels, version %d", name, len(jobs), level - 1, version)
    except BaseException:
        pool.cancel()
        raise
    finally:
        report.close()
        pool.close()
        keep = {s.uuid for s in final} if committed else set()
        try:
            remove_uncommitted(ds, [u for u in created if u not in keep])
        except Exception as exc:
            logger.warning("could not remove uncommitted segments: %s", exc)
    return _at_version(dataset, ds, version)
