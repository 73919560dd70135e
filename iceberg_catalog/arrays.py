"""Arrow arrays built from numpy buffers without `pa.array`.

`pa.array` and `pa.scalar` import pandas on their first call when it is installed (pyarrow checks every input
for pandas types): ~0.25 s that a training process would pay before its first batch for nothing. These build
the same arrays from raw buffers; they take only what they can build exactly (fixed-width numbers, booleans,
strings) and are checked against `pa.array` in tests/iceberg_catalog/test_arrays.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMERIC = {
    pa.int8(): "<i1",
    pa.int16(): "<i2",
    pa.int32(): "<i4",
    pa.int64(): "<i8",
    pa.uint8(): "<u1",
    pa.uint16(): "<u2",
    pa.uint32(): "<u4",
    pa.uint64(): "<u8",
    pa.float32(): "<f4",
    pa.float64(): "<f8",
}


def numeric(values, type_: pa.DataType) -> pa.Array:
    """`pa.array(values, type_)` for a fixed-width numeric type, no nulls (values are converted like numpy's
    `astype`: give values that fit)."""
    dtype = _NUMERIC.get(type_)
    if dtype is None:
        raise TypeError(f"numeric() builds {sorted(map(str, _NUMERIC))}, got {type_}")
    data = np.ascontiguousarray(np.asarray(values).astype(dtype, copy=False)).reshape(-1)
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def mask(values) -> pa.BooleanArray:
    """`pa.array(values, pa.bool_())` for booleans without nulls."""
    data = np.asarray(values, dtype=bool).reshape(-1)
    return pa.Array.from_buffers(pa.bool_(), len(data), [None, pa.py_buffer(np.packbits(data, bitorder="little"))])


def string_scalar(text: str, type_: pa.DataType = pa.large_string()) -> pa.Scalar:
    """`pa.scalar(text, type_)` for a string or large_string."""
    if type_ not in (pa.string(), pa.large_string()):
        raise TypeError(f"string_scalar() builds string or large_string, got {type_}")
    raw = text.encode()
    offsets = np.array([0, len(raw)], dtype="<i8" if type_ == pa.large_string() else "<i4")
    return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])[0]


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """`column.to_numpy()` for a fixed-width numeric column without nulls, read from its buffers (one copy
    when there are several chunks, none for one)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = _NUMERIC.get(column.type)
    if dtype is None:
        raise TypeError(f"to_numpy() reads {sorted(map(str, _NUMERIC))}, got {column.type}")
    if column.null_count:
        raise ValueError(f"to_numpy() reads columns without nulls; this one has {column.null_count}")
    item = np.dtype(dtype).itemsize
    parts = [np.frombuffer(c.buffers()[1], dtype=dtype, count=len(c), offset=c.offset * item) for c in chunks if len(c)]
    if not parts:
        return np.empty(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
