"""Dataset handles: the one place where what a caller passes as a dataset
(our :class:`~lance_segmerge.Dataset`, a URI ``str``, an ``os.PathLike``,
or pylance's ``lance.LanceDataset``) becomes a URI, storage options and a
pinned version.

:class:`DatasetHandle` holds those three values and the manifest facts the
kernel read when it was opened; nothing native. The verbs' ``Dataset``
(``lance_segmerge.api``) is a DatasetHandle with methods; :func:`resolve`
builds whichever class its caller asks for, so this module needs nothing
above it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping, Optional, TypeVar, Union

from . import _ffi
from ._display import Column, TableSpec, to_html
from ._validate import _I64, _name, _opt_pos_int, _show, _storage_options, redact_uri
from .errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import LanceDataset

__all__ = ["DatasetHandle", "DatasetLike", "resolve", "at_version", "is_lance_dataset"]

logger = logging.getLogger(__name__)

H = TypeVar("H", bound="DatasetHandle")


class DatasetHandle:
    """A Lance dataset at one version: URI, storage options, version, and
    what its manifest said when it was opened. Cheap; pickles as
    (uri, version, options), so workers reopen the same version.

    Parameters
    ----------
    uri : str
        Dataset root: a local path, ``file://``, ``s3://``, ``gs://``,
        ``az://`` or ``memory://`` URI.
    version : int, optional
        Version to open; the latest when omitted. The handle stays pinned
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
        info = _ffi.call_json("DatasetInfo", uri, _ffi.options_json(self._storage_options), version or 0)
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
        """The version this handle is pinned to."""
        return self._version

    @property
    def storage_options(self) -> dict[str, str]:
        """A copy of the storage options."""
        return dict(self._storage_options)

    @property
    def options_json(self) -> str:
        """The storage options as the kernel takes them (never logged)."""
        return _ffi.options_json(self._storage_options)

    @property
    def latest_version(self) -> int:
        """The newest version in storage now (re-read on every access)."""
        info = _ffi.call_json("DatasetInfo", self._uri, self.options_json, 0)
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

    def checkout(self: H, version: Optional[int] = None) -> H:
        """The same dataset at another version (the latest if omitted)."""
        return type(self)(self._uri, version, self._storage_options)

    def same_store(self, other: "DatasetHandle") -> bool:
        """Whether ``other`` is this dataset in the same store (URI and
        options), at whatever version."""
        return other._uri == self._uri and other._storage_options == self._storage_options

    # -- pickling: URI, options, version; nothing native ---------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._uri, self._version, self._storage_options))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(uri={self.display_uri!r}, version={self._version})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetHandle) and self.same_store(other) and other._version == self._version

    def __hash__(self) -> int:
        return hash((self._uri, self._version))


#: Every kind of dataset handle the functions of this package accept: our
#: ``Dataset``, a URI ``str``, an ``os.PathLike`` (a local path), or
#: pylance's ``lance.LanceDataset`` (its URI, version and storage options
#: are used).
DatasetLike = Union[DatasetHandle, str, "os.PathLike[str]", "LanceDataset"]


def _lance_dataset_type() -> Optional[type]:
    """pylance's LanceDataset class, if pylance is imported (an object
    cannot be a LanceDataset otherwise, and lance_segmerge does not need
    pylance)."""
    mod = sys.modules.get("lance.dataset")
    cls = getattr(mod, "LanceDataset", None) if mod is not None else None
    return cls if isinstance(cls, type) else None


def is_lance_dataset(obj: object) -> bool:
    cls = _lance_dataset_type()
    return cls is not None and isinstance(obj, cls)


def _lance_storage_options(lds: Any) -> Optional[dict[str, str]]:
    """The storage options a LanceDataset was opened with."""
    opts = getattr(lds, "initial_storage_options", None)
    if opts is None:
        opts = getattr(lds, "_storage_options", None)
    return {str(k): str(v) for k, v in dict(opts).items()} if opts else None


def resolve(
    dataset: Any,
    storage_options: Optional[Mapping[str, str]] = None,
    *,
    version: Optional[int] = None,
    cls: type[H],
) -> H:
    """Turn any accepted dataset form into a ``cls`` handle.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        A handle of ``cls`` is returned as is (or at ``version``); another
        DatasetHandle is re-wrapped without reopening; a URI or path opens
        its latest version (or ``version``) with ``storage_options``; a
        ``lance.LanceDataset`` gives its URI, its version (unless
        ``version`` is given) and the storage options it was opened with.
    storage_options : dict of str to str, optional
        Only with a URI or path: a handle carries its own.
    version : int, optional
        The version to pin instead of the handle's (or the latest).
    cls : type
        The DatasetHandle class to return.

    Raises
    ------
    InvalidInputError
        Any other kind of object (the message names its type), or
        ``storage_options`` next to a handle.
    """
    if isinstance(dataset, DatasetHandle) or is_lance_dataset(dataset):
        if storage_options is not None:
            raise InvalidInputError(
                f"storage_options go with a URI; this {type(dataset).__name__} already carries its own"
            )
        if isinstance(dataset, DatasetHandle):
            if version is not None and version != dataset.version:
                return cls(dataset.uri, version, dataset._storage_options)
            return dataset if isinstance(dataset, cls) else _rewrap(dataset, cls)
        uri = getattr(dataset, "uri", None)
        if not isinstance(uri, str) or not uri:
            raise InvalidInputError(f"this lance.LanceDataset has no URI ({uri!r})")
        pinned = int(dataset.version) if version is None else version
        return cls(uri, pinned, _lance_storage_options(dataset))
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        if isinstance(path, str):
            return cls(path, version, storage_options)
    kind = type(dataset)
    raise InvalidInputError(
        "dataset must be a lance_segmerge.Dataset, a URI str, an os.PathLike or a lance.LanceDataset, "
        f"got {kind.__module__}.{kind.__qualname__}"
    )


def _rewrap(h: DatasetHandle, cls: type[H]) -> H:
    """``h`` as a ``cls`` handle, without reopening the dataset."""
    out = cls.__new__(cls)
    out.__dict__.update(h.__dict__)
    return out


def at_version(given: Any, ds: H, version: int, have: Optional[DatasetHandle] = None) -> Any:
    """The dataset at ``version``, as the kind of handle the caller gave: a
    LanceDataset for a LanceDataset (checked out with pylance, keeping its
    session and options), else a handle of ``ds``'s class: ``have`` when it
    is already that version of the same store (a commit's result handed up
    through the callers, instead of opening the new version again)."""
    if is_lance_dataset(given):
        return given if int(given.version) == version else given.checkout_version(version)
    if ds.version == version:
        return ds
    if have is not None and have.version == version and have.same_store(ds):
        return have if isinstance(have, type(ds)) else _rewrap(have, type(ds))
    return ds.checkout(version)
