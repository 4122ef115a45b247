"""The dataset driver keeps its own copy of each partition's keys: a table fetched from the Ray object store
shares the partition's buffers, and holding it would pin the whole partition (its rows too) for the run."""

import pyarrow as pa

from ragassay.analysis.partitions import _owned


def _addresses(t: pa.Table) -> set[int]:
    return {b.address for col in t.columns for chunk in col.chunks for b in chunk.buffers() if b is not None}


def test_owned_copies_every_buffer_and_keeps_the_values():
    t = pa.table({"query_id": pa.array(["q1", "q2", None, "q3"]), "trial": pa.array([0, 1, 2, 3], pa.int64()),
                  "line": pa.array([10, 11, 12, 13], pa.int64())})
    own = _owned(t)
    assert own.equals(t)
    assert not (_addresses(own) & _addresses(t))
    assert _owned(t.slice(0, 0)).num_rows == 0


def test_packed_rows_come_back_in_slices_equal_to_the_table():
    import numpy as np

    from ragassay.analysis import partitions

    n = 2 * partitions.WRITE_ROWS + 5
    t = pa.table({"query_id": pa.array([f"q{i % 997}" for i in range(n)]),
                  "value": pa.array(np.where(np.arange(n) % 7 == 0, np.nan, np.arange(n) / n))})
    blob = partitions.pack_rows(t)
    batches = list(partitions.unpack_rows(blob))
    assert [b.num_rows for b in batches] == [partitions.WRITE_ROWS, partitions.WRITE_ROWS, 5]
    back = pa.Table.from_batches(batches)
    assert back.column("query_id").to_pylist() == t.column("query_id").to_pylist()
    assert np.array_equal(back.column("value").to_numpy(), t.column("value").to_numpy(), equal_nan=True)
    assert len(blob) < t.nbytes * 0.75  # compressed (repeated ids; the doubles barely shrink)
    empty = list(partitions.unpack_rows(partitions.pack_rows(t.slice(0, 0))))
    assert len(empty) == 1 and empty[0].num_rows == 0 and empty[0].schema == t.schema
