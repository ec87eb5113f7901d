"""The build path: train a model once, build fragment-scoped uncommitted
segments with it (anywhere), merge them with the tree merge, commit once."""

from __future__ import annotations

import json
import logging
from typing import Any, Optional, Sequence, Union

from . import _ffi
from ._cdata import CStructs
from ._progress import ProgressArg, Reporter
from .api import Dataset
from .errors import InvalidInputError
from .model import IndexModel, normalize_index_type, normalize_metric
from .types import IndexSegment

logger = logging.getLogger(__name__)

__all__ = ["build_index_segment", "read_index_model", "train_index_model"]


def _dataset(dataset: Union[Dataset, str]) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    if isinstance(dataset, str):
        return Dataset(dataset)
    uri = getattr(dataset, "uri", None)  # a pylance LanceDataset
    if isinstance(uri, str):
        return Dataset(uri, getattr(dataset, "version", None))
    raise InvalidInputError(f"dataset must be a Dataset or a URI, got {type(dataset).__name__}")


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
    dataset: Union[Dataset, str],
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
        The vector column (fixed-size list of float32).
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
        float16 vectors, stable row ids, shallow clones.
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


def read_index_model(dataset: Union[Dataset, str], index_name: str) -> IndexModel:
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


def train_index_model(*args: Any, **kwargs: Any) -> IndexModel:  # replaced below when training lands
    raise NotImplementedError
