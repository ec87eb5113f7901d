"""The verification verbs: check a vector index against its data, segment
by segment (:func:`verify_index`), check merge outputs before a commit,
search one segment alone, and rewrite one damaged segment (the job of
:func:`lance_segmerge.repair_index`).

See :mod:`lance_segmerge.verify` for what the checks find and why.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any, Optional, Sequence, Union

from . import _ffi
from ._args import checked
from ._progress import OperationProgressArg, Reporter
from ._validate import _seq, _uuid
from .api import Dataset, DatasetLike, as_dataset, segments_json
from .errors import CorruptError, InvalidInputError
from .reports import SegmentVerdict, VerifyReport
from .types import IndexSegment

logger = logging.getLogger(__name__)

__all__ = ["verify_index", "check_outputs", "require_clean", "search_segment", "repair_segment"]

#: Default sample of rows read back per segment, queries per segment, k.
DEFAULT_SAMPLE_ROWS = 1024
DEFAULT_QUERIES = 64
DEFAULT_K = 10
#: The sample of each merge output ``optimize(verify=True)`` checks.
DEFAULT_OUTPUT_SAMPLE_ROWS = 256


def _report_from_kernel(out: str, dataset_uri: str, seconds: float) -> VerifyReport:
    """The VerifyReport of the kernel's JSON, with what only the driver knows."""
    d = json.loads(out)
    d["dataset_uri"] = dataset_uri
    d["seconds"] = seconds
    report: VerifyReport = VerifyReport.from_dict(d)
    return report


def _options(sample_rows: int, queries: int, k: int, nprobes: Optional[int], deep: bool, seed: int) -> dict[str, Any]:
    return {"sample_rows": sample_rows, "queries": queries, "k": k, "nprobes": nprobes or 0, "deep": deep, "seed": seed}


@checked(converts=("dataset", "segments"))
def verify_index(
    dataset: DatasetLike,
    index_name: str,
    *,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    queries: int = DEFAULT_QUERIES,
    k: int = DEFAULT_K,
    nprobes: Optional[int] = None,
    deep: bool = False,
    seed: int = 0,
    segments: Optional[Sequence[Union[str, IndexSegment]]] = None,
    progress: OperationProgressArg = None,
) -> VerifyReport:
    """Check every segment of a vector index against its data.

    Each segment gets, in order:

    - **files and structure**: every file the manifest lists exists with
      its recorded size; footers, schemas and index metadata parse; the
      partitions hold the file's rows; the columns have the widths the
      model implies; row ids are unique and belong to fragments the
      segment covers (with ``deep``, to rows those fragments have; deleted
      rows are counted as stale, which an optimize reclaims); the model
      (centroids, codebook, SQ bounds, RQ rotation) agrees with the
      index's other segments;
    - **layout and codes**: ``sample_rows`` rows are read back from the
      data files, assigned and encoded with the segment's own model, and
      compared with the stored partitions and codes, under the declared
      layout and under the known wrong ones, so that layout damage is
      named (``pq_transposed_twice``, ``rq_packed_twice``,
      ``layout_flag_lies``) with the share of rows affected;
    - **recall** (``queries > 0``): ``queries`` vectors sampled from the
      segment's rows are searched over the segment alone with a Go search
      computing what pylance computes (IVF probe of ``nprobes`` nearest
      centroids, then the quantizer's distance), against brute force over
      its live rows; next to it, what the same model reaches encoding the
      same rows afresh. A recall far below the fresh one is damage.

    ``IVF_HNSW_*`` segments get the structure checks only (their verdict
    is ``unverified`` when those pass).

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset (a URI: its latest version).
    index_name : str
    sample_rows : int, default 1024
        Rows per segment the codes check reads back.
    queries : int, default 64
        Queries per segment of the recall check; 0 skips it (the check
        reads every row of the segment and of its data once).
    k : int, default 10
    nprobes : int, optional
        Partitions each query probes; default Lance's 20 (at most every
        partition).
    deep : bool, default False
        Check every row id against the rows its fragment has.
    seed : int, default 0
        Seeds the samples (deterministic per segment).
    segments : list of str or IndexSegment, optional
        Check only these segments.
    progress : bool or callable, optional
        ``True`` for a tqdm bar over the segments, or a callable receiving
        :class:`OperationProgress` snapshots.

    Returns
    -------
    VerifyReport

    Raises
    ------
    NotFoundError
        No such index, or a segment not in it.
    StorageError, CorruptError
        The data files cannot be read (damage to the index itself is
        reported, not raised).
    """
    ds = as_dataset(dataset)
    opts = _options(sample_rows, queries, k, nprobes, deep, seed)
    if segments is not None:
        opts["segments"] = [s.uuid if isinstance(s, IndexSegment) else _uuid(s, "segments") for s in _seq(segments, "segments")]
    return _verify(ds, index_name, opts, progress)


def _verify(ds: Dataset, index_name: str, opts: dict[str, Any], progress: OperationProgressArg = None) -> VerifyReport:
    t0 = time.perf_counter()
    with Reporter(progress, "verify") as reporter:
        out = _ffi.run_operation(
            "VerifyIndex", (ds.uri, ds.options_json, ds.version, index_name, json.dumps(opts)), reporter.poll
        )
    rep = _report_from_kernel(out, ds.display_uri, time.perf_counter() - t0)
    for s in rep.damaged:
        logger.info("index %s segment %s is damaged (%s): %s", index_name, s.uuid, ", ".join(s.damage), s.advice)
    logger.info("verified %s at version %d: %d segments, %d damaged in %.1fs", index_name, rep.version,
                len(rep.segments), len(rep.damaged), rep.seconds)
    return rep


def check_outputs(ds: Dataset, segments: Sequence[IndexSegment], *, sample_rows: int = DEFAULT_OUTPUT_SAMPLE_ROWS,
                  seed: int = 0, thorough: bool = False) -> VerifyReport:
    """The check of uncommitted segments (merge outputs) before their
    commit: files, structure, and the layout and codes of a sample read
    from a bounded number of partitions (no full row id scan, no recall).
    ``optimize(..., verify=True)`` runs it and refuses to commit a segment
    that fails. ``thorough`` adds what a run checks before it reuses an
    output a journal recorded: every row id (unique, of the fragments the
    output covers) and the model against the index's segments."""
    opts = {"sample_rows": sample_rows, "seed": seed, "cheap": not thorough, "queries": 0}
    t0 = time.perf_counter()
    out = _ffi.run_operation(
        "CheckSegments",
        (ds.uri, ds.options_json, ds.version, segments_json(segments), json.dumps(opts)),
    )
    return _report_from_kernel(out, ds.display_uri, time.perf_counter() - t0)


def require_clean(report: VerifyReport) -> None:
    """Raise :class:`CorruptError` naming every damaged segment of a
    report."""
    bad = report.damaged
    if bad:
        what = "; ".join(f"{s.uuid} ({', '.join(s.damage)}): {_first_failure(s)}" for s in bad)
        raise CorruptError(f"{len(bad)} merge output(s) do not verify, nothing was committed: {what}")


def _first_failure(s: SegmentVerdict) -> str:
    return next((c.message for c in s.checks if c.verdict == "failed"), s.verdict)


def repair_segment(ds: Dataset, index_name: str, segment: str, depth: int, *, output_uuid: str, sample_rows: int,
                   seed: int) -> dict[str, Any]:
    """Rewrite one damaged segment with its code layout applied once, into
    ``output_uuid``, and verify the rewrite. Returns {"segment": ...,
    "report": ...} as plain dicts."""
    out = _ffi.run_operation(
        "RepairSegment",
        (ds.uri, ds.options_json, ds.version, index_name, segment, depth,
         json.dumps({"output_uuid": output_uuid, "sample_rows": sample_rows, "seed": seed})),
    )
    return dict(json.loads(out))


@checked(converts=("dataset", "queries"))
def search_segment(
    dataset: DatasetLike,
    index_name: str,
    segment: Union[str, IndexSegment],
    queries: Any,
    *,
    k: int = DEFAULT_K,
    nprobes: Optional[int] = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Search one segment alone, as Lance's IVF search does (the Go search
    the recall check uses): each query probes its ``nprobes`` nearest
    partitions and rows are scored with the segment's quantized distance.
    Rows the dataset no longer has are filtered out, as a pylance query
    filters them.

    Parameters
    ----------
    queries : array-like of float, shape (n, dim) or (dim,)
    k : int, default 10
    nprobes : int, optional
        Default Lance's 20.

    Returns
    -------
    (row_ids, distances)
        One list per query, nearest first: row ids (addresses), and the
        distances as pylance's ``_distance`` reports them.
    """
    import numpy as np

    ds = as_dataset(dataset)
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2:
        raise InvalidInputError(f"queries must be a vector or a 2-d array of vectors, got shape {q.shape}")
    req = {"vectors": base64.b64encode(np.ascontiguousarray(q).tobytes()).decode("ascii"), "k": k, "nprobes": nprobes or 0}
    out = _ffi.call_json("SearchSegment", ds.uri, ds.options_json, ds.version, index_name, segment, json.dumps(req))
    return [list(map(int, r)) for r in out["row_ids"]], [list(map(float, d)) for d in out["distances"]]
