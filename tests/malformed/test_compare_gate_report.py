"""Malformed input to `compare`, `gate` and `report`: bad run ids, flags, policies, pin mismatches, markup in
names and missing traces. Each case asserts the exact outcome: a clean `error:` line (exit 2), or the
documented gate exit code and the counted problem in `--json`."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ragassay.corpus import load_corpus
from ragassay.golden import build_golden
from ragassay.store import RunRecord, Store

# the harness's helper, loaded by path: several test folders have a conftest.py and no package
_spec = importlib.util.spec_from_file_location("_malformed_harness", Path(__file__).with_name("conftest.py"))
_harness = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_harness)
tree_digest = _harness.tree_digest

MARKUP = "[/bold]<script>alert(1)</script>"
N = 12
CLEAN = {"unit_failures": 0}
DOC = "The notice period is thirty days. Fees are payable monthly in advance. Late payment accrues interest.\n"


def _golden_yaml(n: int) -> str:
    lines = ["dataset: tiny", "queries:"]
    for i in range(n):
        lines += [f"  - query_id: q{i:03d}", f"    question: 'What is the notice period, case {i}?'",
                  "    stratum: lexical", "    answerable: true", "    evidence:",
                  "      - {doc_id: a, quote: 'The notice period is thirty days.', grade: 3}",
                  "    reference_answer: thirty days", "    source: human", "    created: 2026-01-01"]
    return "\n".join(lines) + "\n"


def _put(st: Store, name: str, values: dict, *, extra=None, config=None, **pins) -> str:
    rec = {"hit_rule": "any_overlap", "gain": "exp", "relevance_threshold": 2, "ties": "given",
           "dataset_version": "tiny@x", "corpus_digest": "sha256:x", "metric_version": "ragassay-metrics-1", **pins}
    run_id = st.create_run(RunRecord(name=name, config=config or {"name": name, "packer": {"budget_tokens": 1000}},
                                     trials=1, n_queries=N, extra=CLEAN if extra is None else extra, **rec))
    qids = [f"q{i:03d}" for i in range(N)]
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": []}
    for m, v in values.items():
        cols["query_id"] += qids
        cols["trial"] += [0] * N
        cols["metric"] += [m] * N
        cols["value"] += [float(x) for x in v]
        cols["stratum"] += ["lexical"] * N
    st.write_batch(run_id, cols, done=[(q, 0, "done", None) for q in qids])
    st.finish_run(run_id)
    return run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny corpus and golden set, and a store of runs scored on it (plus runs with odd pins)."""
    root = tmp_path_factory.mktemp("cgr")
    (root / "corpus").mkdir()
    (root / "corpus" / "a.txt").write_text(DOC)
    (root / "golden.yaml").write_text(_golden_yaml(N))
    corpus = load_corpus(root / "corpus")
    gs = build_golden(root / "golden.yaml", corpus, root / "golden")
    pins = {"dataset_version": gs.dataset_version, "corpus_digest": corpus.digest}
    rng = np.random.default_rng(0)
    base = rng.random(N)
    vals = {"recall@5": base, "recall@10": base, "recall@final_k": base, "ndcg@final_k": base,
            "answer_f1": base, "context_tokens": np.full(N, 480.0)}
    db = root / "r.duckdb"
    with Store.open(db) as st:
        _put(st, "base", vals, **pins, config={"name": "base", "reranker": {"final_k": 10}})
        _put(st, "same", vals, **pins, config={"name": "same", "reranker": {"final_k": 10}})
        _put(st, "k5", vals, **pins, config={"name": "k5", "reranker": {"final_k": 5}})
        _put(st, MARKUP, vals, **pins, config={"name": "m", "reranker": {"final_k": 10}})
        _put(st, "other-set", vals, dataset_version="elsewhere@1", corpus_digest="sha256:else")
        for pin, value in (("hit_rule", "doc"), ("gain", "linear"), ("relevance_threshold", 1), ("ties", "average"),
                           ("metric_version", "ragassay-metrics-0"), ("corpus_digest", "sha256:zzz"),
                           ("dataset_version", "tiny@other")):
            _put(st, f"pin-{pin}", vals, **{**pins, pin: value}, config={"name": pin, "reranker": {"final_k": 10}})
        _put(st, "cut", {**{k: v for k, v in vals.items() if k != "recall@10"}, "recall@20": base}, **pins,
             config={"name": "cut", "reranker": {"final_k": 10}})
        _put(st, "nothing-shared", {"other": base}, **pins)
        _put(st, "units-bad", vals, **pins, extra={"unit_failures": 4},
             config={"name": "u", "reranker": {"final_k": 10}})
        _put(st, "units-unknown", vals, **pins, extra={}, config={"name": "u2", "reranker": {"final_k": 10}})
        noise = rng.normal(0, 1, N)
        _put(st, "noisy", {**vals, "answer_f1": base + 0.3 * (noise - noise.mean())}, **pins,
             config={"name": "noisy", "reranker": {"final_k": 10}})
    return {"root": root, "db": db, "golden": root / "golden", "corpus": root / "corpus"}


def _args(world, *args):
    return [str(a).replace("{db}", str(world["db"])).replace("{root}", str(world["root"])) for a in args]


COMPARE_ERRORS = [
    (("nope", "same"), ["no run matches 'nope'"]),
    (("", "same"), ["empty run reference"]),
    (("base", "same", "--min-effect", "-1"), ["--min-effect '-1': the minimum effect must be a finite number >= 0"]),
    (("base", "same", "--min-effect", "nan"), ["must be a finite number >= 0"]),
    (("base", "same", "--min-effect", "inf"), ["must be a finite number >= 0"]),
    (("base", "same", "--min-effect", "abc"), ["--min-effect 'abc': not a number"]),
    (("base", "same", "--min-effect", "=0.1"), ["empty metric name"]),
    (("base", "same", "--min-effect", "recall@5=-2"), ["must be a finite number >= 0"]),
    (("base", "same", "--min-effect", "bogus@5=0.1"), ["--min-effect names bogus@5"]),
    (("base", "same", "--resamples", "5"), ["--resamples must be an integer between 100 and 1,000,000, got 5"]),
    (("base", "same", "--resamples", "10000000"), ["--resamples must be an integer between 100"]),
    (("base", "same", "-m", "nonexistent"), ["metric(s) ['nonexistent'] missing from one of the runs"]),
    (("base", "nothing-shared"), ["have no metric in common"]),
    (("base", "k5", "-m", "recall@final_k"),
     ["recall@final_k: not a like-for-like comparison; final_k differs: 10 (A) vs 5 (B)"]),
    (("base", "k5", "-m", "ndcg@final_k", "-m", "recall@5"), ["ndcg@final_k: not a like-for-like comparison"]),
    (("base", "pin-hit_rule"), ["differing pins:", "hit_rule: any_overlap (A) vs doc (B)", "--rebaseline"]),
    (("base", "pin-gain"), ["gain: exp (A) vs linear (B)"]),
    (("base", "pin-relevance_threshold"), ["relevance_threshold: 2 (A) vs 1 (B)"]),
    (("base", "pin-ties"), ["ties: given (A) vs average (B)"]),
    (("base", "pin-metric_version"), ["metric_version: ragassay-metrics-1 (A) vs ragassay-metrics-0 (B)"]),
    (("base", "pin-corpus_digest"), ["corpus_digest:", "sha256:zzz (B)"]),
    (("base", "pin-dataset_version"), ["dataset_version:", "tiny@other (B)"]),
    (("base", "cut"), ["cutoffs: (5, 10) (A) vs (5, 20) (B)"]),
]


@pytest.mark.parametrize("args, fragments", COMPARE_ERRORS, ids=[" ".join(a) or "empty" for a, _ in COMPARE_ERRORS])
def test_compare_bad_input_is_a_clean_error(world, cli, args, fragments):
    before = tree_digest(world["root"])
    res = cli("compare", *args, "--store", world["db"], "--resamples" if "--resamples" not in args else "--seed",
              "200" if "--resamples" not in args else "0")
    res.assert_clean_error(*fragments)
    assert tree_digest(world["root"]) == before


@pytest.mark.parametrize("store_kind, fragment", [
    ("missing", "no results store here"),
    ("folder", "not a readable DuckDB results store"),
    ("text", "not a readable DuckDB results store"),
])
def test_compare_bad_store_is_a_clean_error(world, cli, tmp_path, store_kind, fragment):
    path = tmp_path / "s.duckdb"
    if store_kind == "folder":
        path.mkdir()
    elif store_kind == "text":
        path.write_text("not a database\n")
    cli("compare", "a", "b", "--store", path).assert_clean_error(fragment)


def test_compare_with_rebaseline_lists_the_pins_in_every_claim(world, cli):
    res = cli("compare", "base", "pin-hit_rule", "--store", world["db"], "--resamples", "200", "--rebaseline",
              "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["pin_differences"] == [{"pin": "hit_rule", "a": "any_overlap", "b": "doc"}]
    assert out["claims"] and all("rebaselined across differing pins: hit_rule any_overlap → doc" in c
                                 and "configs identical" not in c for c in out["claims"])


def test_compare_lists_metrics_refused_for_differing_final_k(world, cli):
    res = cli("compare", "base", "k5", "--store", world["db"], "--resamples", "200", "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert sorted(e["metric"] for e in out["excluded_metrics"]) == ["ndcg@final_k", "recall@final_k"]
    assert "final_k" not in {r["metric"].split("@")[-1] for r in out["rows"]}
    text = cli("compare", "base", "k5", "--store", world["db"], "--resamples", "200")
    assert "not compared: ndcg@final_k: final_k differs: 10 (A) vs 5 (B)" in text.out


def _policy(tmp_path, text: str | bytes) -> Path:
    p = tmp_path / "gate.yaml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


GATE_POLICY_ERRORS = [
    ("metrics:\n  recall@5: {min_effect: 9}\n", ["gate.yaml:2: metrics.recall@5.min_effect: 9 is out of range"]),
    ("metrics:\n  recall@5: {min_effect: -1}\n",
     ["gate.yaml:2: metrics.recall@5.min_effect: Input should be greater than 0 (got -1)"]),
    ("metrics:\n  recall@5: {min_effect: 0}\n", ["metrics.recall@5.min_effect: Input should be greater than 0"]),
    ("metrics:\n  recall@5: {min_effect: .inf}\n", ["metrics.recall@5.min_effect"]),
    ("metrics:\n  recall@5: {min_efect: 0.02}\n", ["metrics.recall@5.min_efect: Extra inputs are not permitted"]),
    ("metrics:\n  recall@5: 0.03\n", ["metrics.recall@5: Input should be a valid dictionary"]),
    ("confidence: 1.5\n", ["gate.yaml:1: confidence: Input should be less than 1 (got 1.5)"]),
    ("confidence: 0\n", ["confidence: Input should be greater than 0"]),
    ("n_resamples: 5\n", ["n_resamples: Input should be greater than or equal to 100 (got 5)"]),
    ("n_resamples: 10.5\n", ["n_resamples: Input should be a valid integer"]),
    ("seed: -3\n", ["seed: Input should be greater than or equal to 0"]),
    ("treshold: 9\n", ["gate.yaml:1: treshold: Extra inputs are not permitted"]),
    ("hard:\n  min_judged_fraction: 1.5\n", ["gate.yaml:2: hard.min_judged_fraction: Input should be less than"]),
    ("hard:\n  max_schema_failures: -1\n", ["hard.max_schema_failures: Input should be greater than or equal to 0"]),
    ("hard:\n  max_unit_failures: true\n", ["hard.max_unit_failures: Input should be a valid integer"]),
    ("hard:\n  max_p95_latency_ms: 0\n", ["hard.max_p95_latency_ms: Input should be greater than 0"]),
    ("hard:\n  max_cost_per_query: -0.5\n", ["hard.max_cost_per_query: Input should be greater than or equal to 0"]),
    ("hard:\n  min_citation_validity: '1'\n", ["hard.min_citation_validity: Input should be a valid number"]),
    ("metrics: {}\n", ["metrics: Dictionary should have at least 1 item"]),
    ("- 1\n- 2\n", ["a gate policy is a mapping (confidence, metrics, hard), got a list"]),
    ("metrics: [\n", ["invalid YAML in the gate policy"]),
    ("confidence: 0.9\nconfidence: 0.95\n", ["key 'confidence' given twice"]),
    (b"confidence: 0.9 # caf\xe9\n", ["not UTF-8 text (byte 0xE9"]),
    ("metrics:\n  bogus@3: {min_effect: 0.02}\n", ["metric(s) ['bogus@3'] missing from one of the runs"]),
]


@pytest.mark.parametrize("text, fragments", GATE_POLICY_ERRORS,
                         ids=[f"policy{i}" for i in range(len(GATE_POLICY_ERRORS))])
def test_gate_bad_policy_is_a_clean_error(world, cli, tmp_path, text, fragments):
    p = _policy(tmp_path, text)
    cli("gate", "base", "same", "--store", world["db"], "--policy", p).assert_clean_error(*fragments)


@pytest.mark.parametrize("args, fragments", [
    (("base", "same", "--policy", "{root}/missing.yaml"), ["missing.yaml: no such gate policy file"]),
    (("base", "same", "--policy", "{root}"), ["is a folder; pass the gate policy file"]),
    (("base", "nope"), ["no run matches 'nope'"]),
    (("base", "pin-gain"), ["differing pins:", "gain: exp (A) vs linear (B)"]),
])
def test_gate_bad_reference_is_a_clean_error(world, cli, args, fragments):
    cli("gate", *_args(world, *args), "--store", world["db"]).assert_clean_error(*fragments)


def test_gate_refuses_final_k_metrics_across_different_final_k(world, cli, tmp_path):
    p = _policy(tmp_path, "n_resamples: 200\nmetrics:\n  ndcg@final_k: {min_effect: 0.03}\n")
    cli("gate", "base", "k5", "--store", world["db"], "--policy", p).assert_clean_error(
        "ndcg@final_k: not a like-for-like comparison; final_k differs: 10 (A) vs 5 (B)",
        "compare a fixed depth both runs have instead (@5")


@pytest.mark.parametrize("cand, code, verdict, check, fragment", [
    ("units-bad", 1, "FAIL", "unit_failures",
     "4 retrieved units failed validation against the corpus (candidate units-bad: 4); allowed 0; see `ragassay "
     "runs --json`"),
    ("units-unknown", 0, "WARN", "unit_failures", "unknown for candidate units-unknown"),
    ("noisy", 0, "WARN", "answer_f1", "underpowered: MDE"),
    ("same", 0, "PASS", "answer_f1", "no credible regression"),
])
def test_gate_outcomes_keep_their_exit_codes(world, cli, tmp_path, cand, code, verdict, check, fragment):
    p = _policy(tmp_path, "n_resamples: 200\nmetrics:\n  answer_f1: {min_effect: 0.03}\nhard:\n"
                          "  min_citation_validity: null\n")
    res = cli("gate", "base", cand, "--store", world["db"], "--policy", p, "--json")
    assert res.code == code, res.err
    out = json.loads(res.out)
    assert out["verdict"] == verdict and out["exit_code"] == code
    (c,) = [c for c in out["checks"] if c["name"] == check]
    assert fragment in c["detail"]


def test_markup_in_run_names_never_crashes_compare_or_gate(world, cli, tmp_path):
    res = cli("compare", "base", MARKUP, "--store", world["db"], "--resamples", "200")
    assert res.code == 0, res.err
    assert f"→ {MARKUP} (" in res.out
    p = _policy(tmp_path, "n_resamples: 200\nmetrics:\n  answer_f1: {min_effect: 0.03}\n")
    res = cli("gate", MARKUP, "base", "--store", world["db"], "--policy", p)
    assert res.code == 0, res.err
    assert f"gate PASS: {MARKUP} → base" in res.out


REPORT_ERRORS = [
    (("base", "same"), [], ["runs were scored on dataset tiny@", "not the bundled set", "pass --golden and --corpus"]),
    (("other-set",), ["--golden", "{golden}", "--corpus", "{corpus}"],
     ["not the ones the runs were scored on", "run other-set", "dataset elsewhere@1 / corpus sha256:else"]),
    (("base",), ["--golden", "{golden}"], ["pass --golden and --corpus together"]),
    (("base",), ["--corpus", "{corpus}"], ["pass --golden and --corpus together"]),
    (("nope",), ["--golden", "{golden}", "--corpus", "{corpus}"], ["no run matches 'nope'"]),
    (("base", "pin-gain"), ["--golden", "{golden}", "--corpus", "{corpus}"], ["differing pins:", "gain"]),
    (("base", "same"), ["--golden", "{golden}", "--corpus", "{corpus}", "--resamples", "3"],
     ["--resamples must be an integer between 100"]),
]


@pytest.mark.parametrize("runs, opts, fragments", REPORT_ERRORS, ids=[f"report{i}" for i in range(len(REPORT_ERRORS))])
def test_report_bad_input_is_a_clean_error(world, cli, tmp_path, runs, opts, fragments):
    opts = [o.replace("{golden}", str(world["golden"])).replace("{corpus}", str(world["corpus"])) for o in opts]
    before = tree_digest(world["root"])
    cli("report", *runs, "-o", tmp_path / "rep", "--store", world["db"], *opts).assert_clean_error(*fragments)
    assert not (tmp_path / "rep").exists()
    assert tree_digest(world["root"]) == before


@pytest.mark.parametrize("traces_opt, reason", [
    ([], "no traces folder was recorded with the run and none was given"),
    (["--traces-dir", "{root}/no-such-dir"], "no-such-dir does not exist"),
    (["--traces-dir", "{root}/golden.yaml"], "golden.yaml is not a folder"),
    (["--traces-dir", "{root}"], "no {run_id}.jsonl in"),
])
def test_report_without_traces_warns_and_says_why(world, cli, tmp_path, traces_opt, reason):
    out_dir = tmp_path / "rep"
    res = cli("report", "base", MARKUP, "-o", out_dir, "--store", world["db"], "--golden", world["golden"],
              "--corpus", world["corpus"], "--resamples", "200", "--json", *_args(world, *traces_opt))
    assert res.code == 0, res.err
    out = json.loads(res.out)
    with Store.open(world["db"], read_only=True) as st:
        run_id = st.get_run("base").run_id
    reason = reason.replace("{run_id}", run_id)
    assert len(out["warnings"]) == 2 and reason in out["warnings"][0]
    page = (out_dir / "index.html").read_text()
    assert "Per-query traces unavailable for" in page and reason.replace("'", "&#39;") in page
    # the hostile run name is text on the page, never markup
    assert "<script>alert(1)</script>" not in page
    assert "[/bold]&lt;script&gt;alert(1)&lt;/script&gt;" in page
    res = cli("report", "base", "-o", tmp_path / "rep2", "--store", world["db"], "--golden", world["golden"],
              "--corpus", world["corpus"], *_args(world, *traces_opt))
    assert res.code == 0 and "warning: run base:" in res.err
