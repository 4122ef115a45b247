"""The Ray executor: query batches and trace partitions as Ray work, the driver the single store writer.

A run's pipeline (indexes, embedder, reranker) is built once per worker, inside one long-lived actor per
worker CPU, from a recipe that travels once through the object store; the embeddings of the local run are
computed once, spread over the actors, and shared through the object store. Batches go to the actors
round-robin with a bounded number in flight, are scored there, and come back in submission order as rows
and done markers, which keeps the driver's writes — and so the stored rows and commit groups — those of
the local executor. A worker killed mid-batch is restarted by Ray (the pipeline rebuilt) and its
batch retried; if Ray gives up, the driver resubmits the batch to another actor.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

# Set before Ray is imported: a local cluster must never reach for the network (uv runtime envs, usage stats).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ragassay.errors import InputError  # noqa: E402
from ragassay.executors.local import BatchResult, Key, LocalExecutor, PipelineWorkers, Score, run_keys  # noqa: E402
from ragassay.executors.shared import PipelineRecipe  # noqa: E402
from ragassay.pipeline.embedders import TableEmbedder, embed_groups  # noqa: E402
from ragassay.trace import RunHeader  # noqa: E402

OBJECT_STORE_BYTES = 300 * 1024 * 1024
RESUBMITS = 3


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise InputError("--executor ray needs Ray: pip install 'ragassay[ray]'") from exc
    return ray


def connect(address: str | None = None) -> bool:
    """Join ``address`` (or start a local cluster on this machine's CPUs); True when this call started Ray."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address:
        _check_reachable(address)
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                 object_store_memory=OBJECT_STORE_BYTES)
    return True


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``host:port`` no Ray head answers on, in seconds: Ray itself retries an unreachable head for
    minutes. Other forms (``auto``, ``ray://...``) are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not host or "/" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise InputError(f"--executor ray:{address}: no Ray cluster answers at {address} ({exc.strerror or exc}); "
                         "start one with `ray start --head` and pass its address (host:6379), or use "
                         "--executor ray for a new local cluster") from exc


class _PipelineActor:
    """One worker: computes its share of the run's embedding calls, then builds the pipeline once — on
    the shared tables, lazily on its first batch, so an actor Ray restarts rebuilds it the same way — and
    runs and scores batches."""

    def __init__(self, recipe: PipelineRecipe, golden: Any) -> None:
        self.recipe, self.golden = recipe, golden
        self.emb = recipe.embedder()
        self.table: TableEmbedder | None = None
        self.pipe: Any = None
        self._queries: Any = None
        self._score: Score | None = None
        self._score_ref: Any = None

    def embed(self, kind: str, calls: list[list[str]]) -> list[tuple[Any, Any]]:
        fn = self.emb.embed_passages if kind == "passages" else self.emb.embed_queries
        return [(fn(texts), self.emb.token_lengths(texts)) for texts in calls]

    def _ensure(self, shared: list[Any]) -> None:
        # the tables arrive as ObjectRefs inside a list, so Ray does not fetch them for every call
        ray = _ray()
        passages, queries = shared
        if self.pipe is None:
            if self.emb is not None:
                self.table = TableEmbedder(self.emb, ray.get(passages) if passages is not None else None)
            self.pipe = self.recipe(self.table)
        if self.table is not None and queries is not None and queries != self._queries:
            self.table.set_queries(ray.get(queries))
            self._queries = queries

    def header(self, shared: list[Any], dataset_version: str | None, run_name: str) -> RunHeader:
        self._ensure(shared)
        return self.pipe.header(dataset_version, run_name)

    def run(self, keys: Sequence[Key], batched: bool, shared: list[Any], score: list[Any]) -> BatchResult:
        self._ensure(shared)
        # the scorer (golden set, corpus, label arrays) is fetched once per actor, not once per batch
        if score[0] != self._score_ref:
            self._score, self._score_ref = _ray().get(score[0]), score[0]
        return self._score(keys, run_keys(self.pipe, self.golden, keys, batched))


def _call(fn: Callable[..., Any], item: Any, *args: Any) -> Any:
    return fn(item, *args)


class RayPipelineWorkers(PipelineWorkers):
    """One :class:`_PipelineActor` per worker CPU; batches in flight bounded, results in order.

    The embedding calls of the local run (:class:`PipelineRecipe`) are computed once, split over the
    actors in the embedder's own model batches (so each vector is the local one bit for bit), and placed
    in the object store; every actor builds its pipeline on them. Batches are run *and scored* on the
    actors; the driver only writes what comes back, in submission order.
    """

    def __init__(self, recipe: PipelineRecipe, golden: Any, workers: int) -> None:
        ray = _ray()
        self._ray, self.recipe, self.golden = ray, recipe, golden
        actor_cls = ray.remote(num_cpus=1, max_restarts=RESUBMITS, max_task_retries=RESUBMITS)(_PipelineActor)
        # held for the life of the workers: a restarted actor rebuilds its pipeline from these
        self._refs = (ray.put(recipe), ray.put(golden))
        self.actors = [actor_cls.remote(*self._refs) for _ in range(workers)]
        self.config, self.config_sha = recipe.config, recipe.config_sha
        self.emb = recipe.embedder()
        passages = self._compute("passages", [recipe.passage_call(self.emb)]) if self.emb is not None else None
        self._shared = [passages, None]

    def _compute(self, kind: str, calls: list[list[str]]) -> Any:
        """``calls`` embedded on the actors, as one table ``(texts, vectors, lengths)`` in the object store."""
        import numpy as np

        ray = self._ray
        parts = [[texts[i] for i in idx] for texts in calls if texts
                 for idx in embed_groups(self.emb, texts)]
        if not parts:
            return None
        # longest groups first, dealt round-robin: each actor gets about the same number of tokens
        parts.sort(key=lambda p: -sum(map(len, p)))
        shares = [parts[w::len(self.actors)] for w in range(len(self.actors))]
        refs = [a.embed.remote(kind, share) for a, share in zip(self.actors, shares, strict=True) if share]
        done = [out for ref in refs for out in ray.get(ref)]
        texts = [t for share in shares for p in share for t in p]
        return ray.put((texts, np.vstack([v for v, _ in done]), np.concatenate([n for _, n in done])))

    def header(self, dataset_version: str | None, run_name: str) -> RunHeader:
        # every actor starts building now; the header comes from the first
        for actor in self.actors[1:]:
            actor.header.remote(self._shared, dataset_version, run_name)
        return self._ray.get(self.actors[0].header.remote(self._shared, dataset_version, run_name))

    def map(self, batches: Sequence[Sequence[Key]], batched: bool, score: Score) -> Iterator[BatchResult]:
        ray = self._ray
        if self.emb is not None:
            self._shared = [self._shared[0],
                            self._compute("queries", self.recipe.query_calls(self.emb, self.golden, batches, batched))]
        score_ref = [ray.put(score)]
        in_flight: deque[tuple[Sequence[Key], Any, int]] = deque()
        n = 0

        def submit(keys: Sequence[Key], attempt: int) -> tuple[Sequence[Key], Any, int]:
            nonlocal n
            actor = self.actors[n % len(self.actors)]
            n += 1
            return keys, actor.run.remote(list(keys), batched, self._shared, score_ref), attempt

        source = iter(batches)
        for keys in source:
            in_flight.append(submit(keys, 0))
            if len(in_flight) >= 2 * len(self.actors):
                break
        while in_flight:
            keys, ref, attempt = in_flight.popleft()
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError:
                if attempt >= RESUBMITS:
                    raise
                in_flight.appendleft(submit(keys, attempt + 1))
                continue
            nxt = next(source, None)
            if nxt is not None:
                in_flight.append(submit(nxt, 0))
            yield result

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


class RayExecutor(LocalExecutor):
    """Work on a Ray cluster: ``address`` None starts a local one (and shuts it down on :meth:`close`)."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self._started = connect(address)
        ray = _ray()
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def pipeline_workers(self, recipe: PipelineRecipe, golden: Any) -> RayPipelineWorkers:
        # kept so a caller can watch (or, in the failure tests, kill) the actors of the run in progress
        self.last_workers = RayPipelineWorkers(recipe, golden, self.workers)
        return self.last_workers

    def map_ordered(self, fn: Callable[..., Any], items: Iterable[Any], *args: Any) -> Iterator[Any]:
        """``fn(item, *args)`` as Ray tasks (retried when a worker dies), ``2 × workers`` in flight, in order."""
        ray = _ray()
        task = ray.remote(num_cpus=1, max_retries=RESUBMITS)(_call)
        fn_ref = ray.put(fn)
        arg_refs = [ray.put(a) for a in args]
        in_flight: deque[Any] = deque()
        source = iter(items)
        for item in source:
            in_flight.append(task.remote(fn_ref, item, *arg_refs))
            if len(in_flight) >= 2 * self.workers:
                break
        while in_flight:
            out = ray.get(in_flight.popleft())
            nxt = next(source, None)
            if nxt is not None:
                in_flight.append(task.remote(fn_ref, nxt, *arg_refs))
            yield out

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
