"""What every LLM judge client shares: concurrency, retries, timeouts, the spend cap, the store as the cache.

A provider module implements only ``_open``, ``_close`` and ``_send`` (one attempt of one request through the
real SDK, returning a ``Response`` or raising ``ProviderError``). ``JudgeClient.judge`` does the rest:

- **Cache.** Before a batch is sent, its ``request_sha``s are looked up in the store (one query); a paid
  outcome (any but ``error``) answers a request, so the same request is never paid twice — across runs,
  inside one batch (identical requests in flight wait for the first) and after a kill, except for the
  calls in flight and those answered since the last commit (a writer thread commits the backlog of
  finished calls as one transaction at most every 0.2 s, ``_Writer.COMMIT_INTERVAL_S``).
- **Concurrency.** At most ``concurrency`` requests are in flight (an ``asyncio.Semaphore``).
- **Retries.** 408/409/429/5xx/529, connection errors and timeouts are retried up to ``max_attempts`` times
  within ``item_deadline_s``, waiting the server's ``retry-after`` when it sends one (capped at
  ``retry_after_max_s``) and otherwise full-jitter exponential backoff. Other HTTP errors end the item at
  once; 401/403/404 also stop the run, since every later call would fail the same way.
- **Spend cap.** A call starts only if the spend so far plus the worst-case cost of the calls in flight and
  of this one stays within ``spend_cap``. The worst case bounds input tokens by the request's UTF-8 bytes
  plus a fixed overhead (a byte-level BPE token covers at least one byte) and output by ``max_tokens``, so
  the cap is not overshot. Once a call is refused, no new call starts; calls in flight finish and are
  recorded; the rest are returned as ``not_started`` and a later run with a higher cap resumes them.
- **A shared limiter** (optional, ``limiter=``): clients on several machines that must share one provider
  quota and one budget each ask a ``Limiter`` before a call (a concurrency slot plus a reservation of the
  call's worst-case cost) and settle with it after (the slot freed, the reservation replaced by the real
  cost). ``providers.ray_limiter`` is one backed by a Ray actor. Without a limiter nothing changes.

**Batch mode** (``mode="batch"``, :func:`judge_batched`): the calls go through the provider's batch API
(Anthropic Message Batches, OpenAI Batch) at batch prices. It drives the client's own hooks, cache and
records, so it is defined with the client. One run goes:

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

import abc
import asyncio
import contextlib
import email.utils
import json
import logging
import math
import os
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from ragassay.errors import InputError, RagassayError
from ragassay.judges.protocol import (
    PAID_OUTCOMES,
    CallRecord,
    ItemKey,
    Judgement,
    JudgeRequest,
    Outcome,
    Sampling,
    Verdict,
    parse_verdict,
    request_sha,
)

if TYPE_CHECKING:
    from ragassay.store.db import Store

log = logging.getLogger("ragassay.judges")

# Tokens a provider adds around the prompt (role markers, the schema preamble) beyond the request's bytes.
_INPUT_OVERHEAD_TOKENS = 256
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
FATAL_STATUS = frozenset({401, 403, 404})


class JudgeStopped(RagassayError):
    """A judge run stopped before every item was judged (spend cap, or an error every call would hit)."""


# ---------------------------------------------------------------------------------------------- prices
@dataclass(frozen=True)
class Price:
    """USD per million tokens. ``cached_input`` is the cache-read price, ``cache_write`` the cache-write
    price; both default to ``input`` (no discount assumed unless the config says so). ``batch_input`` and
    ``batch_output`` are the provider batch API's prices (both providers discount every token kind of a batch
    by the same factor, so cache reads and writes in a batch scale by ``batch_input / input``)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    batch_input: float | None = None
    batch_output: float | None = None

    @property
    def has_batch(self) -> bool:
        return self.batch_input is not None and self.batch_output is not None

    def batch(self) -> Price:
        """The price of a call made through the batch API; an ``InputError`` if the table has no batch prices."""
        if self.batch_input is None or self.batch_output is None:
            raise InputError("mode batch needs batch prices: add batch_input and batch_output (USD per million "
                             "tokens) to the model's entry in prices")
        ratio = self.batch_input / self.input if self.input > 0 else 1.0
        return Price(
            input=self.batch_input, output=self.batch_output,
            cached_input=None if self.cached_input is None else self.cached_input * ratio,
            cache_write=None if self.cache_write is None else self.cache_write * ratio,
        )

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0, cache_write_tokens: int = 0
             ) -> float:
        """Cost of one call; ``input_tokens`` are the uncached, unwritten input tokens only."""
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        return (input_tokens * self.input + cached_tokens * cached + cache_write_tokens * write
                + output_tokens * self.output) / 1e6

    def worst_case(self, input_tokens: int, output_tokens: int) -> float:
        highest_in = max(self.input, self.cached_input or 0.0, self.cache_write or 0.0)
        return (input_tokens * highest_in + output_tokens * self.output) / 1e6


def price_table(config: Mapping[str, Any], where: str = "prices") -> dict[str, Price]:
    """Read ``{model: {input, output, cached_input?, cache_write?, batch_input?, batch_output?}}`` (USD per
    million tokens), checking every value; an unknown key or a negative or non-numeric price is an
    ``InputError`` naming it."""
    if not isinstance(config, Mapping):
        raise InputError(f"{where}: expected a mapping of model id to prices, got {type(config).__name__}")
    table = {}
    allowed = ("input", "output", "cached_input", "cache_write", "batch_input", "batch_output")
    for model, entry in config.items():
        if not isinstance(model, str) or not model:
            raise InputError(f"{where}: model ids must be non-empty strings, got {model!r}")
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}.{model}: expected {{input: ..., output: ...}} in USD per million tokens")
        unknown = sorted(set(entry) - set(allowed))
        if unknown:
            raise InputError(f"{where}.{model}: unknown key(s) {unknown}; allowed: {list(allowed)}")
        values = {}
        for key in allowed:
            value = entry.get(key)
            if value is None:
                if key in ("input", "output"):
                    raise InputError(f"{where}.{model}: '{key}' price missing (USD per million tokens)")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value < 0:
                raise InputError(f"{where}.{model}.{key}: {value!r} must be a number >= 0 (USD per million "
                                 "tokens)")
            values[key] = float(value)
        if ("batch_input" in values) != ("batch_output" in values):
            raise InputError(f"{where}.{model}: give batch_input and batch_output together (the batch API's "
                             "prices, USD per million tokens)")
        table[model] = Price(**values)
    return table


# ---------------------------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of one item's attempts: a count and a wall-clock deadline, both always finite."""

    max_attempts: int = 5
    timeout_s: float = 60.0
    item_deadline_s: float = 300.0
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not 1 <= self.max_attempts <= 100:
            raise InputError(f"max_attempts = {self.max_attempts!r} must be an integer in [1, 100]")
        for name in ("timeout_s", "item_deadline_s", "backoff_base_s", "backoff_max_s", "retry_after_max_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and name in ("timeout_s", "item_deadline_s")):
                raise InputError(f"{name} = {value!r} must be a finite number > 0 seconds")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff after failed attempt ``attempt`` (1-based)."""
        return rng.uniform(0.0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class BatchPolicy:
    """How a batch-mode run waits for its provider batches: the first poll after ``poll_interval_s``, each
    wait 1.5x the last up to ``max_poll_interval_s``, and never past ``max_wait_s`` in one process. A batch
    still running then stays recorded in the store; the next run resumes polling it (nothing is resubmitted).
    """

    poll_interval_s: float = 30.0
    max_poll_interval_s: float = 300.0
    max_wait_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("poll_interval_s", "max_poll_interval_s", "max_wait_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise InputError(f"batch.{name} = {value!r} must be a finite number > 0 seconds")
        if self.max_wait_s > 7 * 86400:
            raise InputError(f"batch.max_wait_s = {self.max_wait_s!r} must be at most 7 days (604800 s); a "
                             "batch that runs longer is resumed by the next run")

    def waits(self) -> Iterator[float]:
        """The successive poll intervals (unbounded; the caller stops at ``max_wait_s``)."""
        wait = self.poll_interval_s
        while True:
            yield wait
            wait = min(self.max_poll_interval_s, wait * 1.5)


# ---------------------------------------------------------------------------------------------- wire types
@dataclass(frozen=True)
class Response:
    """One 2xx response, normalized. ``stop`` is decided by the provider module from its stop reason
    before any content is read. ``input_tokens`` are uncached input tokens; ``cached_tokens`` cache reads;
    ``cache_write_tokens`` tokens written to the prompt cache."""

    stop: Literal["complete", "refused", "truncated"]
    stop_reason: str | None
    text: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    refusal: str | None = None


class ProviderError(Exception):
    """One failed attempt, classified by the provider module."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after

    @property
    def fatal(self) -> bool:
        return self.status in FATAL_STATUS


@contextlib.contextmanager
def sdk_errors(sdk: Any, timeout: float) -> Iterator[None]:
    """Turn an ``anthropic`` or ``openai`` SDK exception into ``ProviderError`` (status, retryable,
    retry-after); both SDKs raise the same three classes."""
    try:
        yield
    except sdk.APIStatusError as exc:
        detail = getattr(exc, "api_message", None) or exc.message
        raise ProviderError(
            f"HTTP {exc.status_code}: {detail}"[:500],
            status=exc.status_code,
            retryable=exc.status_code in RETRYABLE_STATUS,
            retry_after=retry_after_seconds(exc.response.headers),
        ) from exc
    except sdk.APITimeoutError as exc:
        raise ProviderError(f"timed out after {timeout:g}s", retryable=True) from exc
    except sdk.APIConnectionError as exc:
        raise ProviderError(f"connection error: {exc.message}", retryable=True) from exc


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date), else None."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def request_bytes(request: JudgeRequest) -> int:
    """UTF-8 bytes of what a request sends: rubric, item and verdict schema (a bound on its input tokens)."""
    size = len(request.system.encode("utf-8")) + len(request.user.encode("utf-8"))
    return size + len(json.dumps(request.verdict_type.json_schema()).encode("utf-8"))


class Limiter(Protocol):
    """A concurrency and spend budget shared by judge clients beyond one process.

    ``acquire(estimate)`` waits for a free slot and reserves ``estimate`` USD; it returns a lease to pass to
    ``release``, or a string saying why the call must not start (the shared spend cap). ``release(lease,
    cost)`` frees the slot and replaces the reservation by the call's real cost."""

    async def acquire(self, estimate: float) -> int | str: ...

    async def release(self, lease: int, cost: float) -> None: ...


# ---------------------------------------------------------------------------------------------- run result
@dataclass
class JudgeRun:
    """What a ``judge`` call did: one judgement per started request (in request order), the requests never
    started, why the run stopped early (None if it did not) and the money spent in this run."""

    judgements: list[Judgement]
    not_started: list[JudgeRequest]
    stopped: str | None
    spend: float
    counts: Counter[str] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = Counter(j.outcome for j in self.judgements)

    @property
    def paid_calls(self) -> int:
        """Calls answered by the provider in this run (not from the cache)."""
        return sum(1 for j in self.judgements if not j.record.cache_hit and j.outcome in PAID_OUTCOMES)

    @property
    def cache_hits(self) -> int:
        return sum(1 for j in self.judgements if j.record.cache_hit)

    def raise_if_stopped(self) -> None:
        if self.stopped is not None:
            raise JudgeStopped(
                f"judge run stopped: {self.stopped}; {len(self.judgements)} item(s) judged, "
                f"{len(self.not_started)} not started, ${self.spend:.4f} spent. Every finished call is stored, "
                "so running the same items again pays only for the ones not started"
            )


# ---------------------------------------------------------------------------------------------- the client
class JudgeClient(abc.ABC):
    """Shared async judge client; subclasses speak one provider's SDK.

    ``api_key`` is held only in memory: it is never written to a record, the store, a log line or an error
    message, and it is not part of the request sha."""

    provider: ClassVar[str] = ""
    api_key_env: ClassVar[str] = ""
    # Provider modules with a batch API set these; see batch mode in the module docstring.
    batch_api: ClassVar[bool] = False
    max_batch_requests: ClassVar[int] = 0
    # Each optional sampling setting -> the keyword of the SDK's create call that carries it (None: this
    # provider has no such setting).
    setting_keywords: ClassVar[dict[str, str | None]] = {}

    @classmethod
    def sdk_create(cls) -> Any:
        """The SDK's create method the client calls (None when the SDK is not installed)."""
        return None

    @classmethod
    def unsupported_settings(cls, settings: Mapping[str, Any]) -> list[str]:
        """One line per set sampling setting this provider cannot send: it has no such setting, or the
        installed SDK's create call does not take the keyword (so every call would end in ``error``)."""
        import inspect

        create = cls.sdk_create()
        accepted = set(inspect.signature(create).parameters) if create is not None else None
        out = []
        for name, value in settings.items():
            if value is None:
                continue
            keyword = cls.setting_keywords.get(name)
            if keyword is None:
                out.append(f"{name}: the {cls.provider} provider has no such setting; remove it")
            elif accepted is not None and keyword not in accepted:
                out.append(f"{name}: the installed {cls.provider} SDK does not accept {keyword!r} in its create "
                           "call (every call would fail); remove it")
        return out

    def __init__(
        self,
        sampling: Sampling,
        prices: Mapping[str, Price],
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        concurrency: int = 8,
        retry: RetryPolicy | None = None,
        spend_cap: float | None = None,
        store: Store | None = None,
        seed: int | None = None,
        mode: Literal["sync", "batch"] = "sync",
        batch: BatchPolicy | None = None,
        limiter: Limiter | None = None,
    ):
        if sampling.model not in prices:
            raise InputError(
                f"no price for model {sampling.model!r} in the judge config's prices "
                f"(known: {sorted(prices)}); add {{input: ..., output: ...}} in USD per million tokens "
                "(0 for a local server)"
            )
        if isinstance(sampling.max_tokens, bool) or not isinstance(sampling.max_tokens, int) \
                or sampling.max_tokens < 1:
            raise InputError(f"max_tokens = {sampling.max_tokens!r} must be an integer >= 1")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 1024:
            raise InputError(f"concurrency = {concurrency!r} must be an integer in [1, 1024]")
        if spend_cap is not None and (isinstance(spend_cap, bool) or not isinstance(spend_cap, int | float)
                                      or not math.isfinite(spend_cap) or spend_cap < 0):
            raise InputError(f"spend_cap = {spend_cap!r} must be a number >= 0 (USD) or None for no cap")
        self.sampling = sampling
        self.price = prices[sampling.model]
        # Read once, here, so a key set later in the environment cannot change a running judge.
        self._api_key = api_key if api_key is not None else os.environ.get(self.api_key_env) or None
        if not self._api_key:
            raise InputError(f"no API key for the {self.provider} judge: set {self.api_key_env} (a local "
                             "OpenAI-compatible server takes any non-empty value) or pass api_key")
        self.base_url = base_url
        self.concurrency = concurrency
        self.retry = retry or RetryPolicy()
        self.spend_cap = spend_cap
        if mode not in ("sync", "batch"):
            raise InputError(f"mode = {mode!r} must be 'sync' or 'batch'")
        if mode == "batch" and not self.batch_api:
            raise InputError(f"the {self.provider} judge has no batch API; use mode: sync")
        self.store = store
        self.mode = mode
        self.batch = batch or BatchPolicy()
        # Checked here, before any call: a batch run without batch prices could not keep its spend cap.
        self.batch_price = self.price.batch() if mode == "batch" else None
        if limiter is not None and mode == "batch":
            raise InputError("a shared limiter bounds direct calls; mode: batch submits one provider batch "
                             "instead — use mode: sync with a limiter")
        self.limiter = limiter
        self._rng = random.Random(seed)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self.sampling.model!r}, base_url={self.base_url!r}, "
                f"mode={self.mode!r})")

    # -- provider hooks: each provider module implements these three
    @abc.abstractmethod
    async def _open(self) -> None: ...

    @abc.abstractmethod
    async def _close(self) -> None: ...

    @abc.abstractmethod
    async def _send(self, request: JudgeRequest, timeout: float) -> Response: ...

    # -- public
    def run(self, requests: Sequence[JudgeRequest]) -> JudgeRun:
        """``judge`` from synchronous code (starts and closes an event loop)."""
        return asyncio.run(self.judge(requests))

    async def judge(self, requests: Sequence[JudgeRequest]) -> JudgeRun:
        """Judge every request; see the module docstring for caching, retries, the spend cap and
        ``mode="batch"`` (:func:`judge_batched`)."""
        requests = list(requests)
        keys = [r.key for r in requests]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise InputError(f"judge requests: item key {dup} appears twice; give each judgement its own item")
        shas = [request_sha(self.provider, self.sampling, r) for r in requests]
        if self.mode == "batch":
            return await judge_batched(self, requests, shas)
        cached, own = self.prefetch(requests, shas)
        writer = None if self.store is None else _Writer(self.store)
        state = _RunState(asyncio.Semaphore(self.concurrency), writer)
        try:
            await self._open()
            try:
                results = await asyncio.gather(
                    *(self._one(r, sha, cached, own, state) for r, sha in zip(requests, shas, strict=True))
                )
            finally:
                await self._close()
        finally:
            if writer is not None:
                await asyncio.to_thread(writer.close)
        judgements = [j for j in results if j is not None]
        not_started = [r for r, j in zip(requests, results, strict=True) if j is None]
        return JudgeRun(judgements, not_started, state.stopped, state.spent)

    # -- one item
    async def _one(self, request: JudgeRequest, sha: str, cached: Mapping[str, Mapping[str, Any]],
                   own: Mapping[ItemKey, Mapping[str, Any]], state: _RunState) -> Judgement | None:
        row = own.get(request.key)
        if row is not None:
            # A resumed run: this item's row is already the answer; leave it as it is.
            return self.as_hit(request, sha, row, state, write=False)
        row = cached.get(sha)
        if row is not None:
            return self.as_hit(request, sha, row, state, write=True)
        first = state.inflight.get(sha)
        if first is not None:
            done = await asyncio.shield(first)
            if done is not None and done.outcome in PAID_OUTCOMES:
                return self.as_hit(request, sha, done.record.model_dump(), state, write=True)
        future: asyncio.Future[Judgement | None] = asyncio.get_running_loop().create_future()
        state.inflight[sha] = future
        judgement = None
        try:
            judgement = await self._paid(request, sha, state)
            return judgement
        finally:
            future.set_result(judgement)
            if state.inflight.get(sha) is future:
                del state.inflight[sha]

    async def _paid(self, request: JudgeRequest, sha: str, state: _RunState) -> Judgement | None:
        """Make the call under the concurrency limit and the spend cap; None if it was not started."""
        async with state.semaphore:
            if state.stopped is not None:
                return None
            estimate = self._worst_case(request)
            if self.spend_cap is not None and state.spent + state.reserved + estimate > self.spend_cap:
                state.stopped = (
                    f"spend cap ${self.spend_cap:.4f} reached (spent ${state.spent:.4f}, the next call could "
                    f"cost up to ${estimate:.4f})"
                )
                return None
            lease = None
            if self.limiter is not None:
                lease = await self.limiter.acquire(estimate)
                if isinstance(lease, str):
                    state.stopped = state.stopped or lease
                    return None
            state.reserved += estimate
            judgement = None
            try:
                judgement = await self._call(request, sha, state)
            finally:
                state.reserved -= estimate
                if lease is not None:
                    # A call that raised is settled at its worst case: it may have been billed.
                    await self.limiter.release(lease, estimate if judgement is None else judgement.record.cost)
            state.spent += judgement.record.cost
        state.write(judgement.record)
        return judgement

    def _worst_case(self, request: JudgeRequest, price: Price | None = None) -> float:
        return (price or self.price).worst_case(request_bytes(request) + _INPUT_OVERHEAD_TOKENS,
                                                self.sampling.max_tokens)

    async def _call(self, request: JudgeRequest, sha: str, state: _RunState) -> Judgement:
        policy = self.retry
        loop = asyncio.get_running_loop()
        start = loop.time()
        attempts = 0
        reason = "no attempt made"
        while attempts < policy.max_attempts:
            remaining = policy.item_deadline_s - (loop.time() - start)
            if remaining <= 0:
                reason = f"item deadline of {policy.item_deadline_s:g}s passed after {attempts} attempt(s); " \
                         f"last: {reason}"
                break
            attempts += 1
            timeout = min(policy.timeout_s, remaining)
            sent = loop.time()
            try:
                # The SDK enforces `timeout` on the HTTP exchange; wait_for bounds anything around it.
                response = await asyncio.wait_for(self._send(request, timeout), timeout + 1.0)
            except (TimeoutError, ProviderError) as exc:
                if isinstance(exc, TimeoutError):
                    exc = ProviderError(f"timed out after {timeout:g}s", retryable=True)
                reason = str(exc)
                if exc.fatal:
                    state.stopped = state.stopped or f"provider error every call would hit: {exc}"
                if not exc.retryable or attempts >= policy.max_attempts:
                    break
                delay = policy.backoff(attempts, self._rng)
                if exc.retry_after is not None:
                    delay = min(exc.retry_after, policy.retry_after_max_s)
                if delay >= policy.item_deadline_s - (loop.time() - start):
                    reason = f"{reason}; the next wait ({delay:g}s) would pass the item deadline"
                    break
                log.debug("judge %s/%s attempt %d failed (%s); retrying in %.3fs",
                          request.key.query_id, request.key.item, attempts, exc, delay)
                await asyncio.sleep(delay)
                continue
            except Exception as exc:  # an SDK or response shape we did not foresee: this item only
                reason = f"{type(exc).__name__}: {exc}"
                break
            latency = (loop.time() - sent) * 1000.0
            return self._judged(request, sha, response, attempts, latency)
        log.debug("judge %s/%s ended in error after %d attempt(s): %s",
                  request.key.query_id, request.key.item, attempts, reason)
        return Judgement(self._record(request, sha, "error", reason=reason, attempts=attempts))

    def _judged(self, request: JudgeRequest, sha: str, response: Response, attempts: int,
                latency_ms: float | None, price: Price | None = None) -> Judgement:
        verdict: Verdict | None = None
        reason: str | None = None
        outcome: Outcome
        if response.stop == "refused":
            outcome, reason = "refused", response.refusal or f"stop_reason {response.stop_reason}"
        elif response.stop == "truncated":
            outcome, reason = "truncated", f"output stopped at max_tokens={self.sampling.max_tokens}"
        else:
            outcome, verdict, reason = parse_verdict(request.verdict_type, response.text)
        cost = (price or self.price).cost(response.input_tokens, response.output_tokens, response.cached_tokens,
                               response.cache_write_tokens)
        record = self._record(
            request, sha, outcome, reason=reason,
            verdict=None if verdict is None else verdict.model_dump(mode="json"),
            stop_reason=response.stop_reason,
            input_tokens=response.input_tokens + response.cached_tokens + response.cache_write_tokens,
            output_tokens=response.output_tokens, cached_tokens=response.cached_tokens,
            cost=cost, latency_ms=latency_ms, attempts=attempts,
        )
        return Judgement(record, verdict)

    def _record(self, request: JudgeRequest, sha: str, outcome: Outcome, **values: Any) -> CallRecord:
        key = request.key
        return CallRecord(
            run_id=key.run_id, query_id=key.query_id, trial=key.trial, item=key.item, judge=request.judge,
            request_sha=sha, provider=self.provider, model=self.sampling.model,
            rubric_sha=request.rubric_sha, prompt_sha=request.prompt_sha,
            temperature=self.sampling.temperature, effort=self.sampling.effort,
            max_tokens=self.sampling.max_tokens, outcome=outcome, **values,
        )

    # -- the store as the cache
    def prefetch(self, requests: Sequence[JudgeRequest], shas: Sequence[str]
                 ) -> tuple[dict[str, dict[str, Any]], dict[ItemKey, dict[str, Any]]]:
        """One store query for the whole batch: the best stored answer per sha, and the items whose own row
        already answers their current request (a resumed run)."""
        if self.store is None:
            return {}, {}
        cached: dict[str, dict[str, Any]] = {}
        own: dict[ItemKey, dict[str, Any]] = {}
        wanted = dict(zip((r.key for r in requests), shas, strict=True))
        for row in self.store.cached_judge_calls(sorted(set(shas))):
            cached.setdefault(row["request_sha"], row)
            key = ItemKey(row["run_id"], row["query_id"], row["trial"], row["item"])
            if wanted.get(key) == row["request_sha"]:
                own[key] = row
        return cached, own

    def as_hit(self, request: JudgeRequest, sha: str, row: Mapping[str, Any], state: _RunState | None = None, *,
               write: bool) -> Judgement:
        """A stored call ``row`` as this request's judgement (a cache hit); ``write`` records it in ``state``."""
        verdict = None
        if row["outcome"] in ("ok", "cannot_judge") and row["verdict"] is not None:
            verdict = request.verdict_type.model_validate(row["verdict"])
        record = self._record(request, sha, row["outcome"], reason=row["reason"], verdict=row["verdict"],
                              stop_reason=row["stop_reason"], cache_hit=True, latency_ms=0.0)
        if write:
            state.write(record)
        return Judgement(record, verdict)


class _Writer:
    """Writes call records from a thread of its own, each wake-up's backlog in one transaction, so a DuckDB
    commit never stalls the event loop and a finished call is durable within one commit of its answer.

    Commits start at most every ``COMMIT_INTERVAL_S``. A DuckDB transaction costs about 10 ms of CPU whatever
    its size (measured: 10.7 ms a record one by one, 1.7 ms in eights, 0.2 ms in batches of 64), which one
    commit per call would pay at every call; records arriving in between wait for the next commit, so a call
    is durable within that interval plus one commit."""

    COMMIT_INTERVAL_S = 0.2

    def __init__(self, store: Store):
        self._store = store
        self._queue: queue.Queue[CallRecord | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="judge-call-writer", daemon=True)
        self._thread.start()

    def put(self, record: CallRecord) -> None:
        self._queue.put(record)

    def _loop(self) -> None:
        closing = False
        last = -math.inf
        while not closing:
            batch = [self._queue.get()]
            wait = last + self.COMMIT_INTERVAL_S - time.monotonic()
            if batch[0] is not None and wait > 0:
                time.sleep(wait)  # let the backlog build: one transaction for it instead of one per record
            last = time.monotonic()
            while len(batch) < 1000:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            closing = batch[-1] is None
            rows = [r.to_row() for r in batch if r is not None]
            if rows and self._error is None:
                try:
                    self._store.record_judge_calls(rows)
                except BaseException as exc:  # re-raised by close(): a lost record must not pass silently
                    self._error = exc

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(120.0)
        if self._thread.is_alive():
            raise RagassayError(f"{self._store.path}: judge-call records were not written within 120 s; the "
                                "store is stuck (is the disk full?)")
        if self._error is not None:
            raise self._error


@dataclass
class _RunState:
    semaphore: asyncio.Semaphore
    writer: _Writer | None
    inflight: dict[str, asyncio.Future[Judgement | None]] = field(default_factory=dict)
    spent: float = 0.0
    reserved: float = 0.0
    stopped: str | None = None

    def write(self, record: CallRecord) -> None:
        if self.writer is not None:
            self.writer.put(record)


# ---------------------------------------------------------------------------------------------- batch mode
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


__all__ = [
    "FATAL_STATUS",
    "BatchPolicy",
    "BatchState",
    "RETRYABLE_STATUS",
    "JudgeClient",
    "JudgeRun",
    "JudgeStopped",
    "Limiter",
    "Price",
    "ProviderError",
    "Response",
    "RetryPolicy",
    "price_table",
    "request_bytes",
    "retry_after_seconds",
    "judge_batched",
]
