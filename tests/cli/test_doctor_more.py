"""`ragassay doctor`'s newer checks, each seen firing and seen staying quiet: the sample size counted over
the queries a metric is defined on, a reranker offered no more candidates than it keeps, a low judged
fraction among stored judge metrics, a judge of the generator's model family; and its lines cite docs pages,
never sections of a spec that does not ship."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm
from tests.analysis.conftest import make_run

from ragassay.cli.app import main as _main
from ragassay.cli.doctor import JUDGED_FLOOR, defined_on, model_family
from ragassay.judges.config import JudgeConfig
from ragassay.store import Store

DOCS = Path(__file__).resolve().parents[2] / "docs"


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def lines(args, capsys, area: str) -> list[dict]:
    code, out, err = cli([*args, "--json"], capsys)
    assert code in (0, 1), err
    return [c for c in json.loads(out)["checks"] if c["area"] == area]


def mde(n: int, sigma_d: float = 0.25) -> float:
    """The paired MDE at alpha 0.05 two-sided and 80% power, from scipy's normal quantiles (the oracle)."""
    return (norm.ppf(0.975) + norm.ppf(0.8)) * sigma_d / math.sqrt(n)


def golden_file(tmp_path, answerable: int, negative: int) -> Path:
    queries = [{"query_id": f"a{i}", "question": f"q {i}?", "stratum": "lexical", "answerable": True,
                "evidence": [{"doc_id": "d", "quote": "x", "grade": 3}]} for i in range(answerable)]
    queries += [{"query_id": f"n{i}", "question": f"n {i}?", "stratum": "negative", "answerable": False}
                for i in range(negative)]
    path = tmp_path / f"golden-{answerable}-{negative}.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in queries))
    return path


def policy_file(tmp_path, metrics: dict[str, float]) -> Path:
    path = tmp_path / f"policy-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text("metrics:\n" + "".join(f"  {m}: {{min_effect: {e}}}\n" for m, e in metrics.items()))
    return path


# ------------------------------------------------------------------------------------------ sample size
def test_metrics_undefined_on_negatives_are_sized_on_answerable_queries_only(tmp_path, capsys):
    assert (defined_on("ndcg@10"), defined_on("recall@fusion_depth"), defined_on("answer_f1"),
            defined_on("abstention_recall"), defined_on("precision@5"), defined_on("error")) == (
        "answerable", "answerable", "answerable", "unanswerable", "all", "all")
    # 50 queries detect 0.1 (n_for_mde(0.1, 0.25) = 50), but ndcg only compares the 30 answerable ones
    golden = golden_file(tmp_path, 30, 20)
    none_db = tmp_path / "none.duckdb"
    (size,) = lines(["doctor", "--store", none_db, "--golden", golden, "--policy",
                     policy_file(tmp_path, {"nDCG@10": 0.1})], capsys, "sample size")
    assert size["verdict"] == "WARN"
    assert size["detail"] == (f"30 answerable queries (of 50; ndcg@10 is undefined on the others) detect a change "
                              f"of {mde(30):.3f} at 80% power (sigma_d 0.25); the policy asks for 0.1 on ndcg@10 "
                              "(see docs/stats.md)")
    assert size["fix"].startswith(f"{math.ceil((mde(1) / 0.1) ** 2)} answerable queries for that effect")
    # abstention_recall is defined on the 20 negatives only; the worse of the two is named, the other counted
    (size,) = lines(["doctor", "--store", none_db, "--golden", golden, "--policy",
                     policy_file(tmp_path, {"nDCG@10": 0.1, "abstention_recall": 0.1})], capsys, "sample size")
    assert size["detail"].startswith(f"20 unanswerable queries (of 50; abstention_recall is undefined on the "
                                     f"others) detect a change of {mde(20):.3f}")
    assert "; 1 more metric(s) fall short too" in size["detail"]


def test_sample_size_stays_quiet_when_each_metric_has_enough_of_its_queries(tmp_path, capsys):
    none_db = tmp_path / "none.duckdb"
    # a metric defined on every query counts all 50: MDE 0.099 <= 0.1
    (size,) = lines(["doctor", "--store", none_db, "--golden", golden_file(tmp_path, 30, 20), "--policy",
                     policy_file(tmp_path, {"error": 0.1})], capsys, "sample size")
    assert mde(50) <= 0.1 and size == {"area": "sample size", "verdict": "PASS", "fix": "",
                                       "detail": "50 queries detect every policy minimum effect at 80% power "
                                                 "(sigma_d 0.25)"}
    # 50 answerable queries (and 20 negatives) give ndcg its 50
    (size,) = lines(["doctor", "--store", none_db, "--golden", golden_file(tmp_path, 50, 20), "--policy",
                     policy_file(tmp_path, {"ndcg@10": 0.1, "error": 0.1})], capsys, "sample size")
    assert size["verdict"] == "PASS" and size["detail"].startswith("each metric's queries (at least 50 of 70")


def test_a_policy_metric_defined_on_no_query_of_the_set_is_named(tmp_path, capsys):
    (size,) = lines(["doctor", "--store", tmp_path / "none.duckdb", "--golden", golden_file(tmp_path, 60, 0),
                     "--policy", policy_file(tmp_path, {"abstention_recall": 0.1})], capsys, "sample size")
    assert size["verdict"] == "WARN"
    assert size["detail"].startswith("abstention_recall (no unanswerable query): undefined on every query")


# ------------------------------------------------------------------------------------------ reranker depth
CONFIG = """name: r
chunker: {{kind: recursive, size: 128}}
bm25: {{enabled: true, depth: 50}}
fusion: {{depth: {depth}}}
reranker: {{kind: {kind}, final_k: {final_k}}}
generator: {{kind: extractive}}
"""


def config_file(tmp_path, depth: int, kind: str, final_k: int) -> Path:
    path = tmp_path / f"cfg-{depth}-{kind}-{final_k}.yaml"
    path.write_text(CONFIG.format(depth=depth, kind=kind, final_k=final_k))
    return path


def test_a_reranker_offered_no_more_than_final_k_candidates_is_flagged(tmp_path, capsys):
    cfg = config_file(tmp_path, 10, "lexical", 10)
    (line,) = lines(["doctor", "--store", tmp_path / "none.duckdb", "--config", cfg], capsys, "reranker")
    assert line["verdict"] == "WARN"
    assert line["detail"] == (f"{cfg}: fusion.depth 10 <= reranker.final_k 10: the lexical reranker is offered no "
                              "more candidates than it keeps, so it only reorders the fused list and can bring "
                              "nothing up from below it (see docs/pipeline.md)")
    assert line["fix"].startswith("raise fusion.depth well above final_k")


def test_a_reranker_with_room_to_choose_or_no_reranker_stays_quiet(tmp_path, capsys):
    args = ["doctor", "--store", tmp_path / "none.duckdb"]
    for cfg in (config_file(tmp_path, 11, "lexical", 10), config_file(tmp_path, 10, "none", 10)):
        args += ["--config", cfg]
    assert lines(args, capsys, "reranker") == []


# ------------------------------------------------------------------------------------------ judged fraction
def judged_store(tmp_path, name: str, defined: int, undefined: dict[str, int]) -> Path:
    """A store with one run judged by the local lexical judge, whose stored summary gives faithfulness
    ``defined`` values and ``undefined`` counts by reason."""
    db = tmp_path / f"{name}.duckdb"
    pins = JudgeConfig(provider="local", model="lexical", metrics=["faithfulness"]).pins()
    n = defined + sum(undefined.values())
    summary = {"items": n, "metrics": {"faithfulness": {"mean": 0.5, "defined": defined,
                                                        "undefined": sum(undefined.values())}},
               "undefined": [{"metric": "faithfulness", "reason": r, "count": c} for r, c in undefined.items()]}
    with Store.open(db) as st:
        values = np.r_[np.full(defined, 0.5), np.full(n - defined, np.nan)]
        st.set_judge_pins(make_run(st, name, {"faithfulness": values}), pins, summary)
    return db


def test_a_judge_metric_with_few_verdicts_among_judgeable_answers_is_flagged(tmp_path, capsys):
    # 60 verdicts of 90 judgeable answers; the 10 unanswered ones are undefined by definition, not judgeable
    db = judged_store(tmp_path, "flaky", 60, {"judge_error": 25, "not_started": 5, "not_answered": 10})
    (line,) = lines(["doctor", "--store", db], capsys, "judged fraction")
    assert line["verdict"] == "WARN"
    assert line["detail"] == ("run flaky: the judge gave a verdict on under 90% of the answers it could judge: "
                              "faithfulness 60 of 90 (67%; judge_error 25, not_started 5); each mean speaks only "
                              "for the answers that were judged (see docs/judges.md)")
    assert line["fix"].startswith("ragassay judge flaky --judge JUDGE.yaml --resume asks again the calls")


def test_judged_fraction_stays_quiet_at_the_floor_and_leaves_out_answers_nothing_could_judge(tmp_path, capsys):
    assert JUDGED_FLOOR == 0.9
    # exactly 90%: not under the floor; not_answered / no_claims are left out of the denominator
    db = judged_store(tmp_path, "steady", 90, {"judge_refused": 10, "not_answered": 40, "no_claims": 30})
    (line,) = lines(["doctor", "--store", db], capsys, "judged fraction")
    assert line == {"area": "judged fraction", "verdict": "PASS", "fix": "",
                    "detail": "1 stored judge metric(s), each with a verdict on at least 90% of the answers it "
                              "could judge"}
    # nothing judgeable at all (0 of 0) is undefined: no line, not a judged fraction of 0
    db = judged_store(tmp_path, "silent", 0, {"not_answered": 20})
    assert lines(["doctor", "--store", db], capsys, "judged fraction") == []


# ------------------------------------------------------------------------------------------ self-preference
def test_model_family_reads_the_vendor_prefix():
    assert [model_family(m) for m in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "o3-mini",
                                      "meta-llama/Llama-3.1-8B-Instruct", "Meta-Llama-3-8B", "gemini-2.0-flash",
                                      "mixtral-8x7b", "local:lexical", None)] == [
        "gpt", "claude", "gpt", "llama", "llama", "gemini", "mistral", None, None]


def llm_run_store(tmp_path, name: str, generator: str, judge_model: str) -> Path:
    db = tmp_path / f"{name}.duckdb"
    config = {"name": name, "generator": {"kind": "llm", "provider": "openai", "model": generator}}
    provider, model = judge_model.split(":")
    pins = JudgeConfig(provider=provider, model=model, metrics=["faithfulness"],
                       prices={model: {"input": 1.0, "output": 2.0}}).pins()
    with Store.open(db) as st:
        st.set_judge_pins(make_run(st, name, {"faithfulness": np.linspace(0, 1, 10)}, config=config, trials=1),
                          pins)
    return db


def test_a_run_judged_by_its_generators_family_is_flagged(tmp_path, capsys):
    db = llm_run_store(tmp_path, "self", "gpt-4o-mini", "openai:gpt-4.1")
    (line,) = lines(["doctor", "--store", db], capsys, "self-preference")
    assert line["verdict"] == "WARN"
    assert line["detail"] == ("run self: judge openai:gpt-4.1 and generator gpt-4o-mini are both gpt models; a judge "
                              "tends to rate its own family's answers higher, so these judge metrics may read high "
                              "(see docs/judge-validation.md)")
    assert "ragassay judge validate --judge-family gpt" in line["fix"]


def test_a_run_judged_by_another_family_stays_quiet(tmp_path, capsys):
    db = llm_run_store(tmp_path, "other", "gpt-4o-mini", "anthropic:claude-sonnet-4-5")
    assert lines(["doctor", "--store", db], capsys, "self-preference") == []


LLM_CONFIG = """name: llm
chunker: {kind: recursive, size: 128}
bm25: {enabled: true, depth: 50}
reranker: {kind: none, final_k: 5}
packer: {budget_tokens: 1000, policy: stop}
generator: {kind: llm, provider: openai, model: gpt-4o-mini, base_url: "http://127.0.0.1:9", price_input: 0,
            price_output: 0}
"""


def judge_file(tmp_path, provider: str, model: str) -> Path:
    path = tmp_path / f"judge-{model}.yaml"
    path.write_text(json.dumps({"provider": provider, "model": model, "base_url": "http://127.0.0.1:9",
                                "prices": {model: {"input": 1.0, "output": 2.0}}}))
    return path


def test_the_judge_option_is_checked_against_the_configs_generators(tmp_path, capsys):
    cfg = tmp_path / "llm.yaml"
    cfg.write_text(LLM_CONFIG)
    args = ["doctor", "--store", tmp_path / "none.duckdb", "--config", cfg]
    same = judge_file(tmp_path, "openai", "gpt-4.1")
    (line,) = lines([*args, "--judge", same], capsys, "self-preference")
    assert line["verdict"] == "WARN" and line["detail"].startswith(
        f"{same} judging {cfg}: judge openai:gpt-4.1 and generator gpt-4o-mini are both gpt models")
    other = judge_file(tmp_path, "anthropic", "claude-sonnet-4-5")
    (line,) = lines([*args, "--judge", other], capsys, "self-preference")
    assert line == {"area": "self-preference", "verdict": "PASS", "fix": "",
                    "detail": f"{other} (anthropic:claude-sonnet-4-5): of another model family than the llm "
                              "generator(s) gpt-4o-mini"}
    code, out, err = cli(["doctor", "--store", tmp_path / "none.duckdb", "--judge", other], capsys)
    assert code == 2 and out == ""
    assert "--judge is checked against the generators of the --config files" in err


# ------------------------------------------------------------------------------------------ docs, not §
def cited_pages(text: str) -> set[str]:
    return set(re.findall(r"docs/([\w-]+\.md)", text))


def test_every_finding_cites_a_docs_page_that_exists_and_no_spec_section(tmp_path, capsys):
    golden = golden_file(tmp_path, 2, 0)
    raw = tmp_path / "raw.yaml"
    raw.write_text("metrics:\n  nDCG@10: {threshold: 0.7}\n")
    cfg = tmp_path / "llm.yaml"
    cfg.write_text(LLM_CONFIG)
    db = llm_run_store(tmp_path, "self", "gpt-4o-mini", "openai:gpt-4.1")
    args = ["doctor", "--store", db, "--golden", golden, "--config", cfg, "--config",
            config_file(tmp_path, 10, "lexical", 10), "--judge", judge_file(tmp_path, "openai", "gpt-4.1")]
    code, out, _ = cli([*args, "--policy", raw], capsys)
    assert code == 1 and "§" not in out and "spec" not in out
    code, out2, _ = cli([*args, "--policy", policy_file(tmp_path, {"ndcg@10": 0.03})], capsys)
    assert "§" not in out2 and "spec" not in out2
    flagged = [ln for ln in (out + out2).splitlines() if ln.startswith(("WARN", "FAIL"))
               and not ln.startswith(("WARN extra", "WARN chromium"))]
    assert len(flagged) >= 8 and all(cited_pages(ln) for ln in flagged), flagged
    assert cited_pages(out + out2) <= {p.name for p in DOCS.glob("*.md")}
    code, helptext, _ = cli(["doctor", "--help"], capsys)
    assert code == 0 and "§" not in helptext
    # on the demo store: tests/importers/test_doctor.py::test_doctor_on_the_demo_finds_only_its_unvalidated_judge

