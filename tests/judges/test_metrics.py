"""Judge metrics through the real SDKs against the fake provider, with a scripted judge that reads the prompt."""

import hashlib
import json
import math
import re
from collections import Counter

import pytest

from ragassay.judges.metrics import (
    DEFAULT_CRITERIA,
    NUGGET_METRICS,
    RUBRICS,
    CitationRef,
    ContextUnit,
    JudgeItem,
    judge_items,
    locate_quote,
    suite_pins,
)
from ragassay.judges.protocol import OUTCOMES, Sampling
from ragassay.judges.providers import AnthropicJudge, OpenAIJudge, Price, RetryPolicy

FAST = RetryPolicy(max_attempts=3, timeout_s=0.3, item_deadline_s=5.0, backoff_base_s=0.002, backoff_max_s=0.01)
PRICES = {"judge-m": Price(input=1.0, output=2.0)}
CLIENTS = {"anthropic": AnthropicJudge, "openai": OpenAIJudge}
CRITERION_LABELS = {"central_fact": "pass", "no_contradiction": "fail", "complete": "partial"}
NUGGET_LABELS = ["support", "partial_support", "not_support"]


def _tag(user, name):
    m = re.search(rf"<{name}>(.*?)</{name}>", user, re.S)
    return m.group(1) if m else ""


def scripted_judge(system, user):
    """A deterministic stand-in for the model: decides from the rendered prompt what a careful judge would."""
    base = {"justification": "scripted", "cannot_judge": False}
    if system == RUBRICS["claims"]:
        answer = _tag(user, "answer")
        return {**base, "claims": [s.strip() for s in answer.split(".") if s.strip() and s.strip() != "Hmm?"]}
    if system == RUBRICS["support"]:
        claim, context = _tag(user, "claim"), _tag(user, "context")
        folded = " ".join(context.split())
        if claim.startswith("Water"):
            return {**base, "label": "supported", "quote": "Water is very wet"}  # not in the context
        if claim in folded:
            return {**base, "label": "supported", "quote": claim}
        return {**base, "label": "unsupported", "quote": None}
    if system == RUBRICS["relevance"]:
        return {**base, "label": "relevant"}
    if system == RUBRICS["criterion"]:
        name = re.search(r'<criterion name="([^"]+)">', user).group(1)
        return {**base, "criterion": name, "label": CRITERION_LABELS[name]}
    if system == RUBRICS["nuggets"]:
        ids = re.findall(r'<nugget id="([^"]+)">', user)
        return {**base, "assignments": [{"nugget_id": n, "label": NUGGET_LABELS[min(i, 2)]}
                                        for i, n in enumerate(ids)]}
    raise AssertionError(f"unexpected rubric {system[:40]!r}")


def client(provider, server, **kw):
    kw.setdefault("retry", FAST)
    kw.setdefault("api_key", "sk-local-test")
    return CLIENTS[provider](Sampling("judge-m", max_tokens=256), PRICES, base_url=server.base_url, **kw)


CTX = (ContextUnit("u1", "d1", 100, "The sky   is blue. Water is wet."),
       ContextUnit("u2", "d2", 0, "Grass is green."))
NUGGETS = (("n1", "sky blue", True), ("n2", "grass green", True), ("n3", "water", False))


def item(qid="q1", answer="The sky is blue. Grass is red. Water is wet", **kw):
    base = dict(query_id=qid, trial=0, question="What colour is the sky?", answer=answer, outcome="answered",
                context=CTX, citations=(CitationRef("u1"), CitationRef("u2")), reference="The sky is blue.",
                nuggets=NUGGETS, stratum="lexical", trace_id=f"t-{qid}")
    base.update(kw)
    return JudgeItem(**base)


def values(judged):
    c = judged.columns
    return {(q, m): v for q, m, v in zip(c["query_id"], c["metric"], c["value"], strict=True)}


def test_locate_quote_folds_whitespace_and_maps_back_to_canonical_offsets():
    assert locate_quote("sky is blue", CTX) == (0, 104, 117)
    assert CTX[0].text[4:17] == "sky   is blue"
    assert locate_quote("Grass is", CTX) == (1, 0, 8)
    assert locate_quote("grass is", CTX) is None  # verbatim: case matters
    assert locate_quote("", CTX) is None and locate_quote(None, CTX) is None


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_metrics_combine_verdicts_in_code(provider, fake_provider):
    fake_provider.responder = scripted_judge
    judged = judge_items(client(provider, fake_provider), "R", [item()])
    got = values(judged)
    # 3 claims: supported with a whitespace-folded quote, unsupported, and "supported" with a quote that is
    # not in the context -> unsupported and counted.
    assert got[("q1", "faithfulness")] == pytest.approx(1 / 3)
    assert judged.quote_not_found == 1
    assert got[("q1", "answer_relevance")] == 1.0
    # (2 * pass + 2 * fail + 1 * partial) / 5
    assert got[("q1", "correctness")] == pytest.approx((2 * 1 + 2 * 0 + 1 * 0.5) / 5)
    # only u1 holds a verified quote: precision 1/2; one of three claims has a supporting citation
    assert got[("q1", "citation_precision")] == 0.5
    assert got[("q1", "citation_recall")] == pytest.approx(1 / 3)
    # n1 support, n2 partial (both vital), n3 none
    assert [got[("q1", m)] for m in NUGGET_METRICS] == pytest.approx([0.5, 0.75, 1 / 3, 0.5])
    assert judged.calls == Counter({"ok": 1 + 1 + 3 + 1 + 3})
    assert not judged.undefined


def test_no_claims_is_undefined_not_one_and_abstention_scores_no_nuggets(fake_provider):
    fake_provider.responder = scripted_judge
    items = [item("q1", answer="Hmm?"), item("q2", answer=None, outcome="abstained"),
             item("q3", answer=None, outcome="error", nuggets=())]
    judged = judge_items(client("openai", fake_provider), "R", items)
    got = values(judged)
    assert math.isnan(got[("q1", "faithfulness")]) and math.isnan(got[("q1", "citation_recall")])
    assert judged.undefined[("faithfulness", "no_claims")] == 1
    assert [got[("q2", m)] for m in NUGGET_METRICS] == [0.0, 0.0, 0.0, 0.0]
    assert math.isnan(got[("q2", "faithfulness")]) and judged.undefined[("faithfulness", "not_answered")] == 1
    assert judged.undefined[("faithfulness", "generation_error")] == 1
    assert judged.undefined[("nugget_a", "no_nuggets")] == 1
    means = judged.means()
    assert means["faithfulness"] == (pytest.approx(math.nan, nan_ok=True), 0, 3)


@pytest.mark.parametrize(("action", "reason"), [("malformed", "judge_malformed"), ("refusal", "judge_refused"),
                                                ("truncate", "judge_truncated"), ("400", "judge_error"),
                                                ("cannot_judge", "judge_cannot_judge")])
def test_a_failed_support_call_makes_faithfulness_undefined_with_its_reason(action, reason, fake_provider):
    fake_provider.responder = scripted_judge
    fake_provider.item_of = lambda user: "bad" if "<claim>Grass is red</claim>" in user else None
    fake_provider.plan = {"bad": [action]}
    judged = judge_items(client("openai", fake_provider), "R", [item()], metrics=["faithfulness"])
    assert math.isnan(values(judged)[("q1", "faithfulness")])
    assert judged.undefined == Counter({("faithfulness", reason): 1})
    assert judged.calls[action if action in OUTCOMES else reason.removeprefix("judge_")] == 1


def test_criterion_mismatch_and_wrong_nugget_ids_are_undefined(fake_provider):
    def lying(system, user):
        v = scripted_judge(system, user)
        if system == RUBRICS["criterion"]:
            v["criterion"] = "something_else"
        if system == RUBRICS["nuggets"]:
            v["assignments"] = v["assignments"][:1]
        return v
    fake_provider.responder = lying
    judged = judge_items(client("anthropic", fake_provider), "R", [item()],
                         metrics=["correctness", "nuggets"])
    assert judged.undefined == Counter({("correctness", "criterion_mismatch"): 1,
                                        **{(m, "nugget_mismatch"): 1 for m in NUGGET_METRICS}})


def test_pins_change_with_any_rubric_or_criterion_word():
    base = suite_pins()
    assert suite_pins() == base and len(base[0]) == 64
    edited = (DEFAULT_CRITERIA[0].__class__("central_fact", "States the central fact.", 2.0),
              *DEFAULT_CRITERIA[1:])
    assert suite_pins(edited)[0] != base[0] and suite_pins(edited)[1] == base[1]
    assert suite_pins(metrics=["faithfulness"]) != base


def _fault_of(user):
    # Deterministic 20% faults, every kind mixed, keyed by the prompt.
    h = int(hashlib.sha256(user.encode()).hexdigest()[:8], 16)
    if h % 5:
        return None
    kinds = ["f429", "f500", "f529", "ftimeout", "frefusal", "fmalformed", "ftruncate", "fdrop", "fschema",
             "fcannot"]
    return kinds[(h // 5) % len(kinds)]


FAULT_PLANS = {"f429": ["429", "ok"], "f500": ["500", "500", "500"], "f529": ["529", "ok"],
               "ftimeout": ["timeout", "ok"], "frefusal": ["refusal"], "fmalformed": ["malformed"],
               "ftruncate": ["truncate"], "fdrop": ["drop", "ok"], "fschema": ["schema"],
               "fcannot": ["cannot_judge"]}


@pytest.mark.slow
def test_faulted_500_item_metrics_run_reconciles_reruns_free_and_never_stores_the_key(
        fake_provider, store, run_id, tmp_path, monkeypatch):
    sentinel = "sk-SENTINEL-" + "9" * 24
    monkeypatch.setenv("OPENAI_API_KEY", sentinel)
    fake_provider.hang_s = 0.4
    fake_provider.responder = scripted_judge
    fake_provider.item_of = _fault_of
    fake_provider.plan = FAULT_PLANS
    items = [item(f"q{i:03d}", answer=f"The sky is blue {i}. Grass is red number {i}") for i in range(500)]
    metrics = ["faithfulness", "answer_relevance"]
    judge = OpenAIJudge(Sampling("judge-m", max_tokens=256), PRICES, base_url=fake_provider.base_url,
                        retry=FAST, store=store, concurrency=32)
    judged = judge_items(judge, run_id, items, metrics=metrics)
    n_requests = sum(judged.calls.values())
    assert n_requests == 500 * 2 + 2 * sum(1 for j in judged.judgements if j.record.item == "claims"
                                            and j.outcome == "ok")
    # every request ends in exactly one outcome, and the counts reconcile with the store
    assert judged.calls["not_started"] == 0 and set(judged.calls) <= set(OUTCOMES)
    rows = store.judge_calls(run_id)
    assert len(rows) == n_requests == len({(r["query_id"], r["item"]) for r in rows})
    assert Counter(r["outcome"] for r in rows) == judged.calls
    faulted = sum(1 for r in rows if r["attempts"] > 1 or r["outcome"] != "ok")
    assert 0.1 < faulted / n_requests < 0.3
    # no NaN enters a mean unannounced: every undefined value has a counted reason
    means = judged.means()
    for m in metrics:
        _, defined, undefined = means[m]
        assert defined + undefined == 500
        assert undefined == sum(n for (metric, _), n in judged.undefined.items() if metric == m)
    assert means["answer_relevance"][0] == 1.0
    # a rerun pays nothing
    seen = fake_provider.paid
    again = judge_items(judge, run_id, items, metrics=metrics)
    assert fake_provider.paid == seen
    assert sum(1 for j in again.judgements if not j.record.cache_hit) == sum(
        1 for j in again.judgements if j.outcome == "error")
    assert values(again) == pytest.approx(values(judged), nan_ok=True)
    # the key never reaches the store
    store.connection.execute("CHECKPOINT")
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert sentinel.encode() not in f.read_bytes(), f
    assert sentinel not in json.dumps(rows, default=str)
