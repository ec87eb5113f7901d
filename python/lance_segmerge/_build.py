"""The build verbs: train a model once, read the model of an existing
index, build one fragment-scoped uncommitted segment with a model.

:func:`lance_segmerge.create_index` (in :mod:`lance_segmerge.build`) runs
them on workers, merges and commits."""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any, Callable, Mapping, Optional, Sequence

import pyarrow as pa

from . import _ffi
from ._args import SCALAR_BUILD_TYPES, checked
from ._cdata import CStructs
from ._progress import OperationProgressArg, Reporter
from .api import Dataset, DatasetLike, as_dataset
from .errors import InvalidInputError
from .model import IndexModel
from .types import IndexSegment

logger = logging.getLogger(__name__)

#: Runs sample jobs (``_jobs.sample_task``) on a pool, in order.
SampleRunner = Callable[[list[dict[str, Any]]], list[Any]]

__all__ = ["build_index_segment", "read_index_model", "train_index_model"]


def check_model(model: Any, index_type: str, metric: Optional[str]) -> IndexModel:
    """``model`` is an IndexModel of this index type (and metric)."""
    if not isinstance(model, IndexModel):
        raise InvalidInputError(
            f"model must be an IndexModel (train_index_model, read_index_model or IndexModel.from_arrays), got {type(model).__name__}"
        )
    if model.index_type != index_type:
        raise InvalidInputError(f"the model is for {model.index_type}, not {index_type}")
    if metric is not None and metric != model.metric:
        raise InvalidInputError(f"the model is for the {model.metric} metric, not {metric}")
    return model


@checked(converts=("dataset", "model"))
def build_index_segment(
    dataset: DatasetLike,
    column: str,
    index_type: str,
    fragment_ids: Sequence[int],
    model: Optional[IndexModel] = None,
    *,
    name: str,
    metric: Optional[str] = None,
    index_uuid: Optional[str] = None,
    progress: OperationProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    params: Optional[dict[str, Any]] = None,
) -> IndexSegment:
    """Build one uncommitted index segment over some fragments.

    Vector indices: reads only the given fragments' vectors from the data files (deleted
    rows, null vectors and vectors holding NaN or infinity skipped, as
    pylance skips them), assigns IVF partitions and encodes with ``model``,
    and writes the segment under ``_indices/<uuid>/`` in the layout
    pylance's ``create_index_uncommitted`` writes (row-major codes). The
    manifest is not touched: merge the segments with
    :func:`merge_existing_index_segments` and commit them with
    :func:`commit_existing_index_segments` (or pylance's own).

    Scalar indices (``BTREE``, ``BITMAP``, ``LABEL_LIST``, ``ZONEMAP``,
    ``BLOOMFILTER``, ``NGRAM``; no model): reads
    the fragments' values of ``column`` a window at a time (deleted rows
    left out, nulls kept) and writes the files pylance's
    ``create_index_uncommitted`` writes. BTREE and BITMAP sort the (value,
    row) pairs by value in bounded memory (sorted runs past
    ``memory_bytes`` spill to temporary files and are merged), then write a
    BTREE's sorted pages and their lookup (pages of the size the index's
    existing segments have, else 4096 rows) or a BITMAP's row map per
    distinct value, the null value first (LABEL_LIST: a row under each of
    its labels, null lists in a map of their own); NGRAM sorts (trigram
    token, row) pairs the same way and writes a posting list per token
    (text is lower-cased and ASCII-folded as pylance does; a character
    whose folding is not reproduced here is refused); ZONEMAP and
    BLOOMFILTER stream the fragments in order into zones of 8,192 live rows
    (or the index's zone size), each with its bounds or its bloom filter.

    Full-text indices (``INVERTED``, alias ``FTS``; a string column):
    each live, non-null row is analyzed as pylance 14.0.2 analyzes it
    (simple or whitespace tokenizer, tokens of ``max_token_length`` bytes
    or more dropped, lower-casing, English Snowball stemming, stop words,
    ASCII folding; positions when ``with_position``) and the segment is
    written as pylance lays one out, one partition, its BM25 statistics
    its own (pylance scores a query over all of an index's segments
    together). Rows without tokens are left out, as pylance leaves them.
    The documents' posting lists are held in memory until the segment is
    written: bound them by the fragments given. A configuration or a
    character whose tokens are not reproduced here is refused.

    Parameters
    ----------
    dataset : Dataset or str
        The dataset, at the version to index.
    column : str
        The vector column (fixed-size list of float32 or float16; float16
        segments are computed and stored in float16, as pylance's), or the
        scalar column (integer, floating-point, date, time, timestamp,
        string or binary; for LABEL_LIST a list of those).
    index_type : str
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ`` or ``IVF_RQ`` (the model's), or
        ``BTREE``, ``BITMAP``, ``LABEL_LIST``, ``ZONEMAP``, ``BLOOMFILTER``,
        ``NGRAM`` or ``INVERTED`` (``FTS``) (a string column).
    fragment_ids : list of int
        The fragments this segment covers.
    model : IndexModel, optional
        The shared model of a vector index (:func:`train_index_model`,
        :func:`read_index_model` or :meth:`IndexModel.from_arrays`);
        required for vector types, refused for scalar ones.
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
        Encoded rows (vector) or (value, row) pairs (scalar) held in memory
        before spilling to a temporary file (default 64 MiB, 128 MiB).
    params : dict, optional
        An INVERTED index's analyzer: pylance's ``create_scalar_index``
        keywords ``base_tokenizer`` ("simple" or "whitespace"),
        ``language`` ("English"), ``with_position``, ``max_token_length``
        (bytes; None: no limit), ``lower_case``, ``stem``,
        ``remove_stop_words``, ``custom_stop_words``, ``ascii_folding``,
        over pylance's defaults. A segment joining an index takes the
        index's own (given ones must say the same).

    Returns
    -------
    IndexSegment

    Raises
    ------
    InvalidInputError
        A model that does not fit (kind, metric, dimension, parameters), a
        model missing (vector) or given (scalar), unknown or repeated
        fragments, a column that is not a float vector (vector), an index
        of that name on another column or of another type, ``params`` for
        another type than INVERTED or unlike the index's.
    UnsupportedError
        Vectors of another element type, NGRAM text with a character whose folding is not
        reproduced, shallow clones, a scalar column of a type with no order
        (lists, structs, dictionaries; a ZONEMAP of a dictionary column is
        built); INVERTED analyzers other than those above
        (another tokenizer or language, stemming or folding without
        lower-casing) or text with a character whose folding is not
        reproduced (the error names it).
    CancelledError
        The build was cancelled; nothing it wrote is left.
    """
    ds = as_dataset(dataset)
    if params is not None and index_type != "INVERTED":
        raise InvalidInputError(f"params: analyzer parameters are for INVERTED indices, not {index_type}")
    if index_type in SCALAR_BUILD_TYPES:
        if model is not None:
            raise InvalidInputError(f"model: a {index_type} index has no model; pass none")
        return build_scalar_segment(ds, column, index_type, fragment_ids, name=name, index_uuid=index_uuid,
                                    progress=progress, window_rows=window_rows, memory_bytes=memory_bytes, params=params)
    if model is None:
        raise InvalidInputError(f"model: a {index_type} segment is built with the index's model "
                                "(train_index_model or read_index_model)")
    return _build_segment(
        ds, column, index_type, fragment_ids, check_model(model, index_type, metric), name=name,
        index_uuid=index_uuid, progress=progress, window_rows=window_rows, memory_bytes=memory_bytes,
    )


def _build_options(column: str, name: str, fragment_ids: Sequence[int], index_uuid: Optional[str],
                   window_rows: Optional[int], memory_bytes: Optional[int]) -> dict[str, Any]:
    """The kernel's build options (those given)."""
    opts: dict[str, Any] = {"column": column, "name": name, "fragment_ids": list(fragment_ids)}
    for key, val in (("index_uuid", index_uuid), ("window_rows", window_rows), ("memory_bytes", memory_bytes)):
        if val is not None:
            opts[key] = val
    return opts


def build_scalar_segment(
    ds: Dataset,
    column: str,
    index_type: str,
    fragment_ids: Sequence[int],
    *,
    name: str,
    index_uuid: Optional[str] = None,
    progress: OperationProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    params: Optional[dict[str, Any]] = None,
) -> IndexSegment:
    """One scalar segment built by the kernel (arguments checked)."""
    opts = _build_options(column, name, fragment_ids, index_uuid, window_rows, memory_bytes)
    opts["index_type"] = index_type
    if params:
        opts["params"] = params
    with Reporter(progress, "build") as reporter:
        out = _ffi.run_operation("BuildScalarSegment", (ds.uri, ds.options_json, ds.version, json.dumps(opts)), reporter.poll)
    seg = IndexSegment._from_kernel(json.loads(out))
    logger.info("built %s segment %s over %d fragments (%s rows)", index_type, seg.uuid, len(opts["fragment_ids"]), seg.num_rows)
    return seg


def _build_segment(
    ds: Dataset,
    column: str,
    index_type: str,
    fragment_ids: Sequence[int],
    model: IndexModel,
    *,
    name: str,
    index_uuid: Optional[str] = None,
    progress: OperationProgressArg = None,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
) -> IndexSegment:
    opts = _build_options(column, name, fragment_ids, index_uuid, window_rows, memory_bytes)
    spec, keep = model.export()
    with Reporter(progress, "build") as reporter:
        out = _ffi.run_operation("BuildSegment", (ds.uri, ds.options_json, ds.version, spec, json.dumps(opts)), reporter.poll)
    del keep  # the kernel released the exported arrays
    seg = IndexSegment._from_kernel(json.loads(out))
    logger.info("built segment %s over %d fragments (%s rows)", seg.uuid, len(opts["fragment_ids"]), seg.num_rows)
    return seg


@checked(converts=("dataset",))
def read_index_model(dataset: DatasetLike, index_name: str) -> IndexModel:
    """The model of an existing index: build new segments with it for
    appended fragments, and they merge with the index's segments, as
    ``optimize_indices(num_indices_to_merge=0)`` deltas do.

    It is read from the index's newest segment. ``maintain(retrain="auto")``
    extends a model by appending centroids, and every segment built after
    that carries the extended model, so the newest segment holds the widest
    model and the older segments' centroids are its first rows."""
    ds = as_dataset(dataset)
    structs = {n: CStructs() for n in ("centroids", "codebook", "rotation")}
    out = _ffi.call_json(
        "ReadIndexModel", ds.uri, ds.options_json, ds.version, index_name,
        json.dumps({n: s.pair() for n, s in structs.items()}),
    )
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    return IndexModel.from_spec(out, arrays, params=(("source", f"{ds.uri}@{ds.version}:{index_name}"),))


def read_segment_model(ds: Dataset, segment: IndexSegment) -> IndexModel:
    """The model of one segment, committed or not (a resumed reindex reads
    the model an output was built with before a crash)."""
    structs = {n: CStructs() for n in ("centroids", "codebook", "rotation")}
    out = _ffi.call_json(
        "ReadSegmentModel", ds.uri, ds.options_json, ds.version, json.dumps(segment._entry_dict()),
        json.dumps({n: s.pair() for n, s in structs.items()}),
    )
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    return IndexModel.from_spec(out, arrays, params=(("source", f"{ds.uri}@{ds.version}:{segment.uuid}"),))


@checked(converts=("dataset",))
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
    if index_type in SCALAR_BUILD_TYPES:
        raise InvalidInputError(f"index_type: a {index_type} index has no model to train")
    return _train(
        as_dataset(dataset), column, index_type, metric=metric, num_partitions=num_partitions,
        num_sub_vectors=num_sub_vectors, num_bits=num_bits, sample_rate=sample_rate, max_iters=max_iters,
        fragment_ids=fragment_ids, seed=seed,
    )


def _train(
    ds: Dataset,
    column: str,
    index_type: str,
    *,
    metric: str,
    num_partitions: int,
    num_sub_vectors: Optional[int],
    num_bits: Optional[int],
    sample_rate: int,
    max_iters: int,
    fragment_ids: Optional[Sequence[int]],
    seed: Optional[int],
    sample_on: Optional[SampleRunner] = None,
    groups: Optional[Sequence[Sequence[int]]] = None,
    live_rows: Optional[Mapping[int, int]] = None,
) -> IndexModel:
    """Train a model. With ``sample_on`` and ``groups``, the sample is drawn
    by one job per group of fragments, run by ``sample_on`` (a run's worker
    pool), each its groups' share by live rows (``live_rows``, fragment id
    to rows, when the caller has listed them: :func:`fragment_rows`), and
    trained on here; else the kernel draws it in this process."""
    seed_val = secrets.randbits(63) if seed is None else seed
    params: dict[str, Any] = {
        "index_type": index_type,
        "metric": metric,
        "num_partitions": num_partitions,
        "num_sub_vectors": num_sub_vectors or 0,  # the kernel's default (0 is never a caller's value)
        "num_bits": num_bits or 0,
        "sample_rate": sample_rate,
        "max_iters": max_iters,
        "fragment_ids": None if fragment_ids is None else list(fragment_ids),
        "seed": seed_val,
    }
    structs = {n: CStructs() for n in ("centroids", "codebook")}
    ptrs = json.dumps({n: s.pair() for n, s in structs.items()})
    tasks = 0
    if sample_on is not None and groups:
        live = dict(live_rows) if live_rows is not None else dict(fragment_rows(ds))
        shares = _sample_on_workers(ds, column, params, groups, live, sample_on)
        tasks = len(shares)
        sample = CStructs().export(pa.concat_arrays(shares))
        out = json.loads(_ffi.run_operation("TrainModelOnSample", (json.dumps(params), json.dumps(sample.pair()), ptrs)))
    else:
        out = json.loads(_ffi.run_operation("TrainModel", (ds.uri, ds.options_json, ds.version, column, json.dumps(params), ptrs)))
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    stats = out.get("stats") or {}
    prov = (
        ("sample_rate", sample_rate),
        ("max_iters", max_iters),
        ("seed", seed_val),
        ("sample_rows", int(stats.get("sample_rows", 0))),
        ("sample_tasks", tasks),
        ("ivf_iters", int(stats.get("ivf_iters", 0))),
        ("dataset", f"{ds.uri}@{ds.version}"),
    )
    model = IndexModel.from_spec(out, arrays, params=prov)
    logger.info("trained %r on %s vectors%s", model, stats.get("sample_rows"),
                f" sampled by {tasks} tasks" if tasks else "")
    return model


# Spreads the groups' seeds (group 0 keeps the caller's seed: one group
# draws exactly the sample TrainModel would).
_SEED_STRIDE = 0x9E3779B97F4A7C15


def _sample_on_workers(
    ds: Dataset, column: str, params: dict[str, Any], groups: Sequence[Sequence[int]], live: Mapping[int, int],
    run: SampleRunner,
) -> list[Any]:
    """Each group's share of the training sample, drawn by a job per group."""
    total = sum(live.get(f, 0) for g in groups for f in g)
    jobs = [
        {"dataset": ds, "column": column, "fragment_ids": [int(f) for f in g], "params": params, "of_rows": total,
         "seed": (int(params["seed"]) ^ (i * _SEED_STRIDE)) % (1 << 64)}
        for i, g in enumerate(groups)
        if any(live.get(f, 0) for f in g)
    ]
    if not jobs:
        raise InvalidInputError("the fragments hold no rows to train on")
    shares = [a for a in run(jobs) if len(a)]
    if not shares:
        raise InvalidInputError(f"no vectors to train on in column {column!r} (every sampled row is null)")
    return shares


def sample_vectors(ds: Dataset, job: dict[str, Any]) -> Any:
    """One group's share of a training sample (a sample job's body), as a
    FixedSizeList<float32> array."""
    req = {k: job[k] for k in ("column", "fragment_ids", "params", "of_rows", "seed")}
    out = CStructs()
    _ffi.run_operation("SampleVectors", (ds.uri, ds.options_json, ds.version, json.dumps(req), json.dumps(out.pair())))
    return out.import_array()


def fragment_rows(ds: Dataset) -> list[tuple[int, int]]:
    """(fragment id, live rows) of every fragment of the dataset version."""
    return [(int(f), int(n)) for f, n in _ffi.call_json("FragmentRows", ds.uri, ds.options_json, ds.version)]


def group_fragments(frags: list[tuple[int, int]], fragments_per_task: Optional[int], workers: int) -> list[list[int]]:
    """Consecutive fragments in groups: ``fragments_per_task`` each, or, by
    default, about two groups per worker balanced by rows."""
    if fragments_per_task is not None:
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
