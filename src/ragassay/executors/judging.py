"""An LLM judge whose calls are made on a cluster's workers, with the local client's answers and records.

:class:`ClusterJudge` stands in for a ``JudgeClient`` in ``judge_items`` (it has the one method used,
``run``). The driver does what needs the store, as the local client does: one cache lookup per round
(a request paid before is answered from the store, an item resumed keeps its row), and identical
requests are sent once, the others answered as cache hits of the first. Only the requests that must be
paid go to the workers, in parts of :data:`PART_REQUESTS`; each worker runs them through its own copy of
the judge client — same retries, timeouts and prompts — behind one shared
:class:`~ragassay.judges.providers.ray_limiter.RayLimiter`, which holds the config's ``concurrency`` and
``spend_cap`` for the whole cluster. The records come back and the driver, the single writer, stores
them part by part; the judgements are returned in request order, so the metrics are the local ones.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ragassay.errors import InputError
from ragassay.judges.protocol import PAID_OUTCOMES, Judgement, JudgeRequest, request_sha
from ragassay.judges.providers import JudgeRun

# Requests per worker task: small enough that a driver killed mid-run loses few paid records, large enough
# that a part's Ray round trip (about a millisecond) is nothing next to its calls.
PART_REQUESTS = 16


def _judge_part(requests: list[JudgeRequest], client: Any) -> JudgeRun:
    return client.run(requests)


class ClusterJudge:
    """``judge`` (a ``JudgeClient`` holding the store) with its paid calls spread over ``executor``'s workers."""

    def __init__(self, judge: Any, cfg: Any, executor: Any) -> None:
        if judge.mode == "batch":
            raise InputError("judge config mode: batch submits one provider batch from this machine; use "
                             "--executor local for it, or mode: sync to spread the calls over a cluster")
        from ragassay.judges.providers.ray_limiter import RayLimiter

        self.judge, self.executor = judge, executor
        self.limiter = RayLimiter.create(concurrency=cfg.concurrency, spend_cap=cfg.spend_cap)
        # the workers' client: the driver's settings (and key, held in memory only), no store, the limiter
        self.worker_client = copy.copy(judge)
        self.worker_client.store = None
        self.worker_client.limiter = self.limiter

    def __enter__(self) -> ClusterJudge:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.limiter.kill()

    def run(self, requests: Sequence[JudgeRequest]) -> JudgeRun:
        requests = list(requests)
        keys = [r.key for r in requests]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise InputError(f"judge requests: item key {dup} appears twice; give each judgement its own item")
        judge = self.judge
        shas = [request_sha(judge.provider, judge.sampling, r) for r in requests]
        cached, own = judge.prefetch(requests, shas)
        results: list[Judgement | None] = [None] * len(requests)
        hits, first, waiting = [], {}, []
        for i, (r, sha) in enumerate(zip(requests, shas, strict=True)):
            if r.key in own:
                results[i] = judge.as_hit(r, sha, own[r.key], None, write=False)
            elif sha in cached:
                results[i] = judge.as_hit(r, sha, cached[sha], None, write=False)
                hits.append(results[i].record)
            elif sha in first:
                waiting.append(i)
            else:
                first[sha] = i
        stopped, spend = None, 0.0
        if hits:
            judge.store.record_judge_calls([rec.to_row() for rec in hits])
        todo = list(first.values())
        while todo:
            parts = [todo[s:s + PART_REQUESTS] for s in range(0, len(todo), PART_REQUESTS)]
            done = self.executor.map_ordered(_judge_part, [[requests[i] for i in p] for p in parts], self.worker_client)
            for part, run in zip(parts, done, strict=True):
                by_key = {(j.record.query_id, j.record.trial, j.record.item): j for j in run.judgements}
                for i in part:
                    k = requests[i].key
                    results[i] = by_key.get((k.query_id, k.trial, k.item))
                if run.judgements:
                    judge.store.record_judge_calls([j.record.to_row() for j in run.judgements])
                stopped, spend = stopped or run.stopped, spend + run.spend
            # a duplicate waits for its first: a paid answer is its cache hit; after an error each duplicate
            # makes its own call (as the local client's waiters do); after a refusal it is not started either
            retry = []
            for i in waiting:
                j = results[first[shas[i]]]
                if j is not None and j.outcome in PAID_OUTCOMES:
                    results[i] = judge.as_hit(requests[i], shas[i], j.record.model_dump(), None, write=False)
                    judge.store.record_judge_calls([results[i].record.to_row()])
                elif j is not None and stopped is None:
                    retry.append(i)
            todo, waiting = retry, []
        judgements = [j for j in results if j is not None]
        not_started = [r for r, j in zip(requests, results, strict=True) if j is None]
        return JudgeRun(judgements, not_started, stopped, spend)
