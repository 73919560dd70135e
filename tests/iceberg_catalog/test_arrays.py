"""iceberg_catalog.arrays builds the same arrays as pyarrow's converters, without importing pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from iceberg_catalog import arrays

NUMERIC = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(), pa.float64()]


@pytest.mark.parametrize("type_", NUMERIC, ids=str)
def test_numeric_and_to_numpy_match_pyarrow(type_):
    values = np.arange(-3, 40) if pa.types.is_signed_integer(type_) or pa.types.is_floating(type_) else np.arange(43)
    built = arrays.numeric(values, type_)
    assert built.equals(pa.array(values, type_))
    chunked = pa.chunked_array([built.slice(0, 5), built.slice(7, 11), built.slice(20)])  # offsets into buffers
    got = arrays.to_numpy(chunked)
    assert got.dtype == chunked.to_numpy().dtype and np.array_equal(got, chunked.to_numpy())
    assert np.array_equal(arrays.to_numpy(built.slice(3, 4)), built.slice(3, 4).to_numpy())
    assert arrays.to_numpy(pa.chunked_array([], type_)).size == 0


def test_mask_and_string_scalar_match_pyarrow():
    for n in (0, 1, 7, 8, 9, 64, 1000):
        values = (np.arange(n) * 7919) % 3 == 0
        assert arrays.mask(values).equals(pa.array(values, pa.bool_()))
    table = pa.table({"x": pa.array(range(10))})
    assert table.filter(arrays.mask(np.arange(10) % 2 == 0)).column("x").to_pylist() == [0, 2, 4, 6, 8]
    for text in ("", "\t", "\n", "naïve — ok"):
        assert arrays.string_scalar(text).equals(pa.scalar(text, pa.large_string()))
        assert arrays.string_scalar(text, pa.string()).equals(pa.scalar(text, pa.string()))


def test_what_it_cannot_build_exactly_is_refused_by_name():
    with pytest.raises(TypeError, match="large_string"):
        arrays.numeric([1], pa.large_string())
    with pytest.raises(ValueError, match="nulls"):
        arrays.to_numpy(pa.array([1, None], pa.int64()))
    with pytest.raises(TypeError, match="binary"):
        arrays.string_scalar("x", pa.binary())


def test_none_of_them_imports_pandas():
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from iceberg_catalog import arrays\n"
        "a = arrays.numeric(np.arange(5), pa.int32())\n"
        "assert arrays.to_numpy(pa.chunked_array([a, a])).sum() == 20\n"
        "arrays.mask([True, False]); arrays.string_scalar('x')\n"
        "assert 'pandas' not in sys.modules\n"
        "pa.array([1])\n"
        "assert 'pandas' in sys.modules, 'pa.array no longer imports pandas: iceberg_catalog.arrays can go'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
