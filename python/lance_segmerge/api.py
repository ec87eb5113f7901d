"""The public entry points: open a dataset, list the segments of its vector
indices, merge them."""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union, overload

from . import _ffi
from ._progress import ProgressArg, Reporter
from ._validate import (
    _I64,
    _bool,
    _int,
    _name,
    _opt_pos_int,
    _progress,
    _seconds,
    redact_uri,
    _show,
    _storage_options,
    _uuid,
)
from .errors import InvalidInputError
from .types import IndexSegment, MergePlan, SegmentList, _from_kernel

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
            raise InvalidInputError(f"dataset uri must be a non-empty string, got {_show(uri)}")
        _name(uri, "dataset uri")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version <= 0):
            raise InvalidInputError(f"version must be a positive integer, got {_show(version)}")
        _opt_pos_int(version, "version", _I64)
        self._uri = uri
        self._storage_options = _storage_options(storage_options)
        info = _ffi.call_json(
            "DatasetInfo", uri, _ffi.options_json(self._storage_options), version or 0
        )
        self._version: int = int(info["version"])
        self._info: dict[str, Any] = info
        logger.debug("opened %s at version %d", redact_uri(uri), self._version)

    @property
    def uri(self) -> str:
        """The dataset root, as given (credentials in its userinfo
        included: ``repr``, logs and plans show :attr:`display_uri`)."""
        return self._uri

    @property
    def display_uri(self) -> str:
        """The dataset root with any userinfo masked
        (``s3://***@bucket/t.lance``): what to print or log."""
        return redact_uri(self._uri)

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

    @property
    def num_rows(self) -> int:
        """Rows of this version (deleted rows excluded), from the manifest."""
        return int(self._info.get("num_rows") or 0)

    @property
    def num_fragments(self) -> int:
        """Fragments of this version."""
        return int(self._info.get("num_fragments") or 0)

    @property
    def index_segments(self) -> dict[str, int]:
        """Segments (manifest entries) of each index at this version."""
        return {str(k): int(v) for k, v in (self._info.get("index_segments") or {}).items()}

    def _repr_html_(self) -> str:
        from ._display import Column, TableSpec, to_html

        counts = self.index_segments
        summary = (
            ("version", f"{self._version} (latest when opened: {self._info.get('latest_version', '?')})"),
            ("rows", f"{self.num_rows:,}"),
            ("fragments", f"{self.num_fragments:,}"),
            ("storage", f"Lance {self.data_storage_version}, {self.manifest_scheme} manifest names"),
            ("written by", f"{self._info.get('writer_library') or '?'} {self._info.get('writer_version') or ''}".strip()),
        )
        spec = TableSpec(
            f"Lance dataset {self.display_uri}",
            (Column("index", "text"), Column("segments", "int", total=True)),
            tuple((name, counts.get(name, 0)) for name in self.index_names),
            summary,
            "index",
        )
        return to_html(spec)

    def checkout(self, version: Optional[int] = None) -> "Dataset":
        """Return the same dataset at another version (the latest if omitted)."""
        return Dataset(self._uri, version, self._storage_options)

    def list_index_segments(
        self, index_name: Optional[str] = None, *, with_stats: bool = True
    ) -> SegmentList:
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
        if index_name is not None:
            _name(index_name, "index_name")
        _bool(with_stats, "with_stats")
        out = _ffi.call_json(
            "ListSegments",
            self._uri,
            _ffi.options_json(self._storage_options),
            self._version,
            index_name or "",
            not with_stats,
        )
        with _from_kernel():
            return SegmentList(IndexSegment.from_dict(d) for d in out)

    def merge_existing_index_segments(
        self,
        segments: Any,
        *,
        index_uuid: Optional[str] = None,
        progress: ProgressArg = None,
        window_rows: Optional[int] = None,
        parallelism: Optional[int] = None,
        requantize_sq: bool = True,
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
    ) -> "Dataset":
        """Commit segments as one new dataset version; returns this dataset
        at the new version (``ds = ds.commit_existing_index_segments(...)``).

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
        requantize_sq: bool = True,
        **policy: Any,
    ) -> MergePlan:
        """Plan the merge of an index's segments.

        See :func:`lance_segmerge.plan_index_segment_merge` (``policy`` and
        the tiered policy's options are passed through).
        """
        return plan_index_segment_merge(
            self,
            index_name,
            segments_per_task,
            max_segments_to_merge,
            target_rows_per_task=target_rows_per_task,
            requantize_sq=requantize_sq,
            **policy,
        )

    # -- pickling: URI, options, version; nothing native ---------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (Dataset, (self._uri, self._version, self._storage_options))

    def __repr__(self) -> str:
        return f"Dataset(uri={self.display_uri!r}, version={self._version})"

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
    uri: "DatasetLike",
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
    ds = as_dataset(uri, storage_options, version=version)
    return ds


# -- dataset handles ---------------------------------------------------------

#: Every kind of dataset handle the functions of this package accept: our
#: :class:`Dataset`, a URI ``str``, an ``os.PathLike`` (a local path), or
#: pylance's ``lance.LanceDataset`` (its URI, version and storage options
#: are used).
DatasetLike = Union[Dataset, str, "os.PathLike[str]", "LanceDataset"]

def _lance_dataset_type() -> Optional[type]:
    """pylance's LanceDataset class, if pylance is imported (an object
    cannot be a LanceDataset otherwise, and lance_segmerge does not need
    pylance)."""
    mod = sys.modules.get("lance.dataset")
    cls = getattr(mod, "LanceDataset", None) if mod is not None else None
    return cls if isinstance(cls, type) else None


def _is_lance_dataset(obj: object) -> bool:
    cls = _lance_dataset_type()
    return cls is not None and isinstance(obj, cls)


def _lance_storage_options(lds: Any) -> Optional[dict[str, str]]:
    """The storage options a LanceDataset was opened with."""
    opts = getattr(lds, "initial_storage_options", None)
    if opts is None:
        opts = getattr(lds, "_storage_options", None)
    return {str(k): str(v) for k, v in dict(opts).items()} if opts else None


def as_dataset(
    dataset: Any,
    storage_options: Optional[Mapping[str, str]] = None,
    *,
    version: Optional[int] = None,
) -> Dataset:
    """Turn any accepted dataset handle into our :class:`Dataset`.

    This is the one place where handles are interpreted; every public
    function goes through it.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        A :class:`Dataset` is returned as is (or at ``version``); a URI or
        path opens its latest version (or ``version``) with
        ``storage_options``; a ``lance.LanceDataset`` gives its URI, its
        version (unless ``version`` is given) and the storage options it
        was opened with.
    storage_options : dict of str to str, optional
        Only with a URI or path: a handle carries its own.
    version : int, optional
        The version to pin instead of the handle's (or the latest).

    Raises
    ------
    InvalidInputError
        Any other kind of object (the message names its type), or
        ``storage_options`` next to a handle.
    """
    if isinstance(dataset, Dataset) or _is_lance_dataset(dataset):
        if storage_options is not None:
            raise InvalidInputError(
                f"storage_options go with a URI; this {type(dataset).__name__} already carries its own"
            )
        if isinstance(dataset, Dataset):
            return dataset if version is None or version == dataset.version else dataset.checkout(version)
        uri = getattr(dataset, "uri", None)
        if not isinstance(uri, str) or not uri:
            raise InvalidInputError(f"this lance.LanceDataset has no URI ({uri!r})")
        pinned = int(dataset.version) if version is None else version
        return Dataset(uri, pinned, _lance_storage_options(dataset))
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        if isinstance(path, str):
            return Dataset(path, version, storage_options)
    kind = type(dataset)
    raise InvalidInputError(
        "dataset must be a lance_segmerge.Dataset, a URI str, an os.PathLike or a lance.LanceDataset, "
        f"got {kind.__module__}.{kind.__qualname__}"
    )


def _at_version(given: Any, ds: Dataset, version: int, have: Any = None) -> Any:
    """The dataset at ``version``, as the kind of handle the caller gave:
    a LanceDataset for a LanceDataset (checked out with pylance, keeping its
    session and options), else our Dataset: ``have`` when it is already
    that (a commit's result handed up through the callers, instead of
    opening the new version again at each level)."""
    if _is_lance_dataset(given):
        return given if int(given.version) == version else given.checkout_version(version)
    if ds.version == version:
        return ds
    if (
        isinstance(have, Dataset)
        and have.version == version
        and have.uri == ds.uri
        and have._storage_options == ds._storage_options
    ):
        return have
    return ds.checkout(version)


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
            raise InvalidInputError(f"not an index segment: {_show(item)}")
    return out


def _replaces(replaces: Any) -> list[str]:
    """The uuids of the segments a commit replaces: uuid strings, or
    objects with a ``uuid`` (IndexSegment, pylance's Index)."""
    if isinstance(replaces, (str, bytes)) or not isinstance(replaces, Iterable):
        raise InvalidInputError(f"replaces must be a list of segments or uuids, got {_show(replaces)}")
    out = []
    for r in replaces:
        u = r if isinstance(r, str) else getattr(r, "uuid", None)
        if u is None:
            raise InvalidInputError(f"replaces holds {_show(r)}, not a segment or a uuid")
        out.append(str(uuid.UUID(_uuid(str(u) if not isinstance(u, str) else u, "a segment uuid in replaces"))))
    return out


def _segments_json(segments: Sequence[IndexSegment]) -> str:
    """Segments as the kernel takes them: their manifest entries (the
    kernel opens the files for their statistics)."""
    return json.dumps([s._entry_dict() for s in segments])


def merge_existing_index_segments(
    dataset: DatasetLike,
    segments_or_task: Any,
    *,
    index_uuid: Optional[str] = None,
    progress: ProgressArg = None,
    window_rows: Optional[int] = None,
    parallelism: Optional[int] = None,
    requantize_sq: bool = True,
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
        Segment kinds or layouts lance-segmerge does not read (HNSW graphs
        of float16 or binary vectors).
    NotFoundError, CorruptError
        An input's files are missing or damaged.
    CancelledError
        The operation was cancelled.
    """
    ds = as_dataset(dataset)
    segs = _to_segments(segments_or_task, ds)
    if hnsw_graph not in ("reuse", "rebuild"):
        raise InvalidInputError(f"hnsw_graph must be 'reuse' or 'rebuild', got {_show(hnsw_graph)}")
    opts: dict[str, Any] = {"strict_sq": not _bool(requantize_sq, "requantize_sq"), "hnsw_graph": hnsw_graph}
    if index_uuid is not None:
        opts["index_uuid"] = _uuid(index_uuid, "index_uuid")
    for key, val in (("window_rows", window_rows), ("parallelism", parallelism)):
        if val is not None:
            if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
                raise InvalidInputError(f"{key} must be a positive integer, got {_show(val)}")
            opts[key] = _int(val, key, 1, 2**31 - 1)
    _progress(progress)
    reporter = Reporter(progress, "merge")
    try:
        out = _ffi.run_operation(
            "MergeSegments",
            (ds.uri, _ffi.options_json(ds.storage_options), ds.version, _segments_json(segs), json.dumps(opts)),
            reporter if reporter.active else None,
        )
        result = json.loads(out)
        for note in result.pop("notes", None) or ():
            logger.info("merge into %s: %s", result.get("uuid"), note)
        with _from_kernel():
            merged = IndexSegment.from_dict(result)
        reporter.finish(merged.num_partitions, merged.num_rows)
    finally:
        reporter.close()
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
) -> "LanceDataset": ...


def commit_existing_index_segments(
    dataset: DatasetLike,
    index_name: str,
    column: str,
    segments: Any,
    *,
    replaces: Optional[Sequence[Any]] = None,
    max_retries: int = 20,
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
    _name(index_name, "index_name")
    _name(column, "column")
    _int(max_retries, "max_retries", 0, 10_000)
    segs = _to_segments(segments, ds)
    request: dict[str, Any] = {"index_name": index_name, "column": column, "max_retries": max_retries}
    if replaces is not None:
        request["replaces"] = _replaces(replaces)
    version = _ffi.run_operation(
        "CommitSegments",
        (ds.uri, _ffi.options_json(ds.storage_options), ds.version, _segments_json(segs), json.dumps(request)),
    )
    logger.info("committed %d segments of %s as version %d", len(segs), index_name, version)
    return _at_version(dataset, ds, int(version))


POLICIES = ("all", "tiered")


def _policy_options(
    policy: str,
    segments_per_tier: Optional[int],
    max_segment_rows: Optional[int],
    floor_rows: Optional[int],
    deletes_pct_allowed: Optional[float],
    max_segments: Optional[int] = None,
) -> dict[str, Any]:
    """Check the merge policy's options and encode them for the kernel
    (``None`` = the kernel's default)."""
    if policy not in POLICIES:
        raise InvalidInputError(f"policy must be one of {POLICIES}, got {policy!r}")
    given = {
        "segments_per_tier": segments_per_tier,
        "max_segment_rows": max_segment_rows,
        "floor_rows": floor_rows,
        "deletes_pct_allowed": deletes_pct_allowed,
        "max_segments": max_segments,
    }
    if policy != "tiered":
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise InvalidInputError(f"{', '.join(extra)} only apply to policy='tiered'")
        return {}
    out: dict[str, Any] = {"policy": policy}
    for key, minimum in (("segments_per_tier", 2), ("max_segment_rows", 1), ("floor_rows", 1), ("max_segments", 1)):
        val = given[key]
        if val is None:
            continue
        if isinstance(val, bool) or not isinstance(val, int) or val < minimum:
            raise InvalidInputError(f"{key} must be an integer >= {minimum}, got {val!r}")
        out[key] = val
    if deletes_pct_allowed is not None:
        pct = deletes_pct_allowed
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 <= pct <= 100:
            raise InvalidInputError(f"deletes_pct_allowed must be a percentage in [0, 100], got {pct!r}")
        out["deletes_pct_allowed"] = float(pct)
    if floor_rows is not None and max_segment_rows is not None and floor_rows > max_segment_rows:
        raise InvalidInputError(f"floor_rows ({floor_rows}) is above max_segment_rows ({max_segment_rows})")
    return out


def _plan_options(
    index_name: str,
    segments_per_task: int,
    max_segments_to_merge: Optional[int],
    target_rows_per_task: Optional[int],
    requantize_sq: bool,
    policy: Optional[Mapping[str, Any]] = None,
) -> str:
    _name(index_name, "index_name")
    _int(segments_per_task, "segments_per_task", 2, 2**31 - 1)
    if max_segments_to_merge is not None:
        _int(max_segments_to_merge, "max_segments_to_merge", 2, 2**31 - 1)
    _opt_pos_int(target_rows_per_task, "target_rows_per_task")
    _bool(requantize_sq, "requantize_sq")
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
    ds = as_dataset(dataset)
    pol = _policy_options(policy, segments_per_tier, max_segment_rows, floor_rows, deletes_pct_allowed, max_segments)
    if pol and (max_segments_to_merge is not None or target_rows_per_task is not None):
        raise InvalidInputError("max_segments_to_merge and target_rows_per_task do not apply to policy='tiered'")
    opts = _plan_options(index_name, segments_per_task, max_segments_to_merge, target_rows_per_task, requantize_sq, pol)
    out = _ffi.call_json("PlanIndex", ds.uri, _ffi.options_json(ds.storage_options), ds.version, opts)
    with _from_kernel():
        plan = MergePlan.from_dict(out)
    if plan.requantize_sq:
        logger.info("the IVF_SQ segments of %s have different bounds: the merges re-quantize them to their union", index_name)
    for t in plan.tasks:
        if t.reason:
            logger.info("task %d (%d segments, %d rows): %s", t.task_id, len(t.segments), t.rows, t.reason)
    logger.info(
        "planned %d tasks over %d segments of %s at version %d",
        len(plan.tasks),
        plan.num_segments,
        index_name,
        plan.read_version,
    )
    return plan


def plan_segments(
    dataset: DatasetLike,
    segments: Sequence[IndexSegment],
    segments_per_task: int,
    *,
    requantize_sq: bool = True,
) -> MergePlan:
    """Group an explicit list of segments (e.g. one level of a tree merge)
    into tasks, with the same checks and balancing as
    :func:`plan_index_segment_merge`."""
    if not segments:
        raise InvalidInputError("no segments to plan")
    dataset = as_dataset(dataset)
    opts = _plan_options(segments[0].name, segments_per_task, None, None, requantize_sq)
    out = _ffi.call_json(
        "PlanSegments", dataset.uri, _ffi.options_json(dataset.storage_options), dataset.version, _segments_json(segments), opts
    )
    with _from_kernel():
        return MergePlan.from_dict(out)


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
    seconds = _seconds(older_than, "older_than")
    _bool(dry_run, "dry_run")
    out = _ffi.call_json("Cleanup", ds.uri, _ffi.options_json(ds.storage_options), seconds, bool(dry_run))
    logger.info("cleanup of %s: %d orphaned segment directories%s", ds.display_uri, len(out), " (dry run)" if dry_run else "")
    return list(out)


def remove_uncommitted(dataset: DatasetLike, uuids: Sequence[str]) -> int:
    """Delete the files of uncommitted segments (outputs of cancelled or
    intermediate merges). Committed segments are refused."""
    if not uuids:
        return 0
    dataset = as_dataset(dataset)
    return int(_ffi.call("RemoveUncommitted", dataset.uri, _ffi.options_json(dataset.storage_options), json.dumps(list(uuids))))
