"""Batch mode (Anthropic Message Batches, OpenAI Batch) through the real SDKs against the local fake provider:
create -> poll -> merge into the same call records as the sync path, the cache before submission, the spend
cap on the batch worst case, resume after a kill without paying twice, and the key-leak sentinel."""

import asyncio
import json
import logging
import textwrap
from collections import Counter

import pytest

from ragassay.errors import InputError
from ragassay.judges.config import build_judge, load_judge_config
from ragassay.judges.cost import cost_line
from ragassay.judges.protocol import PAID_OUTCOMES, ItemKey, JudgeRequest, Sampling, SupportVerdict
from ragassay.judges.providers import (
    AnthropicJudge,
    BatchPolicy,
    JudgeStopped,
    OpenAIJudge,
    Price,
    RetryPolicy,
)
from ragassay.store import RunRecord, Store

CLIENTS = {"anthropic": AnthropicJudge, "openai": OpenAIJudge}
FAST = RetryPolicy(max_attempts=3, timeout_s=5.0, item_deadline_s=10.0, backoff_base_s=0.005, backoff_max_s=0.02)
QUICK = BatchPolicy(poll_interval_s=0.01, max_poll_interval_s=0.03, max_wait_s=10.0)
PRICES = {"judge-m": Price(input=1.0, output=2.0, cached_input=0.1, cache_write=1.25, batch_input=0.5,
                           batch_output=1.0)}
RUBRIC = "RUBRIC: judge support."


def requests_for(run_id, tags, user="claim: the sky is blue"):
    return [JudgeRequest(ItemKey(run_id, f"q{i}", 0, tag), "support", SupportVerdict, RUBRIC, f"{user} [[item:{tag}]]")
            for i, tag in enumerate(tags)]


def client(name, server, mode="batch", **kw):
    kw.setdefault("retry", FAST)
    kw.setdefault("api_key", "sk-local-test")
    kw.setdefault("batch", QUICK)
    return CLIENTS[name](Sampling("judge-m", max_tokens=64), PRICES, base_url=server.base_url, mode=mode, **kw)


def batch_entries(server):
    return [len(b["entries"]) for b in server.batches.values()]


# Scripted action -> outcome for one batch request.
MIXED = {
    "ok": (["ok"], "ok"),
    "cannot_judge": (["cannot_judge"], "cannot_judge"),
    "refused": (["refusal"], "refused"),
    "filtered": (["content_filter"], "refused"),
    "malformed": (["malformed"], "malformed"),
    "schema": (["schema"], "malformed"),
    "truncated": (["truncate"], "truncated"),
    "expired": (["expired"], "error"),
    "errored": (["500"], "error"),
    "bad_request": (["400"], "error"),
}


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_a_batch_of_mixed_outcomes_reconciles(provider, fake_provider, store, run_id):
    fake_provider.plan = {tag: steps for tag, (steps, _) in MIXED.items()}
    tags = list(MIXED)
    reqs = requests_for(run_id, tags)
    # The same request under another item key: sent once, answered as a cache hit of the first.
    twin = JudgeRequest(ItemKey(run_id, "q99", 0, "twin"), "support", SupportVerdict, RUBRIC, reqs[0].user)
    run = client(provider, fake_provider, store=store).run([*reqs, twin])

    assert run.stopped is None and run.not_started == []
    got = {j.record.item: j for j in run.judgements}
    assert {tag: got[tag].outcome for tag in tags} == {tag: out for tag, (_, out) in MIXED.items()}
    # Every item exactly one outcome; the counts reconcile.
    assert sum(run.counts.values()) == len(tags) + 1 == len(got)
    assert run.counts == Counter(ok=2, cannot_judge=1, refused=2, malformed=2, truncated=1, error=3)
    assert got["twin"].record.cache_hit and got["twin"].verdict == got["ok"].verdict
    assert got["ok"].verdict.quote == "the sky is blue"
    assert got["expired"].record.reason.startswith("batch request")
    assert "expired" in got["expired"].record.reason
    assert "500" in got["errored"].record.reason
    # One batch, one entry per distinct request sha.
    assert batch_entries(fake_provider) == [len(tags)]

    # Batch prices: the fake bills 1000 input tokens (800 a cacheable prefix, written by the first request
    # of the batch and read by the later ones) and 50 output tokens; batch rates are half the sync rates.
    if provider == "anthropic":
        first = (200 * 0.5 + 800 * 1.25 * 0.5 + 50 * 1.0) / 1e6
    else:
        first = (1000 * 0.5 + 50 * 1.0) / 1e6
    later = (200 * 0.5 + 800 * 0.1 * 0.5 + 50 * 1.0) / 1e6
    paid = [j.record for j in run.judgements if not j.record.cache_hit and j.outcome in PAID_OUTCOMES]
    assert sorted(r.cost for r in paid) == pytest.approx(sorted([first] + [later] * (len(paid) - 1)))
    assert run.spend == pytest.approx(first + later * (len(paid) - 1))
    assert all(r.cost == 0 and r.attempts == 1 for r in (got[t].record for t in ("expired", "errored")))
    assert all(r.latency_ms is None for r in paid)
    # What the provider billed is what was recorded as paid.
    assert fake_provider.paid == len(paid) == run.paid_calls == 7

    rows = {r["item"]: r for r in store.judge_calls(run_id)}
    assert {k: r["outcome"] for k, r in rows.items()} == {k: j.outcome for k, j in got.items()}
    (batch,) = store.judge_batches()
    assert batch["status"] == "collected" and batch["provider"] == provider
    assert sorted(batch["billed_shas"]) == sorted(r.request_sha for r in paid)

    line = cost_line([j.record for j in run.judgements], 11, store)
    assert line.batch_calls == 7 and line.paid_calls == 7 and line.errors == 3
    assert line.spend == pytest.approx(run.spend)
    assert "7 via batch at batch prices" in line.text()


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_errored_items_are_retried_later_and_nothing_is_paid_twice(provider, fake_provider, store, run_id):
    tags = ["a", "b", "gone", "boom"]
    fake_provider.plan = {"gone": ["expired", "ok"], "boom": ["500", "ok"]}
    first = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
    assert first.counts == Counter(ok=2, error=2)

    # A later batch run sends only the two errors, in a new batch; the rest are answered from the store.
    second = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
    assert batch_entries(fake_provider) == [4, 2]
    assert second.counts == Counter(ok=4) and second.paid_calls == 2 and second.cache_hits == 2
    # A sync run afterwards pays for nothing: every sha is in the store.
    fake_provider.reset_counts()
    third = client(provider, fake_provider, mode="sync", store=store).run(requests_for(run_id, tags))
    assert third.counts == Counter(ok=4) and third.paid_calls == 0 and fake_provider.seen == []


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_a_sync_error_is_retried_by_a_batch_and_the_cache_is_consulted_before_submission(
        provider, fake_provider, store, run_id):
    tags = ["a", "b", "c"]
    fake_provider.plan = {"c": ["400", "ok"]}
    sync = client(provider, fake_provider, mode="sync", store=store).run(requests_for(run_id, tags))
    assert sync.counts == Counter(ok=2, error=1)
    batch = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
    assert batch_entries(fake_provider) == [1]
    assert batch.counts == Counter(ok=3) and batch.paid_calls == 1


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_resume_after_a_kill_between_create_and_results_pays_nothing_twice(provider, fake_provider, tmp_path):
    tags = ["a", "b", "ref", "gone"]
    fake_provider.plan = {"ref": ["refusal"], "gone": ["expired", "ok"]}
    fake_provider.batch_hold = True
    path = tmp_path / "kill.duckdb"

    async def killed(judge, reqs):
        task = asyncio.create_task(judge.judge(reqs))
        # Kill once the batch exists and has been polled (its id was recorded right after create).
        while not [c for c in fake_provider.control if c.action.startswith("GET batches/")]:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Store.open(path) as store:
        run_id = store.create_run(RunRecord(name="killed"))
        asyncio.run(killed(client(provider, fake_provider, store=store), requests_for(run_id, tags)))
        assert [b["status"] for b in store.judge_batches()] == ["submitted"]
        assert store.judge_calls(run_id) == [] and fake_provider.paid == 0
    # The "new process": a fresh store handle and client. The batch ends now; it is resumed, not resubmitted.
    fake_provider.batch_hold = False
    with Store.open(path) as store:
        resumed = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
        assert len(fake_provider.batches) == 1
        assert resumed.counts == Counter(ok=2, refused=1, error=1) and resumed.not_started == []
        assert fake_provider.paid == 3 == resumed.paid_calls
        assert [b["status"] for b in store.judge_batches()] == ["collected"]
        # Once more: the billed three come from the store; only the unbilled expiry goes out again.
        again = client(provider, fake_provider, store=store).run(requests_for(run_id, tags))
        assert again.cache_hits == 3 and batch_entries(fake_provider) == [4, 1]
        assert fake_provider.paid == 4 and again.paid_calls == 1


def test_the_wait_is_bounded_and_a_later_run_collects_the_same_batch(fake_provider, store, run_id):
    fake_provider.batch_hold = True
    reqs = requests_for(run_id, ["a", "b", "c"])
    short = BatchPolicy(poll_interval_s=0.02, max_poll_interval_s=0.05, max_wait_s=0.25)
    run = client("anthropic", fake_provider, store=store, batch=short).run(reqs)
    assert run.judgements == [] and len(run.not_started) == 3
    assert "still in_progress after 0.25s" in run.stopped
    with pytest.raises(JudgeStopped, match="0 item\\(s\\) judged, 3 not started"):
        run.raise_if_stopped()
    polls = [c.at for c in fake_provider.control if c.action.startswith("GET")]
    # Polled from the start to the deadline, with waits that grow (0.02 s, then 0.03 s, ... up to 0.05 s).
    assert 4 <= len(polls) <= 12 and polls[-1] - polls[0] <= 0.25 + 0.2
    fake_provider.batch_hold = False
    later = client("anthropic", fake_provider, store=store).run(reqs)
    assert later.counts == Counter(ok=3) and len(fake_provider.batches) == 1 and fake_provider.paid == 3


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_spend_cap_applies_before_submission(provider, fake_provider, store, run_id):
    tags = [f"t{i}" for i in range(5)]
    reqs = requests_for(run_id, tags)
    # The worst case of one request at batch prices, computed here from its bytes (a BPE token covers at
    # least one byte) plus 256 tokens of overhead, and max_tokens of output.
    size = len(RUBRIC.encode()) + len(reqs[0].user.encode()) + len(json.dumps(SupportVerdict.json_schema()).encode())
    worst = ((size + 256) * 1.25 * 0.5 + 64 * 1.0) / 1e6
    capped = client(provider, fake_provider, store=store, spend_cap=2.5 * worst).run(reqs)
    assert batch_entries(fake_provider) == [2] and len(capped.judgements) == 2 and len(capped.not_started) == 3
    assert "spend cap" in capped.stopped and "before submission" in capped.stopped
    assert capped.spend <= 2.5 * worst
    resumed = client(provider, fake_provider, store=store, spend_cap=10 * worst).run(reqs)
    assert batch_entries(fake_provider) == [2, 3] and resumed.stopped is None
    assert resumed.paid_calls == 3 and resumed.cache_hits == 2 and fake_provider.paid == 5


def test_a_rate_limited_create_is_retried_and_an_unanswered_one_is_not(fake_provider, store, run_id):
    fake_provider.batch_create_plan = ["429", "ok"]
    run = client("openai", fake_provider, store=store).run(requests_for(run_id, ["a"]))
    assert run.counts == Counter(ok=1)
    creates = [c for c in fake_provider.control if c.action == "POST batches"]
    assert len(creates) == 2 and len(fake_provider.batches) == 1
    # A 400 on create is an error for its items (not billed), and nothing is recorded as a batch.
    fake_provider.batch_create_plan = ["400"]
    bad = client("anthropic", fake_provider, store=store).run(requests_for(run_id, ["z"], user="other claim"))
    assert bad.counts == Counter(error=1) and "batch creation failed: HTTP 400" in bad.judgements[0].record.reason
    assert len(store.judge_batches()) == 1


@pytest.mark.parametrize("provider", sorted(CLIENTS))
def test_the_sentinel_key_never_reaches_the_store_or_logs(provider, fake_provider, tmp_path, caplog,
                                                         monkeypatch):
    sentinel = "sk-SENTINEL-b47c-batch-do-not-store"
    monkeypatch.setenv(CLIENTS[provider].api_key_env, sentinel)
    caplog.set_level(logging.DEBUG)
    fake_provider.plan = {"b": ["500"], "c": ["malformed"], "d": ["expired"]}
    with Store.open(tmp_path / "leak.duckdb") as store:
        run_id = store.create_run(RunRecord(name="leak"))
        judge = CLIENTS[provider](Sampling("judge-m", max_tokens=64), PRICES, base_url=fake_provider.base_url,
                                  retry=FAST, store=store, mode="batch", batch=QUICK)
        run = judge.run(requests_for(run_id, ["a", "b", "c", "d"]))
        texts = [repr(judge), repr(run)] + [j.record.model_dump_json() for j in run.judgements]
        texts += [json.dumps(b, default=str) for b in store.judge_batches()]
    assert run.counts == Counter(ok=1, malformed=1, error=2)
    # The key was really used: every batch request the server received carried it.
    assert {c.key_header for c in fake_provider.control} == {sentinel}
    assert caplog.records, "debug logging captured nothing; the check below would be empty"
    blobs = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert sentinel.encode() not in blobs
    assert sentinel not in caplog.text and not any(sentinel in t for t in texts)


def test_mode_batch_flows_from_judge_yaml(tmp_path, fake_provider, store, run_id, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local-test")
    cfg_path = tmp_path / "judge.yaml"
    cfg_path.write_text(textwrap.dedent(f"""\
        provider: anthropic
        model: judge-m
        base_url: {fake_provider.base_url}
        mode: batch
        batch: {{poll_interval_s: 0.01, max_poll_interval_s: 0.02, max_wait_s: 5}}
        prices: {{judge-m: {{input: 1.0, output: 2.0, batch_input: 0.5, batch_output: 1.0}}}}
        """))
    cfg = load_judge_config(cfg_path)
    judge = build_judge(cfg, store)
    assert judge.mode == "batch" and judge.batch == QUICK.__class__(0.01, 0.02, 5.0)
    assert judge.batch_price == Price(input=0.5, output=1.0)
    run = judge.run(requests_for(run_id, ["a", "b"]))
    assert run.counts == Counter(ok=2) and len(fake_provider.batches) == 1
    # No batch prices for the model: an error naming the file and the field, before any call.
    cfg_path.write_text("provider: openai\nmodel: m\nmode: batch\nprices:\n  m: {input: 1, output: 2}\n")
    with pytest.raises(InputError, match=r"judge\.yaml: prices: mode batch needs m: \{batch_input"):
        load_judge_config(cfg_path)
    cfg_path.write_text("provider: local\nmodel: lexical\nmode: batch\nmetrics: [faithfulness]\n")
    with pytest.raises(InputError, match="mode: a local judge makes no calls"):
        load_judge_config(cfg_path)
    with pytest.raises(InputError, match="batch_input and batch_output together"):
        from ragassay.judges.providers import price_table

        price_table({"m": {"input": 1, "output": 2, "batch_input": 0.5}})
    with pytest.raises(InputError, match="mode batch needs batch prices"):
        OpenAIJudge(Sampling("m"), {"m": Price(1.0, 2.0)}, api_key="x", mode="batch")


def test_ragassay_judge_in_batch_mode_scores_like_sync_at_batch_prices(tmp_path, capsys, fake_provider,
                                                                       monkeypatch):
    from tests.judges.test_cli_judge import cli, judge_yaml, responder, write_run_traces

    from ragassay.analysis.runner import load_inputs
    from ragassay.golden import bundled_golden_source

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-judge-test")
    fake_provider.responder = responder
    db = str(tmp_path / "r.duckdb")
    traces = write_run_traces(tmp_path / "traces.jsonl", load_inputs(None, None))
    code, _, err = cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db,
                        "--name", "a", "--json"], capsys)
    assert code == 0, err
    cfg = judge_yaml(tmp_path, fake_provider, mode="batch",
                     batch={"poll_interval_s": 0.01, "max_poll_interval_s": 0.02, "max_wait_s": 10},
                     prices={"judge-m": {"input": 1.0, "output": 2.0, "batch_input": 0.5, "batch_output": 1.0}})
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    # The same numbers as the sync test of this command (tests/judges/test_cli_judge.py).
    assert res["metrics"]["faithfulness"] == {"mean": 0.5, "defined": 3, "undefined": 1}
    assert res["metrics"]["citation_recall"]["mean"] == 0.5
    cost = res["cost"]
    assert cost["batch_calls"] == cost["paid_calls"] == cost["calls"] == fake_provider.paid > 0
    # Claims first, then the calls that depend on them: two batches, one after the other.
    assert len(fake_provider.batches) == 2
    # 1000 input tokens (no cached_input price, so cache reads cost the same) and 50 output tokens per call
    # at the batch rates (0.5 and 1.0 USD per million).
    assert cost["spend"] == pytest.approx(cost["calls"] * (1000 * 0.5 + 50 * 1.0) / 1e6)
