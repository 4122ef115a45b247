"""The shared judge limiter on a real Ray cluster: two workers, each with its own judge client, against the
local fake provider server — never more than the global concurrency in flight, never past the shared cap."""

import sys

import pytest
from ray import cloudpickle
from tests.judges.conftest import fake_provider  # noqa: F401  (the server fixture, shared with tests/judges)

from ragassay.errors import InputError
from ragassay.judges.protocol import ItemKey, JudgeRequest, Sampling, SupportVerdict
from ragassay.judges.providers import OpenAIJudge, Price, RetryPolicy
from ragassay.judges.providers.ray_limiter import RayLimiter

# The worker function lives in this test module, which the workers cannot import by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
PRICES = {"judge-m": Price(input=1.0, output=2.0)}
RETRY = RetryPolicy(max_attempts=2, timeout_s=5.0, item_deadline_s=20.0)


def _requests(worker, n):
    return [JudgeRequest(ItemKey("R", f"w{worker}q{i}", 0, f"w{worker}i{i}"), "support", SupportVerdict,
                         "RUBRIC: judge support.", f"claim: the sky is blue [[item:w{worker}i{i}]]")
            for i in range(n)]


def _client(base_url, limiter, spend_cap=None):
    # Each worker alone would allow 8 calls at once and its own cap: only the shared limiter bounds the cluster.
    return OpenAIJudge(Sampling("judge-m", max_tokens=64), PRICES, api_key="sk-local-test", base_url=base_url,
                       concurrency=8, retry=RETRY, spend_cap=spend_cap, limiter=limiter)


def _judge_on_worker(base_url, limiter, worker, n, spend_cap=None):
    run = _client(base_url, limiter, spend_cap).run(_requests(worker, n))
    return {"outcomes": sorted(j.outcome for j in run.judgements), "not_started": len(run.not_started),
            "stopped": run.stopped, "spend": run.spend}


def _on_two_workers(ray, fake, limiter, n, spend_cap=None):
    task = ray.remote(num_cpus=1)(_judge_on_worker)
    return ray.get([task.remote(fake.base_url, limiter, w, n, spend_cap) for w in (0, 1)])


def test_two_workers_never_exceed_the_shared_concurrency(ray_cluster, fake_provider):  # noqa: F811
    fake_provider.latency = 0.05
    limiter = RayLimiter.create(concurrency=3)
    try:
        out = _on_two_workers(ray_cluster, fake_provider, limiter, 24)
        stats = limiter.stats()
    finally:
        limiter.kill()
    assert [o["outcomes"] for o in out] == [["ok"] * 24] * 2
    assert len(fake_provider.seen) == 48
    # The server saw at most 3 requests at once; with 16 client slots across the workers it saw exactly 3.
    assert fake_provider.max_inflight == 3
    assert stats["max_inflight"] == 3 and stats["inflight"] == 0 and stats["leases"] == 48
    assert stats["reserved"] == 0
    assert stats["spent"] == pytest.approx(sum(o["spend"] for o in out), rel=1e-12)


def test_two_workers_never_exceed_the_shared_spend_cap(ray_cluster, fake_provider):  # noqa: F811
    fake_provider.latency = 0.02
    worst = _client(fake_provider.base_url, None)._worst_case(_requests(0, 1)[0])
    cap = 9.5 * worst
    limiter = RayLimiter.create(concurrency=4, spend_cap=cap)
    try:
        # Each worker's own cap is the whole budget: alone, each would spend it, together twice over.
        out = _on_two_workers(ray_cluster, fake_provider, limiter, 20, spend_cap=cap)
        stats = limiter.stats()
    finally:
        limiter.kill()
    spent = sum(o["spend"] for o in out)
    assert spent <= cap and stats["spent"] == pytest.approx(spent, rel=1e-12)
    judged = sum(len(o["outcomes"]) for o in out)
    # Every real call costs at most its worst case, so at least 9 fit; the server billed only started calls.
    assert 9 <= judged < 40 and len(fake_provider.seen) == judged
    assert judged + sum(o["not_started"] for o in out) == 40
    assert any(o["stopped"] and "shared spend cap" in o["stopped"] for o in out)
    assert stats["refused"] >= 1 and stats["inflight"] == 0


def test_the_limiter_refuses_bad_settings_and_batch_mode(ray_cluster):
    with pytest.raises(InputError, match="concurrency"):
        RayLimiter.create(concurrency=0)
    with pytest.raises(InputError, match="spend_cap"):
        RayLimiter.create(concurrency=2, spend_cap=float("inf"))
    prices = {"judge-m": Price(input=1.0, output=2.0, batch_input=0.5, batch_output=1.0)}
    with pytest.raises(InputError, match="mode: sync with a limiter"):
        OpenAIJudge(Sampling("judge-m"), prices, api_key="x", mode="batch", limiter=object())
