"""compare / gate output: Markdown for a PR comment, metric names in any spelling, the Wilcoxon column against
scipy, full-width tables when piped, and no progress bar in captured output."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from ragassay.cli.app import main as _main
from ragassay.cli.common import WIDE_DEFAULT, output_width
from ragassay.store import RunRecord, Store

N = 60


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def _run(st: Store, name: str, values: dict[str, np.ndarray]) -> None:
    run_id = st.create_run(RunRecord(
        name=name, dataset_version="ds@1", corpus_digest="sha256:c", metric_version="ragassay-metrics-1",
        config={"name": name}, hit_rule="any_overlap", gain="exp", relevance_threshold=2, ties="given", trials=1,
        n_queries=N))
    qids = [f"q{i:03d}" for i in range(N)]
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": [], "latency_ms": [], "cost": []}
    for m, v in values.items():
        cols["query_id"] += qids
        cols["trial"] += [0] * N
        cols["metric"] += [m] * N
        cols["value"] += [float(x) for x in v]
        cols["stratum"] += ["s1" if i % 2 else "s2" for i in range(N)]
        cols["latency_ms"] += [10.0] * N
        cols["cost"] += [None] * N
    st.write_batch(run_id, cols, done=[(q, 0, "done", None) for q in qids])
    st.finish_run(run_id)


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(4)
    base = {"ndcg@final_k": rng.random(N), "recall@fusion_depth": rng.random(N)}
    # the candidate loses about 0.15 nDCG on most queries: a credible regression
    cand = {"ndcg@final_k": np.clip(base["ndcg@final_k"] - rng.normal(0.15, 0.1, N), 0, 1),
            "recall@fusion_depth": base["recall@fusion_depth"]}
    path = tmp_path / "s.duckdb"
    with Store.open(path) as st:
        _run(st, "base|<b>", base)
        _run(st, "cand", cand)
    return path, base, cand


def test_compare_markdown_with_ir_measures_names_and_escaped_run_names(runs, capsys):
    path, _, _ = runs
    code, out, err = cli(["compare", "base|<b>", "cand", "--store", str(path), "-m", "nDCG@final_k",
                          "--resamples", "500", "--format", "markdown"], capsys)
    assert code == 0 and err == ""
    assert out.startswith("### ragassay compare: base\\|\\<b\\> → cand")
    assert "| ndcg@final\\_k | all | 60 |" in out and "🔴 regressed" in out
    assert "| s1 |" not in out  # a PR comment carries the overall rows only


def test_gate_markdown_canonicalizes_policy_names_and_keeps_the_exit_code(runs, tmp_path, capsys):
    path, _, _ = runs
    policy = tmp_path / "gate.yaml"
    policy.write_text("n_resamples: 500\nmetrics:\n  nDCG@final_k: {min_effect: 0.03}\n  R@fusion_depth: "
                      "{min_effect: 0.03}\n")
    code, out, _ = cli(["gate", "base|<b>", "cand", "--store", str(path), "--policy", str(policy),
                        "--format", "markdown"], capsys)
    assert code == 1
    assert out.startswith("### ragassay gate: **FAIL**")
    assert "- FAIL ndcg@final\\_k: credible regression" in out and "- PASS recall@fusion\\_depth" in out


def test_gate_policy_naming_one_metric_twice_is_refused(tmp_path):
    from ragassay.analysis.gate import load_policy
    from ragassay.errors import InputError

    policy = tmp_path / "gate.yaml"
    policy.write_text("metrics:\n  nDCG@5: {min_effect: 0.03}\n  ndcg_cut_5: {min_effect: 0.05}\n")
    with pytest.raises(InputError, match="same metric as another entry"):
        load_policy(policy)


def test_compare_wilcoxon_column_matches_scipy_and_is_adjusted(runs, capsys):
    path, base, cand = runs
    code, out, _ = cli(["compare", "base|<b>", "cand", "--store", str(path), "-m", "ndcg@final_k",
                        "--resamples", "200", "--test", "wilcoxon", "--json"], capsys)
    tests = {(t["metric"], t["stratum"]): t for t in json.loads(out)["tests"]}
    ref = sps.wilcoxon(cand["ndcg@final_k"] - base["ndcg@final_k"])
    overall = tests[("ndcg@final_k", "all")]
    assert overall["test"] == "wilcoxon" and overall["n"] == N
    assert overall["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
    odd = np.arange(N) % 2 == 1
    ref_s1 = sps.wilcoxon(cand["ndcg@final_k"][odd] - base["ndcg@final_k"][odd])
    assert tests[("ndcg@final_k", "s1")]["p_value"] == pytest.approx(ref_s1.pvalue, rel=1e-9)
    ps = [tests[k]["p_value"] for k in sorted(tests)]
    from statsmodels.stats.multitest import multipletests

    adj = multipletests(ps, method="fdr_bh")[1]
    assert [tests[k]["p_adj"] for k in sorted(tests)] == pytest.approx(list(adj), rel=1e-12)
    code, _, err = cli(["compare", "base|<b>", "cand", "--store", str(path), "--test", "mannwhitney"], capsys)
    assert code == 2 and "use one of bootstrap, wilcoxon, permutation, t" in err


def test_piped_tables_use_columns_or_a_wide_default_and_no_progress_bar(runs, capsys, monkeypatch):
    path, _, _ = runs
    monkeypatch.delenv("COLUMNS", raising=False)

    class Pipe:
        def isatty(self):
            return False

    assert output_width(Pipe()) == WIDE_DEFAULT
    monkeypatch.setenv("COLUMNS", "137")
    assert output_width(Pipe()) == 137
    code, out, err = cli(["compare", "base|<b>", "cand", "--store", str(path), "--resamples", "300",
                          "--overall-only"], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.lstrip().startswith("ndcg@final_k"))
    # every column on one line, verdict included: rich's 80-column fallback used to fold this row
    assert len(row) > 80 and row.rstrip().endswith("regressed")
    assert "resamples" not in err and "\x1b" not in err  # the spinner stays off captured stderr
