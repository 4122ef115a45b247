"""A stored run from per-query arrays, for the analyses' tests."""

import numpy as np

from ragassay.store import RunRecord, Store


def make_run(store: Store, name: str, values: dict[str, np.ndarray], *, strata=None, config=None, trials=1,
             latency=None, extra=None, qids=None, **pins) -> str:
    """One row per (query, trial, metric); arrays have n_queries * trials entries, query-major. ``pins``
    override the run record's fields (dataset_version, judge_model, created_at, ...)."""
    total = len(next(iter(values.values())))
    n = total // trials
    record = {"dataset_version": "ds@1", "corpus_digest": "sha256:c", "metric_version": "ragassay-metrics-1",
              "hit_rule": "any_overlap", "gain": "exp", "relevance_threshold": 2, "ties": "given", **pins}
    run_id = store.create_run(RunRecord(name=name, config=config or {"name": name}, trials=trials, n_queries=n,
                                        extra=extra or {}, **record))
    qids = list(qids) if qids is not None else [f"q{i:03d}" for i in range(n)]
    strata = list(strata) if strata is not None else ["s1" if i % 2 else "s2" for i in range(n)]
    keys = [(qids[i], t) for i in range(n) for t in range(trials)]
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": [], "latency_ms": []}
    for m, v in values.items():
        cols["query_id"] += [q for q, _ in keys]
        cols["trial"] += [t for _, t in keys]
        cols["metric"] += [m] * total
        cols["value"] += [float(x) for x in v]
        cols["stratum"] += [strata[i] for i in range(n) for _ in range(trials)]
        cols["latency_ms"] += list(latency) if latency is not None else [None] * total
    store.write_batch(run_id, cols, done=[(q, t, "done", None) for q, t in keys])
    store.finish_run(run_id)
    return run_id
