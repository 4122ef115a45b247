"""`ragassay golden status`: saturation, headroom, items every configuration passes, tiers, rot."""

import hashlib
import json
import math
from datetime import datetime, timedelta

import numpy as np
import pytest
import yaml
from scipy import stats as sps
from tests.analyses._runs import make_run

from ragassay.analysis.golden_status import run_scores, stored_golden_status
from ragassay.cli.app import main as _main
from ragassay.cli.golden import golden_app
from ragassay.cli.golden_status import TIERS_HEADER, register
from ragassay.corpus import load_corpus
from ragassay.errors import InputError
from ragassay.golden import build_golden
from ragassay.golden.schema import GoldenQuery
from ragassay.golden.set import GoldenSet
from ragassay.golden.status import (
    FAIL,
    PASS,
    UNDEFINED,
    StatusOptions,
    golden_rot,
    mean_lower_bound,
    pass_status,
    saturation_bound,
    smoke_sample,
)
from ragassay.store import Store

NAN = float("nan")
T0 = datetime(2026, 1, 1)
QIDS = ["a1", "a2", "a3", "b1", "b2", "b3"]
STRATA = ["easy"] * 3 + ["hard"] * 3


def _golden(version="ds@1"):
    queries = [GoldenQuery(query_id=q, question=f"question {q}?", stratum=s, answerable=True)
               for q, s in zip(QIDS, STRATA, strict=True)]
    return GoldenSet(queries, {"dataset_version": version})


def _run(store, name, values, *, created, latency=None, config=None, **pins):
    return make_run(store, name, {"recall@10": np.asarray(values, dtype=float)}, qids=QIDS, strata=STRATA,
                    latency=latency, config=config or {"name": name}, created_at=T0 + timedelta(hours=created),
                    **pins)


@pytest.fixture
def worked(tmp_path):
    """Two configurations: X run twice (x, then x2), Y once (y, between them); one run of another version.

    easy: every run scores 1, 1, 1. hard: x 1, 0.5, -; y 1, 0, -; x2 0, 1, - (b3 undefined everywhere)."""
    path = tmp_path / "w.duckdb"
    with Store.open(path) as st:
        _run(st, "x", [1, 1, 1, 1, 0.5, NAN], created=1, config={"cfg": "X"})
        _run(st, "y", [1, 1, 1, 1, 0, NAN], created=2, config={"cfg": "Y"},
             latency=[10, 20, 30, 40, 50, 60])
        _run(st, "x2", [1, 1, 1, 0, 1, NAN], created=3, config={"cfg": "X"},
             latency=[30, 20, 10, 40, 50, None])
        _run(st, "z", [0] * 6, created=4, dataset_version="ds@2")
    return path


def test_mean_lower_bound_matches_scipy_t_interval():
    v = np.array([1.0, 0.8, 0.9, NAN, 1.0, 0.7])
    mean, low, n = mean_lower_bound(v)
    ref = sps.ttest_1samp(v[~np.isnan(v)], 0.0).confidence_interval(0.95)
    assert n == 5 and mean == pytest.approx(0.88)
    assert low == pytest.approx(ref.low, rel=1e-12)


def test_mean_lower_bound_edge_cases_are_undefined_not_zero():
    assert mean_lower_bound(np.array([1.0, 1.0, 1.0])) == (1.0, 1.0, 3)  # sd 0: the mean itself
    mean, low, n = mean_lower_bound(np.array([0.9, NAN]))
    assert (mean, n) == (0.9, 1) and math.isnan(low)
    mean, low, n = mean_lower_bound(np.array([NAN]))
    assert n == 0 and math.isnan(mean) and math.isnan(low)


def test_pass_status_needs_every_defined_metric_at_the_threshold():
    v = np.array([[1.0, 0.96], [1.0, 0.5], [NAN, 0.97], [NAN, NAN]])
    assert pass_status(v, 0.95).tolist() == [PASS, FAIL, PASS, UNDEFINED]


def test_worked_store_strata_items_and_tiers(worked):
    with Store.open(worked, read_only=True) as st:
        rep = stored_golden_status(st, _golden())
    assert [r["name"] for r in rep["runs"]] == ["x", "y", "x2"]
    assert rep["configs"] == ["y", "x2"] and rep["latest_run"] == "x2"  # X's latest run is x2
    assert rep["excluded"]["other_version"] == ["z"] and rep["excluded"]["n_other_version"] == 1
    easy, hard = rep["strata"]
    e = easy["metrics"]["recall@10"]
    # three perfect items cannot show a ceiling at the default floor: their bound is 0.025 ** (1/3) = 0.29
    assert (e["best"], e["latest"], e["headroom_best"], e["saturated"]) == (1.0, 1.0, 0.0, False)
    assert [c["ci_low"] for c in e["configs"]] == [pytest.approx(0.025 ** (1 / 3))] * 2
    assert easy["passed_by_all"] == ["a1", "a2", "a3"] and easy["saturated"] is False
    h = hard["metrics"]["recall@10"]
    # x2: (0 + 1) / 2, y: (1 + 0) / 2; b3 undefined in both, counted, not scored 0
    assert (h["best"], h["best_run"], h["latest"], h["headroom_latest"]) == (0.5, "y", 0.5, 0.5)
    assert h["saturated"] is False
    assert [(c["run"], c["n_defined"], c["n_undefined"]) for c in h["configs"]] == [("y", 2, 1), ("x2", 2, 1)]
    assert hard["passed_by_all"] == [] and hard["n_undefined_items"] == 1
    assert rep["saturated_strata"] == []
    with Store.open(worked, read_only=True) as st:
        low_floor = stored_golden_status(st, _golden(), options=StatusOptions(ci_floor=0.25))
    assert low_floor["saturated_strata"] == ["easy"]
    assert rep["items"] == {"n": 6, "passed_by_all": 3, "stable": 3, "flipped": ["b1", "b2"],
                            "undefined": ["b3"]}
    tiers = rep["tiers"]
    assert tiers["smoke"]["query_ids"] == ["a1", "a2", "a3"]
    assert tiers["regression"]["query_ids"] == ["b1", "b2", "b3"]
    assert tiers["full"]["query_ids"] == QIDS
    # per item: mean latency over the runs that stored one: a 20 20 20, b 40 50 60 (x stored none)
    assert [tiers[t]["expected_ms"] for t in ("smoke", "regression", "full")] == [60.0, 150.0, 210.0]
    assert all(tiers[t]["n_latency_unknown"] == 0 for t in tiers)


def test_an_old_failure_keeps_an_item_out_of_smoke(worked):
    """a run of X that failed a1 before x2 passed it: every latest run passes a1, but it flipped."""
    with Store.open(worked) as st:
        _run(st, "x0", [0, 1, 1, 1, 1, NAN], created=0, config={"cfg": "X"})
        runs = [r.name for r in st.list_runs() if r.name != "z"]
    with Store.open(worked, read_only=True) as st:
        rep = stored_golden_status(st, _golden(), runs=runs)
    assert rep["items"]["passed_by_all"] == 3 and rep["items"]["stable"] == 2
    assert rep["items"]["flipped"] == ["a1", "b1", "b2"]
    assert rep["tiers"]["smoke"]["query_ids"] == ["a2", "a3"]
    assert rep["tiers"]["regression"]["query_ids"] == ["a1", "b1", "b2", "b3"]


def test_stratum_with_one_defined_item_is_undefined_not_saturated(tmp_path):
    with Store.open(tmp_path / "u.duckdb") as st:
        _run(st, "x", [1, NAN, NAN, 1, 1, 1], created=1)
        rep = stored_golden_status(st, _golden(), options=StatusOptions(ci_floor=0.25))
    easy, hard = rep["strata"]
    assert easy["metrics"]["recall@10"]["saturated"] is None  # one value bounds nothing
    assert easy["metrics"]["recall@10"]["best"] == 1.0
    assert hard["metrics"]["recall@10"]["saturated"] is True
    assert rep["saturated_strata"] == ["hard"]


def test_threshold_and_ci_floor_are_options(tmp_path):
    with Store.open(tmp_path / "o.duckdb") as st:
        _run(st, "x", [0.9, 0.9, 0.9, 1, 0.8, 0.9], created=1)
        strict = stored_golden_status(st, _golden())
        loose = stored_golden_status(st, _golden(), options=StatusOptions(threshold=0.85, ci_floor=0.25))
    assert strict["saturated_strata"] == [] and strict["items"]["passed_by_all"] == 1  # b1 only
    # hard: mean 0.9, sd 0.1, n 3 -> t bound 0.9 - 4.303 * 0.1 / sqrt(3) = 0.6516, exact cap 0.9 * 0.025 ** (1/3)
    lo = loose["strata"][1]["metrics"]["recall@10"]["configs"][0]["ci_low"]
    assert lo == pytest.approx(min(0.9 - sps.t.ppf(0.975, 2) * 0.1 / math.sqrt(3), 0.9 * 0.025 ** (1 / 3)))
    assert loose["saturated_strata"] == ["easy", "hard"]
    with pytest.raises(InputError, match="--ci-floor 1.5"):
        StatusOptions(ci_floor=1.5)


def test_run_scores_average_defined_trials_and_latency(tmp_path):
    with Store.open(tmp_path / "t.duckdb") as st:
        # query-major, two trials per item
        vals = [1, NAN, 0.5, 1, NAN, NAN, 0, 0, 1, 1, 0.2, 0.4]
        lat = [10, 30, None, None, 5, 7, 1, 1, 2, 2, 3, 3]
        make_run(st, "r", {"recall@10": np.array(vals, dtype=float)}, qids=QIDS, strata=STRATA, trials=2,
                 latency=lat)
        sc = run_scores(st, st.get_run("r"), _golden(), ["recall@10"])
    assert sc.values[:, 0].tolist()[:1] == [1.0] and math.isnan(sc.values[2, 0])
    assert sc.values[[1, 3, 4, 5], 0].tolist() == [0.75, 0.0, 1.0, pytest.approx(0.3)]
    assert math.isnan(sc.latency_ms[1])
    assert sc.latency_ms[[0, 2, 3]].tolist() == [20.0, 6.0, 1.0]


def test_smoke_sample_is_stratified_and_seeded():
    cands = {"A": [f"a{i}" for i in range(10)], "B": ["b0", "b1"]}

    def ranked(ids, seed=0):
        return sorted(ids, key=lambda q: hashlib.sha256(f"{seed}:{q}".encode()).hexdigest())

    a, b = ranked(cands["A"]), ranked(cands["B"])
    # first one of each stratum (A, larger, first), then A's second: (1 + 1/2) / 10 < (1 + 1/2) / 2
    assert smoke_sample(cands, 3, 0) == [a[0], b[0], a[1]]
    assert smoke_sample(cands, 1, 0) == [a[0]]
    assert smoke_sample(cands, 0, 0) == []
    assert sorted(smoke_sample(cands, 50, 0)) == sorted(cands["A"] + cands["B"])
    a7 = ranked(cands["A"], 7)
    assert smoke_sample(cands, 1, 7) == [a7[0]]


def test_smoke_tier_is_capped_and_proportional(tmp_path):
    with Store.open(tmp_path / "s.duckdb") as st:
        _run(st, "x", [1] * 6, created=1)
        rep = stored_golden_status(st, _golden(), options=StatusOptions(smoke_size=2))
    smoke = rep["tiers"]["smoke"]["query_ids"]
    assert len(smoke) == 2 and {q[0] for q in smoke} == {"a", "b"}  # one of each stratum
    assert rep["tiers"]["regression"]["query_ids"] == []
    assert rep["tiers"]["regression"]["expected_ms"] == 0.0
    assert rep["tiers"]["full"]["expected_ms"] is None  # no latency stored: unknown, not 0
    assert rep["tiers"]["full"]["n_latency_unknown"] == 6


# ------------------------------------------------------------------------------------------- rot

ROT_SRC = """
dataset: rot
queries:
  - query_id: q1
    question: Who may obtain a copy?
    stratum: lexical
    evidence:
      - {doc_id: mit, quote: "to any person obtaining a copy", grade: 3}
  - query_id: q2
    question: What must be conveyed?
    stratum: paraphrase
    evidence:
      - {doc_id: gpl, quote: "machine-readable Corresponding Source", grade: 3}
  - query_id: q3
    question: How does it end?
    stratum: lexical
    evidence:
      - {doc_id: gpl, quote: "The end.", occurrence: 2, grade: 1}
      - {doc_id: bsd, quote: "Redistribution and use", grade: 2}
"""

DOCS = {"mit": "Permission is hereby granted, free of charge, to any person obtaining a copy.\n",
        "gpl": "Convey the machine-readable Corresponding Source.\n\nNOTE: The end. NOTE: The end.\n",
        "bsd": "Redistribution and use in source and binary forms are permitted.\n"}


def _corpus_dir(path, docs):
    path.mkdir()
    for k, v in docs.items():
        (path / f"{k}.txt").write_text(v)
    return path


def test_rot_lists_each_evidence_that_no_longer_resolves_with_its_document(tmp_path):
    src = tmp_path / "g.yaml"
    src.write_text(ROT_SRC)
    gs = build_golden(src, load_corpus(_corpus_dir(tmp_path / "c1", DOCS)), tmp_path / "g")
    assert golden_rot(gs, load_corpus(tmp_path / "c1"))["corpus_changed"] is False
    changed = {"mit": "Permission is granted to anyone who gets a copy.\n",  # quote gone
               "gpl": "Preface.\n" + DOCS["gpl"]}  # both quotes shift by 9; bsd removed
    rot = golden_rot(gs, load_corpus(_corpus_dir(tmp_path / "c2", changed)))
    assert rot["corpus_changed"] is True
    assert rot["items"] == ["q1", "q2", "q3"] and rot["docs"] == ["bsd", "gpl", "mit"]
    got = [(r["query_id"], r["doc_id"], r["reason"]) for r in rot["evidence"]]
    gpl = DOCS["gpl"]
    assert got == [
        ("q1", "mit", "quote not found"),
        ("q2", "gpl", f"quote moved (now at offset {9 + gpl.index('machine')}, was {gpl.index('machine')})"),
        ("q3", "gpl", f"quote moved (now at offset {9 + gpl.index('The end.')}, was {gpl.rindex('The end.')})"),
        ("q3", "bsd", "document removed"),
    ]
    # an edit elsewhere in a document leaves its spans resolving (the second "The end." stays put)
    same = {**DOCS, "gpl": DOCS["gpl"] + "Appendix.\n"}
    rot = golden_rot(gs, load_corpus(_corpus_dir(tmp_path / "c3", same)))
    assert rot["corpus_changed"] is True and rot["items"] == [] and rot["evidence"] == []


# ------------------------------------------------------------------------------------------- CLI

def cli(args, capsys):
    register(golden_app)
    with pytest.raises(SystemExit) as e:
        _main(args)
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def _built(tmp_path):
    src = tmp_path / "g.yaml"
    src.write_text(ROT_SRC)
    return build_golden(src, load_corpus(_corpus_dir(tmp_path / "c1", DOCS)), tmp_path / "g")


@pytest.fixture
def built_store(tmp_path):
    gs = _built(tmp_path)
    path = tmp_path / "s.duckdb"
    with Store.open(path) as st:
        for i, (name, vals) in enumerate((("a", [1, 0.5, 1]), ("b", [1, 1, 1]))):
            make_run(st, name, {"recall@10": np.array(vals, dtype=float), "error": np.zeros(3),
                                "tokens": np.array([3.0, 1, 1])},
                     qids=["q1", "q2", "q3"], strata=["lexical", "paraphrase", "lexical"],
                     latency=[100, 200, 300], dataset_version=gs.dataset_version,
                     created_at=T0 + timedelta(hours=i))
        make_run(st, "other", {"recall@10": np.ones(3)}, qids=["q1", "q2", "q3"], dataset_version="else@1")
    return tmp_path, path


def test_cli_status_json_tiers_and_rot(built_store, capsys):
    tmp, store = built_store
    out_file = tmp / "tiers.yaml"
    code, out, _ = cli(["golden", "status", "--golden", str(tmp / "g"), "--store", str(store), "--json",
                        "--ci-floor", "0.15", "--tiers-out", str(out_file), "--corpus", str(_corpus_dir(tmp / "c2", {"mit": "x\n"}))],
                       capsys)
    assert code == 0
    rep = json.loads(out)
    assert rep["excluded"]["n_other_version"] == 1
    assert [s["stratum"] for s in rep["strata"]] == ["lexical", "paraphrase"]
    para = rep["strata"][1]["metrics"]["recall@10"]
    assert (para["best"], para["best_run"], para["latest"], para["saturated"]) == (1.0, "b", 1.0, False)
    assert rep["strata"][0]["metrics"]["recall@10"]["saturated"] is True
    assert rep["tiers"]["smoke"]["query_ids"] == ["q1", "q3"]
    assert rep["tiers"]["regression"]["query_ids"] == ["q2"]
    assert rep["tiers"]["regression"]["expected_ms"] == 200.0
    assert rep["rot"]["items"] == ["q1", "q2", "q3"]
    text = out_file.read_text()
    assert text.splitlines()[0] == TIERS_HEADER
    tiers = yaml.safe_load(text)
    assert tiers["tiers"]["full"]["query_ids"] == ["q1", "q2", "q3"] and tiers["runs"] == ["a", "b"]
    # a file this command wrote is replaced; the human summary names the tiers
    code, out, _ = cli(["golden", "status", "--golden", str(tmp / "g"), "--store", str(store),
                        "--tiers-out", str(out_file), "--corpus", str(tmp / "c2")], capsys)
    assert code == 0 and "tier smoke: 2 items, expected 400 ms per trial" in out
    assert "1 of other versions" in out
    assert "rot: 3 item(s) with evidence that no longer resolves, in 3 document(s)" in out
    assert "  q3  bsd  document removed" in out


@pytest.mark.parametrize("extra, message", [
    (["--metric", "error"], "error: metric error: lower is better, so 1 - score is not headroom"),
    (["--metric", "tokens"], "error: run a: metric tokens has value 3.0 for q1, outside [0, 1]"),
    (["--metric", "nope"], "holds nope (runs left out: 1 other version, 0 unfinished, 2 missing metric); "
                           "pass --metric among error, recall@10, tokens"),
    (["--runs", "other"], "error: run other ("),
    (["--threshold", "2"], "error: --threshold 2.0: give a score between 0 and 1"),
    (["--tiers-out", "t.txt"], "the tier file must end in .yaml or .yml"),
])
def test_cli_status_bad_input_is_one_error_line_exit_2(built_store, capsys, extra, message, monkeypatch):
    tmp, store = built_store
    monkeypatch.chdir(tmp)
    code, out, err = cli(["golden", "status", "--golden", str(tmp / "g"), "--store", str(store), *extra], capsys)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert all(line.startswith("error: ") for line in err.splitlines())


def test_cli_refuses_runs_of_another_version_by_name(built_store, capsys):
    tmp, store = built_store
    code, _, err = cli(["golden", "status", "--golden", str(tmp / "g"), "--store", str(store),
                        "--runs", "a", "--runs", "other"], capsys)
    assert code == 2
    assert err.splitlines() == [f"error: run other ({_run_id(store, 'other')}) is of golden version 'else@1', "
                                f"not {_built_version(tmp)!r}; pass the golden set it was scored on; drop it "
                                "from --runs"]


def _run_id(store, name):
    with Store.open(store, read_only=True) as st:
        return st.get_run(name).run_id


def _built_version(tmp):
    return json.loads((tmp / "g" / "manifest.json").read_text())["dataset_version"]


def test_cli_never_overwrites_a_file_it_did_not_write(built_store, capsys):
    tmp, store = built_store
    foreign = tmp / "mine.yaml"
    foreign.write_text("keep: me\n")
    code, _, err = cli(["golden", "status", "--golden", str(tmp / "g"), "--store", str(store),
                        "--tiers-out", str(foreign)], capsys)
    assert code == 2 and "is not an earlier ragassay golden tiers output; refusing to overwrite" in err
    assert foreign.read_text() == "keep: me\n"


def test_cli_missing_store_and_golden(tmp_path, capsys):
    gs_dir = _built(tmp_path).manifest and tmp_path / "g"
    code, _, err = cli(["golden", "status", "--golden", str(gs_dir), "--store", str(tmp_path / "no.duckdb")],
                       capsys)
    assert code == 2 and "no results store here" in err
    code, _, err = cli(["golden", "status", "--golden", str(tmp_path / "nope"), "--store", "x"], capsys)
    assert code == 2 and "not a built golden set" in err


# ------------------------------------------------------------------------------------------- demo

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's bm25 and hybrid runs on the bundled corpus and golden set, as `ragassay demo` stores them
    (without its judging and comparisons, which status does not read)."""
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import load_inputs, run_pipeline_into_store

    out = tmp_path_factory.mktemp("demo")
    corpus, golden = load_inputs(None, None, out / "golden")
    with Store.open(out / "ragassay.duckdb") as st:
        for name in ("bm25", "hybrid"):
            run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden, name=name,
                                    cache_dir=out / "cache")
    return out, golden


def test_demo_status_matches_an_independent_sql_computation(demo):
    threshold, floor = 0.95, 0.90
    out, golden = demo
    with Store.open(out / "ragassay.duckdb", read_only=True) as st:
        rep = stored_golden_status(st, golden, metrics=["recall@10"])
        con = st.connection
        # per (run, item): mean of defined trials; per (run, stratum): mean, sd, n of defined items
        item = ("SELECT run_id, query_id, any_value(stratum) AS stratum, avg(value) AS v FROM results "
                "WHERE metric = 'recall@10' GROUP BY run_id, query_id")
        cells = con.execute(f"SELECT stratum, run_id, avg(v), stddev_samp(v), count(v) FROM ({item}) "
                            "GROUP BY stratum, run_id").fetchall()
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        passed = {q for (q,) in con.execute(
            f"SELECT query_id FROM ({item}) GROUP BY query_id HAVING count(v) = {runs} AND min(v) >= {threshold}"
        ).fetchall()}
        undefined = {q for (q,) in con.execute(
            f"SELECT query_id FROM ({item}) GROUP BY query_id HAVING count(v) < {runs}").fetchall()}
    assert [r["name"] for r in rep["runs"]] == ["bm25", "hybrid"]
    expected: dict[str, bool | None] = {}
    best: dict[str, float] = {}
    for stratum, _, mean, sd, n in cells:
        if n < 2:
            verdict = None if mean is None or mean >= threshold else False
        else:
            low = mean - sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
            verdict = mean >= threshold and low >= floor
        prev = expected.get(stratum, True)
        expected[stratum] = False if False in (prev, verdict) else (None if None in (prev, verdict) else True)
        if mean is not None:
            best[stratum] = max(best.get(stratum, -1.0), mean)
    got = {s["stratum"]: s["metrics"]["recall@10"] for s in rep["strata"]}
    assert {s: v["saturated"] for s, v in got.items()} == expected
    assert {s: v["best"] for s, v in got.items() if v["best"] is not None} == pytest.approx(best)
    assert got["negative"]["best"] is None  # recall has no relevant evidence to find: undefined
    assert {q for s in rep["strata"] for q in s["passed_by_all"]} == passed
    assert set(rep["items"]["undefined"]) == undefined
    assert set(rep["tiers"]["regression"]["query_ids"]) == set(golden.query_ids) - passed
    assert set(rep["tiers"]["smoke"]["query_ids"]) <= passed
    assert rep["tiers"]["smoke"]["n"] == min(25, len(passed))


def test_perfect_scores_saturate_a_stratum_only_with_enough_items():
    # the t interval of identical values collapses to the mean; the exact cap needs ln(0.025)/ln(0.90) = 35.01
    # items, so 36 perfect items saturate at the default floor and 35 do not
    assert math.ceil(math.log(0.025) / math.log(0.90)) == 36
    for n, saturated in ((2, False), (35, False), (36, True)):
        mean, low, k = saturation_bound(np.ones(n))
        assert (mean, k) == (1.0, n) and low == pytest.approx(0.025 ** (1 / n))
        assert (low >= 0.90) is saturated
    mean, low, k = saturation_bound(np.array([1.0, NAN]))
    assert (mean, k) == (1.0, 1) and math.isnan(low)
