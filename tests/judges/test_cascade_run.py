"""`ragassay judge RUN --judge cascade.yaml`: a two-tier cascade routes every support judgement of a stored
run (tier 1 scores, the band on P(bad) = 1 - score decides or escalates to tier 2), stores both tiers'
judgements and the count per route, and the cost line reports the saving against tier 2 alone."""

import json
import math
import re

import pytest
from tests.judges.test_cli_judge import cli

from ragassay.analysis.runner import load_inputs
from ragassay.golden import bundled_golden_source
from ragassay.judges.cost import CascadeCost
from ragassay.judges.local import EmbeddingSupport, LexicalSupport, LocalVerdict, split_claims
from ragassay.judges.metrics import RUBRICS, CitationRef, ContextUnit, JudgeItem
from ragassay.judges.protocol import SupportVerdict
from ragassay.judges.routing import p_bad, route, route_local
from ragassay.store import Store
from ragassay.trace.io import write_traces
from ragassay.trace.schema import Citation, RunHeader, Trace, Unit

QUERIES = ("lex-002", "lex-007", "lex-008")
LO, HI = 0.2, 0.8
FOREIGN = "bananas grow tall trees"
FAIL = "Bananas grow on tall trees in warm places."
# the fake provider bills every call 1,000 input tokens at $1/M and 50 output tokens at $2/M
CALL_COST = (1000 * 1.0 + 50 * 2.0) / 1e6


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def _content_words(text):
    seen = []
    for w in re.findall(r"\w+", text.lower()):
        if w not in seen and w not in {"a", "an", "and", "the", "of", "or", "for", "to", "in", "is", "that", "which",
                                       "by", "as", "it", "on", "be", "with", "this", "not", "no", "from"}:
            seen.append(w)
    return seen


def claims_for(context_text):
    """Four claims against a one-sentence context: the sentence itself, two that share part of its content
    words with FOREIGN ones, and one with no word of it."""
    sentence = " ".join(context_text.split())
    words = _content_words(sentence)
    mid_a = " ".join(words[:4]).capitalize() + f" {FOREIGN}."
    mid_b = f"{FOREIGN.capitalize()} " + " ".join(words[4:7]) + "."
    return [sentence, mid_a, mid_b, FAIL]


def make_traces(path, inputs, sep):
    """One answered trace per query (its evidence span as the only packed and cited unit, the four claims
    joined by ``sep``) and one abstention; returns {query_id: (context, claims)}."""
    corpus, golden = inputs
    traces, made = [], {}
    for qid in QUERIES:
        ev = golden[qid].evidence[0]
        text = corpus[ev.doc_id].text[ev.start:ev.end]
        unit = Unit(unit_id=f"{ev.doc_id}#0", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=1, text=text)
        claims = claims_for(text)
        made[qid] = ((ContextUnit(unit.unit_id, ev.doc_id, ev.start, text),), claims)
        traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=golden[qid].question, fused=[unit],
                            packed=[unit], answer=sep.join(claims), citations=[Citation(unit_id=unit.unit_id)],
                            outcome="answered"))
    traces.append(Trace(trace_id="t-neg-001", query_id="neg-001", question=golden["neg-001"].question,
                        outcome="abstained"))
    write_traces(path, RunHeader(run_name="cascade", corpus_digest=corpus.digest,
                                 dataset_version=golden.dataset_version), traces)
    return made


def score_runs(tmp_path, capsys, traces, names):
    db = str(tmp_path / "r.duckdb")
    for name in names:
        code, _, err = cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db,
                            "--name", name, "--json"], capsys)
        assert code == 0, err
    return db


def write_yaml(path, cfg):
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def hand_route(score):
    """The band applied by hand: P(bad) = 1 - score (clipped), below LO pass, above HI fail, else escalate."""
    p = min(1.0, max(0.0, 1.0 - score))
    return "auto_pass" if p < LO else "auto_fail" if p > HI else "escalated"


CASCADE = {"tier1": {"model": "lexical"}, "band": {"lo": LO, "hi": HI}}
LOCAL_METRICS = ["faithfulness", "citations"]


def test_lexical_to_embedding_cascade_routes_by_the_band_and_scores_like_a_single_judge(tmp_path, capsys, inputs):
    made = make_traces(tmp_path / "t.jsonl", inputs, " ")
    db = score_runs(tmp_path, capsys, tmp_path / "t.jsonl", ["a"])
    # tier 2 at cosine 0.2: the escalated claims (a few words of the sentence) land on both sides of it
    cfg = write_yaml(tmp_path / "cascade.yaml", {"provider": "local", "model": "embedding", "threshold": 0.2,
                                                "metrics": LOCAL_METRICS, "cascade": CASCADE})
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)

    # the hand computation: tier-1 scores through the band, tier 2 on the escalated claims
    lexical, embedding = LexicalSupport(0.7), EmbeddingSupport(0.2)
    routes = {"auto_pass": 0, "auto_fail": 0, "escalated": 0}
    faith, recall, tier2_labels = {}, {}, []
    for qid, (ctx, claims) in made.items():
        assert split_claims(" ".join(claims)) == claims  # the answer's sentences are exactly these claims
        supported = 0
        for claim in claims:
            (t1,) = lexical.judge_many([claim], ctx)
            r = hand_route(t1.score)
            routes[r] += 1
            if r == "escalated":
                (t2,) = embedding.judge_many([claim], ctx)
                ok = t2.verdict.label == "supported"
                tier2_labels.append(ok)
                assert not ok or t2.verdict.quote in ctx[0].text
            else:
                ok = r == "auto_pass"
            supported += ok
        faith[qid] = supported / len(claims)
        recall[qid] = supported / len(claims)  # one cited unit, no span: a supported claim is a cited one
    # every route is exercised; the one-sentence claim scores 1 and the unrelated one 0
    assert all(routes.values()) and routes["auto_pass"] == routes["auto_fail"] == len(QUERIES)
    assert any(tier2_labels) and not all(tier2_labels)
    # mid_a shares 4 of its 8 content words with the context sentence: a tier-1 score of exactly 0.5
    assert LexicalSupport(0.7).judge_many([made["lex-007"][1][1]], made["lex-007"][0])[0].score == 0.5

    summary = res["cascade"]
    assert summary["routes"] == routes and summary["unscored"] == 0
    assert summary["judgements"] == sum(routes.values()) == 4 * len(QUERIES)
    assert summary["tier1"] == "local:lexical" and summary["tier2"] == "local:embedding"
    assert summary["band"] == {"lo": LO, "hi": HI}
    assert summary["covers"] == ["faithfulness", "citation_precision", "citation_recall"]
    m = res["metrics"]
    assert m["faithfulness"]["defined"] == len(QUERIES) and m["faithfulness"]["undefined"] == 1
    assert m["faithfulness"]["mean"] == pytest.approx(sum(faith.values()) / len(faith))
    with Store.open(db, read_only=True) as st:
        rows = {(r["query_id"], r["metric"]): r["value"] for r in st.results("a").to_pylist()}
        calls = st.judge_calls("a")
        rec = st.get_run("a")
    for qid in QUERIES:
        assert rows[(qid, "faithfulness")] == pytest.approx(faith[qid])
        assert rows[(qid, "citation_recall")] == pytest.approx(recall[qid])
        assert rows[(qid, "citation_precision")] == (1.0 if faith[qid] > 0 else 0.0)
    assert rows[("neg-001", "faithfulness")] is None

    # both tiers' judgements are stored: one tier-1 row per claim, one tier-2 row per escalated claim
    tier1 = [c for c in calls if c["item"].startswith("tier1:")]
    tier2 = [c for c in calls if c["item"].startswith("tier2:")]
    assert len(tier1) == summary["judgements"] and len(tier2) == routes["escalated"] == len(calls) - len(tier1)
    assert {c["provider"] for c in calls} == {"local"} and {c["model"] for c in tier1} == {"lexical"}
    assert {c["model"] for c in tier2} == {"embedding"}
    assert all(c["cost"] == 0 and c["latency_ms"] >= 0 and not c["cache_hit"] for c in calls)
    assert sorted(c["reason"].split(":")[0] for c in tier1) == sorted(
        r for r, n in routes.items() for _ in range(n))
    assert rec.extra["judge_summary"]["cascade"]["routes"] == routes

    # the cost line: local tiers cost nothing, so the cost saving is undefined and the latency saving shown
    cost = res["cost"]["cascade"]
    assert cost["escalated"] == routes["escalated"] and cost["judgements"] == summary["judgements"]
    assert cost["escalated_share"] == pytest.approx(routes["escalated"] / summary["judgements"])
    assert cost["cost_saved"] is None and cost["cost_saved_undefined"] == "tier 2 costs nothing"
    t1_ms = sum(c["latency_ms"] for c in tier1)
    t2_ms = sum(c["latency_ms"] for c in tier2)
    per = t2_ms / len(tier2)
    assert cost["tier1_latency_ms"] == pytest.approx(t1_ms) and cost["tier2_latency_ms"] == pytest.approx(t2_ms)
    assert cost["latency_saved"] == pytest.approx(1 - (t1_ms + t2_ms) / (per * summary["judgements"]))
    assert res["cost"]["spend"] == 0 and res["cost"]["calls"] == 0

    # human output: the cascade line under the cost line, never a saving of 0 for an undefined one
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--resume"], capsys)
    assert code == 0, err
    assert "cost: no LLM calls (both tiers are local judges)" in out
    assert f"escalated {routes['escalated']} ({routes['escalated'] / summary['judgements']:.0%})" in out
    assert "cost saved undefined (tier 2 costs nothing)" in out and "latency saved " in out
    with Store.open(db, read_only=True) as st:
        assert len(st.judge_calls("a")) == len(calls)  # a resume stores no second copy


def support_responder(asked):
    """The scripted LLM: claims split at ' || '; a support claim is supported (quoting the start of the
    context, which is verbatim) unless it starts with 'Bananas'. Records every support claim it is asked."""
    def respond(system, user):
        base = {"justification": "scripted", "cannot_judge": False}
        if system == RUBRICS["claims"]:
            answer = user.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
            return {**base, "claims": answer.split(" || ")}
        assert system == RUBRICS["support"]
        claim = user.rsplit("<claim>", 1)[1].removesuffix("</claim>")
        asked.append(claim)
        if claim.startswith("Bananas"):
            return {**base, "label": "unsupported", "quote": None}
        unit = re.search(r'<unit id="1">(.*?)</unit>', user, re.S).group(1)
        return {**base, "label": "supported", "quote": unit[:40]}
    return respond


def llm_cfg(server, **extra):
    return {"provider": "openai", "model": "judge-m", "base_url": server.base_url, "max_tokens": 256,
            "api_key_env": "JUDGE_TEST_KEY", "concurrency": 4, "metrics": LOCAL_METRICS,
            "retry": {"max_attempts": 2, "timeout_s": 2, "backoff_base_s": 0.001},
            "prices": {"judge-m": {"input": 1.0, "output": 2.0}}, **extra}


def test_lexical_to_llm_cascade_calls_the_llm_only_for_escalated_claims(tmp_path, capsys, inputs, fake_provider,
                                                                       monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    asked = []
    fake_provider.responder = support_responder(asked)
    made = make_traces(tmp_path / "t.jsonl", inputs, " || ")
    db = score_runs(tmp_path, capsys, tmp_path / "t.jsonl", ["a", "b"])
    cfg = write_yaml(tmp_path / "cascade.yaml", llm_cfg(fake_provider, cascade=CASCADE))
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)

    lexical = LexicalSupport(0.7)
    routes = {"auto_pass": 0, "auto_fail": 0, "escalated": 0}
    want_asked, not_asked, faith = [], [], {}
    for qid, (ctx, claims) in made.items():
        supported = 0
        for claim in claims:  # the LLM's claims are the answer's ' || ' parts
            r = hand_route(lexical.judge_many([claim], ctx)[0].score)
            routes[r] += 1
            (want_asked if r == "escalated" else not_asked).append(claim)
            supported += r == "auto_pass" or (r == "escalated" and not claim.startswith("Bananas"))
        faith[qid] = supported / len(claims)
    assert all(routes.values())
    n = sum(routes.values())
    # the LLM saw one claims call per answer and a support call for exactly the escalated claims
    assert sorted(asked) == sorted(want_asked)
    assert fake_provider.paid == len(fake_provider.seen) == len(QUERIES) + routes["escalated"]
    assert res["cascade"]["routes"] == routes
    assert res["calls"] == {"ok": len(QUERIES) + routes["escalated"]}
    with Store.open(db, read_only=True) as st:
        rows = {(r["query_id"], r["metric"]): r["value"] for r in st.results("a").to_pylist()}
        calls = st.judge_calls("a")
    for qid in QUERIES:
        assert rows[(qid, "faithfulness")] == pytest.approx(faith[qid])
    llm = [c for c in calls if c["provider"] == "openai"]
    assert sorted(c["item"].split(":")[0] for c in llm) == sorted(["claims"] * 3 + ["support"] * routes["escalated"])
    assert len([c for c in calls if c["item"].startswith("tier1:")]) == n

    # the saving: tier 2's mean call cost times every judgement, against what the escalated calls cost
    cost = res["cost"]["cascade"]
    assert cost["tier2_calls"] == routes["escalated"]
    assert cost["tier2_spend"] == pytest.approx(routes["escalated"] * CALL_COST)
    saving = 1 - routes["escalated"] * CALL_COST / (CALL_COST * n)
    assert cost["cost_saved"] == pytest.approx(saving) and cost["cost_saved_undefined"] is None
    assert cost["latency_saved"] is not None and cost["tier2_timed"] == routes["escalated"]
    assert res["cost"]["spend"] == pytest.approx((len(QUERIES) + routes["escalated"]) * CALL_COST)

    # a resume pays nothing: every LLM call is a cache hit, and the saving is the same (priced at the originals)
    fake_provider.reset_counts()
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--resume", "--json"], capsys)
    assert code == 0, err
    again = json.loads(out)
    assert fake_provider.seen == [] and again["cost"]["spend"] == 0
    assert again["cost"]["cascade"]["cost_saved"] == pytest.approx(saving)
    assert again["cost"]["cascade"]["tier2_spend"] == 0
    assert again["cost"]["cascade"]["tier2_cost"] == pytest.approx(routes["escalated"] * CALL_COST)
    # no tier-2 call was timed on a rerun of cache hits: the latency saving is undefined, not 0
    assert again["cost"]["cascade"]["latency_saved"] is None
    assert again["metrics"]["faithfulness"] == res["metrics"]["faithfulness"]
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--resume"], capsys)
    assert code == 0, err
    assert f"cost saved {saving:.0%} vs tier 2 on all {n} (estimated from {routes['escalated']} tier-2 calls" in out
    assert "latency saved undefined (no tier-2 judgement was timed in this run" in out

    # the same judge without the cascade shares the cache: only the claims tier 1 decided are paid for
    fake_provider.reset_counts()
    asked.clear()
    plain = write_yaml(tmp_path / "plain.yaml", llm_cfg(fake_provider))
    code, out, err = cli(["judge", "b", "--judge", str(plain), "--store", db, "--json"], capsys)
    assert code == 0, err
    assert sorted(asked) == sorted(not_asked) and fake_provider.paid == len(not_asked)
    assert json.loads(out)["cascade"] is None and json.loads(out)["cost"]["cascade"] is None


def test_routing_escalates_unscored_claims_and_labels_that_contradict_the_band():
    ctx = (ContextUnit("u1", "d1", 0, "The licence was published in 2007."),)
    item = JudgeItem("q1", 0, "When?", "It is. The licence was published in 2007. Cats purr loudly.", "answered",
                     ctx, (CitationRef("u1"),))
    judged, log = route_local("r1", [item], LexicalSupport(0.7), LexicalSupport(0.7), lo=LO, hi=HI)
    # "It is." has no content word: tier 1 gives no score, so it goes to tier 2 (which cannot judge it either)
    assert log.routes == {"auto_pass": 1, "auto_fail": 1, "escalated": 1} and log.unscored == 1
    assert [r.reason.split(":")[0] for r in log.tier1_records] == ["escalated", "auto_pass", "auto_fail"]
    assert log.tier1_records[0].reason.startswith("escalated: no tier-1 score")
    assert [(r.item, r.outcome) for r in log.tier2_records] == [("tier2:support:0", "cannot_judge")]
    values = dict(zip(judged.columns["metric"], judged.columns["value"], strict=True))
    assert values["faithfulness"] == 0.5  # a claim tier 2 cannot judge is left out, as for a local judge
    # a tier-1 label that contradicts the band (only at the threshold's float edge) escalates
    unsure = LocalVerdict(SupportVerdict(justification="x", cannot_judge=False, label="insufficient_context",
                                         quote=None), 0.95)
    assert route(p_bad(0.95), unsure, LO, HI) == "escalated"
    assert p_bad(-0.3) == 1.0 and math.isnan(p_bad(math.nan)) and route(math.nan, unsure, LO, HI) == "escalated"


def test_a_cascade_saving_is_undefined_without_tier2_calls_and_never_printed_as_zero():
    none = CascadeCost("local:lexical", "openai:m", auto_pass=3, auto_fail=2, escalated=0, tier1_latency_ms=1.0,
                       tier2_calls=0, tier2_spend=0.0, tier2_cost=0.0, tier2_timed=0, tier2_latency_ms=0.0)
    assert math.isnan(none.cost_saved()[0]) and none.cost_saved()[1] == "no tier-2 call was made"
    assert "cost saved undefined (no tier-2 call was made)" in none.text() and "saved 0%" not in none.text()
    d = none.to_dict()
    assert math.isnan(d["cost_saved"]) and math.isnan(d["latency_saved"]) and d["escalated_share"] == 0
    free = CascadeCost("local:lexical", "openai:m", auto_pass=1, auto_fail=1, escalated=2, tier1_latency_ms=2.0,
                       tier2_calls=2, tier2_spend=0.0, tier2_cost=0.0, tier2_timed=2, tier2_latency_ms=40.0)
    assert free.cost_saved()[1] == "tier 2 costs nothing"
    # latency: (2 ms of tier 1 + 2 × 20 ms) against 4 judgements × 20 ms
    assert free.latency_saved()[0] == pytest.approx(1 - 42 / 80)


def test_cascaded_and_plain_runs_are_not_compared_without_rebaseline(tmp_path, capsys, inputs):
    make_traces(tmp_path / "t.jsonl", inputs, " ")
    db = score_runs(tmp_path, capsys, tmp_path / "t.jsonl", ["plain", "cascaded"])
    plain = {"provider": "local", "model": "embedding", "metrics": LOCAL_METRICS}
    plain_cfg = write_yaml(tmp_path / "plain.yaml", plain)
    cascade_cfg = write_yaml(tmp_path / "cascade.yaml", {**plain, "cascade": CASCADE})
    for run, cfg in (("plain", plain_cfg), ("cascaded", cascade_cfg)):
        code, _, err = cli(["judge", run, "--judge", str(cfg), "--store", db], capsys)
        assert code == 0, err
    with Store.open(db, read_only=True) as st:
        a, b = st.get_run("plain").extra["judge"], st.get_run("cascaded").extra["judge"]
    assert a["judge_model"] == b["judge_model"] == "local:embedding"
    assert a["rubric_sha"] != b["rubric_sha"] and a["prompt_sha"] != b["prompt_sha"]
    assert a["settings"] == "none"
    assert b["settings"] == "cascade=hi=0.8,lo=0.2,tier1=local:lexical,tier1_threshold=0.7"
    code, _, err = cli(["compare", "plain", "cascaded", "--store", db, "--resamples", "200"], capsys)
    assert code == 2 and "judge_settings" in err
    code, out, err = cli(["compare", "plain", "cascaded", "--store", db, "--resamples", "200", "--rebaseline",
                          "--json"], capsys)
    assert code == 0, err
    assert "judge_settings" in {p["pin"] for p in json.loads(out)["pin_differences"]}
    # nor can a plain run be resumed under the cascade
    code, _, err = cli(["judge", "plain", "--judge", str(cascade_cfg), "--store", db, "--resume"], capsys)
    assert code != 0 and "other pins" in err


@pytest.mark.parametrize(("cascade", "fragment"), [
    ({"tier1": {"model": "lexical"}, "band": {"lo": 0.6, "hi": 0.4}},
     ":6: cascade.band: lo (0.6) must be below hi (0.4)"),
    ({"tier1": {"model": "lexical"}, "band": {"lo": 0.1, "hi": 1.5}},
     ":6: cascade.band.hi: Input should be less than or equal to 1"),
    ({"tier1": {"provider": "openai", "model": "judge-m"}, "band": {"lo": 0.2, "hi": 0.8}},
     ":5: cascade.tier1.provider: tier 1 of a cascade must be a local judge that emits a score"),
    ({"tier1": {"model": "gpt-5-mini"}, "band": {"lo": 0.2, "hi": 0.8}},
     ":5: cascade.tier1.model: tier 1 emits a support score: 'lexical' or 'embedding'"),
    ({"tier1": {"model": "lexical", "bogus": 1}, "band": {"lo": 0.2, "hi": 0.8}},
     ":5: cascade.tier1.bogus: Extra inputs are not permitted"),
    ({"tier1": {"model": "lexical"}, "band": {"lo": 0.2, "hi": 0.8}, "tier2": "x"},
     ":7: cascade.tier2: Extra inputs are not permitted"),
    ({"tier1": {"model": "embedding"}, "band": {"lo": 0.1, "hi": 0.15}},
     ":6: cascade.band: tier 1 must itself call every auto-pass supported and every auto-fail not supported: its "
     "threshold 0.8 (the embedding default) must lie in [1 - hi, 1 - lo] = [0.85, 0.9]"),
])
def test_bad_cascade_configs_are_file_line_field_errors(tmp_path, capsys, cascade, fragment):
    cfg = tmp_path / "cascade.yaml"
    lines = ["provider: local", "model: embedding", "metrics: [faithfulness, citations]", "cascade:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in cascade.items()]
    cfg.write_text("\n".join(lines) + "\n")
    code, _, err = cli(["judge", "x", "--judge", str(cfg), "--store", str(tmp_path / "none.duckdb")], capsys)
    assert code == 2 and f"{cfg}{fragment}" in err


def test_a_cascade_must_route_faithfulness_or_citations(tmp_path, capsys, fake_provider):
    cfg = tmp_path / "cascade.yaml"
    cfg.write_text("provider: openai\nmodel: m\nprices: {m: {input: 1, output: 1}}\nmetrics: [answer_relevance]\n"
                   "cascade:\n  tier1: {model: lexical}\n  band: {lo: 0.2, hi: 0.8}\n")
    code, _, err = cli(["judge", "x", "--judge", str(cfg), "--store", str(tmp_path / "none.duckdb")], capsys)
    assert code == 2 and f"{cfg}:5: cascade: a cascade routes only the support judgements behind faithfulness " \
                          "and citations" in err


CASCADE_YAML = ("provider: local\nmodel: embedding\nmetrics: [faithfulness]\n"
                f"cascade:\n  tier1: {{model: lexical}}\n  band: {{lo: {LO}, hi: {HI}}}\n")


def test_a_cascade_config_is_validated_as_a_whole_and_its_record_speaks_for_the_cascaded_run(
        tmp_path, capsys, inputs):
    from ragassay.judges.config import build_tier1, load_judge_config
    from ragassay.judges.labels import bundled_labels, load_labels
    from ragassay.judges.validate import judge_local, route_items

    cfg_path = tmp_path / "cascade.yaml"
    cfg_path.write_text(CASCADE_YAML)
    db = str(tmp_path / "v.duckdb")
    code, out, err = cli(["judge", "validate", "--judge", str(cfg_path), "--store", db, "--json",
                          "--resamples", "200"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    # the routes equal tier 1's P(bad) against the band, by hand
    items = load_labels(bundled_labels()).items
    first = judge_local(build_tier1(load_judge_config(cfg_path)), items)
    want = {"auto_pass": 0, "auto_fail": 0, "escalated": 0}
    for j in first:
        p = p_bad(j.score)
        key = ("auto_pass" if p < LO and j.label == "supported" else
               "auto_fail" if p > HI and j.label == "unsupported" else "escalated")
        want[key] += 1
    assert rec["calls"]["cascade"]["routes"] == want
    assert [r for r, _ in route_items(first, LO, HI)].count("escalated") == want["escalated"]
    assert want["escalated"] < len(items) and want["auto_pass"] + want["auto_fail"] > 0
    # the record carries the cascade's settings pin, which a plain embedding record does not match
    assert "cascade=" in rec["judge_settings"] and rec["kind"] == "support"
    code, _, err = cli(["judge", "validate", "--judge", str(cfg_path), "--tier1", str(cfg_path), "--store", db],
                       capsys)
    assert code == 2 and "names a cascade already: it is validated as a whole" in err


def test_rebaseline_from_a_cascade_routes_the_old_judge_as_the_run_was_judged(tmp_path, capsys, inputs):
    traces = tmp_path / "t.jsonl"
    make_traces(traces, inputs, " ")
    db = score_runs(tmp_path, capsys, traces, ["a"])
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(CASCADE_YAML)
    new.write_text("provider: local\nmodel: embedding\nmetrics: [faithfulness]\n")
    code, _, err = cli(["judge", "a", "--judge", str(old), "--store", db], capsys)
    assert code == 0, err
    with Store.open(db, read_only=True) as st:
        stored = {(r["query_id"]): r["value"] for r in st.results("a", ["faithfulness"]).to_pylist()}
    # OLD as given must be the cascade the run was judged with; the plain tier 2 is not
    code, _, err = cli(["judge", "rebaseline", str(new), str(new), "--runs", "a", "--store", db], capsys)
    assert code == 2 and "was not judged by OLD" in err
    code, out, err = cli(["judge", "rebaseline", str(old), str(new), "--runs", "a", "--store", db, "--json",
                          "--resamples", "200"], capsys)
    assert code == 0, err
    res = json.loads(out)
    faith = res["metrics"]["faithfulness"]
    defined = [v for v in stored.values() if v is not None]
    # the old side re-scored through the cascade equals what the run stored
    assert faith["mean_old"] == pytest.approx(sum(defined) / len(defined))
