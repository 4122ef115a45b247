"""`ragassay transcripts` logic: failures are the verifier's (or, without agent rows, the answer metric's),
sampled across strata with a fixed seed; every transcript carries the claim, the verdict and each step; all
stored text is escaped in the HTML and Markdown forms."""

import re
from collections import Counter

import pytest

from ragassay.analysis.transcripts import (
    build_transcripts,
    find_failures,
    render_html,
    render_markdown,
    render_text,
    sample_failures,
)
from ragassay.cli.agent_run import BUNDLED_VERIFIER, run_into, score_into
from ragassay.corpus.loader import load_corpus
from ragassay.errors import InputError
from ragassay.golden.builder import build_golden
from ragassay.pipeline.agent import ReferenceAgent, load_agent_config, verdicts
from ragassay.store import Store


@pytest.fixture(scope="module")
def stored(example, agents, tmp_path_factory):
    """The cheap agent on the bundled example, stored twice: with the bundled verifier and without one."""
    corpus, gs = example
    tmp = tmp_path_factory.mktemp("stored")
    path, traces = run_into(tmp / "cheap", agents["cheap"], corpus, gs, trials=1, show_progress=False)
    st = Store.open(tmp / "s.duckdb")
    verified, _ = score_into(st, path, corpus, gs, name="verified", verifier=BUNDLED_VERIFIER, human_fix_cost=5.0)
    plain, _ = score_into(st, path, corpus, gs, name="plain", verifier=None, human_fix_cost=None)
    yield st, verified, plain, traces
    st.close()


def _expected_failures(traces, gs):
    """The oracle: the bundled verifier applied directly to the traces, outside the store."""
    return sorted((t.query_id, t.trial, gs[t.query_id].stratum)
                  for t, v in zip(traces, verdicts(traces, gs), strict=True) if not v["success"])


def test_failures_are_the_verifiers_and_without_agent_rows_the_answer_metrics(example, stored):
    _, gs = example
    st, verified, plain, traces = stored
    want = _expected_failures(traces, gs)
    f = find_failures(st, verified)
    assert f.basis == "task_success" and f.rows == want and f.n_rows == 32 and f.n_undefined == 0
    assert f.per_stratum == dict(sorted(Counter(s for _, _, s in want).items()))
    g = find_failures(st, plain)
    assert g.basis == "answer_f1" and g.rows == want  # the extractive answers are exact or wholly wrong
    with pytest.raises(InputError, match="no such rows"):
        find_failures(st, verified, metric="bogus")


def test_sample_spreads_across_strata_round_robin_with_a_fixed_seed(example, stored):
    st, verified, _, _ = stored
    f = find_failures(st, verified)
    strata = sorted(f.per_stratum)
    assert len(strata) == 3 and f.per_stratum == {"author_birthplace": 2, "founder_birthplace": 5, "three_hop": 2}
    three = sample_failures(f, 3, "stratum", 0)
    assert sorted(s for _, _, s in three) == strata  # one from each stratum before any stratum's second
    seven = sample_failures(f, 7, "stratum", 0)
    assert Counter(s for _, _, s in seven) == {"author_birthplace": 2, "founder_birthplace": 3, "three_hop": 2}
    assert seven[:3] == three  # a larger sample extends the smaller one
    assert sorted(sample_failures(f, 100, "stratum", 0)) == f.rows  # asked for more: every failure, once
    assert sample_failures(f, 7, "stratum", 0) == seven  # same seed, same sample
    orders = {tuple(sample_failures(f, 9, "stratum", s)) for s in range(6)}
    assert len(orders) > 1  # the seed matters
    assert set(sample_failures(f, 9, "none", 1)) == set(f.rows)
    with pytest.raises(InputError, match="--by"):
        sample_failures(f, 3, "tags", 0)
    with pytest.raises(InputError, match="--sample"):
        sample_failures(f, 0, "stratum", 0)


def test_transcripts_show_claim_verdict_steps_and_answer(example, stored):
    _, gs = example
    st, verified, _, traces = stored
    rep = build_transcripts(st, verified, sample=10, seed=0, golden=gs)
    assert rep["shown"] == rep["n_failures"] == 9 and rep["missing_traces"] == 0
    by = {(t.query_id, t.trial): t for t in traces}
    for t in rep["transcripts"]:
        trace = by[(t["query_id"], t["trial"])]
        assert t["reference"] == gs[t["query_id"]].reference_answer
        assert t["claimed_success"] is True and t["verdict"]["task_success"] == 0.0
        assert t["verdict"]["silent_failure"] == 1.0
        assert t["answer"] == trace.answer and len(t["steps"]) == len(trace.steps)
        search = t["steps"][0]
        assert search["name"] == "search" and search["hop"] == 1 and search["units"][0]["text"]
        assert t["workdir"] == trace.meta["workdir"]
    text = render_text(rep)
    assert "claimed success" in text and "task_success 0" in text and "reference: Quellmoor" in text


def test_without_a_golden_set_the_reference_is_marked_not_shown(stored):
    st, verified, _, _ = stored
    rep = build_transcripts(st, verified, sample=1)
    assert rep["transcripts"][0]["reference"] is None
    assert "not shown (pass --golden)" in render_text(rep)


HOSTILE = "<script>alert('x')</script>"


def test_hostile_text_is_escaped_in_html_and_markdown(tmp_path):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "evil-corp.txt").write_text(f"Evil Corp was founded by Zed Quill. {HOSTILE} <img src=x "
                                              "onerror=alert(2)>\n")
    (corpus_dir / "zed-quill.txt").write_text("Zed Quill was born in Mordor.\n")
    (tmp_path / "g.yaml").write_text(
        "queries:\n"
        "  - query_id: evil-1\n"
        "    question: \"In which town was the founder of Evil Corp born?\"\n"
        "    stratum: hostile\n"
        "    evidence:\n"
        "      - {doc_id: evil-corp, quote: \"Evil Corp was founded by Zed Quill.\", grade: 3, hop: 1}\n"
        "      - {doc_id: zed-quill, quote: \"Zed Quill was born in Mordor.\", grade: 3, hop: 2}\n"
        f"    reference_answer: \"{HOSTILE}\"\n")
    (tmp_path / "never.py").write_text("def never(trace, item):\n    return False\n")
    corpus = load_corpus(corpus_dir)
    gs = build_golden(tmp_path / "g.yaml", corpus)
    agent = ReferenceAgent(load_agent_config("cheap"), corpus)

    class Hostile:
        name, config = agent.name, agent.config

        def solve(self, query, trial, ws):
            t = agent.solve(query, trial, ws)
            steps = [t.steps[0].model_copy(update={"error": HOSTILE}), *t.steps[1:]]
            return t.model_copy(update={"answer": HOSTILE, "steps": steps})

    path, _ = run_into(tmp_path / "run", Hostile(), corpus, gs, trials=1, show_progress=False)
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id, _ = score_into(st, path, corpus, gs, name="evil", verifier=f"{tmp_path / 'never.py'}:never",
                               human_fix_cost=None)
        rep = build_transcripts(st, run_id, golden=gs)
    t = rep["transcripts"][0]
    assert t["answer"] == HOSTILE and t["reference"] == HOSTILE and t["steps"][0]["error"] == HOSTILE
    assert any(HOSTILE in (u["text"] or "") for s in t["steps"] for u in s["units"])
    page = render_html(rep)
    assert "<script" not in page and "<img" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert page.count("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;") >= 4  # answer, reference, error, unit
    md = render_markdown(rep)
    assert not re.search(r"(?<!\\)<(script|img)", md)
    assert "\\<script\\>" in md
