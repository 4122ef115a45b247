"""`ragassay compare` writes its claim sentences in pipeline order (retrieve, rerank, context, generate; the
report's stage-table order within a stage), not in the store's alphabetical metric order."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.analysis.conftest import make_run

from ragassay.analysis.compare import STAGE_METRICS, compare_runs, stage_key
from ragassay.cli.app import main as _main
from ragassay.store import Store

# The headline metrics, each written out in the order a query meets them: what the claims must follow.
PIPELINE = ["recall@fusion_depth", "recall@final_k", "ndcg@final_k", "recall@context", "answer_f1",
            "abstention_recall", "over_refusal"]


def _values(seed: int, n: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {m: rng.integers(0, 2, n).astype(float) for m in sorted(PIPELINE)}


@pytest.fixture
def pair(tmp_path):
    db = tmp_path / "s.duckdb"
    with Store.open(db) as st:
        make_run(st, "base", _values(1))
        make_run(st, "cand", _values(2))
    return db


def _metric_of(claim: str) -> str:
    return claim.split(" ", 1)[0]


def test_the_claims_follow_the_pipeline_not_the_alphabet(pair, capsys):
    assert sorted(PIPELINE) != PIPELINE  # the alphabet would put abstention_recall first
    with Store.open(pair, read_only=True) as st:
        comp = compare_runs(st, "base", "cand", n_resamples=200)
    metric_claims = [c for c in comp.claims if _metric_of(c) in PIPELINE]
    assert [_metric_of(c) for c in metric_claims] == PIPELINE
    # the coverage claims (not about one metric) stay after them
    assert comp.claims[:len(PIPELINE)] == metric_claims

    with pytest.raises(SystemExit) as e:
        _main(["compare", "base", "cand", "--store", str(pair), "--resamples", "200", "--json"])
    assert (e.value.code or 0) == 0
    printed = json.loads(capsys.readouterr().out)["claims"]
    assert [_metric_of(c) for c in printed[:len(PIPELINE)]] == PIPELINE

    with pytest.raises(SystemExit) as e:
        _main(["compare", "base", "cand", "--store", str(pair), "--resamples", "200", "--overall-only"])
    out = capsys.readouterr().out
    bullets = [line[2:] for line in out.splitlines() if line.startswith("• ")]
    assert [_metric_of(c) for c in bullets[:len(PIPELINE)]] == PIPELINE


def test_stage_key_orders_by_stage_then_the_stage_table_then_the_name():
    names = ["faithfulness", "recall@10", "answer_f1", "rerank_gain", "recall@bm25_depth", "context_tokens",
             "ndcg@10", "recall@final_k", "citation_validity"]
    assert sorted(names, key=stage_key) == [
        "recall@bm25_depth",                    # retrieve
        "recall@final_k", "rerank_gain",        # rerank: the stage table's metric, then by name
        "ndcg@10", "recall@10",                 # ranking, by name
        "context_tokens",                       # context
        "answer_f1", "citation_validity", "faithfulness",  # generate: table order, then the judge metric
    ]
    assert sorted(STAGE_METRICS, key=stage_key)[:4] == ["recall@bm25_depth", "recall@dense_depth",
                                                        "recall@fusion_depth", "recall@final_k"]
