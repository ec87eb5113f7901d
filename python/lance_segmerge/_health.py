"""The health verb: how well an index's model (trained once) still fits
today's data, measured on a bounded sample (:func:`health`). The kernel
does the measuring (``verify.Health``); this module checks the arguments
and turns its answer into a :class:`~lance_segmerge.reports.HealthReport`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Optional

from . import _ffi
from ._args import checked
from ._progress import OperationProgressArg, Reporter
from .api import Dataset, DatasetLike, as_dataset
from .reports import HealthReport

logger = logging.getLogger(__name__)

__all__ = ["health", "DEFAULT_HEALTH_SAMPLE_ROWS", "DEFAULT_HEALTH_QUERIES"]

#: The sample that stands for the table, and queries per era.
DEFAULT_HEALTH_SAMPLE_ROWS = 20000
DEFAULT_HEALTH_QUERIES = 128


@checked(converts=("dataset",))
def health(
    dataset: DatasetLike,
    index_name: str,
    *,
    sample_rows: int = DEFAULT_HEALTH_SAMPLE_ROWS,
    queries: int = DEFAULT_HEALTH_QUERIES,
    k: int = 10,
    nprobes: Optional[int] = None,
    seed: int = 0,
    progress: OperationProgressArg = None,
    storage_options: Optional[dict[str, str]] = None,
) -> HealthReport:
    """Measure the drift of a vector index against today's data.

    The model of an IVF index (centroids, PQ codebook, SQ bounds) is
    trained once, when the index is created; every delta and every merge
    reuses it. As data moves, recent rows crowd a few partitions, lie
    farther from their centroids, and recall at the same ``nprobes`` falls
    with no error anywhere. ``health`` measures, reading the manifest, each
    segment's partition table and a bounded sample of vectors (nothing is
    written):

    - partition skew over the index and per segment (coefficient of
      variation, largest over mean);
    - the share of rows added since training (rows of fragments newer than
      those of the version the oldest segment was built at);
    - the mean distance to the nearest centroid of recent rows against
      training-era rows (``residual_ratio``);
    - recall@``k`` at ``nprobes`` of queries drawn from recent rows against
      queries drawn from training-era rows, with the index's own model and
      quantizer over a uniform sample of the table (``recall_drop``);

    and a verdict, ``ok``, ``degrading`` or ``retrain``, with the
    thresholds it used and which were crossed (``reasons``). A
    ``retrain`` verdict is what :func:`lance_segmerge.maintain` with
    ``retrain="auto"`` acts on (:func:`lance_segmerge.reindex`).

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    index_name : str
        A vector index: IVF_FLAT, IVF_SQ, IVF_PQ, IVF_RQ, or IVF_HNSW_*, of
        which partitions, rows and residuals (with its IVF centroids) are
        measured but not the recall (the graphs are not searched here;
        ``reasons`` says so).
    sample_rows : int, default 20000
        Rows that stand for the table (the cost is about
        ``sample_rows * queries`` distances).
    queries : int, default 128
        Queries per era (the standard error of the recall drop is then
        about 0.025).
    k : int, default 10
    nprobes : int, optional
        Partitions probed per query; the kernel's default query
        (``search.DefaultNProbes``) when omitted.
    seed : int, default 0
        The sample (the same seed measures the same rows).
    progress : bool or callable, optional
    storage_options : dict of str to str, optional
        For a URI.

    Returns
    -------
    HealthReport
        A table (one row per segment) with the measures in its summary.

    Raises
    ------
    NotFoundError
        No such index at this version.
    UnsupportedError
        An index kind whose model is not read here (scalar, full-text).
    """
    ds = as_dataset(dataset, storage_options)
    return _health(ds, index_name, {"sample_rows": sample_rows, "queries": queries, "k": k,
                                    "nprobes": nprobes or 0, "seed": seed}, progress)


def _health(ds: Dataset, index_name: str, opts: dict[str, Any], progress: OperationProgressArg = None) -> HealthReport:
    t0 = time.perf_counter()
    with Reporter(progress, "health") as reporter:
        out = _ffi.run_operation("IndexHealth", (ds.uri, ds.options_json, ds.version, index_name, json.dumps(opts)),
                                 reporter.poll)
    d = json.loads(out)
    d["dataset_uri"] = ds.display_uri
    d["seconds"] = time.perf_counter() - t0
    d["reasons"] = d.get("reasons") or []
    d["segments"] = d.get("segments") or []
    rep: HealthReport = HealthReport.from_dict(d)
    logger.info("health of %s at version %d: %s (%s)", index_name, rep.version, rep.verdict,
                "; ".join(rep.reasons) or "no threshold crossed")
    return rep
