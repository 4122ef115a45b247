"""The Ray executor: query batches and trace partitions as Ray work, the driver the single store writer.

A run's pipeline (indexes, embedder, reranker) is built once per worker, inside one long-lived actor per
worker CPU; the build recipe travels once through the object store. Batches go to the actors round-robin
with a bounded number in flight (so the driver holds at most ``2 × workers`` batches of traces) and come
back in submission order, which keeps the driver's writes — and so the stored rows and commit groups —
those of the local executor. A worker killed mid-batch is restarted by Ray (the pipeline rebuilt) and its
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
from ragassay.executors.local import Key, LocalExecutor, PipelineWorkers, run_keys  # noqa: E402
from ragassay.trace import RunHeader, Trace  # noqa: E402

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
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                 object_store_memory=OBJECT_STORE_BYTES)
    return True


class _PipelineActor:
    """One worker's pipeline, built once from the shared recipe."""

    def __init__(self, build: Callable[[], Any], golden: Any) -> None:
        self.pipe, self.golden = build(), golden

    def describe(self, dataset_version: str | None, run_name: str) -> tuple[dict, str, RunHeader]:
        return self.pipe.config, self.pipe.config_sha, self.pipe.header(dataset_version, run_name)

    def run(self, keys: Sequence[Key], batched: bool) -> list[Trace]:
        return run_keys(self.pipe, self.golden, keys, batched)


def _call(fn: Callable[..., Any], item: Any, *args: Any) -> Any:
    return fn(item, *args)


class RayPipelineWorkers(PipelineWorkers):
    """One :class:`_PipelineActor` per worker CPU; batches in flight bounded, results in order."""

    def __init__(self, build: Callable[[], Any], golden: Any, workers: int) -> None:
        ray = _ray()
        self._ray = ray
        actor_cls = ray.remote(num_cpus=1, max_restarts=RESUBMITS, max_task_retries=RESUBMITS)(_PipelineActor)
        # held for the life of the workers: a restarted actor rebuilds its pipeline from these
        self._refs = (ray.put(build), ray.put(golden))
        self.actors = [actor_cls.remote(*self._refs) for _ in range(workers)]
        self.config, self.config_sha, _ = ray.get(self.actors[0].describe.remote(None, ""))

    def header(self, dataset_version: str | None, run_name: str) -> RunHeader:
        return self._ray.get(self.actors[0].describe.remote(dataset_version, run_name))[2]

    def map(self, batches: Iterable[Sequence[Key]], batched: bool) -> Iterator[list[Trace]]:
        ray = self._ray
        in_flight: deque[tuple[Sequence[Key], Any, int]] = deque()
        n = 0

        def submit(keys: Sequence[Key], attempt: int) -> tuple[Sequence[Key], Any, int]:
            nonlocal n
            actor = self.actors[n % len(self.actors)]
            n += 1
            return keys, actor.run.remote(list(keys), batched), attempt

        source = iter(batches)
        for keys in source:
            in_flight.append(submit(keys, 0))
            if len(in_flight) >= 2 * len(self.actors):
                break
        while in_flight:
            keys, ref, attempt = in_flight.popleft()
            try:
                traces = ray.get(ref)
            except ray.exceptions.RayActorError:
                if attempt >= RESUBMITS:
                    raise
                in_flight.appendleft(submit(keys, attempt + 1))
                continue
            nxt = next(source, None)
            if nxt is not None:
                in_flight.append(submit(nxt, 0))
            yield traces

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

    def pipeline_workers(self, build: Callable[[], Any], golden: Any) -> RayPipelineWorkers:
        # kept so a caller can watch (or, in the failure tests, kill) the actors of the run in progress
        self.last_workers = RayPipelineWorkers(build, golden, self.workers)
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
