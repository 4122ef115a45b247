"""The judge clients through the real anthropic and openai SDKs, pointed at the local fake provider server."""

import logging
import random
from collections import Counter

import pytest

from ragassay.errors import InputError
from ragassay.judges.protocol import PAID_OUTCOMES, ItemKey, JudgeRequest, Sampling, SupportVerdict
from ragassay.judges.providers import AnthropicJudge, JudgeStopped, OpenAIJudge, Price, RetryPolicy
from ragassay.store import RunRecord, Store

CLIENTS = {"anthropic": AnthropicJudge, "openai": OpenAIJudge}
FAST = RetryPolicy(max_attempts=4, timeout_s=0.3, item_deadline_s=5.0, backoff_base_s=0.005, backoff_max_s=0.02)
PRICES = {"judge-m": Price(input=1.0, output=2.0, cached_input=0.1, cache_write=1.25)}


def requests_for(run_id, tags, user="claim: the sky is blue"):
    return [
        JudgeRequest(ItemKey(run_id, f"q{i // 3}", 0, tag), "support", SupportVerdict, "RUBRIC: judge support.",
                     f"{user} [[item:{tag}]]")
        for i, tag in enumerate(tags)
    ]


def client(name, server, **kw):
    kw.setdefault("retry", FAST)
    kw.setdefault("api_key", "sk-local-test")
    return CLIENTS[name](Sampling("judge-m", max_tokens=64), PRICES, base_url=server.base_url, **kw)


# What each scripted action sequence must end in, and after how many attempts.
EXPECTED = {
    "ok": (["ok"], "ok", 1),
    "cannot_judge": (["cannot_judge"], "cannot_judge", 1),
    "refused": (["refusal"], "refused", 1),
    "filtered": (["content_filter"], "refused", 1),
    "truncated": (["truncate"], "truncated", 1),
    "malformed": (["malformed"], "malformed", 1),
    "schema": (["schema"], "malformed", 1),
    "rate_limited": (["429", "ok"], "ok", 2),
    "server_errors": (["500", "529", "503", "ok"], "ok", 4),
    "timeout": (["timeout", "ok"], "ok", 2),
    "dropped": (["drop", "ok"], "ok", 2),
    "bad_request": (["400"], "error", 1),
    "exhausted": (["500"], "error", 4),
}


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_every_outcome_kind_through_the_real_sdk(provider, fake_provider, store, run_id):
    fake_provider.plan = {tag: steps for tag, (steps, _, _) in EXPECTED.items()}
    run = client(provider, fake_provider, store=store).run(requests_for(run_id, list(EXPECTED)))
    got = {j.record.item: j for j in run.judgements}
    assert sorted(got) == sorted(EXPECTED) and run.not_started == [] and run.stopped is None
    for tag, (_, outcome, attempts) in EXPECTED.items():
        rec = got[tag].record
        assert (rec.outcome, rec.attempts) == (outcome, attempts), tag
        assert isinstance(got[tag].verdict, SupportVerdict) == (outcome in ("ok", "cannot_judge")), tag
        assert (rec.cost > 0) == (outcome in PAID_OUTCOMES), tag
    assert got["ok"].verdict.label == "supported" and got["ok"].verdict.quote == "the sky is blue"
    assert got["cannot_judge"].record.reason == "the claim is not a statement about the context"
    assert got["truncated"].record.stop_reason == ("max_tokens" if provider == "anthropic" else "length")
    assert got["refused"].record.stop_reason == ("refusal" if provider == "anthropic" else "stop")
    assert got["malformed"].record.reason.startswith("not JSON")
    assert "does not match SupportVerdict" in got["schema"].record.reason
    assert got["bad_request"].record.reason.startswith("HTTP 400")
    assert got["exhausted"].record.reason.startswith("HTTP 500")
    # The store holds exactly one row per item with the same outcome.
    rows = {r["item"]: r for r in store.judge_calls(run_id)}
    assert {k: r["outcome"] for k, r in rows.items()} == {k: v[1] for k, v in EXPECTED.items()}
    assert rows["ok"]["verdict"]["label"] == "supported" and rows["ok"]["model"] == "judge-m"
    assert rows["ok"]["provider"] == provider and rows["ok"]["max_tokens"] == 64


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_cost_uses_uncached_cached_and_written_tokens(provider, fake_provider):
    # The server reports 1000 input tokens, 800 of them a cacheable prefix, and 50 output tokens; the first
    # call writes the prefix (Anthropic bills the write at 1.25x), later calls read it at 0.1x.
    run = client(provider, fake_provider, concurrency=1).run(requests_for("R", ["a", "b"]))
    first, second = (j.record for j in run.judgements)
    if provider == "anthropic":
        assert first.cost == pytest.approx((200 * 1.0 + 800 * 1.25 + 50 * 2.0) / 1e6)
    else:
        assert first.cost == pytest.approx((1000 * 1.0 + 50 * 2.0) / 1e6)
    assert second.cost == pytest.approx((200 * 1.0 + 800 * 0.1 + 50 * 2.0) / 1e6)
    assert (first.input_tokens, second.input_tokens, second.cached_tokens) == (1000, 1000, 800)
    assert run.spend == pytest.approx(first.cost + second.cost)


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_retry_after_is_honoured(provider, fake_provider):
    fake_provider.retry_after = 0.4
    fake_provider.plan = {"x": ["429", "ok"]}
    run = client(provider, fake_provider).run(requests_for("R", ["x"]))
    assert run.judgements[0].record.outcome == "ok" and run.judgements[0].record.attempts == 2
    first, second = fake_provider.seen
    # Backoff alone would wait at most 0.02 s here.
    assert second.at - first.at >= 0.4


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_item_deadline_bounds_a_hanging_server(provider, fake_provider):
    fake_provider.hang_s = 0.5
    fake_provider.plan = {"x": ["timeout"]}
    policy = RetryPolicy(max_attempts=50, timeout_s=0.2, item_deadline_s=0.7, backoff_base_s=0.001)
    run = client(provider, fake_provider, retry=policy).run(requests_for("R", ["x"]))
    rec = run.judgements[0].record
    assert rec.outcome == "error" and 2 <= rec.attempts <= 4
    assert "timed out" in rec.reason


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_authentication_error_stops_the_run(provider, fake_provider):
    fake_provider.plan = {f"t{i}": ["401"] for i in range(5)}
    run = client(provider, fake_provider, concurrency=1).run(requests_for("R", [f"t{i}" for i in range(5)]))
    assert [j.outcome for j in run.judgements] == ["error"]
    assert len(run.not_started) == 4 and len(fake_provider.seen) == 1
    assert "HTTP 401" in run.stopped
    with pytest.raises(JudgeStopped, match="1 item\\(s\\) judged, 4 not started"):
        run.raise_if_stopped()


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_concurrency_limit_is_respected(provider, fake_provider):
    fake_provider.latency = 0.05
    run = client(provider, fake_provider, concurrency=4).run(requests_for("R", [f"c{i}" for i in range(24)]))
    assert run.counts == Counter(ok=24)
    assert fake_provider.max_inflight == 4


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_a_rerun_is_answered_from_the_store(provider, fake_provider, store, run_id):
    tags = ["ok1", "ok2", "refused", "cj", "bad"]
    fake_provider.plan = {"refused": ["refusal"], "cj": ["cannot_judge"], "bad": ["400"]}
    first = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
    assert first.paid_calls == 4 and first.cache_hits == 0
    fake_provider.reset_counts()
    # The same run resumed, and a second run judging the same answers.
    again = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
    other = store.create_run(RunRecord(name="other"))
    second = client(provider, fake_provider, store=store).run(requests_for(other, tags))
    for rerun in (again, second):
        assert rerun.paid_calls == 0 and rerun.cache_hits == 4 and rerun.spend == 0.0
        assert {j.record.item: j.outcome for j in rerun.judgements} == {
            j.record.item: j.outcome for j in first.judgements}
    # Only the error (never billed) was tried again, once per rerun; nothing was paid.
    assert [s.item for s in fake_provider.seen] == ["bad", "bad"] and fake_provider.paid == 0
    assert [j.verdict for j in second.judgements if j.record.item == "ok1"] == [
        j.verdict for j in first.judgements if j.record.item == "ok1"]
    rows = store.judge_calls(other)
    assert len(rows) == 5 and sum(r["cache_hit"] for r in rows) == 4
    assert all(r["cost"] == 0 for r in rows)
    # The first run's rows are still the paid originals.
    assert sum(r["cost"] > 0 for r in store.judge_calls(run_id)) == 4


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_identical_requests_in_one_batch_are_paid_once(provider, fake_provider, store, run_id):
    reqs = [JudgeRequest(ItemKey(run_id, f"q{i}", 0, "support:0"), "support", SupportVerdict, "RUBRIC",
                         "claim [[item:same]]") for i in range(6)]
    run = client(provider, fake_provider, store=store, concurrency=6).run(reqs)
    assert len(fake_provider.seen) == 1
    assert run.paid_calls == 1 and run.cache_hits == 5 and run.counts == Counter(ok=6)


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_spend_cap_stops_cleanly_and_a_resume_pays_no_call_twice(provider, fake_provider, store, run_id):
    tags = [f"s{i}" for i in range(30)]
    reqs = requests_for(run_id, tags)
    probe = client(provider, fake_provider)
    worst = probe._worst_case(reqs[0])
    cap = 10.5 * worst
    capped = client(provider, fake_provider, store=store, spend_cap=cap, concurrency=4).run(reqs)
    assert capped.stopped is not None and "spend cap" in capped.stopped
    assert capped.spend <= cap
    assert 10 <= len(capped.judgements) < 30
    assert len(capped.judgements) + len(capped.not_started) == 30
    with pytest.raises(JudgeStopped, match="spend cap"):
        capped.raise_if_stopped()
    resumed = client(provider, fake_provider, store=store, concurrency=4).run(reqs)
    assert resumed.stopped is None and resumed.counts == Counter(ok=30)
    assert resumed.paid_calls == len(capped.not_started) and resumed.cache_hits == len(capped.judgements)
    # Across both runs the server answered every item exactly once.
    assert Counter(s.item for s in fake_provider.seen) == Counter(tags)
    assert len(store.judge_calls(run_id)) == 30


FAULTS = ["429", "500", "529", "503", "timeout", "drop", "refusal", "truncate", "malformed", "schema",
          "cannot_judge", "400"]


def _faulted_plan(n, rng):
    """20% of items faulted, every fault kind mixed; transient faults clear on a later attempt."""
    plan, expected = {}, {}
    for i in range(n):
        tag = f"f{i:03d}"
        if rng.random() >= 0.2:
            expected[tag] = "ok"
            continue
        fault = rng.choice(FAULTS)
        if fault in ("429", "500", "529", "503", "timeout", "drop"):
            plan[tag] = [fault, "ok"]
            expected[tag] = "ok"
        else:
            plan[tag] = [fault]
            expected[tag] = {"refusal": "refused", "truncate": "truncated", "schema": "malformed",
                             "400": "error"}.get(fault, fault)
    return plan, expected


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_faulted_run_reconciles_and_rerun_pays_nothing(provider, fake_provider, store, run_id):
    n = 300
    plan, expected = _faulted_plan(n, random.Random(12))
    assert set(Counter(s[0] for s in plan.values())) == set(FAULTS)
    fake_provider.plan = plan
    fake_provider.retry_after = 0.01
    fake_provider.hang_s = 0.4
    tags = sorted(expected)
    run = client(provider, fake_provider, store=store, concurrency=32).run(requests_for(run_id, tags))
    counts = run.counts
    assert run.stopped is None and run.not_started == []
    assert sum(counts.values()) == n
    assert counts["ok"] + counts["cannot_judge"] + counts["refused"] + counts["truncated"] \
        + counts["malformed"] + counts["error"] == n
    assert counts == Counter(expected.values())
    assert {j.record.item: j.outcome for j in run.judgements} == expected
    rows = store.judge_calls(run_id)
    assert len(rows) == n and Counter(r["outcome"] for r in rows) == counts
    assert run.spend == pytest.approx(sum(r["cost"] for r in rows))
    fake_provider.reset_counts()
    rerun = client(provider, fake_provider, store=store, concurrency=32).run(requests_for(run_id, tags))
    assert rerun.counts == counts and rerun.spend == 0.0
    assert fake_provider.paid == 0 and rerun.paid_calls == 0
    assert rerun.cache_hits == n - counts["error"]


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_api_key_never_reaches_store_logs_or_records(provider, fake_provider, tmp_path, monkeypatch, caplog):
    sentinel = "sk-SENTINEL-7f3a9c1e-do-not-store"
    monkeypatch.setenv(CLIENTS[provider].api_key_env, sentinel)
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "leak.duckdb"
    fake_provider.plan = {"a": ["429", "ok"], "b": ["401"], "c": ["malformed"], "d": ["500", "ok"]}
    with Store.open(path) as store:
        run_id = store.create_run(RunRecord(name="leak"))
        judge = CLIENTS[provider](Sampling("judge-m", max_tokens=64), PRICES, base_url=fake_provider.base_url,
                                  retry=FAST, store=store, concurrency=1)
        run = judge.run(requests_for(run_id, ["a", "b", "c", "d"]))
        texts = [repr(judge), repr(run)] + [j.record.model_dump_json() for j in run.judgements]
    # The key was really used: the server received it.
    assert {s.key_header for s in fake_provider.seen} == {sentinel}
    assert caplog.records, "debug logging captured nothing; the check below would be empty"
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert sentinel.encode() not in blobs
    assert sentinel not in caplog.text and not any(sentinel in t for t in texts)


def test_missing_key_and_unknown_price_are_clean_errors(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(InputError, match="set ANTHROPIC_API_KEY"):
        AnthropicJudge(Sampling("judge-m"), PRICES)
    with pytest.raises(InputError, match="no price for model 'other'"):
        OpenAIJudge(Sampling("other"), PRICES, api_key="x")
    with pytest.raises(InputError, match="concurrency"):
        OpenAIJudge(Sampling("judge-m"), PRICES, api_key="x", concurrency=0)
    with pytest.raises(InputError, match="spend_cap"):
        OpenAIJudge(Sampling("judge-m"), PRICES, api_key="x", spend_cap=float("nan"))


def test_duplicate_item_keys_are_refused(fake_provider):
    reqs = requests_for("R", ["a"]) * 2
    with pytest.raises(InputError, match="appears twice"):
        client("openai", fake_provider).run(reqs)
    assert fake_provider.seen == []
