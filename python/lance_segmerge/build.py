"""The build path: train a model once, build fragment-scoped uncommitted
segments with it on workers, merge them with the tree merge, commit once
(:func:`create_index`, on the run engine). The single-call build verbs
live in :mod:`lance_segmerge._build`; their names here keep working."""

from __future__ import annotations

import logging
import math
from typing import Any, Optional

from . import _jobs
from ._args import SCALAR_BUILD_TYPES, checked
from ._build import build_index_segment, check_model, fragment_rows, group_fragments, read_index_model, train_index_model, _train
from ._engine import Run
from ._handles import at_version
from ._progress import OptimizeProgressArg
from .api import DatasetLike, as_dataset
from .errors import InvalidInputError
from .executors import resolve_executor
from .model import IndexModel
from .reports import OptimizeProgress
from .types import IndexSegment

logger = logging.getLogger(__name__)

__all__ = ["build_index_segment", "read_index_model", "train_index_model", "create_index"]


@checked(converts=("dataset", "model"))
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
    progress: OptimizeProgressArg = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    properties: Optional[dict[str, str]] = None,
    params: Optional[dict[str, Any]] = None,
    storage_options: Optional[dict[str, str]] = None,
) -> Any:
    """Build an index over the whole dataset, distributed, and commit it
    once.

    Vector indices: trains the model on the driver (or takes ``model``),
    builds one
    uncommitted segment per group of fragments on ``executor``'s workers,
    merges them with the tree merge of :func:`optimize` (the query layout
    is applied once, at the last level), and commits the result as one new
    version. Scalar indices (``BTREE``, ``BITMAP``, ``LABEL_LIST``, ``ZONEMAP``,
    ``BLOOMFILTER``, ``NGRAM``, ``INVERTED``) are built the same
    way without a model: each worker sorts its fragments' values in
    bounded memory, or analyzes its fragments' text (see
    :func:`build_index_segment`), and the segments are merged by the
    merges of :func:`optimize` (a full-text index's merged segment scores
    as pylance's own build). On any failure or
    interrupt, running work is cancelled, every segment this call wrote is
    removed, and the dataset is left as it was.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    column : str
        The vector column, or the scalar column of a BTREE, BITMAP or
        ZONEMAP, BLOOMFILTER (a list column for LABEL_LIST, a string column
        for NGRAM and INVERTED).
    index_type : str
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ``, ``IVF_RQ``, ``BTREE``,
        ``BITMAP``, ``LABEL_LIST``, ``ZONEMAP``, ``BLOOMFILTER``, ``NGRAM`` or
        ``INVERTED`` (``FTS``: full text, analyzed as pylance analyzes it;
        see :func:`build_index_segment`).
    name : str, optional
        Index name; ``<column>_idx`` when omitted. It must not exist yet.
    metric : str, default "l2"
    model : IndexModel, optional
        A model trained beforehand (vector indices); training parameters
        are then ignored.
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
    params : dict, optional
        An INVERTED index's analyzer (pylance's ``create_scalar_index``
        keywords; see :func:`build_index_segment`).
    properties : dict of str to str, optional
        Key-values for the commit's transaction (see
        :func:`lance_segmerge.optimize`); the package adds the model's hash.

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the new version, of the kind given (a
        ``lance.LanceDataset`` for one, else a :class:`Dataset`).
    """
    ds = as_dataset(dataset, storage_options)
    name = name or f"{column}_idx"
    if name in ds.index_names:
        raise InvalidInputError(f"the dataset already has an index named {name!r}")
    frags = fragment_rows(ds)
    if not frags:
        raise InvalidInputError("the dataset has no fragments to index")
    scalar = index_type in SCALAR_BUILD_TYPES
    if params is not None and index_type != "INVERTED":
        raise InvalidInputError(f"params: analyzer parameters are for INVERTED indices, not {index_type}")
    if scalar and model is not None:
        raise InvalidInputError(f"model: a {index_type} index has no model; pass none")
    if model is not None:
        check_model(model, index_type, metric)
    if executor == "auto":
        executor = "local"  # no cost model for builds yet
    pool = resolve_executor(executor, max_workers)
    workers = max_workers or getattr(getattr(pool, "_pool", None), "_max_workers", None) or 2
    run = Run(ds, name, pool, executor=executor if isinstance(executor, str) else type(executor).__name__,
              progress=progress, merge_options={"requantize_sq": False, **({"window_rows": window_rows} if window_rows else {})},
              verb="create_index", properties=properties)
    with run:
        # Worker processes spawn and import the build path while the
        # driver trains.
        warm = getattr(pool, "warm", None)
        if callable(warm):
            warm(_jobs.warm_build, int(workers))
        if model is None and not scalar:
            total = sum(n for _, n in frags)
            model = _train(
                ds, column, index_type, metric=metric, num_partitions=num_partitions or max(1, int(round(math.sqrt(total)))),
                num_sub_vectors=num_sub_vectors, num_bits=num_bits, sample_rate=sample_rate, max_iters=max_iters,
                fragment_ids=None, seed=seed,
            )
        m = None if scalar else check_model(model, index_type, metric)
        groups = group_fragments(frags, fragments_per_task, int(workers))
        jobs = [
            {"dataset": ds, "column": column, "index_type": index_type, "fragment_ids": g, "model": m, "name": name,
             "index_uuid": run.new_output(), "window_rows": window_rows, "memory_bytes": memory_bytes, "params": params}
            for g in groups
        ]
        done = [0]
        run.report(OptimizeProgress(0, 0, len(jobs), len(jobs)))

        def on_done(_: int) -> None:
            done[0] += 1
            run.report(OptimizeProgress(0, done[0], len(jobs), len(jobs)))

        built = run.batch(_jobs.build_task, jobs, on_done=on_done,
                          describe=lambda k: f"build of fragments {jobs[k]['fragment_ids']} (output {jobs[k]['index_uuid']})")
        final = run.reduce([IndexSegment._from_kernel(r) for r in built], fan_in, target_segments)
        out = run.commit(name, column, final, facts={"model": m.content_hash[:16]} if m is not None else {})
    logger.info("create_index %s: %d build tasks, %d merge levels, version %d", name, len(jobs), run.stats.levels, out.version)
    return at_version(dataset, ds, out.version, out)
