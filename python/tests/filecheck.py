"""Compare what the Go kernel reads from a Lance file with what pyarrow /
pylance hold, row by row."""

from __future__ import annotations

import base64
import json
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from lance_segmerge import _ffi


def go_inspect(path: str, start: int = 0, end: int = -1, columns: Optional[list[str]] = None) -> dict[str, Any]:
    return json.loads(_ffi.call("InspectFile", path, start, end, json.dumps(columns) if columns else ""))


def _bits(b64: Optional[str], n: int) -> Optional[np.ndarray]:
    if not b64:
        return None
    raw = np.frombuffer(base64.b64decode(b64), np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


def _np_dtype(t: pa.DataType) -> np.dtype:
    return np.dtype(t.to_pandas_dtype())


def rows_of_arrow(arr: pa.Array) -> list[Any]:
    """Canonical rows: None for null, else bytes of the value (a vector's
    bytes for fixed-size lists), or a list of such for lists."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    t = arr.type
    out: list[Any] = []
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offs = arr.offsets.to_numpy()
        items = rows_of_arrow(arr.values)
        for i in range(len(arr)):
            out.append(None if not arr[i].is_valid else items[offs[i] : offs[i + 1]])
        return out
    if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        return [None if v is None else (v.encode() if isinstance(v, str) else v) for v in arr.to_pylist()]
    if pa.types.is_fixed_size_list(t):
        flat = arr.values
        d = t.list_size
        item_valid = np.ones(len(flat), bool) if flat.null_count == 0 else ~np.asarray(flat.is_null())
        vals = np.asarray(flat.fill_null(0).to_numpy(zero_copy_only=False), dtype=_np_dtype(t.value_type))
        for i in range(len(arr)):
            if not arr[i].is_valid:
                out.append(None)
            else:
                v = vals[arr.offset * 0 + i * d : (i + 1) * d].tobytes()
                iv = tuple(item_valid[i * d : (i + 1) * d])
                out.append((v, iv) if not all(iv) else v)
        return out
    vals = np.asarray(arr.fill_null(_zero(t)).to_numpy(zero_copy_only=False), dtype=_np_dtype(t))
    valid = np.ones(len(arr), bool) if arr.null_count == 0 else ~np.asarray(arr.is_null())
    return [vals[i : i + 1].tobytes() if valid[i] else None for i in range(len(arr))]


def _width(type_str: str) -> int:
    prim = {"uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "halffloat": 2, "uint32": 4, "int32": 4,
            "float": 4, "uint64": 8, "int64": 8, "double": 8, "bool": 1}
    if type_str.startswith("fixed_size_list:"):
        _, elem, n = type_str.rsplit(":", 2)[0].split(":", 1)[0], type_str.split(":")[1], type_str.split(":")[-1]
        return prim[elem] * int(n)
    return prim[type_str]


def rows_of_go(col: dict[str, Any]) -> list[Any]:
    n = col["len"]
    t = col["type"]
    valid = _bits(col.get("validity"), n)
    if t in ("list", "large_list"):
        offs = col["offsets"]
        items = rows_of_go(col["items"])
        return [None if valid is not None and not valid[i] else items[offs[i] : offs[i + 1]] for i in range(n)]
    if t in ("binary", "string", "large_binary", "large_string"):
        raw = base64.b64decode(col.get("values") or "")
        offs = col["offsets"]
        return [None if valid is not None and not valid[i] else raw[offs[i] : offs[i + 1]] for i in range(n)]
    w = _width(t)
    vals = base64.b64decode(col.get("values") or "")
    assert len(vals) == n * w, (t, len(vals), n, w)
    out: list[Any] = []
    iv = None
    dim = 0
    if t.startswith("fixed_size_list:") and col.get("item_validity"):
        dim = int(t.split(":")[-1])
        iv = _bits(col["item_validity"], n * dim)
    for i in range(n):
        if valid is not None and not valid[i]:
            out.append(None)
            continue
        v = vals[i * w : (i + 1) * w]
        if iv is not None:
            ivt = tuple(bool(x) for x in iv[i * dim : (i + 1) * dim])
            if not all(ivt):
                # Null items may hold anything; compare with zeros like pyarrow's fill.
                ew = w // dim
                v = b"".join(v[k * ew : (k + 1) * ew] if ivt[k] else b"\0" * ew for k in range(dim))
                out.append((v, ivt))
                continue
        out.append(v)
    return out


def assert_same(arrow: pa.Array, go_col: dict[str, Any], label: str = "") -> None:
    a, g = rows_of_arrow(arrow), rows_of_go(go_col)
    assert len(a) == len(g), f"{label}: {len(a)} rows vs {len(g)}"
    for i, (x, y) in enumerate(zip(a, g)):
        assert x == y, f"{label}: row {i} differs: arrow {x!r:.120} go {y!r:.120}"


_LOGICAL = {
    pa.uint8(): "uint8", pa.int8(): "int8", pa.uint16(): "uint16", pa.int16(): "int16",
    pa.uint32(): "uint32", pa.int32(): "int32", pa.uint64(): "uint64", pa.int64(): "int64",
    pa.float16(): "halffloat", pa.float32(): "float", pa.float64(): "double", pa.bool_(): "bool",
}


def logical_type(t: pa.DataType) -> str:
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list:{_LOGICAL[t.value_type]}:{t.list_size}"
    if pa.types.is_list(t):
        return "list"
    for name, test in [("binary", pa.types.is_binary), ("string", pa.types.is_string),
                       ("large_binary", pa.types.is_large_binary), ("large_string", pa.types.is_large_string)]:
        if test(t):
            return name
    return _LOGICAL[t]


def _is_var(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)


def _zero(t: pa.DataType) -> Any:
    return False if pa.types.is_boolean(t) else 0


def _validity_bytes(arr: pa.Array) -> Optional[bytes]:
    if arr.null_count == 0:
        return None
    valid = ~np.asarray(arr.is_null())
    return np.packbits(valid, bitorder="little").tobytes()


def _fixed_values(arr: pa.Array) -> bytes:
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        flat = arr.flatten() if arr.null_count == 0 else pa.FixedSizeListArray.from_arrays(arr.values, t.list_size).flatten()
        # Null rows keep their (zero-filled) slots.
        vals = np.asarray(arr.values.fill_null(0).to_numpy(zero_copy_only=False), dtype=_np_dtype(t.value_type))
        del flat
        return vals[arr.offset * t.list_size : (arr.offset + len(arr)) * t.list_size].tobytes()
    return np.asarray(arr.fill_null(_zero(t)).to_numpy(zero_copy_only=False), dtype=_np_dtype(t)).tobytes()


def go_write(
    path: str,
    tbl: pa.Table,
    version: str,
    *,
    tmp: str,
    metadata: Optional[dict[str, str]] = None,
    global_buffers: Optional[list[bytes]] = None,
    max_page_bytes: int = 0,
    batch_rows: int = 0,
) -> None:
    """Write tbl with the Go kernel's writer."""
    import os

    cols = []
    for i, name in enumerate(tbl.column_names):
        arr = tbl[name].combine_chunks()
        field = tbl.schema.field(name)
        spec: dict[str, Any] = {"name": name, "type": logical_type(arr.type), "nullable": field.nullable, "len": len(arr)}

        def dump(suffix: str, data: Optional[bytes]) -> str:
            if data is None:
                return ""
            p = os.path.join(tmp, f"{i}-{suffix}.bin")
            with open(p, "wb") as f:
                f.write(data)
            return p

        spec["validity_path"] = dump("validity", _validity_bytes(arr))
        if pa.types.is_list(arr.type):
            spec["item_type"] = logical_type(arr.type.value_type)
            spec["item_nullable"] = arr.type.value_field.nullable
            offs = arr.offsets.to_numpy().astype(np.int64)
            items = arr.values.slice(offs[0], offs[-1] - offs[0]) if len(arr) else arr.values.slice(0, 0)
            spec["offsets_path"] = dump("offsets", (offs - offs[0]).tobytes())
            spec["values_path"] = dump("values", _fixed_values(items))
            spec["item_validity_path"] = dump("item_validity", _validity_bytes(items))
        elif _is_var(arr.type):
            wide = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
            offs = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
            spec["offsets_path"] = dump("offsets", (offs - offs[0]).tobytes())
            data = arr.buffers()[2]
            spec["values_path"] = dump("values", data.to_pybytes()[offs[0] : offs[-1]] if data is not None and len(arr) else b"")
        else:
            spec["values_path"] = dump("values", _fixed_values(arr))
        cols.append(spec)
    import base64

    _ffi.call(
        "WriteTestFile",
        path,
        json.dumps(
            {
                "version": version,
                "max_page_bytes": max_page_bytes,
                "batch_rows": batch_rows,
                "metadata": metadata or {},
                "global_buffers": [base64.b64encode(b).decode() for b in (global_buffers or [])],
                "columns": cols,
            }
        ),
    )
