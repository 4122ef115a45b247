"""The claim extractor and three-way checker: local (deterministic) and LLM (through the real SDKs to the fake
provider), the tables they build and the metrics those give."""

import re
from collections import Counter

import numpy as np
import pytest
from tests.judges.fake_provider import FakeProvider

from ragassay.judges.claims import (
    CHECK_RUBRIC,
    ClaimInput,
    LocalClaimChecker,
    judge_claims_llm,
    judge_claims_local,
    span_relevance,
    split_clauses,
)
from ragassay.judges.metrics import RUBRICS, ContextUnit, JudgeItem
from ragassay.judges.protocol import Sampling
from ragassay.judges.providers import AnthropicJudge, OpenAIJudge, Price, RetryPolicy
from ragassay.metrics.claims import CLAIM_METRICS, VERDICTS, claim_metrics
from ragassay.store import RunRecord, Store

FAST = RetryPolicy(max_attempts=2, timeout_s=0.5, item_deadline_s=5.0, backoff_base_s=0.002, backoff_max_s=0.01)
CLIENTS = {"anthropic": AnthropicJudge, "openai": OpenAIJudge}

CTX = (ContextUnit("u1", "gpl", 1000, "The licence may be copied freely. It must keep the notice."),
       ContextUnit("u2", "mit", 0, "Software is provided as is, without warranty."))
ITEM = JudgeItem("q1", 0, "What does the licence allow?",
                 "The licence may be copied freely. Users may sell it. It must not keep the notice.", "answered",
                 context=CTX, reference="The licence may be copied freely. It must keep the notice.",
                 stratum="s", trace_id="t1")


@pytest.fixture
def fake_provider():
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------ local
def test_clauses_split_at_semicolons_and_coordinating_commas_and_keep_content():
    assert split_clauses("You may copy it; you must keep the notice, and you may sell copies. Fine, ok.") == [
        "You may copy it", "you must keep the notice", "you may sell copies", "Fine, ok"]
    assert split_clauses("") == [] and split_clauses(None) == [] and split_clauses("   ") == []


def test_local_checker_labels_verbatim_negated_numeric_and_unrelated_claims():
    chk = LocalClaimChecker(0.7)
    passage = "Preamble.  The licence\nmay be copied freely. Version 3 was published in 2007."
    label, span = chk.check("The licence may be copied freely", passage)
    assert label == "entailed" and passage[span[0]:span[1]] == "The licence\nmay be copied freely"
    assert chk.check("The licence may not be copied freely", passage)[0] == "contradicted"
    assert chk.check("Version 3 was published in 2009", passage)[0] == "contradicted"
    assert chk.check("Version 3 was published in 2007", passage)[0] == "entailed"
    assert chk.check("Cats chase mice at night", passage) == ("neutral", None)


def test_span_relevance_is_any_overlap_with_evidence_of_the_same_document():
    ev = [("gpl", 1040, 1050), ("mit", 500, 600)]
    assert span_relevance(CTX, ev) == (True, False)
    assert span_relevance(CTX, [("gpl", 1058, 1100)]) == (False, False)  # u1 ends at 1058 (exclusive)


def test_local_judging_builds_tables_whose_spans_are_the_quoted_document_text():
    judged = judge_claims_local([ClaimInput(ITEM, (True, False))], LocalClaimChecker(0.7))
    (t,) = judged.tables
    assert t.gt_claims == ("The licence may be copied freely", "It must keep the notice")
    assert t.response_claims == ("The licence may be copied freely", "Users may sell it", "It must not keep the notice")
    assert [[VERDICTS[c] for c in row] for row in t.response_units] == [
        ["entailed", "neutral"], ["neutral", "neutral"], ["contradicted", "neutral"]]
    assert [VERDICTS[c] for c in t.response_vs_reference] == ["entailed", "neutral", "contradicted"]
    assert [VERDICTS[c] for c in t.gt_vs_response] == ["entailed", "contradicted"]
    s, e = t.response_quotes[0, 0]
    assert CTX[0].text[s - 1000:e - 1000] == "The licence may be copied freely"
    v = dict(zip(CLAIM_METRICS, claim_metrics(judged.tables).values[0], strict=True))
    # hand: precision 1/3, recall 1/2, claim recall 2/2, context precision 1/2 (u1 entails a gt claim),
    # utilization 1/2, hallucination 1/3 (r1), noise relevant 0 (r2 contradicted, not entailed), faith 1/3
    assert v["claims_precision"] == pytest.approx(1 / 3) and v["claims_recall"] == pytest.approx(1 / 2)
    assert v["claim_recall"] == 1 and v["context_precision_claims"] == pytest.approx(1 / 2)
    assert v["context_utilization"] == pytest.approx(1 / 2) and v["hallucination"] == pytest.approx(2 / 3)
    assert v["faithfulness_claims"] == pytest.approx(1 / 3) and v["noise_sensitivity_relevant"] == 0
    assert judged.calls == Counter(ok=2 * 2 + 3 * 2 + 3 + 2)


def test_an_abstention_has_no_response_claims_and_keeps_its_retriever_metrics():
    item = JudgeItem("q2", 0, "?", None, "abstained", context=CTX, reference="It must keep the notice.")
    (t,) = judge_claims_local([ClaimInput(item, (True, False))], LocalClaimChecker()).tables
    s = claim_metrics([t])
    assert t.no_response == "not_answered" and not t.response_claims
    assert s.values[0, CLAIM_METRICS.index("claim_recall")] == 1.0
    assert np.isnan(s.values[0, CLAIM_METRICS.index("claims_recall")])


# ------------------------------------------------------------------------------ LLM, through the fake provider
def _tag(user, name):
    m = re.search(rf"<{name}>\n?(.*?)\n?</{name}>", user, re.S)
    return m.group(1) if m else ""


def scripted(system, user):
    base = {"justification": "scripted", "cannot_judge": False}
    if system == RUBRICS["claims"]:
        return {**base, "claims": [s.strip() for s in _tag(user, "answer").split(".") if s.strip()]}
    assert system == CHECK_RUBRIC
    claim, passage = _tag(user, "claim"), _tag(user, "passage")
    if claim == "Users may sell it" and "freely" in passage:
        return {**base, "label": "entailed", "quote": "Users may sell it"}  # a quote the passage does not hold
    if claim in passage:
        return {**base, "label": "entailed", "quote": claim}
    if claim.replace(" not ", " ") in passage:
        return {**base, "label": "contradicted", "quote": None}
    return {**base, "label": "neutral", "quote": None}


def client(provider, server, store=None):
    return CLIENTS[provider](Sampling("judge-m", max_tokens=256), {"judge-m": Price(input=1.0, output=2.0)},
                             base_url=server.base_url, api_key="sk-local-test", retry=FAST, store=store)


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_llm_claim_judge_agrees_with_the_hand_tables_and_downgrades_unverified_quotes(provider, fake_provider):
    fake_provider.responder = scripted
    judged = judge_claims_llm(client(provider, fake_provider), "R", [ClaimInput(ITEM, (True, False))])
    (t,) = judged.tables
    assert t.failed is None
    assert t.response_claims == ("The licence may be copied freely", "Users may sell it",
                                 "It must not keep the notice")
    assert [[VERDICTS[c] for c in row] for row in t.response_units] == [
        ["entailed", "neutral"], ["neutral", "neutral"], ["contradicted", "neutral"]]
    # "Users may sell it" claimed entailed, with a quote neither holds, by u1 and by the reference (u1's text)
    assert judged.quote_not_found == 2 and [VERDICTS[c] for c in t.response_vs_reference][1] == "neutral"
    # 2 extractions; gt 2 x (2 units + response); response 3 x (2 units + reference)
    assert judged.calls == Counter(ok=2 + 2 * 3 + 3 * 3)
    s, e = t.response_quotes[0, 0]
    assert CTX[0].text[s - 1000:e - 1000] == "The licence may be copied freely"


def test_a_failed_check_makes_the_item_undefined_with_the_outcome(fake_provider):
    fake_provider.responder = scripted
    fake_provider.item_of = lambda user: "bad" if "<claim>Users may sell it</claim>" in user else None
    fake_provider.plan = {"bad": ["refusal"]}
    judged = judge_claims_llm(client("openai", fake_provider), "R", [ClaimInput(ITEM, (True, False))])
    (t,) = judged.tables
    assert t.failed == "judge_refused" and judged.calls["refused"] == 3
    s = claim_metrics(judged.tables)
    assert np.isnan(s.values).all() and set(s.reasons[0]) == {"judge_refused"}


def test_a_second_judging_is_answered_from_the_store(fake_provider, tmp_path):
    fake_provider.responder = scripted
    with Store.open(tmp_path / "c.duckdb") as st:
        run = st.create_run(RunRecord(name="r"))
        judge_claims_llm(client("openai", fake_provider, st), run, [ClaimInput(ITEM, (True, False))])
        paid = len(fake_provider.seen)
        again = judge_claims_llm(client("openai", fake_provider, st), run, [ClaimInput(ITEM, (True, False))])
    # 17 checks and extractions, 12 distinct questions: the reference answer is u1's text, and the claim both
    # the reference and the response state is checked against it once
    assert len(fake_provider.seen) == paid == 12
    assert again.spend == 0 and again.tables[0].response_claims[1] == "Users may sell it"
