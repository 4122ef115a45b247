"""The shared judge limiter on a real Ray cluster: two workers, each with its own judge client, against the
local fake provider server — never more than the global concurrency in flight, never past the shared cap."""

import json
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


# ---------------------------------------------------------------------------------------------- judge score
def _judged(tmp_path, capsys, inputs, fake, executor, cfg_path, name):
    from tests.judges.test_cli_judge import cli, write_run_traces

    from ragassay.golden import bundled_golden_source
    from ragassay.store import Store

    db = str(tmp_path / f"{name}.duckdb")
    traces = write_run_traces(tmp_path / f"{name}.jsonl", inputs)
    code, _, err = cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db,
                        "--name", "a"], capsys)
    assert code == 0, err
    before = len(fake.seen)
    code, out, err = cli(["judge", "a", "--judge", str(cfg_path), "--store", db, "--executor", executor,
                          "--json"], capsys)
    assert code == 0, err
    with Store.open(db, read_only=True) as st:
        results = sorted((r["query_id"], r["trial"], r["metric"], r["value"]) for r in st.results("a").to_pylist())
        # wall times, and which call found the provider's prompt cache warm (call order: it varies between
        # two local runs too, and the fake server, like a provider, remembers prompts across runs)
        drop = ("run_id", "latency_ms", "created_at", "cached_tokens")
        calls = sorted((tuple((k, v) for k, v in sorted(c.items()) if k not in drop) for c in st.judge_calls("a")),
                       key=repr)
    return json.loads(out), results, calls, len(fake.seen) - before, db


@pytest.fixture(scope="module")
def inputs():
    from ragassay.analysis.runner import load_inputs

    return load_inputs(None, None)


@pytest.mark.slow
def test_judge_score_on_ray_stores_the_local_rows_and_calls(tmp_path, capsys, inputs, ray_cluster,
                                                            fake_provider, monkeypatch):  # noqa: F811
    from tests.judges.test_cli_judge import cli, judge_yaml, responder

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-judge-SENTINEL-123")
    fake_provider.responder = responder
    fake_provider.latency = 0.02
    cfg = judge_yaml(tmp_path, fake_provider, concurrency=2)
    local = _judged(tmp_path, capsys, inputs, fake_provider, "local", cfg, "local")
    fake_provider.max_inflight = 0
    ray = _judged(tmp_path, capsys, inputs, fake_provider, "ray", cfg, "ray")
    assert ray[1] == local[1] and len(local[1]) > 20        # the judge metrics, row for row
    assert ray[2] == local[2] and len(local[2]) == local[3]  # every call record, one per paid request
    assert ray[3] == local[3] > 10                          # the server billed the same calls
    assert ray[0]["metrics"] == local[0]["metrics"] and ray[0]["calls"] == local[0]["calls"]
    # the config's concurrency held for the cluster: two workers, at most 2 requests at the server at once
    assert fake_provider.max_inflight == 2
    # judged again on Ray with --resume: every answer comes from the store, nothing is paid
    before = len(fake_provider.seen)
    code, out, err = cli(["judge", "a", "--judge", str(cfg), "--store", ray[4], "--executor", "ray", "--resume",
                          "--json"], capsys)
    assert code == 0, err
    assert len(fake_provider.seen) == before and json.loads(out)["cost"]["cache_hits"] == local[3]


def test_judge_score_on_ray_keeps_the_spend_cap_for_the_cluster(tmp_path, capsys, inputs, ray_cluster,
                                                                 fake_provider, monkeypatch):  # noqa: F811
    from tests.judges.test_cli_judge import cli, judge_yaml, responder, write_run_traces

    from ragassay.golden import bundled_golden_source
    from ragassay.store import Store

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-judge-SENTINEL-123")
    fake_provider.responder = responder
    # with max_tokens 256 at $2/M output a call's worst case is above $0.0005: a $0.002 cap stops within 4
    cfg = judge_yaml(tmp_path, fake_provider, concurrency=4, spend_cap=0.002)
    db = str(tmp_path / "cap.duckdb")
    traces = write_run_traces(tmp_path / "cap.jsonl", inputs)
    assert cli(["score", str(traces), "--golden", str(bundled_golden_source()), "--store", db, "--name", "a"],
               capsys)[0] == 0
    code, _, err = cli(["judge", "a", "--judge", str(cfg), "--store", db, "--executor", "ray"], capsys)
    assert code == 2 and "spend cap" in err and "--resume" in err
    with Store.open(db, read_only=True) as st:
        calls = st.judge_calls("a")
    assert 0 < len(calls) == len(fake_provider.seen) <= 4
    assert sum(c["cost"] for c in calls) <= 0.002


def test_judge_score_refuses_a_bad_executor_before_anything_runs(tmp_path, capsys):
    from tests.judges.test_cli_judge import cli

    code, _, err = cli(["judge", "a", "--judge", str(tmp_path / "missing.yaml"), "--executor", "spark"], capsys)
    assert code == 2 and "--executor 'spark'" in err


def test_identical_requests_on_ray_are_paid_once_as_on_one_machine(tmp_path, ray_cluster, fake_provider):  # noqa: F811
    from ragassay.executors import get_executor
    from ragassay.executors.judging import ClusterJudge
    from ragassay.judges.config import JudgeConfig
    from ragassay.store import RunRecord, Store

    def requests(run_id):
        # trials 0 and 1 of each query ask the same thing: one paid call, one cache hit of it
        return [JudgeRequest(ItemKey(run_id, f"q{i}", t, "support"), "support", SupportVerdict,
                             "RUBRIC: judge support.", f"claim: the sky is blue {i}") for t in (0, 1) for i in range(6)]

    got = {}
    for label in ("local", "ray"):
        fake_provider.reset_counts()
        with Store.open(tmp_path / f"{label}.duckdb") as st:
            run_id = st.create_run(RunRecord(name="r"))
            client = OpenAIJudge(Sampling("judge-m", max_tokens=64), PRICES, api_key="sk-local-test",
                                 base_url=fake_provider.base_url, concurrency=4, retry=RETRY, store=st)
            if label == "local":
                run = client.run(requests(run_id))
            else:
                cfg = JudgeConfig(provider="openai", model="judge-m", concurrency=4,
                                  prices={"judge-m": {"input": 1.0, "output": 2.0}})
                ex = get_executor("ray")
                try:
                    with ClusterJudge(client, cfg, ex) as cluster:
                        run = cluster.run(requests(run_id))
                finally:
                    ex.close()  # an executor given as an object is its caller's to close
            stored = sorted((c["query_id"], c["trial"], c["outcome"], c["cache_hit"], c["request_sha"])
                            for c in st.judge_calls(run_id))
        got[label] = ([(j.record.query_id, j.record.trial, j.outcome, j.record.cache_hit) for j in run.judgements],
                      stored, fake_provider.paid, run.not_started)
    assert got["ray"] == got["local"]
    assert got["local"][2] == 6 and sum(hit for *_, hit in got["local"][0]) == 6
