import numpy as np
import pytest

from ragassay.store import RunRecord, Store


def make_run(store: Store, name: str, values: dict[str, np.ndarray], *, strata=None, config=None,
             dataset_version="ds@1", corpus_digest="sha256:c", metric_version="ragassay-metrics-1",
             latency=None, cost=None, extra=None, trials=1) -> str:
    """A stored run with the given per-query values (one array per metric, all the same length)."""
    n = len(next(iter(values.values())))
    run_id = store.create_run(RunRecord(
        name=name, dataset_version=dataset_version, corpus_digest=corpus_digest, metric_version=metric_version,
        config=config or {"name": name}, hit_rule="any_overlap", gain="exp", relevance_threshold=2,
        ties="given", trials=trials, n_queries=n, extra=extra or {}))
    qids = [f"q{i:03d}" for i in range(n)]
    strata = strata or ["s1" if i % 2 else "s2" for i in range(n)]
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": [], "latency_ms": [], "cost": []}
    for m, v in values.items():
        cols["query_id"] += qids
        cols["trial"] += [0] * n
        cols["metric"] += [m] * n
        cols["value"] += [float(x) for x in v]
        cols["stratum"] += list(strata)
        cols["latency_ms"] += list(latency if latency is not None else [10.0] * n)
        cols["cost"] += list(cost if cost is not None else [None] * n)
    store.write_batch(run_id, cols, done=[(q, 0, "done", None) for q in qids])
    store.finish_run(run_id)
    return run_id


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as st:
        yield st
