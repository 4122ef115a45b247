"""Store.results with a column list and in storage order: the same rows as the full sorted read."""

import numpy as np
import pytest

from ragassay.errors import InputError
from ragassay.store import RunRecord, Store


@pytest.fixture
def store_and_run(tmp_path):
    rng = np.random.default_rng(11)
    with Store.open(tmp_path / "r.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        for b in range(4):  # written out of key order: queries descending batch by batch, metrics shuffled
            q = [f"q{i:03d}" for i in range(40 - 10 * b - 1, 30 - 10 * b - 1, -1)]
            metrics = list(rng.permutation(["rr", "ap", "ndcg@10"]))
            store.write_batch(run, {"query_id": [x for x in q for _ in metrics], "metric": metrics * len(q),
                                    "value": rng.random(len(q) * 3).tolist(), "latency_ms": [5.0] * len(q) * 3})
        yield store, run


def test_a_column_list_in_storage_order_holds_the_same_rows(store_and_run):
    store, run = store_and_run
    full = store.results(run)
    assert full.column_names[:4] == ["run_id", "query_id", "trial", "metric"] and full.num_rows == 120
    keys = list(zip(full["query_id"].to_pylist(), full["trial"].to_pylist(), full["metric"].to_pylist(),
                    strict=True))
    assert keys == sorted(keys)
    part = store.results(run, columns=["metric", "value", "query_id"], ordered=False)
    assert part.column_names == ["metric", "value", "query_id"]
    assert sorted(zip(part["query_id"].to_pylist(), part["metric"].to_pylist(), part["value"].to_pylist(),
                      strict=True)) == sorted(zip(full["query_id"].to_pylist(), full["metric"].to_pylist(),
                                                  full["value"].to_pylist(), strict=True))
    assert store.results(run, ["rr"], columns=["query_id"]).column("query_id").to_pylist() == \
        [f"q{i:03d}" for i in range(40)]


@pytest.mark.parametrize("columns", [[], ["value", "value"], ["score"]])
def test_bad_column_lists_are_refused(store_and_run, columns):
    store, run = store_and_run
    with pytest.raises(InputError, match="give distinct names among"):
        store.results(run, columns=columns)
