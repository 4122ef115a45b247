"""arrownp converts numeric Arrow arrays to and from numpy exactly as pyarrow's own conversion does."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ragassay.metrics.arrownp import from_numpy, to_numpy

DTYPES = [np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_to_numpy_equals_pyarrow_on_sliced_and_chunked_arrays(dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(1000) * 100).astype(dtype)
    arr = pa.array(x)
    for a in (arr, arr.slice(13, 500), arr.slice(999), arr.slice(0, 0),
              pa.chunked_array([arr.slice(0, 7), arr.slice(7, 300), arr.slice(700)])):
        got = to_numpy(a)
        want = a.to_numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_to_numpy_unpacks_booleans_at_any_offset():
    rng = np.random.default_rng(5)
    x = rng.random(203) < 0.5
    arr = pa.array(x)
    for start in (0, 1, 5, 8, 13):
        a = arr.slice(start, 150)
        got = to_numpy(a)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, x[start : start + 150])
    np.testing.assert_array_equal(to_numpy(pc.greater(pa.array([1, 5, 2]), 2)), [False, True, False])


def test_null_entries_take_the_given_value_like_fill_null():
    a = pc.index_in(pa.array(["b", "x", "a", "y", "b"]), value_set=pa.array(["a", "b"]))
    assert a.null_count == 2
    np.testing.assert_array_equal(to_numpy(a, null=-1), a.fill_null(-1).to_numpy())
    np.testing.assert_array_equal(to_numpy(a.slice(1), null=-7), [-7, 0, -7, 1])
    # without a fill value an array with nulls goes through pyarrow, which gives NaN for floats
    f = pa.array([1.5, None, 2.0])
    np.testing.assert_array_equal(to_numpy(f), [1.5, np.nan, 2.0])


def test_to_numpy_of_one_chunk_is_a_zero_copy_view():
    arr = pa.array(np.arange(10, dtype=np.int64))
    got = to_numpy(pa.chunked_array([arr]))
    assert not got.flags.writeable
    assert got.ctypes.data == arr.buffers()[1].address


@pytest.mark.parametrize("dtype", DTYPES + [np.bool_])
def test_from_numpy_round_trips_and_equals_pa_array(dtype):
    x = np.arange(-20, 41).astype(dtype) if dtype is not np.bool_ else np.arange(61) % 3 == 0
    a = from_numpy(x)
    assert a.equals(pa.array(x))
    np.testing.assert_array_equal(to_numpy(a), x)
    strided = x[::3]  # not contiguous: copied first
    assert from_numpy(strided).equals(pa.array(strided))


def test_from_numpy_leaves_other_types_to_pyarrow():
    a = from_numpy(np.array(["q1", "q2"], dtype=object))
    assert a.type == pa.string() and a.to_pylist() == ["q1", "q2"]
