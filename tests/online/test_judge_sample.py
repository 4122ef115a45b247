"""Judge-on-sample: the stratified draw, the weighted (Hájek) estimate and its linearized interval on simulated
traffic, the validated-and-pinned judge check, resumable verdicts, and the spend cap against the fake provider."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.judges.fake_provider import FakeProvider

from ragassay.errors import InputError
from ragassay.judges.config import judge_settings, load_judge_config
from ragassay.judges.metrics import RUBRICS
from ragassay.online.judge import (
    draw_sample,
    judged_rows,
    parse_oversample,
    parse_rate,
    run_online_judge,
    weighted_rate,
)
from ragassay.online.store import RECORD_SCHEMA
from ragassay.store import Store

DAY0 = datetime(2026, 11, 30, 9, tzinfo=UTC)


def write_records(store, rows):
    """Production records in the ingest layout: <S>.online/records/date=YYYY-MM-DD/part-00000.parquet."""
    by_day: dict[str, list[dict]] = {}
    for r in rows:
        full = {name: r.get(name) for name in RECORD_SCHEMA.names}
        by_day.setdefault(r["ts"].strftime("%Y-%m-%d"), []).append(full)
    for day, day_rows in by_day.items():
        folder = store.parent / f"{store.name}.online" / "records" / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(day_rows, schema=RECORD_SCHEMA), folder / "part-00000.parquet")


def traffic(n_days=2, per_day=60, strata=("billing", "shipping"), fail_every=5):
    """Requests: every ``fail_every``-th thumbs-down; failures answer off the context (unfaithful)."""
    rows = []
    for d in range(n_days):
        for i in range(per_day):
            fail = i % fail_every == 0
            ctx = f"Ticket {d}-{i}. The refund window is 30 days. Shipping takes 5 days."
            rows.append({"request_id": f"r{d}-{i:03d}", "ts": DAY0 + timedelta(days=d, minutes=i),
                         "release": "v1", "stratum": strata[i % len(strata)], "question": f"question {i}?",
                         "answer": "The moon is made of cheese." if fail else "The refund window is 30 days.",
                         "outcome": "answered", "context": ctx, "thumbs": -1 if fail else None,
                         "n_retrieved": 3})
    return rows


LOCAL = {"provider": "local", "model": "lexical", "metrics": ["faithfulness"]}


def judge_file(tmp_path, cfg, name="judge.yaml"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def validated(store_path, cfg, kinds=(("support", "binary"),)):
    """Store a validation record that meets the default floor for the judge's pins (as test_compare_gate does)."""
    pins = cfg.pins()
    ci = {"value": 0.85, "ci_low": 0.75, "ci_high": 0.92, "defined": True}
    with Store.open(store_path) as st:
        for kind, scale in kinds:
            st.record_judge_validation({
                "judge_model": pins["judge_model"], "rubric_sha": pins["rubric_sha"], "prompt_sha": pins["prompt_sha"],
                "judge_settings": judge_settings(pins), "kind": kind, "scale": scale, "label_set_version": "ab" * 32,
                "labelled_by": "human", "n_items": 150, "n": 150, "kappa": 0.85, "kappa_low": 0.75,
                "kappa_high": 0.92, "min_class_recall": 0.8,
                "figures": {"scale": scale, "kappa": ci, "per_class": [
                    {"label": c, "support": 50, "recall": {"value": 0.85, "ci_low": 0.7, "ci_high": 0.95}}
                    for c in ("a", "b", "c")]}})


# ---------------------------------------------------------------------------------------------- the design
def test_rate_and_oversample_flags_parse_and_refuse_bad_values():
    assert parse_rate("2%") == pytest.approx(0.02)
    assert parse_rate("0.05") == 0.05
    assert parse_oversample("failures=5") == 5.0
    assert parse_oversample(None) == 1.0
    for bad in ("0%", "150%", "two", "nan"):
        with pytest.raises(InputError, match="--sample"):
            parse_rate(bad)
    for bad in ("errors=5", "failures=0.5", "failures"):
        with pytest.raises(InputError, match="--oversample"):
            parse_oversample(bad)


def test_draw_takes_ceil_of_rate_per_cell_and_oversamples_failures_by_the_factor():
    ids = [f"r{i}" for i in range(300)]
    days = ["d1"] * 200 + ["d2"] * 100
    strata = ["a", "b"] * 150
    failure = [i % 10 == 0 for i in range(300)]
    s = draw_sample(ids, days, strata, failure, 0.05, 4.0, seed=3)
    for i, (d, st, f) in enumerate(s.keys):
        n_cell = sum(1 for k in range(300) if (days[k], strata[k], failure[k]) == (d, st, f))
        assert s.population[i] == n_cell
        assert s.drawn[i] == min(n_cell, math.ceil((0.2 if f else 0.05) * n_cell - 1e-9))
        assert s.selected[s.cell == i].sum() == s.drawn[i]
        assert np.allclose(s.pi[s.cell == i], s.drawn[i] / n_cell)
    # the same seed draws the same requests; another seed draws others
    again = draw_sample(ids, days, strata, failure, 0.05, 4.0, seed=3)
    assert (again.selected == s.selected).all()
    assert (draw_sample(ids, days, strata, failure, 0.05, 4.0, seed=4).selected != s.selected).any()


def test_hajek_with_every_sampled_request_defined_is_the_horvitz_thompson_mean():
    rng = np.random.default_rng(0)
    cell = np.array([0, 0, 1, 1, 1, 2])
    population = np.array([10, 40, 6])
    y = rng.random(6)
    est = weighted_rate(y, np.ones(6, bool), cell, population)
    pi = np.array([2 / 10, 2 / 10, 3 / 40, 3 / 40, 3 / 40, 1 / 6])
    assert est.value == pytest.approx(np.sum(y / pi) / population.sum())
    assert est.unweighted == pytest.approx(y.mean())
    # Cochran's stratified variance with the finite-population correction, by hand (cell 2, judged once,
    # borrows the pooled within-cell variance of the others)
    s2 = [np.var(y[:2], ddof=1), np.var(y[2:5], ddof=1)]
    pooled = (s2[0] * 1 + s2[1] * 2) / 3
    var = (10 ** 2 * (1 - 2 / 10) * s2[0] / 2 + 40 ** 2 * (1 - 3 / 40) * s2[1] / 3
           + 6 ** 2 * (1 - 1 / 6) * pooled / 1) / 56 ** 2
    assert est.se == pytest.approx(math.sqrt(var))
    # an undefined verdict leaves its request out of the numerator and the weights
    part = weighted_rate(np.array([1.0, np.nan]), np.array([True, False]), np.array([0, 0]), np.array([4]))
    assert (part.value, part.n_defined, part.n_judged) == (1.0, 1, 2)
    none = weighted_rate(np.array([np.nan]), np.array([False]), np.array([0]), np.array([4]))
    assert math.isnan(none.value) and none.n_defined == 0


def test_weighted_estimate_is_unbiased_and_covers_while_the_unweighted_mean_is_biased():
    """Simulated traffic where failures (10%) are bad answers and sampled 6x: over many draws the weighted
    estimate centres on the true rate and its 95% interval covers it about 95% of the time; the plain mean of
    the same verdicts is pulled down by the oversampled failures."""
    rng = np.random.default_rng(7)
    n = 4000
    ids = [f"q{i}" for i in range(n)]
    days = [f"d{i % 4}" for i in range(n)]
    strata = [("a", "b", "c")[i % 3] for i in range(n)]
    failure = rng.random(n) < 0.10
    quality = np.where(failure, rng.random(n) < 0.3, rng.random(n) < 0.9).astype(float)
    truth = quality.mean()
    est, plain, covered, ses = [], [], 0, []
    draws = 300
    for seed in range(draws):
        s = draw_sample(ids, days, strata, failure.tolist(), 0.03, 6.0, seed=seed)
        k = np.flatnonzero(s.selected)
        e = weighted_rate(quality[k], np.ones(len(k), bool), s.cell[k], s.population)
        est.append(e.value)
        plain.append(e.unweighted)
        ses.append(e.se)
        covered += e.ci_low <= truth <= e.ci_high
    est, plain = np.array(est), np.array(plain)
    assert abs(est.mean() - truth) < 3 * est.std(ddof=1) / math.sqrt(draws)
    assert plain.mean() - truth < -0.1  # failures are ~40% of the sample, 10% of the traffic
    assert 0.9 <= covered / draws <= 0.99
    # the linearized standard error matches the spread of the estimate across draws
    assert np.mean(ses) == pytest.approx(est.std(ddof=1), rel=0.15)


# ---------------------------------------------------------------------------------------------- the judge
def test_an_unvalidated_judge_is_refused_and_a_validated_local_one_judges_offline_and_resumes(tmp_path):
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    write_records(db, traffic())
    path = judge_file(tmp_path, LOCAL)
    cfg = load_judge_config(path)
    with pytest.raises(InputError, match="not validated") as e:
        run_online_judge(db, cfg, str(path), rate=0.1, factor=3.0)
    assert "no validation record for these judge pins" in str(e.value)
    assert not (tmp_path / "s.duckdb.online" / "judged").exists()
    validated(db, cfg)
    out = run_online_judge(db, cfg, str(path), rate=0.1, factor=3.0)
    c = out["counts"]
    assert c["records"] == 120 and c["judged_now"] == c["sampled"] and c["already_judged"] == 0
    # per (day, stratum) cell of 30: 24 ordinary (ceil 2.4 = 3) and 6 failures (ceil 1.8 = 2) sampled
    assert c["sampled"] == 4 * (3 + 2) and c["sampled_failures"] == 8
    overall = next(r for r in out["quality"] if r["day"] == "all" and r["stratum"] == "all")
    # failures are unfaithful (0), the rest faithful (1): the truth is 96/120 = 0.8 exactly, and with every
    # sampled request judged the weighted estimate is exact per cell; the plain mean is 12/20
    assert overall["value"] == pytest.approx(0.8)
    assert overall["unweighted"] == pytest.approx(12 / 20)
    assert overall["n_defined"] == 20 and overall["covered"] == 1.0
    assert {(r["day"], r["stratum"]) for r in out["quality"]} >= {("2026-11-30", "billing"), ("2026-12-01", "all")}
    stored = judged_rows(db, out["judge"]["key"])
    assert len(stored) == 20
    # a re-run judges nothing again and gives the same table
    again = run_online_judge(db, cfg, str(path), rate=0.1, factor=3.0)
    assert again["counts"]["judged_now"] == 0 and again["counts"]["already_judged"] == 20
    assert again["quality"] == out["quality"]
    files = list((tmp_path / "s.duckdb.online" / "judged" / out["judge"]["key"]).glob("*.parquet"))
    assert len(files) == 1


def test_a_judge_whose_model_id_moves_is_refused_as_unpinned(tmp_path):
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    write_records(db, traffic(n_days=1, per_day=10))
    path = judge_file(tmp_path, {"provider": "openai", "model": "gpt-judge-latest", "metrics": ["faithfulness"],
                                 "prices": {"gpt-judge-latest": {"input": 1.0, "output": 2.0}}})
    cfg = load_judge_config(path)
    validated(db, cfg)  # even a matching validation does not pin a model that changes under it
    with pytest.raises(InputError, match="not pinned: model 'gpt-judge-latest' is an alias"):
        run_online_judge(db, cfg, str(path), rate=0.5)


def _responder(system, user):
    base = {"justification": "scripted", "cannot_judge": False}
    if system == RUBRICS["claims"]:
        answer = user.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
        return {**base, "claims": [answer]}
    if system == RUBRICS["support"]:
        claim = user.split("<claim>", 1)[1].rsplit("</claim>", 1)[0]
        context = user.split("<context>", 1)[1].rsplit("</context>", 1)[0]
        if claim in context:
            return {**base, "label": "supported", "quote": claim}
        return {**base, "label": "unsupported", "quote": None}
    return {**base, "label": "relevant"}


@pytest.fixture
def fake_provider():
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_spend_cap_stops_before_it_is_passed_and_a_rerun_pays_only_for_the_rest(tmp_path, fake_provider,
                                                                                     monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-online")
    fake_provider.responder = _responder
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    write_records(db, traffic(n_days=1, per_day=40))
    model = "judge-m"
    path = judge_file(tmp_path, {
        "provider": "openai", "model": model, "base_url": fake_provider.base_url, "max_tokens": 100,
        "api_key_env": "JUDGE_TEST_KEY", "concurrency": 2, "metrics": ["faithfulness", "answer_relevance"],
        "retry": {"max_attempts": 2, "timeout_s": 2, "backoff_base_s": 0.001},
        "prices": {model: {"input": 1.0, "output": 2.0}}})
    cfg = load_judge_config(path)
    validated(db, cfg, kinds=(("support", "binary"), ("relevance", "ordinal")))
    cap = 0.03
    out = run_online_judge(db, cfg, str(path), rate=0.5, factor=1.0, max_spend=cap)
    c, s = out["counts"], out["spend"]
    served = fake_provider.paid
    # every call the fake billed is 1000 input + 50 output tokens at $1/$2 per million: $0.0011
    assert served * 0.0011 <= cap + 1e-12
    assert s["usd"] == pytest.approx(served * 0.0011) and s["usd"] <= cap
    assert s["stopped"] and "spend cap" in s["stopped"]
    assert c["sampled"] == 20 and c["skipped"] > 0 and c["judged_now"] > 0
    assert c["judged_now"] + c["skipped"] + c["errors"] == c["sampled"]
    # each judged request took exactly 3 calls (claims, relevance, one support); a skipped one may have
    # started some, which are stored and not paid again
    assert served >= 3 * c["judged_now"]
    assert len(judged_rows(db, out["judge"]["key"])) == c["judged_now"]
    fake_provider.reset_counts()
    done_before = c["judged_now"]
    rest = run_online_judge(db, cfg, str(path), rate=0.5, factor=1.0, max_spend=1.0)
    assert rest["counts"]["already_judged"] == done_before
    assert rest["counts"]["judged_now"] == 20 - done_before and rest["counts"]["skipped"] == 0
    assert fake_provider.paid + served <= 3 * 20  # nothing judged before was paid for again
    overall = {r["metric"]: r for r in rest["quality"] if r["day"] == "all" and r["stratum"] == "all"}
    # 8 of 40 requests are failures (unfaithful), all relevant
    assert overall["faithfulness"]["value"] == pytest.approx(32 / 40)
    assert overall["answer_relevance"]["value"] == 1.0


def test_the_judge_command_refuses_then_prints_the_table_and_json(tmp_path, capsys):
    import typer

    from ragassay.cli.online_flywheel import register

    app, group = typer.Typer(), typer.Typer()
    register(group)
    app.add_typer(group, name="online")
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    write_records(db, traffic())
    path = judge_file(tmp_path, LOCAL)
    args = ["online", "judge", "--store", str(db), "--judge", str(path), "--sample", "10%", "--oversample",
            "failures=3"]
    with pytest.raises(InputError, match="is not validated"):
        app(args=args, standalone_mode=False)
    validated(db, load_judge_config(path))
    app(args=[*args, "--to", "2026-11-30"], standalone_mode=False)
    text = capsys.readouterr().out
    assert "judge local:lexical on 60 production requests: sampled 10 (4 with a failure signal)" in text
    assert "judged now 10, already judged 0, skipped 0, errors 0" in text
    assert "2026-12-01" not in text  # --to keeps the second day out
    app(args=[*args, "--json"], standalone_mode=False)
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "online-judge" and out["counts"]["already_judged"] == 10
    assert out["counts"]["judged_now"] == 10 and out["design"]["estimator"] == "hajek"
    with pytest.raises(InputError, match="--from 2026-12-02 is after --to 2026-12-01"):
        app(args=[*args, "--from", "2026-12-02", "--to", "2026-12-01"], standalone_mode=False)


def test_a_validated_cascade_is_routed_as_judge_routes_it(tmp_path):
    """A local two-tier cascade (validated as a whole, under its own pins) gives the verdicts its tiers give."""
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    write_records(db, traffic(n_days=1))
    path = judge_file(tmp_path, {**LOCAL, "cascade": {"tier1": {"model": "lexical", "threshold": 0.7},
                                                      "band": {"lo": 0.2, "hi": 0.8}}})
    cfg = load_judge_config(path)
    plain = load_judge_config(judge_file(tmp_path, LOCAL, "plain.yaml"))
    validated(db, plain)  # the tier-2 judge's own record does not speak for the cascade
    with pytest.raises(InputError, match="not validated"):
        run_online_judge(db, cfg, str(path), rate=0.2)
    validated(db, cfg)
    out = run_online_judge(db, cfg, str(path), rate=0.2)
    overall = next(r for r in out["quality"] if r["day"] == "all" and r["stratum"] == "all")
    assert overall["value"] == pytest.approx(0.8) and overall["n_defined"] == out["counts"]["sampled"] == 14


# ---------------------------------------------------------------------------------------------- columnar design
def _old_draw(request_ids, days, strata, failure, rate, factor, seed):
    """The draw as it was computed before the design went columnar (a per-record tuple per cell, a Python str per
    id): the oracle the columnar path must reproduce exactly."""
    import hashlib

    n = len(request_ids)
    keys_all = [(str(d), "unstratified" if s is None else str(s), bool(f))
                for d, s, f in zip(days, strata, failure, strict=True)]
    keys = sorted(set(keys_all))
    index = {k: i for i, k in enumerate(keys)}
    cell = np.fromiter((index[k] for k in keys_all), dtype=np.int64, count=n)
    population = np.bincount(cell, minlength=len(keys)).astype(np.int64)
    rates = np.array([min(1.0, rate * factor) if k[2] else rate for k in keys], dtype=np.float64)
    drawn = np.minimum(population, np.ceil(rates * population - 1e-9)).astype(np.int64)
    u = np.empty(n, dtype=np.float64)
    for i, rid in enumerate(request_ids):
        h = hashlib.blake2b(f"{seed}\x1f".encode() + str(rid).encode("utf-8"), digest_size=8).digest()
        u[i] = (int.from_bytes(h, "big") >> 11) / float(1 << 53)
    order = np.lexsort((u, cell))
    starts = np.concatenate([[0], np.cumsum(population)[:-1]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts[cell[order]]
    selected = rank < drawn[cell]
    return cell, selected, (drawn / np.maximum(population, 1))[cell], keys, population, drawn


def test_uniforms_from_the_arrow_buffer_equal_the_per_string_hash():
    from ragassay.online.judge import uniforms, uniforms_arrow

    ids = ["r1", "", "é-ü-😀", None, "x" * 300, "r2"]
    want = uniforms([str(i) for i in ids], 7)
    assert np.array_equal(uniforms_arrow(pa.array(ids, pa.string()), 7), want)
    assert np.array_equal(uniforms_arrow(pa.array(ids, pa.large_string()), 7), want)
    # a slice (non-zero offset) and a chunked array read the right bytes
    assert np.array_equal(uniforms_arrow(pa.array(ids, pa.string()).slice(2, 3), 7), want[2:5])
    assert np.array_equal(uniforms_arrow(pa.chunked_array([ids[:2], ids[2:]], pa.string()), 7), want)
    assert (uniforms_arrow(pa.array(ids, pa.string()), 8) != want).any()
    assert len(uniforms_arrow(pa.array([], pa.string()), 7)) == 0


def test_the_columnar_design_draws_exactly_the_old_sample_on_a_simulated_month(tmp_path):
    """`online simulate --records 20000` ingested: the columnar frame and draw give the same cells, the same
    request ids drawn, the same pi, and the judge's table equals the one the old per-record path computes."""
    from ragassay.online.ingest import ingest
    from ragassay.online.judge import (
        FAILURE_SIGNALS,
        draw_frame,
        quality_table,
        read_frame,
        read_records,
        signals_of,
    )
    from ragassay.online.simulate import simulate

    src = tmp_path / "traffic.jsonl"
    simulate(src, records=20_000, days=30, seed=0)
    db = tmp_path / "s.duckdb"
    Store.open(db).close()
    ingest([src], db)
    rec = read_records(db)
    n = len(rec["request_id"])
    assert n == 20_000
    sigs = [signals_of(rec, k) for k in range(n)]
    fail_old = [any(s in FAILURE_SIGNALS for s in ss) for ss in sigs]
    assert 0 < sum(fail_old) < n
    frame = read_frame(db)
    assert frame.column("request_id").to_pylist() == rec["request_id"]
    for rate, factor, seed in ((0.02, 5.0, 0), (0.05, 2.0, 11)):
        cell, selected, pi, keys, population, drawn = _old_draw(rec["request_id"], rec["day"], rec["stratum"],
                                                                fail_old, rate, factor, seed)
        new, failure = draw_frame(frame, rate, factor, seed)
        assert failure.tolist() == fail_old
        assert new.keys == keys and len(keys) > 60
        assert np.array_equal(new.population, population) and np.array_equal(new.drawn, drawn)
        assert np.array_equal(new.cell, cell) and np.array_equal(new.pi, pi)
        ids = np.array(rec["request_id"], dtype=object)
        assert sorted(ids[new.selected]) == sorted(ids[selected]) and selected.sum() > 400

    # end to end: the judge's table (and stored verdicts) equal the old path's on the full records
    path = judge_file(tmp_path, LOCAL)
    cfg = load_judge_config(path)
    validated(db, cfg)
    out = run_online_judge(db, cfg, str(path), rate=0.02, factor=5.0, seed=0)
    cell, selected, pi, keys, population, drawn = _old_draw(rec["request_id"], rec["day"], rec["stratum"],
                                                            fail_old, 0.02, 5.0, 0)
    from ragassay.online.judge import Sample

    old = Sample(cell, selected, pi, keys, population, drawn)
    done = judged_rows(db, out["judge"]["key"])
    assert set(done) == {rec["request_id"][k] for k in np.flatnonzero(selected)}
    assert out["quality"] == quality_table(rec, old, done, ["faithfulness"])
    assert out["counts"]["sampled"] == int(selected.sum())
    assert out["counts"]["sampled_failures"] == int((selected & np.array(fail_old)).sum())
    assert [c["population"] for c in out["cells"]] == population.tolist()
    t = pq.read_table(next((tmp_path / "s.duckdb.online" / "judged" / out["judge"]["key"]).glob("*.parquet")))
    where = {rid: k for k, rid in enumerate(rec["request_id"])}
    for row in t.to_pylist():
        k = where[row["request_id"]]
        assert row["signals"] == sigs[k] and row["pi"] == pi[k] and row["weight"] == 1 / pi[k]
        assert (row["day"], row["stratum"], row["failure"]) == keys[cell[k]]


def test_the_columnar_draw_puts_a_null_stratum_in_the_unstratified_cell_as_the_old_draw_does(tmp_path):
    from ragassay.online.judge import draw_frame, read_frame, read_records

    db = tmp_path / "s.duckdb"
    rows = traffic(n_days=3, per_day=40, strata=("billing", None, "unstratified", "shipping"), fail_every=3)
    for i, r in enumerate(rows):
        r["rephrased"] = i % 7 == 0 or None
        r["thumbs"] = r["thumbs"] if i % 11 else 1
    write_records(db, rows)
    rec = read_records(db)
    fail = [bool((t is not None and t < 0) or rp) for t, rp in zip(rec["thumbs"], rec["rephrased"], strict=True)]
    cell, selected, pi, keys, population, _ = _old_draw(rec["request_id"], rec["day"], rec["stratum"], fail,
                                                        0.1, 3.0, 5)
    new, failure = draw_frame(read_frame(db), 0.1, 3.0, 5)
    assert failure.tolist() == fail
    assert new.keys == keys and ("2026-11-30", "unstratified", True) in keys and len(keys) == 3 * 3 * 2
    assert np.array_equal(new.cell, cell) and np.array_equal(new.selected, selected) and np.array_equal(new.pi, pi)
    assert population.sum() == 120
