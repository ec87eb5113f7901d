"""The public entry points: open a dataset, list the segments of its vector
indices, merge them."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from . import _ffi
from ._progress import ProgressArg, Reporter
from .errors import InvalidInputError
from .types import IndexSegment, MergePlan

__all__ = [
    "Dataset",
    "open",
    "plan_index_segment_merge",
    "merge_existing_index_segments",
    "commit_existing_index_segments",
    "cleanup",
]

logger = logging.getLogger(__name__)


class Dataset:
    """A Lance dataset at one version, as lance_segmerge sees it.

    A Dataset is cheap: it holds the URI, the storage options and the version
    it was opened at, nothing native. It pickles as those three values, so it
    can be shipped to Ray, Dask or multiprocessing workers, which reopen the
    same version.

    Use :func:`open` to create one.

    Parameters
    ----------
    uri : str
        Dataset root: a local path, ``file://`` URI or ``memory://`` name.
    version : int, optional
        Version to open; the latest when omitted. The Dataset stays pinned
        to the version it resolved at open.
    storage_options : dict of str to str, optional
        Object-store settings, as pylance accepts them. They may hold
        credentials: they are never logged or shown in ``repr``.
    """

    def __init__(
        self,
        uri: str,
        version: Optional[int] = None,
        storage_options: Optional[Mapping[str, str]] = None,
    ) -> None:
        if not isinstance(uri, str) or not uri:
            raise InvalidInputError(f"dataset uri must be a non-empty string, got {uri!r}")
        if version is not None and (not isinstance(version, int) or version <= 0):
            raise InvalidInputError(f"version must be a positive integer, got {version!r}")
        self._uri = uri
        self._storage_options = dict(storage_options or {})
        info = _ffi.call_json(
            "DatasetInfo", uri, _ffi.options_json(self._storage_options), version or 0
        )
        self._version: int = int(info["version"])
        self._info: dict[str, Any] = info
        logger.debug("opened %s at version %d", uri, self._version)

    @property
    def uri(self) -> str:
        """The dataset root, as given."""
        return self._uri

    @property
    def version(self) -> int:
        """The version this Dataset is pinned to."""
        return self._version

    @property
    def storage_options(self) -> dict[str, str]:
        """A copy of the storage options."""
        return dict(self._storage_options)

    @property
    def latest_version(self) -> int:
        """The newest version in storage now (re-read on every access)."""
        info = _ffi.call_json("DatasetInfo", self._uri, _ffi.options_json(self._storage_options), 0)
        return int(info["version"])

    @property
    def manifest_scheme(self) -> str:
        """Manifest naming scheme of the dataset: ``"V1"`` or ``"V2"``."""
        return str(self._info["manifest_scheme"])

    @property
    def data_storage_version(self) -> str:
        """The dataset's Lance file format version, e.g. ``"2.2"``."""
        return str(self._info["data_storage_version"])

    @property
    def index_names(self) -> list[str]:
        """Names of every index at this version (vector or not)."""
        return list(self._info["index_names"] or [])

    def checkout(self, version: Optional[int] = None) -> "Dataset":
        """Return the same dataset at another version (the latest if omitted)."""
        return Dataset(self._uri, version, self._storage_options)

    def list_index_segments(
        self, index_name: Optional[str] = None, *, with_stats: bool = True
    ) -> list[IndexSegment]:
        """List the segments of a vector index at this version.

        Parameters
        ----------
        index_name : str, optional
            The logical index; every vector index when omitted.
        with_stats : bool, default True
            Read each segment's files for its statistics (index type,
            partitions, rows, layout flags, sizes). Without them only the
            manifest is read.

        Returns
        -------
        list of IndexSegment
            In manifest order.

        Raises
        ------
        NotFoundError
            ``index_name`` names no index of this version.
        CorruptError
            The manifest or a segment file is damaged.
        """
        if index_name is not None and (not isinstance(index_name, str) or not index_name):
            raise InvalidInputError(f"index_name must be a non-empty string, got {index_name!r}")
        out = _ffi.call_json(
            "ListSegments",
            self._uri,
            _ffi.options_json(self._storage_options),
            self._version,
            index_name or "",
            not with_stats,
        )
        return [IndexSegment.from_dict(d) for d in out]

    def merge_existing_index_segments(
        self,
        segments: Any,
        *,
        index_uuid: Optional[str] = None,
        progress: ProgressArg = None,
        window_rows: Optional[int] = None,
        parallelism: Optional[int] = None,
        requantize_sq: bool = False,
        hnsw_graph: str = "reuse",
    ) -> IndexSegment:
        """Merge segments into one new, uncommitted segment.

        See :func:`lance_segmerge.merge_existing_index_segments`.
        """
        return merge_existing_index_segments(
            self,
            segments,
            index_uuid=index_uuid,
            progress=progress,
            window_rows=window_rows,
            parallelism=parallelism,
            requantize_sq=requantize_sq,
            hnsw_graph=hnsw_graph,
        )

    def commit_existing_index_segments(
        self,
        index_name: str,
        column: str,
        segments: Any,
        *,
        replaces: Optional[Sequence[Any]] = None,
        max_retries: int = 20,
    ) -> int:
        """Commit segments as one new dataset version.

        See :func:`lance_segmerge.commit_existing_index_segments`.
        """
        return commit_existing_index_segments(
            self, index_name, column, segments, replaces=replaces, max_retries=max_retries
        )

    def plan_index_segment_merge(
        self,
        index_name: str,
        segments_per_task: int = 32,
        max_segments_to_merge: Optional[int] = None,
        *,
        target_rows_per_task: Optional[int] = None,
        requantize_sq: bool = False,
    ) -> MergePlan:
        """Plan the merge of an index's segments.

        See :func:`lance_segmerge.plan_index_segment_merge`.
        """
        return plan_index_segment_merge(
            self,
            index_name,
            segments_per_task,
            max_segments_to_merge,
            target_rows_per_task=target_rows_per_task,
            requantize_sq=requantize_sq,
        )

    # -- pickling: URI, options, version; nothing native ---------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (Dataset, (self._uri, self._version, self._storage_options))

    def __repr__(self) -> str:
        return f"Dataset(uri={self._uri!r}, version={self._version})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Dataset)
            and other._uri == self._uri
            and other._version == self._version
            and other._storage_options == self._storage_options
        )

    def __hash__(self) -> int:
        return hash((self._uri, self._version))


def open(
    uri: str,
    version: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dataset:
    """Open a Lance dataset.

    Parameters
    ----------
    uri : str
        Dataset root: a local path or ``file://`` URI.
    version : int, optional
        Version to open; the latest when omitted.
    storage_options : dict of str to str, optional
        Object-store settings, as pylance accepts them.

    Returns
    -------
    Dataset

    Raises
    ------
    NotFoundError
        ``uri`` is not a Lance dataset, or has no such version.
    CorruptError
        The manifest is damaged.
    UnsupportedError
        The manifest needs Lance features lance_segmerge does not know.

    Examples
    --------
    >>> import lance_segmerge
    >>> ds = lance_segmerge.open("/data/vectors.lance")  # doctest: +SKIP
    >>> [s.uuid for s in ds.list_index_segments("vec_idx")]  # doctest: +SKIP
    """
    return Dataset(uri, version, storage_options)


def _to_segments(items: Any, dataset: Optional[Dataset] = None) -> list[IndexSegment]:
    """Accept IndexSegments, pylance Index objects, or a plan task (anything
    with a ``segments`` attribute)."""
    if hasattr(items, "segments") and not isinstance(items, (list, tuple)):
        items = items.segments
    if isinstance(items, (IndexSegment, str)) or not isinstance(items, Iterable):
        raise InvalidInputError(
            "segments must be a list of IndexSegment or lance.dataset.Index objects, or a plan task"
        )
    out: list[IndexSegment] = []
    for item in items:
        if isinstance(item, IndexSegment):
            out.append(item)
        elif all(hasattr(item, a) for a in ("uuid", "fragment_ids", "index_version", "dataset_version")):
            out.append(IndexSegment.from_lance_index(item))
        else:
            raise InvalidInputError(f"not an index segment: {item!r}")
    return out


def _segments_json(segments: Sequence[IndexSegment]) -> str:
    return json.dumps([s.to_dict() for s in segments])


def merge_existing_index_segments(
    dataset: Union[Dataset, str],
    segments_or_task: Any,
    *,
    index_uuid: Optional[str] = None,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    parallelism: Optional[int] = None,
    requantize_sq: bool = False,
    hnsw_graph: str = "reuse",
) -> IndexSegment:
    """Merge segments of one vector index into one new, uncommitted segment.

    Each input's codes are brought back to row-major order using that
    input's own layout flag (PQ ``transposed``, RQ ``packed``), rows of
    fragments an input no longer covers are dropped, and the query layout is
    applied once to every merged partition. Merged segments can therefore be
    merged again, to any depth, without losing recall, and delta segments
    written by ``optimize_indices`` merge like any other.

    Nothing is committed: pass the result to
    :func:`commit_existing_index_segments` (or pylance's own). The output is
    written under ``_indices/<uuid>/``; on any error, cancellation included,
    it is removed.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset (a URI opens its latest version).
    segments_or_task : list of IndexSegment or lance.dataset.Index, or a task
        The segments to merge, in merge order (rows of each partition are
        written in this order).
    index_uuid : str, optional
        UUID of the output segment; a new one when omitted.
    progress : bool or callable, optional
        ``True`` for a tqdm bar (needs the ``progress`` extra), or a
        callable receiving :class:`OperationProgress` snapshots on the
        calling thread.
    window_rows : int, optional
        Rows (over all inputs) per window; default 131072. Two windows are
        in memory at once: one being read while the other is written.
    parallelism : int, optional
        Input segments read concurrently, and IVF_HNSW_* partition graphs
        built concurrently; default 4.
    requantize_sq : bool, default False
        IVF_SQ and IVF_HNSW_SQ: accept inputs whose SQ bounds differ (every
        ``create_index_uncommitted`` segment trains its own) by re-quantizing
        their codes to the union of the bounds. Without it such inputs are
        refused; pylance instead decodes them all with the first input's
        bounds, which silently distorts distances.
    hnsw_graph : {"reuse", "rebuild"}, default "reuse"
        IVF_HNSW_* only: how each merged partition gets its graph.
        ``"reuse"`` starts from the graph of the input with the most rows in
        the partition (its nodes renumbered, rows that were dropped removed
        and their neighbours' lists repaired) and inserts only the other
        inputs' rows; ``"rebuild"`` builds every graph from nothing, as
        pylance's ``optimize_indices`` does. Both use the inputs' HNSW
        parameters (``m``, ``ef_construction``, ``max_level``), which must
        agree, and the distances pylance's search computes on the merged
        storage.

    Returns
    -------
    IndexSegment
        The merged segment, with statistics.

    Raises
    ------
    InvalidInputError
        The segments do not form a mergeable group: different indices or
        models (centroids, PQ codebook, SQ bounds, RQ rotation), overlapping
        fragments, duplicates. The message names the segment at fault.
    UnsupportedError
        Stable row ids, shallow-clone segments.
    NotFoundError, CorruptError
        An input's files are missing or damaged.
    CancelledError
        The operation was cancelled.
    """
    ds = dataset if isinstance(dataset, Dataset) else Dataset(str(dataset))
    segs = _to_segments(segments_or_task, ds)
    if hnsw_graph not in ("reuse", "rebuild"):
        raise InvalidInputError(f"hnsw_graph must be 'reuse' or 'rebuild', got {hnsw_graph!r}")
    opts: dict[str, Any] = {"requantize_sq": bool(requantize_sq), "hnsw_graph": hnsw_graph}
    if index_uuid is not None:
        opts["index_uuid"] = str(index_uuid)
    for key, val in (("window_rows", window_rows), ("parallelism", parallelism)):
        if val is not None:
            if not isinstance(val, int) or val <= 0:
                raise InvalidInputError(f"{key} must be a positive integer, got {val!r}")
            opts[key] = val
    reporter = Reporter(progress, "merge")
    try:
        out = _ffi.run_operation(
            "MergeSegments",
            (ds.uri, _ffi.options_json(ds.storage_options), ds.version, _segments_json(segs), json.dumps(opts)),
            reporter if reporter.active else None,
        )
    finally:
        reporter.close()
    merged = IndexSegment.from_dict(json.loads(out))
    logger.info("merged %d segments into %s (%s rows)", len(segs), merged.uuid, merged.num_rows)
    return merged


def commit_existing_index_segments(
    dataset: Union[Dataset, str],
    index_name: str,
    column: str,
    segments: Any,
    *,
    replaces: Optional[Sequence[Any]] = None,
    max_retries: int = 20,
) -> int:
    """Commit index segments as one new, atomic dataset version.

    The new version carries every field of the latest manifest unchanged
    (unknown fields included) except the index section, from which the
    replaced segments are removed and to which the new ones are added, with
    a CreateIndex transaction written as Lance writes it. pylance reads the
    result as if it had committed it.

    The commit is planned against ``dataset.version``. If other writers
    committed since, their transactions are checked: appends, deletes and
    work on other indices are rebased over; a commit that removed or
    replaced a source segment, rewrote (compacted) or updated fragments the
    segments cover, or overwrote the dataset raises :class:`ConflictError`.
    Losing the race for the next version is retried with backoff.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset, at the version the segments were planned against.
    index_name : str
        The logical index.
    column : str
        The indexed column.
    segments : list of IndexSegment or lance.dataset.Index
        The new segments (merge outputs, or ``create_index_uncommitted``
        segments).
    replaces : list of IndexSegment, Index or str, optional
        The committed segments the new ones replace (for merges: their
        inputs). They must all still be committed when the commit lands, and
        the new segments must cover all of their fragments. When omitted,
        same-name segments the new ones cover entirely are replaced, as
        pylance does; a partial overlap is refused.
    max_retries : int, default 20
        Attempts after losing a commit race.

    Returns
    -------
    int
        The new version.

    Raises
    ------
    InvalidInputError
        Empty input, duplicate uuids, overlapping coverage, wrong column,
        segments that would orphan or drop covered fragments.
    NotFoundError, CorruptError
        A segment's files are missing or incomplete.
    ConflictError
        A concurrent commit invalidated this one; re-plan and retry.
    """
    ds = dataset if isinstance(dataset, Dataset) else Dataset(str(dataset))
    if not isinstance(index_name, str) or not index_name:
        raise InvalidInputError(f"index_name must be a non-empty string, got {index_name!r}")
    if not isinstance(column, str) or not column:
        raise InvalidInputError(f"column must be a non-empty string, got {column!r}")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidInputError(f"max_retries must be a non-negative integer, got {max_retries!r}")
    segs = _to_segments(segments, ds)
    request: dict[str, Any] = {"index_name": index_name, "column": column, "max_retries": max_retries}
    if replaces is not None:
        request["replaces"] = [r if isinstance(r, str) else str(r.uuid) for r in replaces]
    version = _ffi.run_operation(
        "CommitSegments",
        (ds.uri, _ffi.options_json(ds.storage_options), ds.version, _segments_json(segs), json.dumps(request)),
    )
    logger.info("committed %d segments of %s as version %d", len(segs), index_name, version)
    return int(version)


def _plan_options(
    index_name: str,
    segments_per_task: int,
    max_segments_to_merge: Optional[int],
    target_rows_per_task: Optional[int],
    requantize_sq: bool,
) -> str:
    if not isinstance(index_name, str) or not index_name:
        raise InvalidInputError(f"index_name must be a non-empty string, got {index_name!r}")
    if not isinstance(segments_per_task, int) or segments_per_task < 2:
        raise InvalidInputError(f"segments_per_task must be an integer >= 2, got {segments_per_task!r}")
    if max_segments_to_merge is not None and (not isinstance(max_segments_to_merge, int) or max_segments_to_merge < 2):
        raise InvalidInputError(f"max_segments_to_merge must be an integer >= 2, got {max_segments_to_merge!r}")
    if target_rows_per_task is not None and (not isinstance(target_rows_per_task, int) or target_rows_per_task <= 0):
        raise InvalidInputError(f"target_rows_per_task must be a positive integer, got {target_rows_per_task!r}")
    return json.dumps(
        {
            "index_name": index_name,
            "segments_per_task": segments_per_task,
            "max_segments_to_merge": max_segments_to_merge or 0,
            "target_rows_per_task": target_rows_per_task or 0,
            "requantize_sq": bool(requantize_sq),
        }
    )


def plan_index_segment_merge(
    dataset: Union[Dataset, str],
    index_name: str,
    segments_per_task: int = 32,
    max_segments_to_merge: Optional[int] = None,
    *,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = False,
) -> MergePlan:
    """Plan the merge of the segments of a vector index into disjoint tasks.

    Every planned segment is opened and checked against the others up front
    (same index type, metric, IVF centroids, PQ codebook / SQ bounds / RQ
    rotation, disjoint coverage), so a task cannot fail on a model mismatch
    later. Tasks are balanced by bytes (and, with ``target_rows_per_task``,
    by rows), each merges at least two segments, and the same input always
    gives the same plan.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset; the plan is pinned to its version.
    index_name : str
        The logical index.
    segments_per_task : int, default 32
        Most segments one task merges (a task may get one more so that no
        task merges a single segment).
    max_segments_to_merge : int, optional
        Plan only the newest N segments and leave the rest (typically the
        large base) untouched, as pylance's ``num_indices_to_merge`` does.
    target_rows_per_task : int, optional
        Add tasks until the average task holds about this many rows.
    requantize_sq : bool, default False
        Accept IVF_SQ segments with different bounds (see
        :func:`merge_existing_index_segments`).

    Returns
    -------
    MergePlan
        Fewer than two qualifying segments give a plan without tasks.

    Raises
    ------
    NotFoundError
        No index of that name.
    InvalidInputError
        Bad arguments, or segments that cannot be merged together.
    UnsupportedError
        IVF_HNSW_* segments.
    """
    ds = dataset if isinstance(dataset, Dataset) else Dataset(str(dataset))
    opts = _plan_options(index_name, segments_per_task, max_segments_to_merge, target_rows_per_task, requantize_sq)
    out = _ffi.call_json("PlanIndex", ds.uri, _ffi.options_json(ds.storage_options), ds.version, opts)
    plan = MergePlan.from_dict(out)
    logger.info(
        "planned %d tasks over %d segments of %s at version %d",
        len(plan.tasks),
        plan.num_segments,
        index_name,
        plan.read_version,
    )
    return plan


def plan_segments(
    dataset: Dataset,
    segments: Sequence[IndexSegment],
    segments_per_task: int,
    *,
    requantize_sq: bool = False,
) -> MergePlan:
    """Group an explicit list of segments (e.g. one level of a tree merge)
    into tasks, with the same checks and balancing as
    :func:`plan_index_segment_merge`."""
    if not segments:
        raise InvalidInputError("no segments to plan")
    opts = _plan_options(segments[0].name, segments_per_task, None, None, requantize_sq)
    out = _ffi.call_json(
        "PlanSegments", dataset.uri, _ffi.options_json(dataset.storage_options), dataset.version, _segments_json(segments), opts
    )
    return MergePlan.from_dict(out)


def cleanup(
    dataset: Union[Dataset, str],
    older_than: Union[float, timedelta] = 3600.0,
    *,
    dry_run: bool = False,
) -> list[dict[str, Any]]:
    """Find (and remove) segment directories that no version references.

    Crashed or cancelled merges leave their partial outputs under
    ``_indices/<uuid>/``. A directory is removed only when no version of the
    dataset references it and its newest file is older than ``older_than``,
    a grace period for merges still running and commits about to land.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset.
    older_than : float or datetime.timedelta, default 1 hour
        Grace period (seconds when a float).
    dry_run : bool, default False
        Only list what would be removed.

    Returns
    -------
    list of dict
        One entry per orphan: ``uuid``, ``files``, ``bytes``, ``modified``,
        ``removed``.
    """
    ds = dataset if isinstance(dataset, Dataset) else Dataset(str(dataset))
    seconds = older_than.total_seconds() if hasattr(older_than, "total_seconds") else float(older_than)
    if seconds < 0:
        raise InvalidInputError(f"older_than must not be negative, got {older_than!r}")
    out = _ffi.call_json("Cleanup", ds.uri, _ffi.options_json(ds.storage_options), seconds, bool(dry_run))
    logger.info("cleanup of %s: %d orphaned segment directories%s", ds.uri, len(out), " (dry run)" if dry_run else "")
    return list(out)


def remove_uncommitted(dataset: Dataset, uuids: Sequence[str]) -> int:
    """Delete the files of uncommitted segments (outputs of cancelled or
    intermediate merges). Committed segments are refused."""
    if not uuids:
        return 0
    return int(_ffi.call("RemoveUncommitted", dataset.uri, _ffi.options_json(dataset.storage_options), json.dumps(list(uuids))))
