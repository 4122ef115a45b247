"""Every `ragassay analyze` subcommand refuses inputs `compare` would refuse (issue 26, item 6): runs with
differing pins unless --rebaseline (which then names them), a non-oracle --oracle, a slice key whose value no
query has, a slices file declared between the two runs, refusals dropped from the consistency clusters, and
hygiene auditing only its first run or runs of another golden set. Each CLI case goes through CliRunner (the
real entry point, so the exit code and the `error:` lines are the user's) and asserts both."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np
import pytest
from click.testing import CliRunner
from tests.analyses._runs import make_run

from ragassay.analysis.compare import PINS, compare_runs, pins_for
from ragassay.analysis.consistency import consistency_of, consistency_of_run
from ragassay.analysis.slicing import declared_before
from ragassay.cli.app import main
from ragassay.errors import InputError, PinMismatchError
from ragassay.store import Store


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _ragassay(args) -> None:
    main(list(args))


def cli(*args):
    return CliRunner().invoke(_ragassay, [str(a) for a in args])


N = 40


def _values(y, h) -> dict:
    return {"answer_f1": y, "recall@context": h, "recall@fusion_depth": h, "ndcg@final_k": h, "faithfulness": y}


@pytest.fixture
def db(tmp_path):
    """Runs a and b on golden set ds@1, `other` on ds@2, an oracle run, a run posing as one, and two runs
    judged by different judges."""
    path = tmp_path / "s.duckdb"
    ya, ha = np.r_[np.ones(30), np.zeros(10)], np.r_[np.ones(25), np.zeros(15)]
    yb, hb = np.r_[np.ones(20), np.zeros(20)], np.r_[np.ones(30), np.zeros(10)]
    with Store.open(path) as st:
        make_run(st, "a", _values(ya, ha))
        make_run(st, "b", _values(yb, hb))
        make_run(st, "other", _values(yb, hb), dataset_version="ds@2")
        make_run(st, "oracle", _values(np.r_[np.ones(36), np.zeros(4)], np.ones(N)),
                 config={"name": "oracle", "oracle": True})
        make_run(st, "posing", _values(np.r_[np.ones(36), np.zeros(4)], np.ones(N)), config={"name": "posing"})
        make_run(st, "judged-1", _values(ya, ha), judge_model="judge-a")
        make_run(st, "judged-2", _values(yb, hb), judge_model="judge-b")
    return path


MISMATCH = {"pin": "dataset_version", "run_a": "a", "a": "ds@1", "run_b": "other", "b": "ds@2"}


# ------------------------------------------------------------------------------------ differing pins
def test_decomposition_of_runs_scored_on_other_golden_sets_is_refused_unless_rebaselined(db):
    res = cli("analyze", "decomposition", "a", "other", "--store", db, "--resamples", "100")
    assert res.exit_code == 2
    assert "error: runs a and other are not comparable; differing pins:" in res.stderr
    assert "error:   dataset_version: ds@1 (a) vs ds@2 (other)" in res.stderr and "--rebaseline" in res.stderr
    res = cli("analyze", "decomposition", "a", "other", "--store", db, "--resamples", "100", "--rebaseline",
              "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["rebaselined"] is True and out["pin_differences"] == [MISMATCH]
    assert out["rows"][0]["change"]["delta_A"]["value"] == pytest.approx(-0.25)
    res = cli("analyze", "decomposition", "a", "other", "--store", db, "--resamples", "100", "--rebaseline")
    assert res.exit_code == 0 and "rebaselined: dataset_version: ds@1 (a) → ds@2 (other)" in res.stdout
    out = json.loads(cli("analyze", "decomposition", "a", "b", "--store", db, "--resamples", "100", "--json").stdout)
    assert out["rebaselined"] is False and out["pin_differences"] == []
    res = cli("analyze", "decomposition", "a", "--store", db, "--rebaseline")
    assert res.exit_code == 2 and "--rebaseline applies to two runs" in res.stderr


def test_judge_pins_matter_only_when_the_correctness_metric_is_a_judge_metric(db):
    assert pins_for(["answer_f1", "recall@context"]) == tuple(
        p for p in PINS if p not in ("judge_model", "rubric_sha", "judge_prompt_sha", "judge_settings"))
    assert pins_for(["faithfulness"]) == PINS
    res = cli("analyze", "decomposition", "judged-1", "judged-2", "--store", db, "--resamples", "100", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["rebaselined"] is False
    res = cli("analyze", "decomposition", "judged-1", "judged-2", "--store", db, "--resamples", "100",
              "--correct", "faithfulness>=0.5")
    assert res.exit_code == 2
    assert "judge_model: judge-a (judged-1) vs judge-b (judged-2)" in res.stderr


def test_ladder_refuses_rungs_of_other_golden_sets_unless_rebaselined(db):
    res = cli("analyze", "ladder", "a", "other", "oracle", "--store", db, "--resamples", "100")
    assert res.exit_code == 2
    assert "error: runs a, other and oracle are not comparable; differing pins:" in res.stderr
    assert "dataset_version: ds@1 (a) vs ds@2 (other)" in res.stderr
    res = cli("analyze", "ladder", "a", "other", "oracle", "--store", db, "--resamples", "100", "--rebaseline",
              "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["rebaselined"] is True and out["pin_differences"] == [MISMATCH]
    res = cli("analyze", "ladder", "a", "other", "oracle", "--store", db, "--resamples", "100", "--rebaseline")
    assert res.exit_code == 0 and "rebaselined: dataset_version: ds@1 (a) → ds@2 (other)" in res.stdout


def test_slices_and_cases_refuse_runs_of_other_golden_sets_unless_rebaselined(db, tmp_path):
    res = cli("analyze", "slices", "a", "other", "--store", db, "--resamples", "100")
    assert res.exit_code == 2
    assert "dataset_version: ds@1 (a) vs ds@2 (other)" in res.stderr and "--rebaseline" in res.stderr
    cases = tmp_path / "cases.jsonl"
    res = cli("analyze", "slices", "a", "other", "--store", db, "--resamples", "100", "--rebaseline", "--cases",
              cases, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["rebaselined"] is True and out["pin_differences"] == [MISMATCH]
    assert out["keys"][0]["delta"] == pytest.approx(-0.25) and cases.exists()
    res = cli("analyze", "slices", "a", "other", "--store", db, "--resamples", "100", "--rebaseline")
    assert res.exit_code == 0 and "rebaselined: dataset_version: ds@1 (a) → ds@2 (other)" in res.stdout


def test_ablation_and_report_sections_pass_the_rebaseline_on(db):
    from ragassay.analysis.ablation import AblationSpec, Expectation, evaluate_ablation
    from ragassay.analysis.report_data import analysis_sections

    spec = AblationSpec("x", Path("base.yaml"), {"reranker": {"kind": "lexical"}},
                        expectations=(Expectation("all", "hurt"),))
    with Store.open(db, read_only=True) as st:
        with pytest.raises(PinMismatchError, match="dataset_version: ds@1 \\(a\\) vs ds@2 \\(other\\)"):
            evaluate_ablation(st, spec, "a", "other", None, n_resamples=200)
        assert evaluate_ablation(st, spec, "a", "other", None, n_resamples=200,
                                 rebaseline=True)["pin_differences"] == [MISMATCH]
        # the report analyses runs with differing pins only when its comparisons were rebaselined
        comp = compare_runs(st, "a", "other", n_resamples=200, rebaseline=True)
        recs = [st.get_run("a"), st.get_run("other")]
        sections = analysis_sections(st, recs, None, {}, [comp], n_resamples=100)
    assert sections["decomposition"]["changes"][0]["pin_differences"] == [MISMATCH]
    assert sections["slices"][0]["rebaselined"] is True


# ------------------------------------------------------------------------------------------- oracle
def test_ladder_refuses_an_oracle_that_is_not_an_oracle_run(db):
    res = cli("analyze", "ladder", "a", "b", "--oracle", "posing", "--store", db, "--resamples", "100")
    assert res.exit_code == 2
    assert ("error: --oracle posing: run 'posing' is not an oracle-context run (its config does not say "
            "oracle: true)") in res.stderr
    assert "`oracle: true` (the bundled oracle.yaml)" in res.stderr
    res = cli("analyze", "ladder", "a", "b", "--oracle", "oracle", "--store", db, "--resamples", "100", "--json")
    assert res.exit_code == 0, res.stderr
    rungs = {r["name"]: r["oracle"] for r in json.loads(res.stdout)["rungs"]}
    assert rungs == {"a": False, "b": False, "oracle": True}


# ------------------------------------------------------------------------------------------- slices
def _golden_yaml() -> str:
    tags = {0: "[held_out]", 1: "[held_out]", 2: "[held_out, synthetic]", 3: "[]"}
    lines = ["dataset: tiny", "queries:"]
    for i in range(8):
        lines += [f"  - query_id: q{i:03d}", f"    question: 'What is the notice period, case {i}?'",
                  "    stratum: lexical", "    answerable: true", f"    tags: {tags.get(i, '[]')}",
                  "    evidence:", "      - {doc_id: a, quote: 'The notice period is thirty days.', grade: 3}",
                  "    reference_answer: thirty days"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def tiny(tmp_path):
    """A built 8-query golden set (3 tagged held_out, 1 synthetic, no created dates) and two runs on it."""
    from ragassay.corpus import load_corpus
    from ragassay.golden import build_golden

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("The notice period is thirty days. Fees are payable monthly.\n")
    (tmp_path / "golden.yaml").write_text(_golden_yaml())
    gs = build_golden(tmp_path / "golden.yaml", load_corpus(tmp_path / "corpus"), tmp_path / "golden")
    path = tmp_path / "tiny.duckdb"
    with Store.open(path) as st:
        make_run(st, "ta", {"answer_f1": np.zeros(8)}, dataset_version=gs.dataset_version,
                 created_at=dt.datetime(2026, 1, 1))
        make_run(st, "tb", {"answer_f1": np.r_[np.ones(3), np.zeros(5)]}, dataset_version=gs.dataset_version,
                 created_at=dt.datetime(2026, 3, 1))
    return path, tmp_path / "golden"


def test_a_slice_key_whose_value_no_query_has_is_refused_with_the_values_that_exist(tiny):
    db, golden = tiny
    base = ("analyze", "slices", "ta", "tb", "--store", db, "--golden", golden, "--resamples", "100")
    res = cli(*base, "--by", "tag:nonexistent")
    assert res.exit_code == 2
    assert res.stderr == ("error: slice key 'tag:nonexistent': no paired query has the tag 'nonexistent', so it "
                          "would be one slice holding every query; tags present: tag:held_out (3), "
                          "tag:synthetic (1); other keys: stratum, source, answerable\n")
    res = cli(*base, "--by", "created")
    assert res.exit_code == 2 and "none of the 8 paired queries has a `created` date" in res.stderr
    res = cli(*base, "--by", "tag:held_out", "--json")
    assert res.exit_code == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)["keys"][0]["slices"]}
    assert rows["held_out"]["n"] == 3 and rows["not held_out"]["n"] == 5
    assert rows["held_out"]["delta"] == pytest.approx(1.0) and rows["not held_out"]["delta"] == 0.0


T_A, T_B = dt.datetime(2026, 1, 1), dt.datetime(2026, 3, 1)


@pytest.mark.parametrize(("declared_at", "declared"), [
    (dt.datetime(2025, 12, 1), True),   # before both runs
    (T_A, True),                        # at the earlier run's creation
    (dt.datetime(2026, 2, 1), False),   # between: after run A was made
    (dt.datetime(2026, 4, 1), False),   # after both
])
def test_a_key_is_declared_only_at_or_before_both_runs(declared_at, declared):
    runs = (SimpleNamespace(created_at=T_B), SimpleNamespace(created_at=T_A))
    assert declared_before(declared_at, runs) is declared


def test_a_run_without_created_at_cannot_show_a_key_was_declared_before_it():
    runs = (SimpleNamespace(created_at=None), SimpleNamespace(created_at=T_B))
    assert declared_before(dt.datetime(2000, 1, 1), runs) is False


@pytest.mark.parametrize(("when", "exploratory"), [
    ("2025-12-01T09:00:00", False), ("2026-02-01T09:00:00", True), ("2026-04-01T09:00:00", True)])
def test_slices_declared_between_the_runs_are_exploratory(tiny, tmp_path, when, exploratory):
    db, golden = tiny
    f = tmp_path / "slices.yaml"
    f.write_text(f"declared_at: {when}\nslices: [stratum]\n")
    res = cli("analyze", "slices", "ta", "tb", "--store", db, "--golden", golden, "--declared", f, "--resamples",
              "100", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["keys"][0]["exploratory"] is exploratory
    res = cli("analyze", "slices", "ta", "tb", "--store", db, "--declared", f, "--resamples", "100")
    assert res.exit_code == 0 and ("(exploratory)" if exploratory else "(declared)") in res.stdout


# -------------------------------------------------------------------------------------- consistency
def test_a_refusal_is_an_answer_of_its_own_in_the_modal_fraction_and_pair_agreement(tmp_path):
    from ragassay.trace import Trace
    from ragassay.trace.io import write_traces
    from ragassay.trace.schema import RunHeader

    path = tmp_path / "c.duckdb"
    with Store.open(path) as st:
        # one query, five trials: four answers alike after normalization, one refusal (no answer_f1)
        run = make_run(st, "rep", {"answer_f1": np.array([1.0, 1.0, 1.0, 1.0, np.nan])}, trials=5, qids=["q000"],
                       extra={"traces_dir": str(tmp_path)})
    traces = [Trace(trace_id=f"t{i}", query_id="q000", trial=i, outcome="answered", answer=a)
              for i, a in enumerate(["Paris", "paris.", "Paris", "the Paris"])]
    traces.append(Trace(trace_id="t4", query_id="q000", trial=4, outcome="refused"))
    write_traces(tmp_path / f"{run}.jsonl", RunHeader(run_name="rep"), traces)
    res = cli("analyze", "consistency", "rep", "--store", path, "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    item = out["items"][0]
    # by hand: clusters {paris: 4, <refused>: 1}; modal 4/5; pairs agreeing 4*3 + 1*0 of 5*4 ordered pairs
    assert item["clusters"] == [4, 1]
    assert item["modal_fraction"] == pytest.approx(0.8) and item["pair_agreement"] == pytest.approx(0.6)
    assert out["summary"]["modal_fraction"] == pytest.approx(0.8)
    assert out["summary"]["pair_agreement"] == pytest.approx(0.6)
    # the pass rate counts the four trials with an answer_f1; all five trials are counted
    assert out["summary"]["pass@1"] == 1.0 and item["trials"] == 4 and out["trials"] == 5
    res = cli("analyze", "consistency", "rep", "--store", path)
    assert res.exit_code == 0 and "modal fraction 0.800  pair agreement 0.600" in res.stdout


def test_abstentions_errors_and_all_refused_items_are_clusters_too():
    got = consistency_of({"q": [True, True, False]},
                         {"q": ["a", "a", "b", "<abstained>", "<error>"], "r": ["<refused>"] * 3})
    q, r = got["items"]
    # clusters (2, 1, 1, 1): modal 2/5; agreeing ordered pairs 2*1 of 5*4
    assert q["clusters"] == [2, 1, 1, 1] and q["modal_fraction"] == pytest.approx(0.4)
    assert q["pair_agreement"] == pytest.approx(0.1)
    # every trial refused: no pass rate, but three identical answers
    assert r["pass@1"] is None and r["clusters"] == [3] and r["modal_fraction"] == 1.0
    assert got["summary"]["n_items"] == 2 and got["summary"]["pass@1"] == pytest.approx(2 / 3)


def test_traces_of_another_run_are_refused(store):
    run = make_run(store, "rep", {"answer_f1": np.ones(4)}, trials=2)
    other = {("x", 0): SimpleNamespace(answer="a", outcome="answered")}
    with pytest.raises(InputError, match="the traces given hold none of run 'rep'"):
        consistency_of_run(store, run, traces=other)


# ------------------------------------------------------------------------------------------ hygiene
@pytest.fixture(scope="module")
def bundled_db(tmp_path_factory):
    """The bundled golden set and runs on it: sys and cand, v2 (golden ids, another dataset version) and
    foreign (scored against another golden set: none of its ids is a golden id)."""
    from ragassay.analysis.runner import load_inputs

    root = tmp_path_factory.mktemp("hygiene")
    corpus, golden = load_inputs(None, None, root / "golden")
    ids, n = golden.query_ids, len(golden.query_ids)
    strata = [q.stratum for q in golden.queries]
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    recall = np.where(np.arange(n) % 3 == 0, 0.0, 1.0)
    pins = {"dataset_version": golden.dataset_version, "corpus_digest": corpus.digest}
    path = root / "h.duckdb"
    with Store.open(path) as st:
        make_run(st, "sys", {"answer_f1": a, "recall@context": recall}, qids=ids, strata=strata, **pins)
        make_run(st, "cand", {"answer_f1": b, "recall@context": recall}, qids=ids, strata=strata, **pins)
        make_run(st, "v2", {"answer_f1": b, "recall@context": recall}, qids=ids, strata=strata,
                 **{**pins, "dataset_version": "licenses-demo@v2"})
        make_run(st, "foreign", {"answer_f1": b[:40], "recall@context": recall[:40]}, dataset_version="elsewhere@1")
    return path, golden, a, b, recall


def test_hygiene_audits_every_run_it_is_given(bundled_db):
    path, golden, a, b, recall = bundled_db
    n = len(golden.query_ids)
    res = cli("analyze", "hygiene", "sys", "cand", "--store", path, "--resamples", "200", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    flagged = [int(((v >= 0.5) & (recall == 0)).sum()) for v in (a, b)]
    assert [(x["run"], x["counts"]["total"]["flagged"]) for x in out["bypass"]] == [("sys", flagged[0]),
                                                                                    ("cand", flagged[1])]
    assert [x["counts"]["total"]["defined"] for x in out["bypass"]] == [n, n]
    overall = {r["run"]: r for r in out["shortcut"] if r["stratum"] == "all"}
    # the keyword baseline is defined on answerable queries with a reference answer; each run on those
    scored = np.array([q.answerable and bool(q.reference_answer) for q in golden.queries])
    assert overall["sys"]["n"] == overall["cand"]["n"] == scored.sum()
    assert overall["sys"]["system"] == pytest.approx(a[scored].mean())
    assert overall["cand"]["system"] == pytest.approx(b[scored].mean())
    assert overall["sys"]["baseline"] == overall["cand"]["baseline"]
    assert out["exclusions"]["marginals"]["bypass:sys"] == flagged[0]
    assert out["exclusions"]["marginals"]["bypass:cand"] == flagged[1]
    res = cli("analyze", "hygiene", "sys", "cand", "--store", path, "--resamples", "200")
    assert res.exit_code == 0, res.stderr
    for name, k in zip(("sys", "cand"), flagged, strict=True):
        assert f"keyword baseline (BM25 + extractive) vs {name}" in res.stdout
        assert f"retrieval bypass, {name}: {k} of {n} correct with no relevant evidence delivered" in res.stdout


def test_hygiene_refuses_runs_of_another_golden_set(bundled_db):
    path, golden, *_ = bundled_db
    gv = golden.dataset_version
    res = cli("analyze", "hygiene", "foreign", "--store", path, "--resamples", "200")
    assert res.exit_code == 2
    assert res.stderr == (f"error: run 'foreign' was scored against golden set 'elsewhere@1': none of its 40 query "
                          f"ids is an id of the golden set given ('{gv}'); pass the golden set it was scored with "
                          f"(--golden)\n")
    res = cli("analyze", "hygiene", "foreign", "--store", path, "--resamples", "200", "--rebaseline")
    assert res.exit_code == 2 and "none of its 40 query ids" in res.stderr
    res = cli("analyze", "hygiene", "v2", "--store", path, "--resamples", "200")
    assert res.exit_code == 2
    assert f"dataset_version: licenses-demo@v2 (run v2) vs {gv} (given)" in res.stderr
    res = cli("analyze", "hygiene", "sys", "v2", "--store", path, "--resamples", "200")
    assert res.exit_code == 2
    assert f"error:   dataset_version: {gv} (sys) vs licenses-demo@v2 (v2)" in res.stderr


def test_hygiene_rebaselined_names_the_differing_pins(bundled_db):
    path, golden, *_ = bundled_db
    gv = golden.dataset_version
    res = cli("analyze", "hygiene", "sys", "v2", "--store", path, "--resamples", "200", "--rebaseline", "--json")
    assert res.exit_code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["rebaselined"] is True
    assert out["pin_differences"] == [
        {"pin": "dataset_version", "run_a": "sys", "a": gv, "run_b": "v2", "b": "licenses-demo@v2"},
        {"pin": "dataset_version", "run_a": "golden set given", "a": gv, "run_b": "v2", "b": "licenses-demo@v2"}]
    assert [x["run"] for x in out["bypass"]] == ["sys", "v2"]
    res = cli("analyze", "hygiene", "sys", "v2", "--store", path, "--resamples", "200", "--rebaseline")
    assert res.exit_code == 0
    assert f"rebaselined: dataset_version: {gv} (sys) → licenses-demo@v2 (v2)" in res.stdout


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"n_resamples": 0}, "n_resamples must be an integer between 100 and 1,000,000, got 0"),
    ({"confidence": 1.5}, "confidence must lie strictly between 0 and 1, got 1.5"),
    ({"seed": -1}, "seed must be an integer >= 0, got -1"),
])
def test_the_decomposition_functions_refuse_bad_resampling_settings(tmp_path, kw, fragment):
    from ragassay.analysis.decomposition import decomposition_between, decomposition_of_run, oracle_ladder

    with Store.open(tmp_path / "s.duckdb") as st:
        make_run(st, "a", {"answer_f1": np.linspace(0, 1, 20), "recall@context": np.ones(20)})
        make_run(st, "b", {"answer_f1": np.linspace(0, 1, 20), "recall@context": np.ones(20)})
        for call in (lambda: decomposition_of_run(st, "a", **kw), lambda: decomposition_between(st, "a", "b", **kw),
                     lambda: oracle_ladder(st, ["a", "b"], **kw)):
            with pytest.raises(InputError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
                call()


def test_consistency_refuses_a_correctness_metric_that_is_not_a_score(tmp_path):
    with Store.open(tmp_path / "s.duckdb") as st:
        make_run(st, "tok", {"context_tokens": np.linspace(10, 900, 20)})
        with pytest.raises(InputError, match="is not a score in \\[0, 1\\]"):
            consistency_of_run(st, "tok", correct="context_tokens>=0.5")
