"""Arrow C Data Interface plumbing: the structs a pyarrow array is exported
into (or imported from) when it crosses into the Go kernel.

The kernel receives the addresses of an ``ArrowArray`` / ``ArrowSchema``
pair, validates the structs, and imports them without copying float32
buffers; it releases them when it is done, which hands the buffers back to
pyarrow.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pyarrow as pa

# sizeof(struct ArrowSchema) and sizeof(struct ArrowArray) on 64-bit
# platforms (a stable ABI).
_SCHEMA_BYTES = 72
_ARRAY_BYTES = 80


class CStructs:
    """An ArrowArray and an ArrowSchema in memory this object owns."""

    def __init__(self) -> None:
        self._array = ctypes.create_string_buffer(_ARRAY_BYTES)
        self._schema = ctypes.create_string_buffer(_SCHEMA_BYTES)

    @property
    def array_ptr(self) -> int:
        return ctypes.addressof(self._array)

    @property
    def schema_ptr(self) -> int:
        return ctypes.addressof(self._schema)

    def pair(self) -> list[int]:
        return [self.array_ptr, self.schema_ptr]

    def export(self, arr: pa.Array) -> "CStructs":
        """Export ``arr`` into the structs (the consumer must release them)."""
        arr._export_to_c(self.array_ptr, self.schema_ptr)
        return self

    def released(self) -> bool:
        """Whether the consumer released the structs (or nothing was
        exported): the ``release`` callback pointers are NULL."""
        arr_release = ctypes.c_void_p.from_buffer(self._array, 64).value
        sch_release = ctypes.c_void_p.from_buffer(self._schema, 56).value
        return not arr_release and not sch_release

    def import_array(self) -> Any:
        """Import what a producer exported into the structs."""
        return pa.Array._import_from_c(self.array_ptr, self.schema_ptr)
