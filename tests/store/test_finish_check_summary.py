"""The run summaries of ``ragassay.api.Run`` and the demo read a stored run one metric at a time
(``stored_run_summary``); they must equal ``run_summary`` of the whole results table."""

from __future__ import annotations

import json

import numpy as np

from ragassay.analysis.summary import run_summary, stored_run_summary
from ragassay.api import Run
from ragassay.store import RunRecord, Store


def _random_run(store: Store, seed: int) -> str:
    rng = np.random.default_rng(seed)
    run = store.create_run(RunRecord(name=f"r{seed}", trials=2))
    n = 300
    qids = [f"q{rng.integers(0, 120):04d}" for _ in range(n)]
    keys = sorted({(q, int(t)) for q, t in zip(qids, rng.integers(0, 2, n), strict=True)})
    rows: dict[str, list] = {k: [] for k in ("query_id", "trial", "metric", "value", "stratum",
                                             "latency_ms", "judged_fraction")}
    for q, t in keys:
        lat = None if rng.random() < 0.2 else float(rng.gamma(2.0, 50.0))
        jf = None if rng.random() < 0.3 else float(rng.random())
        # every row names a stratum: run_summary does not take null strata
        stratum = f"s{int(q[1:]) % seed}"
        for m in ("recall@10", "ndcg@10", "faithfulness", "answer_f1"):
            if rng.random() < 0.15:
                continue
            rows["query_id"].append(q)
            rows["trial"].append(t)
            rows["metric"].append(m)
            rows["value"].append(float("nan") if rng.random() < 0.1 else float(rng.random()))
            rows["stratum"].append(stratum)
            rows["latency_ms"].append(lat)
            rows["judged_fraction"].append(jf)
    store.write_batch(run, rows)
    store.finish_run(run)
    return run


def _same(a: dict, b: dict) -> bool:
    # json spells NaN the same way on both sides, so undefined means compare equal
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_api_run_summary_equals_run_summary_of_the_whole_table(tmp_path):
    path = tmp_path / "s.duckdb"
    with Store.open(path) as store:
        runs = [_random_run(store, seed) for seed in (1, 2, 3)]
        expected = {r: run_summary(store.results(r)) for r in runs}
        records = {r: store.get_run(r) for r in runs}
    for r in runs:
        got = Run(records[r], store=path).summary()
        assert _same(got, expected[r])
        assert got["n_rows"] > 0 and got["metrics"] and got["latency_ms"]["n"] > 0
        with Store.open(path, read_only=True) as st:
            assert _same(stored_run_summary(st, r), expected[r])
    # the metric means a notebook reads come from the same summary
    m = expected[runs[0]]["metrics"][0]
    assert Run(records[runs[0]], store=path).metric(m["metric"]) == m["mean"]
