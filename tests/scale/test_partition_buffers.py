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
