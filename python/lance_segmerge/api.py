"""The single-call verbs: open a dataset, list the segments of its
indices, plan, merge and commit them, clean up after crashed runs.

Every public function here checks its arguments once, at entry
(:func:`lance_segmerge._args.checked`), and turns the dataset it is given
into a :class:`Dataset` (:func:`as_dataset`); the private ``_plan``,
``_merge`` and ``_commit`` below are what the run engine calls with
arguments already checked.
"""

from __future__ import annotations

import json
import logging
import os
import uuid as uuidlib
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union, overload

from . import _ffi
from ._args import checked, policy_options
from ._handles import DatasetHandle, DatasetLike, at_version, resolve
from ._progress import OperationProgressArg, Reporter
from ._validate import _show
from ._version import transaction_properties
from .errors import InvalidInputError
from .types import IndexSegment, MergePlan, SegmentList

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import LanceDataset

__all__ = [
    "Dataset",
    "DatasetLike",
    "open",
    "plan_index_segment_merge",
    "merge_existing_index_segments",
    "commit_existing_index_segments",
    "cleanup",
]

logger = logging.getLogger(__name__)


class Dataset(DatasetHandle):
    """A Lance dataset at one version, as lance_segmerge sees it.

    A Dataset is cheap: it holds the URI, the storage options and the version
    it was opened at, nothing native. It pickles as those three values, so it
    can be shipped to Ray, Dask or multiprocessing workers, which reopen the
    same version. Its methods are the verbs of this module.

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

    @checked()
    def list_index_segments(
        self, index_name: Optional[str] = None, *, with_stats: bool = True, with_provenance: bool = False
    ) -> SegmentList:
        """List the segments of an index at this version.

        Parameters
        ----------
        index_name : str, optional
            The logical index, of any type (a scalar or full-text index's
            segments carry their type, files and Lance file version;
            BTREE, BITMAP, ZONEMAP and BLOOMFILTER ones their rows); every
            vector index when omitted.
        with_stats : bool, default True
            Read each segment's files for its statistics (index type,
            partitions, rows, layout flags, sizes). Without them only the
            manifest is read.
        with_provenance : bool, default False
            Also find, for each segment, the version whose commit first
            listed it, that commit's operation and its transaction
            properties (``committed_version``, ``commit_operation``,
            ``commit_properties``): what lance-segmerge verb and run made
            it, or that pylance did. Costs a binary search over the
            versions per segment (manifests read once).

        Returns
        -------
        SegmentList
            A list of :class:`IndexSegment`, in manifest order, that also
            converts to a table (``to_arrow()``, ``to_pandas()``) and shows
            as one in notebooks.

        Raises
        ------
        NotFoundError
            ``index_name`` names no index of this version.
        CorruptError
            The manifest or a segment file is damaged.
        """
        return _list(self, index_name, with_stats, with_provenance)

    def merge_existing_index_segments(self, segments: Any, **options: Any) -> IndexSegment:
        """Merge segments into one new, uncommitted segment.

        See :func:`lance_segmerge.merge_existing_index_segments` (its
        keyword arguments are taken as they are).
        """
        return merge_existing_index_segments(self, segments, **options)

    def commit_existing_index_segments(self, index_name: str, column: str, segments: Any, **options: Any) -> "Dataset":
        """Commit segments as one new dataset version; returns this dataset
        at the new version (``ds = ds.commit_existing_index_segments(...)``).

        See :func:`lance_segmerge.commit_existing_index_segments`.
        """
        out: Dataset = commit_existing_index_segments(self, index_name, column, segments, **options)
        return out

    def plan_index_segment_merge(self, index_name: str, *args: Any, **options: Any) -> MergePlan:
        """Plan the merge of an index's segments.

        See :func:`lance_segmerge.plan_index_segment_merge` (its other
        arguments, the tiered policy's options among them, are taken as
        they are).
        """
        return plan_index_segment_merge(self, index_name, *args, **options)


def as_dataset(
    dataset: Any,
    storage_options: Optional[Mapping[str, str]] = None,
    *,
    version: Optional[int] = None,
) -> Dataset:
    """Turn any accepted dataset form into our :class:`Dataset` (see
    :func:`lance_segmerge._handles.resolve`, the one place where the forms
    are interpreted)."""
    return resolve(dataset, storage_options, version=version, cls=Dataset)


@checked(converts=("uri",))
def open(
    uri: DatasetLike,
    version: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dataset:
    """Open a Lance dataset.

    Parameters
    ----------
    uri : str, os.PathLike, Dataset or lance.LanceDataset
        Dataset root: a local path, ``file://``, ``s3://`` or ``memory://``
        URI; or a dataset handle (see :data:`DatasetLike`), whose URI,
        version and storage options are used.
    version : int, optional
        Version to open; the latest when omitted (for a handle: its own
        version).
    storage_options : dict of str to str, optional
        Object-store settings, as pylance accepts them (with a URI only: a
        handle carries its own).

    Returns
    -------
    Dataset

    Raises
    ------
    InvalidInputError
        ``uri`` is none of the accepted kinds (the message names its type).
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
    return as_dataset(uri, storage_options, version=version)


def _list(ds: Dataset, index_name: Optional[str], with_stats: bool, with_provenance: bool = False) -> SegmentList:
    out = _ffi.call_json("ListSegments", ds.uri, ds.options_json, ds.version, index_name or "", not with_stats)
    if with_provenance:
        prov = _ffi.call_json("SegmentProvenance", ds.uri, ds.options_json, ds.version, index_name or "")
        for d in out:
            p = prov.get(d.get("uuid")) or {}
            if p.get("unknown"):
                logger.info("segment %s: no provenance (%s)", d.get("uuid"), p["unknown"])
            elif p:
                d["provenance"] = {"version": p["version"], "operation": p["operation"],
                                   "properties": p.get("properties") or {}}
    return SegmentList(IndexSegment._from_kernel(d) for d in out)



def to_segments(items: Any) -> list[IndexSegment]:
    """The segments a merge or commit is given: IndexSegments, pylance
    ``Index`` objects, or a plan task (anything with a ``segments``
    attribute)."""
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
            raise InvalidInputError(f"not an index segment: {_show(item)}")
    return out


def segments_json(segments: Sequence[IndexSegment]) -> str:
    """Segments as the kernel takes them: their manifest entries (the
    kernel opens the files for their statistics)."""
    return json.dumps([s._entry_dict() for s in segments])


@checked(converts=("dataset", "segments_or_task"))
def merge_existing_index_segments(
    dataset: DatasetLike,
    segments_or_task: Any,
    *,
    index_uuid: Optional[str] = None,
    progress: OperationProgressArg = None,
    window_rows: Optional[int] = None,
    parallelism: Optional[int] = None,
    requantize_sq: bool = True,
    hnsw_graph: str = "reuse",
    memory_bytes: Optional[int] = None,
) -> IndexSegment:
    """Merge segments of one index into one new, uncommitted segment.

    Each input's codes are brought back to row-major order using that
    input's own layout flag (PQ ``transposed``, RQ ``packed``), rows of
    fragments an input no longer covers are dropped, and the query layout is
    applied once to every merged partition. Merged segments can therefore be
    merged again, to any depth, without losing recall, and delta segments
    written by ``optimize_indices`` merge like any other.

    Nothing is committed: pass the result to
    :func:`commit_existing_index_segments`, or to pylance's own after
    converting it with :meth:`IndexSegment.to_lance_index` (pylance's
    commit takes its own ``Index`` objects only)::

        merged = ls.merge_existing_index_segments(lance_ds, segments)
        lance_ds = lance_ds.commit_existing_index_segments(
            "vec_idx", "vec", [merged.to_lance_index()])

    pylance's commit replaces the same-name segments the new ones cover
    entirely; ours can also be told exactly which (``replaces=``) and
    checks concurrent commits. The output is written under
    ``_indices/<uuid>/``; on any error, cancellation included, it is
    removed.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset (a URI opens its latest version; a handle is used at its
        version).
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
    requantize_sq : bool, default True
        IVF_SQ only: inputs whose SQ bounds differ (every
        ``create_index_uncommitted`` segment trains its own) are merged by
        re-quantizing their codes to the union of the bounds, and the merge
        logs it at INFO. ``False`` refuses such inputs
        (:class:`InvalidInputError`) instead. pylance decodes them all with
        the first input's bounds, which silently distorts distances.
    hnsw_graph : {"reuse", "rebuild"}, default "reuse"
        IVF_HNSW_* only: how each merged partition gets its graph.
        ``"reuse"`` starts from the graph of the input with the most rows in
        the partition (its nodes renumbered, rows that were dropped removed
        and their neighbours' lists repaired) and inserts only the other
        inputs' rows; ``"rebuild"`` builds every graph from nothing, as
        pylance's ``optimize_indices`` does. Both use the HNSW parameters
        (``m``, ``ef_construction``, ``max_level``) of the input with the
        most rows (pylance before 0.31 builds its deltas with ``m=20``
        whatever the base has; a graph built with other parameters is never
        reused) and the distances pylance's search computes on the merged
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
        Segment kinds or layouts lance-segmerge does not read (HNSW graphs
        of float16 or binary vectors).
    NotFoundError, CorruptError
        An input's files are missing or damaged.
    CancelledError
        The operation was cancelled.
    """
    return _merge(
        as_dataset(dataset), to_segments(segments_or_task), index_uuid=index_uuid, progress=progress,
        window_rows=window_rows, parallelism=parallelism, requantize_sq=requantize_sq, hnsw_graph=hnsw_graph,
        memory_bytes=memory_bytes,
    )


def _merge(
    ds: Dataset,
    segs: Sequence[IndexSegment],
    *,
    index_uuid: Optional[str] = None,
    progress: OperationProgressArg = None,
    window_rows: Optional[int] = None,
    parallelism: Optional[int] = None,
    requantize_sq: bool = True,
    hnsw_graph: str = "reuse",
    memory_bytes: Optional[int] = None,
) -> IndexSegment:
    opts: dict[str, Any] = {"strict_sq": not requantize_sq, "hnsw_graph": hnsw_graph}
    for key, val in (("index_uuid", index_uuid), ("window_rows", window_rows), ("parallelism", parallelism),
                     ("memory_bytes", memory_bytes)):
        if val is not None:
            opts[key] = val
    with Reporter(progress, "merge") as reporter:
        out = _ffi.run_operation(
            "MergeSegments", (ds.uri, ds.options_json, ds.version, segments_json(segs), json.dumps(opts)), reporter.poll
        )
        result = json.loads(out)
        for note in result.pop("notes", None) or ():
            logger.info("merge into %s: %s", result.get("uuid"), note)
        merged = IndexSegment._from_kernel(result)
        reporter.finish(merged.num_partitions, merged.num_rows)
    logger.info("merged %d segments into %s (%s rows)", len(segs), merged.uuid, merged.num_rows)
    return merged


@overload
def commit_existing_index_segments(
    dataset: Union[Dataset, str, "os.PathLike[str]"],
    index_name: str,
    column: str,
    segments: Any,
    *,
    replaces: Optional[Sequence[Any]] = None,
    max_retries: int = 20,
    properties: Optional[dict[str, str]] = None,
) -> Dataset: ...


@overload
def commit_existing_index_segments(
    dataset: "LanceDataset",
    index_name: str,
    column: str,
    segments: Any,
    *,
    replaces: Optional[Sequence[Any]] = None,
    max_retries: int = 20,
    properties: Optional[dict[str, str]] = None,
) -> "LanceDataset": ...


@checked(converts=("dataset", "segments"))
def commit_existing_index_segments(
    dataset: DatasetLike,
    index_name: str,
    column: str,
    segments: Any,
    *,
    replaces: Optional[Sequence[Any]] = None,
    max_retries: int = 20,
    properties: Optional[dict[str, str]] = None,
) -> Any:
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
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset, at the version the segments were planned against (a
        URI: its latest version).
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
    properties : dict of str to str, optional
        Key-values written into the transaction next to the package's own
        (``lance_segmerge.version``, ``.verb``, ``.run``); pylance's
        ``read_transaction`` returns them, and
        ``list_index_segments(with_provenance=True)`` shows them per segment.

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the new version, as pylance's own
        ``commit_existing_index_segments`` returns it: a
        ``lance.LanceDataset`` for a ``LanceDataset`` (checked out with
        pylance, same session and options), else a :class:`Dataset`.
        ``.version`` is the new version number.

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
    ds = as_dataset(dataset)
    props = transaction_properties("commit", uuidlib.uuid4().hex, properties)
    committed = _commit(ds, index_name, column, to_segments(segments), replaces, max_retries, props)
    return at_version(dataset, ds, committed.version, committed)


def _commit(
    ds: Dataset,
    index_name: str,
    column: str,
    segs: Sequence[IndexSegment],
    replaces: Optional[Sequence[str]] = None,
    max_retries: int = 20,
    properties: Optional[dict[str, str]] = None,
) -> Dataset:
    """Commit checked segments (``properties``: the transaction's, from
    :func:`~lance_segmerge._version.transaction_properties`); returns the
    dataset at the new version."""
    request: dict[str, Any] = {"index_name": index_name, "column": column, "max_retries": max_retries,
                               "properties": dict(properties or {})}
    if replaces is not None:
        request["replaces"] = list(replaces)
    version = _ffi.run_operation(
        "CommitSegments",
        (ds.uri, ds.options_json, ds.version, segments_json(segs), json.dumps(request)),
    )
    logger.info("committed %d segments of %s as version %d", len(segs), index_name, version)
    return ds.checkout(int(version))


def _plan_options(
    index_name: str,
    segments_per_task: int,
    max_segments_to_merge: Optional[int] = None,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = True,
    policy: Optional[Mapping[str, Any]] = None,
) -> str:
    """The kernel's plan options (arguments already checked)."""
    return json.dumps(
        {
            "index_name": index_name,
            "segments_per_task": segments_per_task,
            "max_segments_to_merge": max_segments_to_merge or 0,
            "target_rows_per_task": target_rows_per_task or 0,
            "strict_sq": not requantize_sq,
            **(policy or {}),
        }
    )


@checked(converts=("dataset",))
def plan_index_segment_merge(
    dataset: DatasetLike,
    index_name: str,
    segments_per_task: int = 32,
    max_segments_to_merge: Optional[int] = None,
    *,
    target_rows_per_task: Optional[int] = None,
    requantize_sq: bool = True,
    policy: str = "all",
    segments_per_tier: Optional[int] = None,
    max_segment_rows: Optional[int] = None,
    floor_rows: Optional[int] = None,
    deletes_pct_allowed: Optional[float] = None,
    max_segments: Optional[int] = None,
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
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset; the plan is pinned to its version (a URI: the latest).
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
    requantize_sq : bool, default True
        Plan IVF_SQ segments with different bounds, which the merges
        re-quantize (logged at INFO); ``False`` refuses them (see
        :func:`merge_existing_index_segments`).
    policy : {"all", "tiered"}, default "all"
        ``"all"`` plans every live segment (or the newest
        ``max_segments_to_merge``) in balanced tasks. ``"tiered"`` plans
        only the merges worth running now, after Lucene's
        TieredMergePolicy: groups of similar-sized segments, once there are
        more segments than ``segments_per_tier`` per size tier; no merge
        writes more than ``max_segment_rows`` live rows, and a segment at or
        above it is only rewritten (alone) once its share of deleted or
        stale rows passes ``deletes_pct_allowed``; among candidates, merges
        that reclaim the most stale rows win. Each task's ``reason`` says
        why it was chosen, the plan's ``summary`` the decision as a whole.
        Deterministic. Apply a tiered plan with :func:`run_plan`
        (``target_segments=len(plan.tasks)``) or :func:`maintain`.
    segments_per_tier : int, optional
        Tiered: segments of about one size the index may hold before they
        are merged, and the most one task merges (also capped by
        ``segments_per_task``). Default 10.
    max_segment_rows : int, optional
        Tiered: the most live rows a merge writes. Default 10,000,000.
    floor_rows : int, optional
        Tiered: smaller segments count as this many rows, so tiny deltas
        are merged eagerly. Default 100,000 (Lucene's 2 MB floor in rows of
        16-byte PQ codes; capped by ``max_segment_rows``).
    deletes_pct_allowed : float, optional
        Tiered: the share (percent) of deleted or stale rows a segment may
        carry before it is rewritten to drop them. Default 33.
    max_segments : int, optional
        Tiered, latency first: the most segments the index may have after
        the pass. When the tiered choice would leave more, the smallest
        segments (and chosen merges) are merged into one, and larger ones
        are folded in early when that rewrites fewer rows over the coming
        passes; segments at or above ``max_segment_rows`` count but are
        never merged, and the merge takes at most ``segments_per_task``
        inputs (the next pass goes on). A query searches every segment, so this bounds query
        cost, at the price of rewriting rows more often: keeping at most 1
        / 2 / 3 segments after every pass rewrites each row at least about
        19 / 5 / 3.2 times on the ingestion benchmark's schedule
        (``bench/ingest_bound.py``). Default: no cap.

    Returns
    -------
    MergePlan
        Fewer than two qualifying segments give a plan without tasks
        (``"tiered"``: no merge worth running now).

    Raises
    ------
    NotFoundError
        No index of that name.
    InvalidInputError
        Bad arguments, or segments that cannot be merged together.
    UnsupportedError
        Segment kinds lance-segmerge does not read.
    """
    pol = policy_options(policy, segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed, max_segments)
    if pol and (max_segments_to_merge is not None or target_rows_per_task is not None):
        raise InvalidInputError("max_segments_to_merge and target_rows_per_task do not apply to policy='tiered'")
    opts = _plan_options(index_name, segments_per_task, max_segments_to_merge, target_rows_per_task, requantize_sq, pol)
    return _plan(as_dataset(dataset), index_name, opts)


def _plan(ds: Dataset, index_name: str, options_json: str) -> MergePlan:
    out = _ffi.call_json("PlanIndex", ds.uri, ds.options_json, ds.version, options_json)
    plan = MergePlan._from_kernel(out)
    if plan.requantize_sq:
        logger.info("the IVF_SQ segments of %s have different bounds: the merges re-quantize them to their union", index_name)
    for t in plan.tasks:
        if t.reason:
            logger.info("task %d (%d segments, %d rows): %s", t.task_id, len(t.segments), t.rows, t.reason)
    logger.info(
        "planned %d tasks over %d segments of %s at version %d", len(plan.tasks), plan.num_segments, index_name,
        plan.read_version,
    )
    return plan


def plan_segments(
    ds: Dataset,
    segments: Sequence[IndexSegment],
    segments_per_task: int,
    *,
    requantize_sq: bool = True,
) -> MergePlan:
    """Group an explicit list of segments (one level of a tree merge) into
    tasks, with the same checks and balancing as
    :func:`plan_index_segment_merge`."""
    if not segments:
        raise InvalidInputError("no segments to plan")
    opts = _plan_options(segments[0].name, segments_per_task, requantize_sq=requantize_sq)
    out = _ffi.call_json("PlanSegments", ds.uri, ds.options_json, ds.version, segments_json(segments), opts)
    return MergePlan._from_kernel(out)


@checked(converts=("dataset",))
def cleanup(
    dataset: DatasetLike,
    older_than: Union[float, timedelta] = 3600.0,
    *,
    dry_run: bool = False,
) -> list[dict[str, Any]]:
    """Find (and remove) segment directories that no version references.

    Crashed or cancelled merges leave their partial outputs under
    ``_indices/<uuid>/``. A directory is removed only when no version of the
    dataset references it and its newest file is older than ``older_than``,
    a grace period for merges still running and commits about to land.

    Run journals (``_indices/_segmerge/``, see ``optimize(resume=True)``)
    are read too: the outputs of a journal that can still resume (younger
    than ``older_than``, every source of its plan still committed) are
    kept whatever their age; a stale journal (older, superseded by another
    commit, or corrupt) is removed with its unreferenced outputs, whatever
    their age.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset.
    older_than : float or datetime.timedelta, default 1 hour
        Grace period (seconds when a float).
    dry_run : bool, default False
        Only list what would be removed.

    Returns
    -------
    list of dict
        One entry per orphan: ``uuid``, ``files``, ``bytes``, ``modified``,
        ``removed``; stale journals have ``journal`` true and their path as
        ``uuid``; ``reason`` says why a journal or its output goes.
    """
    ds = as_dataset(dataset)
    out = _ffi.call_json("Cleanup", ds.uri, ds.options_json, older_than, dry_run)
    logger.info("cleanup of %s: %d orphaned segment directories%s", ds.display_uri, len(out), " (dry run)" if dry_run else "")
    return list(out)


def remove_uncommitted(ds: DatasetHandle, uuids: Sequence[str]) -> int:
    """Delete the files of uncommitted segments (outputs of cancelled or
    intermediate merges). Committed segments are refused."""
    if not uuids:
        return 0
    return int(_ffi.call("RemoveUncommitted", ds.uri, ds.options_json, json.dumps(list(uuids))))
