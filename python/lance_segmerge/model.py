"""IndexModel: the trained model every segment of an index shares (IVF
centroids, and the PQ codebook, SQ bounds or RQ rotation), and the
conversions from models made elsewhere (numpy, pyarrow, pylance's IvfModel
and PqModel).

Arrays cross into the Go kernel through the Arrow C Data Interface."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from ._args import INDEX_TYPES, METRICS, normalize_index_type, normalize_metric
from ._cdata import CStructs
from .errors import InvalidInputError

logger = logging.getLogger(__name__)

__all__ = ["IndexModel", "as_matrix", "INDEX_TYPES", "METRICS", "normalize_index_type", "normalize_metric"]

def as_matrix(obj: Any, what: str, cols: Optional[int] = None) -> pa.Array:
    """Bring a matrix given as a numpy array, a ``pyarrow.FixedSizeListArray``
    or ``FixedShapeTensorArray`` (or a one-chunk ChunkedArray of those), or a
    pylance ``IvfModel`` / ``PqModel``, to the Arrow array that crosses into
    the kernel: a FixedSizeList of floats. numpy float32 arrays are wrapped
    without a copy. The kernel validates the result (type, nulls, sizes)."""
    if hasattr(obj, "centroids") and hasattr(obj, "distance_type"):  # lance IvfModel
        obj = obj.centroids
    elif hasattr(obj, "codebook") and hasattr(obj, "num_subvectors"):  # lance PqModel
        obj = obj.codebook
    if isinstance(obj, pa.ChunkedArray):
        if obj.num_chunks != 1:
            obj = obj.combine_chunks()
        else:
            obj = obj.chunk(0)
    if isinstance(obj, pa.Array):
        return obj
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind != "f":
            raise InvalidInputError(f"{what}: a numpy array of {obj.dtype}; want float32 (or float16/float64)")
        if obj.ndim == 1:
            if not cols:
                raise InvalidInputError(f"{what}: a 1-d array needs a known row width")
            if obj.size % cols:
                raise InvalidInputError(f"{what}: {obj.size} values do not make rows of {cols}")
            obj = obj.reshape(-1, cols)
        if obj.ndim > 2:
            obj = obj.reshape(obj.shape[0], -1) if cols is None else obj.reshape(-1, cols)
        if obj.ndim != 2 or obj.shape[1] == 0:
            raise InvalidInputError(f"{what}: shape {obj.shape}; want a 2-d array")
        flat = np.ascontiguousarray(obj).reshape(-1)
        # Wrap the buffer (no copy); pa.array() on numpy input would also
        # import pandas, half a second in every fresh worker.
        types = {np.dtype(np.float16): pa.float16(), np.dtype(np.float32): pa.float32(), np.dtype(np.float64): pa.float64()}
        if flat.dtype.newbyteorder("=") not in types or not flat.dtype.isnative:
            flat = flat.astype(np.float32)
        values = pa.Array.from_buffers(types[flat.dtype], len(flat), [None, pa.py_buffer(flat)])
        return pa.FixedSizeListArray.from_arrays(values, obj.shape[1])
    raise InvalidInputError(
        f"{what}: {type(obj).__name__} is not a numpy array, pyarrow FixedSizeListArray / "
        "FixedShapeTensorArray, or pylance IvfModel / PqModel"
    )


def _to_numpy(arr: pa.Array, cols: int) -> np.ndarray:
    """A read-only float32 (rows, cols) copy-free view where possible."""
    if hasattr(arr, "storage"):  # an extension array (fixed_shape_tensor)
        arr = arr.storage
    if pa.types.is_fixed_size_list(arr.type):
        values = arr.flatten()
        cols = arr.type.list_size
    else:
        values = arr
    out: np.ndarray = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, cols)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class IndexModel:
    """A trained vector index model, shared by every segment of an index.

    Frozen and picklable (numpy arrays, read-only); ``content_hash`` (a
    SHA-256 over the kind, metric, dimension, parameters and array bytes) is
    its identity: two models with the same hash build mergeable segments.

    Parameters
    ----------
    index_type : str
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ`` or ``IVF_RQ``.
    metric : str
        ``l2``, ``cosine`` or ``dot``.
    centroids : numpy.ndarray
        IVF centroids, float32, (num_partitions, dimension).
    num_sub_vectors, num_bits : int
        PQ sub-vectors and bits per code (4 or 8); SQ bits (8); RQ bits per
        dimension (1 sign bit plus extra bits, 1..9).
    codebook : numpy.ndarray, optional
        PQ codebook, (2**num_bits, dimension): sub-vector ``s`` of
        centroid ``c`` is the flat values ``[(s*2**num_bits + c)*sub_dim,
        ...+sub_dim)``, Lance's order.
    sq_bounds : (float, float), optional
        SQ range.
    rq_rotation : str
        ``fast`` (signs) or ``matrix``.
    rq_signs : bytes
        Fast rotation sign bits (4 rounds of ceil(dimension/8) bytes).
    rq_matrix : numpy.ndarray, optional
        Matrix rotation, (dimension, dimension).
    rq_query_estimator : str
        ``raw_query`` (pylance 14) or ``residual_query``.
    pq_dot_assignment : str
        Dot-metric PQ only: ``l2`` (default; what pylance's ``create_index``
        does) encodes each sub-vector by its nearest codebook entry,
        ``inner_product`` by the entry of largest inner product, which is
        what pylance 14's ``create_index_uncommitted`` does with an injected
        codebook (and which loses most of the recall).
    params : tuple of (str, value)
        How it was trained (sample size, iterations, seed...), for
        provenance; not part of the hash.
    """

    index_type: str
    metric: str
    centroids: np.ndarray
    num_sub_vectors: int = 0
    num_bits: int = 0
    codebook: Optional[np.ndarray] = None
    sq_bounds: Optional[tuple[float, float]] = None
    rq_rotation: str = ""
    rq_signs: bytes = b""
    rq_matrix: Optional[np.ndarray] = None
    rq_query_estimator: str = ""
    pq_dot_assignment: str = ""
    params: tuple[tuple[str, Any], ...] = ()
    content_hash: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index_type", normalize_index_type(self.index_type))
        object.__setattr__(self, "metric", normalize_metric(self.metric))
        c = np.asarray(self.centroids)
        if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
            raise InvalidInputError(f"centroids must be a non-empty 2-d array, got shape {c.shape}")
        for name in ("centroids", "codebook", "rq_matrix"):
            a = getattr(self, name)
            if a is not None:
                a = np.array(a, dtype=np.float32, copy=not (isinstance(a, np.ndarray) and a.dtype == np.float32 and not a.flags.writeable))
                if a.ndim != 2:
                    a = a.reshape(-1, c.shape[1])
                a.setflags(write=False)
                object.__setattr__(self, name, a)
        object.__setattr__(self, "rq_signs", bytes(self.rq_signs))
        if self.pq_dot_assignment not in ("", "l2", "inner_product"):
            raise InvalidInputError(f"pq_dot_assignment must be 'l2' or 'inner_product', got {self.pq_dot_assignment!r}")
        if self.sq_bounds is not None:
            object.__setattr__(self, "sq_bounds", (float(self.sq_bounds[0]), float(self.sq_bounds[1])))
        object.__setattr__(self, "params", tuple((str(k), v) for k, v in self.params))
        object.__setattr__(self, "content_hash", self._hash())

    @property
    def dimension(self) -> int:
        return int(self.centroids.shape[1])

    @property
    def num_partitions(self) -> int:
        return int(self.centroids.shape[0])

    def _hash(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(self.spec(), sort_keys=True).encode())
        for a in (self.centroids, self.codebook, self.rq_matrix):
            h.update(b"\0" if a is None else np.ascontiguousarray(a, dtype="<f4").tobytes())
        return h.hexdigest()

    def spec(self) -> dict[str, Any]:
        """The model's scalars, as the kernel reads them."""
        out: dict[str, Any] = {"index_type": self.index_type, "metric": self.metric, "dim": self.dimension}
        if self.index_type == "IVF_PQ":
            out.update(num_sub_vectors=self.num_sub_vectors, num_bits=self.num_bits or 8)
            if self.pq_dot_assignment:
                out["pq_dot_assignment"] = self.pq_dot_assignment
        elif self.index_type == "IVF_SQ":
            out.update(num_bits=self.num_bits or 8, sq_bounds=list(self.sq_bounds or ()))
        elif self.index_type == "IVF_RQ":
            out.update(
                num_bits=self.num_bits,
                rq_rotation=self.rq_rotation or "fast",
                rq_signs=list(self.rq_signs),
                rq_query_estimator=self.rq_query_estimator or "raw_query",
            )
        return out

    def export(self) -> tuple[str, list[CStructs]]:
        """The spec JSON with the arrays exported through the C Data
        Interface, and the structs (keep them alive until the call returns;
        the kernel releases them)."""
        spec = self.spec()
        keep: list[CStructs] = []
        arrays: dict[str, list[int]] = {}
        for name, a in (("centroids", self.centroids), ("codebook", self.codebook), ("rotation", self.rq_matrix)):
            if a is None:
                continue
            s = CStructs().export(as_matrix(a, name))
            keep.append(s)
            arrays[name] = s.pair()
        spec["arrays"] = arrays
        return json.dumps(spec), keep

    @classmethod
    def from_spec(cls, spec: dict[str, Any], arrays: dict[str, pa.Array], params: Sequence[tuple[str, Any]] = ()) -> "IndexModel":
        dim = int(spec["dim"])
        bounds = spec.get("sq_bounds")
        return cls(
            index_type=spec["index_type"],
            metric=spec["metric"],
            centroids=_to_numpy(arrays["centroids"], dim),
            num_sub_vectors=int(spec.get("num_sub_vectors") or 0),
            num_bits=int(spec.get("num_bits") or 0),
            codebook=_to_numpy(arrays["codebook"], dim) if "codebook" in arrays else None,
            sq_bounds=(float(bounds[0]), float(bounds[1])) if bounds else None,
            rq_rotation=str(spec.get("rq_rotation") or ""),
            rq_signs=bytes(spec.get("rq_signs") or []),
            rq_matrix=_to_numpy(arrays["rotation"], dim) if "rotation" in arrays else None,
            rq_query_estimator=str(spec.get("rq_query_estimator") or ""),
            pq_dot_assignment=str(spec.get("pq_dot_assignment") or ""),
            params=tuple(params),
        )

    @classmethod
    def from_arrays(
        cls,
        index_type: str,
        metric: str,
        centroids: Any,
        *,
        codebook: Any = None,
        num_sub_vectors: Optional[int] = None,
        num_bits: Optional[int] = None,
        sq_bounds: Optional[tuple[float, float]] = None,
        rabitq_model: Optional[str] = None,
        rq_rotation: str = "fast",
        rq_signs: bytes = b"",
        rq_matrix: Any = None,
        pq_dot_assignment: str = "",
    ) -> "IndexModel":
        """A model from arrays trained elsewhere: numpy arrays,
        ``pyarrow.FixedSizeListArray`` / ``FixedShapeTensorArray``, pylance
        ``IvfModel`` (centroids) and ``PqModel`` (codebook, with its
        num_subvectors and num_bits), and pylance's ``build_rq_model`` JSON
        for IVF_RQ."""
        t = normalize_index_type(index_type)
        c = as_matrix(centroids, "centroids")
        storage = getattr(c, "storage", c)
        dim = storage.type.list_size if pa.types.is_fixed_size_list(storage.type) else 0
        if hasattr(codebook, "num_subvectors"):
            num_sub_vectors = num_sub_vectors or int(codebook.num_subvectors)
            num_bits = num_bits or int(getattr(codebook, "num_bits", 8))
        if hasattr(centroids, "distance_type") and normalize_metric(centroids.distance_type) != normalize_metric(metric):
            raise InvalidInputError(f"the IvfModel was trained for {centroids.distance_type}, not {metric}")
        if rabitq_model is not None:
            rq = json.loads(rabitq_model)
            num_bits = num_bits or int(rq.get("num_bits") or 1)
            rq_rotation = str(rq.get("rotation_type") or "fast")
            rq_signs = bytes(rq.get("fast_rotation_signs") or [])
            if rq.get("rotate_mat") is not None:
                rq_matrix = np.asarray(rq["rotate_mat"], np.float32)
        return cls(
            index_type=t,
            metric=metric,
            centroids=_to_numpy(c, dim),
            num_sub_vectors=int(num_sub_vectors or 0),
            num_bits=int(num_bits or (8 if t in ("IVF_PQ", "IVF_SQ") else 0)),
            codebook=None if codebook is None else _to_numpy(as_matrix(codebook, "codebook", dim), dim),
            sq_bounds=sq_bounds,
            rq_rotation=rq_rotation if t == "IVF_RQ" else "",
            rq_signs=rq_signs,
            rq_matrix=None if rq_matrix is None else _to_numpy(as_matrix(rq_matrix, "rq_matrix", dim), dim),
            rq_query_estimator="raw_query" if t == "IVF_RQ" else "",
            pq_dot_assignment=pq_dot_assignment,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexModel) and other.content_hash == self.content_hash

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def __repr__(self) -> str:
        extra = ""
        if self.index_type == "IVF_PQ":
            extra = f", num_sub_vectors={self.num_sub_vectors}, num_bits={self.num_bits}"
        elif self.index_type in ("IVF_SQ", "IVF_RQ"):
            extra = f", num_bits={self.num_bits}"
        return (
            f"IndexModel({self.index_type}, metric={self.metric}, dimension={self.dimension}, "
            f"num_partitions={self.num_partitions}{extra}, hash={self.content_hash[:12]})"
        )
