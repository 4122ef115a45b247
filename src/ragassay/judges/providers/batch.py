"""Judge calls through a provider's batch API (Anthropic Message Batches, OpenAI Batch) at batch prices.

``JudgeClient.judge`` comes here when ``mode="batch"``. One run goes:

1. **Cache first.** Every request sha is looked up in the store (one query) before anything is submitted;
   a stored billed answer answers the item as a cache hit, exactly as in sync mode.
2. **Resume.** Batches recorded in ``judge_batches`` as ``submitted`` (an earlier run was killed or stopped
   waiting) that hold any still-needed sha are polled again instead of being resubmitted.
3. **Spend cap, then create.** The remaining distinct shas are submitted in request order while the worst
   case at batch prices (of the resumed batches, which are already committed, plus each new request) stays
   within ``spend_cap``; the rest come back as ``not_started``. Each batch's id is written to the store the
   moment the provider returns it. A create is retried only on an explicit retryable HTTP status: after a
   timeout or a dropped connection the provider may hold the batch, so the run stops rather than risk paying
   for it twice.
4. **Poll**, bounded: every batch is retrieved at ``poll_interval_s``, growing 1.5x up to
   ``max_poll_interval_s``, for at most ``max_wait_s`` in this process. A batch still running then stays
   ``submitted`` and its items ``not_started``; the next run resumes it.
5. **Merge.** An ended batch's results become the same call records and outcomes as the sync path (one per
   item; identical requests share one paid answer, the others are cache hits), priced at batch rates,
   written to ``judge_calls``; then the batch is marked ``collected`` with the shas it billed. A request the
   provider errored, canceled or let expire — or left without a result — is ``error`` (not billed, so a later
   sync or batch run retries it). A batch the provider no longer knows (404) is marked ``lost`` and its
   items are ``error``.

``custom_id`` is the request sha (64 hex characters, inside Anthropic's ``[a-zA-Z0-9_-]{1,64}``), so results
map back without any per-batch state beyond the shas. ``latency_ms`` is null for batch calls (a batch has
no per-request latency), so they stay out of the cost line's latency percentiles.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragassay.judges.protocol import CallRecord, Judgement, JudgeRequest
from ragassay.judges.providers.base import JudgeRun, ProviderError, _RunState, request_bytes

if TYPE_CHECKING:
    from ragassay.judges.providers.base import JudgeClient

log = logging.getLogger("ragassay.judges")

# Both providers cap a batch's size (Anthropic 256 MB, OpenAI 200 MB of JSONL); stay well below either.
_MAX_BATCH_BYTES = 150_000_000
_LINE_OVERHEAD_BYTES = 512


@dataclass(frozen=True)
class BatchState:
    """One poll of a batch: has it ended, the provider's status word, the files holding its results
    (OpenAI) and the provider's batch-level error detail, if any."""

    batch_id: str
    ended: bool
    status: str
    files: tuple[str, ...] = ()
    detail: str | None = None


@dataclass
class _Batch:
    batch_id: str
    shas: list[str]  # the shas of this run it answers


class _Run:
    """What one batch-mode run has decided so far."""

    def __init__(self, client: JudgeClient, requests: Sequence[JudgeRequest], shas: Sequence[str]):
        self.client = client
        self.requests = requests
        self.shas = shas
        self.results: list[Judgement | None] = [None] * len(requests)
        self.need: dict[str, list[int]] = {}
        self.spent = 0.0
        self.stopped: str | None = None
        self.scratch = _RunState(asyncio.Semaphore(1), None)

    def stop(self, reason: str) -> None:
        self.stopped = self.stopped or reason

    def write(self, records: Sequence[CallRecord]) -> None:
        if self.client.store is not None and records:
            self.client.store.record_judge_calls([r.to_row() for r in records])


async def judge_batched(client: JudgeClient, requests: Sequence[JudgeRequest], shas: Sequence[str]) -> JudgeRun:
    """Judge ``requests`` (with their request ``shas``) through ``client``'s batch API; see the module doc."""
    run = _Run(client, requests, shas)
    cached, own = client.prefetch(requests, shas)
    hits = []
    for i, (request, sha) in enumerate(zip(requests, shas, strict=True)):
        row = own.get(request.key)
        if row is not None:
            # A resumed run: this item's row is already its answer; leave it as it is.
            run.results[i] = client.as_hit(request, sha, row, run.scratch, write=False)
            continue
        row = cached.get(sha)
        if row is not None:
            run.results[i] = client.as_hit(request, sha, row, run.scratch, write=False)
            hits.append(run.results[i].record)
            continue
        run.need.setdefault(sha, []).append(i)
    run.write(hits)
    if run.need:
        await client._open()
        try:
            await _submit_and_collect(run)
        finally:
            await client._close()
    judgements = [j for j in run.results if j is not None]
    not_started = [r for r, j in zip(requests, run.results, strict=True) if j is None]
    return JudgeRun(judgements, not_started, run.stopped, run.spent)


async def _submit_and_collect(run: _Run) -> None:
    client, store = run.client, run.client.store
    price = client.batch_price
    resumed: list[_Batch] = []
    reserved = 0.0
    covered: set[str] = set()
    if store is not None:
        for row in store.judge_batches(provider=client.provider, model=client.sampling.model,
                                       status="submitted"):
            mine = [s for s in row["request_shas"] if s in run.need and s not in covered]
            if mine:
                resumed.append(_Batch(row["batch_id"], mine))
                covered.update(mine)
                reserved += row["worst_case"]
                log.info("judge batch %s: resuming (%d of its requests needed)", row["batch_id"], len(mine))
    fresh = [s for s in run.need if s not in covered]
    submit: list[tuple[str, float]] = []
    total = reserved
    for sha in fresh:
        estimate = client._worst_case(run.requests[run.need[sha][0]], price)
        if client.spend_cap is not None and total + estimate > client.spend_cap:
            run.stop(f"spend cap ${client.spend_cap:.4f} reached before submission ({len(fresh) - len(submit)} "
                     f"request(s) not submitted; the batch worst case so far is ${total:.4f}, the next request "
                     f"could cost up to ${estimate:.4f})")
            break
        submit.append((sha, estimate))
        total += estimate
    created = []
    for chunk in _chunks(run, submit):
        batch = await _create(run, chunk)
        if batch is not None:
            created.append(batch)
        elif run.stopped is not None:
            break
    batches = resumed + created
    if batches:
        deadline = asyncio.get_running_loop().time() + client.batch.max_wait_s
        await asyncio.gather(*(_collect(run, b, deadline) for b in batches))


def _chunks(run: _Run, submit: Sequence[tuple[str, float]]) -> list[list[tuple[str, float]]]:
    """Split the submission at the provider's request-count limit and a byte bound."""
    chunks: list[list[tuple[str, float]]] = []
    size = 0
    for sha, estimate in submit:
        nbytes = request_bytes(run.requests[run.need[sha][0]]) + _LINE_OVERHEAD_BYTES
        if not chunks or len(chunks[-1]) >= run.client.max_batch_requests or size + nbytes > _MAX_BATCH_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append((sha, estimate))
        size += nbytes
    return chunks


async def _create(run: _Run, chunk: Sequence[tuple[str, float]]) -> _Batch | None:
    """Submit one batch, retrying explicit retryable statuses; record its id at once. None if not created
    (its items then carry an ``error`` record, or stay not started when the run stops)."""
    client = run.client
    policy = client.retry
    items = [(sha, run.requests[run.need[sha][0]]) for sha, _ in chunk]
    attempts = 0
    while True:
        attempts += 1
        try:
            batch_id = await client._batch_create(items, policy.timeout_s)
            break
        except ProviderError as exc:
            if exc.status is None:
                run.stop(f"creating a batch of {len(items)} request(s) failed without an answer ({exc}); the "
                         "provider may have accepted it, so nothing was resubmitted: check the provider's batch "
                         "list before running again")
                return None
            if exc.retryable and attempts < policy.max_attempts:
                delay = policy.backoff(attempts, client._rng)
                if exc.retry_after is not None:
                    delay = min(exc.retry_after, policy.retry_after_max_s)
                await asyncio.sleep(delay)
                continue
            if exc.fatal or exc.retryable:
                run.stop(f"batch creation failed: {exc}")
            _fail(run, [sha for sha, _ in chunk], f"batch creation failed: {exc}", attempts)
            return None
    if client.store is not None:
        client.store.record_judge_batch(batch_id, provider=client.provider, model=client.sampling.model,
                                        run_id=run.requests[0].key.run_id, request_shas=[s for s, _ in chunk],
                                        worst_case=sum(e for _, e in chunk))
    log.info("judge batch %s: created with %d request(s)", batch_id, len(items))
    return _Batch(batch_id, [sha for sha, _ in chunk])


async def _collect(run: _Run, batch: _Batch, deadline: float) -> None:
    """Poll ``batch`` until it ends (or the deadline passes), then merge its results."""
    client = run.client
    loop = asyncio.get_running_loop()
    timeout = client.retry.timeout_s
    waits = client.batch.waits()
    status = "unknown"
    while True:
        try:
            state = await client._batch_poll(batch.batch_id, timeout)
        except ProviderError as exc:
            if exc.status == 404 or (exc.status is not None and not exc.retryable and not exc.fatal):
                _lose(run, batch, f"batch {batch.batch_id} is gone at the provider ({exc})")
                return
            if exc.fatal:
                run.stop(f"polling batch {batch.batch_id} failed: {exc}")
                return
            log.debug("judge batch %s: poll failed (%s); polling again", batch.batch_id, exc)
        else:
            status = state.status
            if state.ended:
                break
        remaining = deadline - loop.time()
        if remaining <= 0:
            run.stop(f"batch {batch.batch_id} still {status} after {client.batch.max_wait_s:g}s; its id is in the "
                     "store, so the next run resumes it without resubmitting")
            return
        await asyncio.sleep(min(next(waits), remaining))
    answers = await _results(run, batch, state)
    if answers is not None:
        _merge(run, batch, state, answers)


async def _results(run: _Run, batch: _Batch, state: BatchState) -> dict | None:
    client = run.client
    policy = client.retry
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return await client._batch_results(state, policy.timeout_s)
        except ProviderError as exc:
            if not exc.retryable or attempt == policy.max_attempts:
                run.stop(f"results of batch {batch.batch_id} could not be read ({exc}); it stays recorded, so "
                         "the next run reads them again without resubmitting")
                return None
            delay = policy.backoff(attempt, client._rng)
            if exc.retry_after is not None:
                delay = min(exc.retry_after, policy.retry_after_max_s)
            await asyncio.sleep(delay)
        except ValueError as exc:  # a results line that is not JSON or not the documented shape
            run.stop(f"results of batch {batch.batch_id} are unreadable ({exc}); it stays recorded")
            return None
    return None


def _merge(run: _Run, batch: _Batch, state: BatchState, answers: dict) -> None:
    client = run.client
    records: list[CallRecord] = []
    billed = []
    missing = f"no result for this request in batch {state.batch_id} (status {state.status}" + (
        f": {state.detail})" if state.detail else ")")
    for sha in batch.shas:
        idxs = run.need[sha]
        answer = answers.get(sha, missing)
        if isinstance(answer, str):
            for i in idxs:
                run.results[i] = Judgement(client._record(run.requests[i], sha, "error", reason=answer, attempts=1))
                records.append(run.results[i].record)
            continue
        first = client._judged(run.requests[idxs[0]], sha, answer, 1, None, price=client.batch_price)
        run.results[idxs[0]] = first
        records.append(first.record)
        run.spent += first.record.cost
        billed.append(sha)
        for i in idxs[1:]:
            run.results[i] = client.as_hit(run.requests[i], sha, first.record.model_dump(), run.scratch,
                                            write=False)
            records.append(run.results[i].record)
    unclaimed = len(set(answers) - set(batch.shas))
    if unclaimed:
        log.warning("judge batch %s: %d answered request(s) are not asked for by this run and are not recorded",
                    state.batch_id, unclaimed)
    run.write(records)
    if client.store is not None:
        client.store.set_judge_batch_status(state.batch_id, "collected", provider_status=state.status,
                                            billed_shas=billed)
    log.info("judge batch %s: collected (%d billed, %d without a result)", state.batch_id, len(billed),
             len(batch.shas) - len(billed))


def _lose(run: _Run, batch: _Batch, reason: str) -> None:
    _fail(run, batch.shas, reason, 0)
    if run.client.store is not None:
        run.client.store.set_judge_batch_status(batch.batch_id, "lost")


def _fail(run: _Run, shas: Sequence[str], reason: str, attempts: int) -> None:
    records = []
    for sha in shas:
        for i in run.need[sha]:
            run.results[i] = Judgement(run.client._record(run.requests[i], sha, "error", reason=reason,
                                                          attempts=attempts))
            records.append(run.results[i].record)
    run.write(records)


__all__ = ["BatchState", "judge_batched"]
