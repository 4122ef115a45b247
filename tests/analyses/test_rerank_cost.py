"""`ragassay analyze rerank-cost`: quality per millisecond (spec §9.4) on hand-made stored runs — Δ and added
p95 against independent numpy computations, the Pareto set worked by hand, batched runs "not measured",
mismatched golden versions refused as compare refuses them."""

import json

import numpy as np
import pytest
from scipy import stats as sps

from ragassay.analysis.compare import compare_runs
from ragassay.analysis.rerank_cost import added_p95, pareto_set, rerank_cost
from ragassay.cli.app import main
from ragassay.errors import InputError, PinMismatchError
from ragassay.report.include import load_include, section_view
from ragassay.store import RunRecord, Store

N = 40
BASE_NDCG = 0.2 + 0.5 * (np.arange(N) % 7) / 6          # values in [0.2, 0.7], so shifts stay in [0, 1]
BASE_LAT = np.arange(1, N + 1, dtype=float)              # 1..40 ms: p95 (inverted_cdf) is the 38th, 38 ms


def _run(store, name, ndcg, latency=None, cost=None, extra=None, **pins) -> str:
    """One stored run: an ndcg@final_k row per query with its request latency and cost (None = not stored)."""
    record = {"dataset_version": "ds@1", "corpus_digest": "sha256:c", "metric_version": "ragassay-metrics-1",
              "hit_rule": "any_overlap", "gain": "exp", "relevance_threshold": 2, "ties": "given", **pins}
    run_id = store.create_run(RunRecord(name=name, config={"name": name, "fusion": {"depth": 50}},
                                        trials=1, n_queries=N, extra=extra or {}, **record))
    qids = [f"q{i:03d}" for i in range(N)]
    none = [None] * N
    store.write_batch(run_id, {
        "query_id": qids, "trial": [0] * N, "metric": ["ndcg@final_k"] * N, "value": [float(v) for v in ndcg],
        "stratum": ["s"] * N, "latency_ms": none if latency is None else [float(x) for x in latency],
        "cost": none if cost is None else [float(x) for x in cost]}, done=[(q, 0, "done", None) for q in qids])
    store.finish_run(run_id)
    return run_id


@pytest.fixture
def db(tmp_path):
    """baseline (0, 0) and four candidates at (Δ, added p95 ms): A (+0.10, +10), B (+0.05, +20),
    C (+0.20, +40), D (−0.05, +5); batched: no per-request latency."""
    path = tmp_path / "rc.duckdb"
    with Store.open(path) as st:
        _run(st, "base", BASE_NDCG, BASE_LAT, cost=np.full(N, 0.002))
        for name, dq, dl in (("A", 0.10, 10), ("B", 0.05, 20), ("C", 0.20, 40), ("D", -0.05, 5)):
            _run(st, name, BASE_NDCG + dq, BASE_LAT + dl, cost=np.full(N, 0.003) if name == "A" else None)
        _run(st, "batched", BASE_NDCG + 0.3, None, extra={"latency": "not measured (batched)"})
        _run(st, "other_golden", BASE_NDCG, BASE_LAT, dataset_version="ds@2")
    return path


def _cli(args, capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _rows(res) -> dict:
    return {r["name"]: r for r in res["rows"]}


def test_delta_added_p95_per_100ms_and_cost_match_independent_computation(db):
    with Store.open(db, read_only=True) as st:
        res = rerank_cost(st, ["base", "A", "B", "C", "D"], n_resamples=500)
        cmp_a = compare_runs(st, "base", "A", metrics=["ndcg@final_k"], strata=False, n_resamples=500
                             ).overall("ndcg@final_k")
    rows = _rows(res)
    base_p95 = float(np.percentile(BASE_LAT, 95, method="inverted_cdf"))
    assert base_p95 == 38.0 and rows["base"]["latency"]["p95_ms"] == 38.0
    assert rows["base"]["quality"]["value"] == pytest.approx(BASE_NDCG.mean())
    for name, dq, dl in (("A", 0.10, 10), ("B", 0.05, 20), ("C", 0.20, 40), ("D", -0.05, 5)):
        r = rows[name]
        assert r["delta"]["value"] == pytest.approx(np.mean((BASE_NDCG + dq) - BASE_NDCG))
        assert r["quality"]["value"] == pytest.approx(np.mean(BASE_NDCG + dq))
        lat = r["latency"]
        assert lat["added_p95_ms"] == pytest.approx(np.percentile(BASE_LAT + dl, 95, method="inverted_cdf") - base_p95)
        # a constant shift moves every resample's p95 by exactly dl: the interval collapses onto it
        assert lat["ci_low"] == pytest.approx(dl) and lat["ci_high"] == pytest.approx(dl) and lat["n"] == N
        assert r["delta_per_100ms"] == pytest.approx(100 * dq / dl)
    # the Δ interval is compare's paired bootstrap, unchanged
    assert (rows["A"]["delta"]["ci_low"], rows["A"]["delta"]["ci_high"]) == pytest.approx((cmp_a.ci_low, cmp_a.ci_high))
    # $/1k queries = 1000 x mean stored cost per request; a run that stored none is undefined, never 0
    assert rows["base"]["cost"]["per_1k_queries"] == pytest.approx(2.0)
    assert rows["A"]["cost"]["per_1k_queries"] == pytest.approx(3.0)
    assert rows["B"]["cost"] == {"per_1k_queries": None, "n": N, "n_missing": N}


def test_pareto_set_worked_by_hand(db):
    # (Δ, ms): base (0, 0), A (.10, 10), B (.05, 20) dominated by A, C (.20, 40), D (−.05, 5) dominated by base
    with Store.open(db, read_only=True) as st:
        res = rerank_cost(st, ["base", "A", "B", "C", "D"], n_resamples=200)
    assert {r["name"]: r["pareto"] for r in res["rows"]} == {"base": True, "A": True, "B": False, "C": True,
                                                             "D": False}
    assert res["pareto"] == ["base", "A", "C"]


def test_pareto_ties_do_not_dominate_and_undefined_points_are_not_placed():
    assert pareto_set([0.1, 0.1, 0.0], [5.0, 5.0, 5.0]) == [True, True, False]
    assert pareto_set([0.0, 0.3, None], [0.0, None, 1.0]) == [True, None, None]
    # lower-is-better quality: the smaller value wins
    assert pareto_set([0.2, 0.1], [1.0, 1.0], higher=False) == [False, True]


def test_added_p95_interval_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(3)
    base = rng.gamma(2.0, 10.0, size=(60, 1))
    cand = base + rng.gamma(2.0, 15.0, size=(60, 1))
    res = added_p95(base, cand, n_resamples=20_000, seed=1, confidence=0.9)

    def stat(b, c, axis=-1):
        return (np.percentile(c, 95, method="inverted_cdf", axis=axis)
                - np.percentile(b, 95, method="inverted_cdf", axis=axis))

    ref = sps.bootstrap((base[:, 0], cand[:, 0]), stat, paired=True, vectorized=True, n_resamples=20_000,
                        confidence_level=0.9, method="percentile", random_state=7).confidence_interval
    assert res["added_p95_ms"] == pytest.approx(stat(base[:, 0], cand[:, 0]))
    spread = float(np.ptp(cand - base))
    assert res["ci_low"] == pytest.approx(ref.low, abs=0.05 * spread)
    assert res["ci_high"] == pytest.approx(ref.high, abs=0.05 * spread)


def test_batched_run_latency_is_not_measured_never_zero(db, capsys, monkeypatch):
    with Store.open(db, read_only=True) as st:
        row = _rows(rerank_cost(st, ["base", "A", "batched"], n_resamples=200))["batched"]
    assert row["latency"]["status"] == "not measured" and "--batched" in row["latency"]["reason"]
    assert row["latency"]["added_p95_ms"] is None and row["delta_per_100ms"] is None and row["pareto"] is None
    assert row["delta"]["value"] == pytest.approx(0.3)
    code, out, _ = _cli(["analyze", "rerank-cost", "base", "A", "batched", "--store", str(db), "--resamples", "200"],
                        capsys, monkeypatch)
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("batched"))
    assert "not measured" in line and "not placed" in line
    assert "not placed on the Pareto set (quality or latency undefined): batched" in out


def test_batched_baseline_leaves_every_added_latency_undefined(db):
    with Store.open(db, read_only=True) as st:
        res = rerank_cost(st, ["batched", "A"], n_resamples=200)
    assert [r["latency"]["added_p95_ms"] for r in res["rows"]] == [None, None]
    assert res["pareto"] == []


def test_mismatched_golden_versions_are_refused_as_compare_refuses_them(db, capsys, monkeypatch):
    with Store.open(db, read_only=True) as st, pytest.raises(PinMismatchError, match="dataset_version"):
        rerank_cost(st, ["base", "A", "other_golden"], n_resamples=200)
    code, out, err = _cli(["analyze", "rerank-cost", "base", "other_golden", "--store", str(db)], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert "error:   dataset_version: ds@1 (base) vs ds@2 (other_golden)" in err
    code, out, _ = _cli(["analyze", "rerank-cost", "base", "other_golden", "--store", str(db), "--json",
                         "--rebaseline", "--resamples", "200"], capsys, monkeypatch)
    res = json.loads(out)
    assert code == 0 and res["rebaselined"] is True
    assert res["pin_differences"] == [{"pin": "dataset_version", "run_a": "base", "a": "ds@1",
                                       "run_b": "other_golden", "b": "ds@2"}]


def test_bad_input_is_refused_with_one_line_each(db, capsys, monkeypatch):
    code, _, err = _cli(["analyze", "rerank-cost", "base", "A", "--store", str(db), "--resamples", "5",
                         "--seed", "-1"], capsys, monkeypatch)
    assert code == 2 and err.count("error:") == 2 and "--resamples" in err and "--seed" in err
    code, _, err = _cli(["analyze", "rerank-cost", "base", "A", "--store", str(db), "-m", "recall@5"],
                        capsys, monkeypatch)
    assert code == 2 and "recall@5" in err and "missing from one of the runs" in err
    with Store.open(db, read_only=True) as st:
        with pytest.raises(InputError, match="at least one candidate"):
            rerank_cost(st, ["base"])
        with pytest.raises(InputError, match="more than once"):
            rerank_cost(st, ["base", "A", "A"])


def test_json_output_and_report_include(db, tmp_path, capsys, monkeypatch):
    code, out, _ = _cli(["analyze", "rerank-cost", "base", "A", "batched", "--store", str(db), "--json",
                         "--resamples", "200"], capsys, monkeypatch)
    assert code == 0
    saved = tmp_path / "rc.json"
    saved.write_text(out)
    res = json.loads(out)
    assert res["kind"] == "rerank-cost" and res["metric"] == "ndcg@final_k" and res["rebaselined"] is False
    sec = load_include(saved)
    assert sec["kind"] == "analyze rerank-cost" and sec["notes"][0] == "Pareto set: base, A"
    view = section_view(sec, 0)
    rows = {r[0]["text"]: [c["text"] for c in r] for r in view["tables"][0]["rows"]}
    cols = view["tables"][0]["columns"]
    assert rows["batched"][cols.index("added p95 ms")] == "not measured"
    assert rows["batched"][cols.index("Pareto")] == "not placed"
    assert rows["A"][cols.index("added p95 ms")] == "10.000" and rows["A"][cols.index("Pareto")] == "yes"


def test_trials_of_a_query_count_as_requests_and_untimed_ones_are_left_out(store):
    from tests.analyses._runs import make_run

    # 10 queries x 3 trials; the candidate's request (q000, 0) has no latency: left out of both runs' p95
    lat = np.arange(1, 31, dtype=float)
    cand = lat * 3
    cand_rows = [None, *cand[1:]]
    make_run(store, "a", {"ndcg@final_k": np.full(30, 0.5)}, trials=3, latency=lat)
    make_run(store, "b", {"ndcg@final_k": np.full(30, 0.6)}, trials=3, latency=cand_rows)
    row = _rows(rerank_cost(store, ["a", "b"], n_resamples=200))["b"]
    kept = np.arange(1, 30)
    expect = (np.percentile(cand[kept], 95, method="inverted_cdf") - np.percentile(lat[kept], 95, method="inverted_cdf"))
    assert row["latency"]["added_p95_ms"] == pytest.approx(expect)
    assert row["latency"]["n"] == 29 and row["latency"]["n_untimed"] == 1 and row["latency"]["n_queries"] == 10
    assert row["latency"]["ci_low"] <= expect <= row["latency"]["ci_high"]
    assert row["delta_per_100ms"] == pytest.approx(100 * 0.1 / expect)


def test_faster_config_has_no_per_100ms_and_final_k_mismatch_is_refused(store):
    _run(store, "slow", BASE_NDCG, BASE_LAT + 50)
    _run(store, "fast", BASE_NDCG - 0.1, BASE_LAT)
    _run(store, "k5", BASE_NDCG, BASE_LAT, extra={"final_k": 5})
    row = _rows(rerank_cost(store, ["slow", "fast"], n_resamples=200))["fast"]
    assert row["latency"]["added_p95_ms"] == pytest.approx(-50) and row["delta_per_100ms"] is None
    with pytest.raises(InputError, match="final_k differs: 10 .* vs 5"):
        rerank_cost(store, ["slow", "k5"], n_resamples=200)
