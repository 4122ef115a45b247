"""The Ray executor: query batches and trace partitions as Ray work, the driver the single store writer.

A run's pipeline (indexes, embedder, reranker) is built once per worker, inside one long-lived actor per
worker CPU, from a recipe that travels once through the object store; the embeddings of the local run are
computed once, spread over the actors, and shared through the object store. Batches go to the actors
through a :class:`ray.util.ActorPool` (two slots per actor, so the next batch waits on the actor while one
runs), are scored there, and come back in submission order as rows and done markers, which keeps the
driver's writes — and so the stored rows and commit groups — those of the local executor. A worker killed
mid-batch is restarted by Ray (the pipeline rebuilt) and its batch retried; if Ray gives up, the run stops
with one line saying how to resume it.

The cluster is the one ``ray.init`` would use (``RAY_ADDRESS``, a ``ray start`` cluster of this machine, or a
new local one), checked to answer as a Ray cluster within seconds before anything else happens.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any

# Set before Ray is imported: a local cluster must never reach for the network (uv runtime envs, usage stats).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ragassay.errors import InputError, RagassayError  # noqa: E402
from ragassay.executors.local import BatchResult, Key, LocalExecutor, PipelineWorkers, Score, run_keys  # noqa: E402
from ragassay.executors.shared import PipelineRecipe  # noqa: E402
from ragassay.pipeline.embedders import TableEmbedder, embed_groups  # noqa: E402
from ragassay.trace import RunHeader  # noqa: E402

OBJECT_STORE_BYTES = 300 * 1024 * 1024
RESTARTS = 3  # times Ray restarts a dead worker (and retries its work) before the run stops
PROBE_S = 5.0  # the longest a cluster address is waited for: Ray itself retries one for minutes
# An HTTP/2 client preface and an empty SETTINGS frame: a Ray head (gRPC) answers with its own SETTINGS frame.
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4


def _ray():
    try:
        import ray
    except ImportError as exc:
        raise InputError("--executor ray needs Ray: pip install 'ragassay[ray]'") from exc
    return ray


def connect(address: str | None = None) -> bool:
    """Join the cluster ``ray.init(address)`` would join (see :func:`cluster_address`), or start a local one
    on this machine's CPUs when it would start one; True when this call started or joined Ray (and so must
    shut it down), False when this process was already connected."""
    ray = _ray()
    if ray.is_initialized():
        return False
    target = cluster_address(address)
    if target is None:
        ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                 object_store_memory=OBJECT_STORE_BYTES)
        return True
    try:
        # the address as given: ray.init applies its own rules (RAY_ADDRESS, the machine's auth token) to it
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        raise InputError(f"--executor {_spec(address)}: could not join the Ray cluster at {target}: "
                         f"{_first_line(exc)}") from None
    return True


def check_cluster(address: str | None = None) -> None:
    """What :func:`connect` checks before it joins or starts anything (nothing when this process is already
    connected: the executor then uses that session)."""
    if not _ray().is_initialized():
        cluster_address(address)


def cluster_address(address: str | None = None, timeout: float = PROBE_S) -> str | None:
    """The ``host:port`` of the cluster ``ray.init(address)`` would join, checked to answer as a Ray cluster
    (and to take this driver's auth token) within about ``timeout`` seconds; None when ``ray.init`` would
    start a new local cluster. As ``ray.init`` resolves it: an explicit ``host:port`` as given; otherwise
    (no address, or ``auto``) ``RAY_ADDRESS``, then the cluster ``ray start`` recorded on this machine
    (``auto`` also takes any running one, and fails when there is none). Ray Client addresses (``ray://``)
    are left to Ray unchecked. Raises :class:`InputError` with one line saying what to do.
    """
    ray = _ray()
    from ray._private import services
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )

    spec, implicit = _spec(address), address in (None, "auto")
    env = os.environ.get("RAY_ADDRESS") or None
    given = env if implicit and env else address
    if (given or "").startswith("ray://"):
        return given
    try:
        target = services.canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as exc:
        raise InputError(f"--executor {spec}: {_first_line(exc)}; start a cluster with `ray start --head` and pass "
                         "ray:HOST:PORT, or use --executor ray for a new local one") from None
    if target is None:
        return None
    if implicit:
        # ray.init sends this machine's token (~/.ray/auth_token) to such an address: so must the checks
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    where, advice = _where(address, env, target)
    problem = _handshake(target, timeout)
    if problem:
        raise InputError(f"--executor {spec}: no Ray cluster answers at {where}: {problem}; {advice}")
    from ray._raylet import AuthenticationMode, InnerGcsClient, get_authentication_mode

    try:
        InnerGcsClient.standalone(target, None, int(timeout * 1000))
    except ray.exceptions.AuthenticationError:
        if get_authentication_mode() != AuthenticationMode.TOKEN:
            raise InputError(f"--executor {spec}: the Ray cluster at {where} asks for an auth token and this "
                             "driver sends none: set RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN "
                             "(or a file named by RAY_AUTH_TOKEN_PATH)") from None
        raise InputError(f"--executor {spec}: the Ray cluster at {where} refused this driver's auth token: set "
                         "the cluster's token in RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH; else "
                         "~/.ray/auth_token is sent)") from None
    except ray.exceptions.RayError as exc:
        raise InputError(f"--executor {spec}: {where} answers, but not as a Ray cluster: {_first_line(exc)}; "
                         f"{advice}") from None
    return target


def _spec(address: str | None) -> str:
    return f"ray:{address}" if address else "ray"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _where(address: str | None, env: str | None, target: str) -> tuple[str, str]:
    """The address as the user gave it and where it came from, and how to get past it when nothing answers."""
    from ray._private import services

    explicit = address not in (None, "auto")
    given = address if explicit else env
    if given is not None:
        # ray.init dials localhost (127.0.0.1) as this node's address
        notes = ([] if explicit else ["RAY_ADDRESS"]) + ([f"dialled by Ray as {target}"] if given != target else [])
        label = f"{given} ({', '.join(notes)})" if notes else given
        if explicit:
            return label, "start one with `ray start --head` and pass the address it prints, or use --executor ray"
        return label, "start the cluster RAY_ADDRESS names, or unset RAY_ADDRESS"
    if services.find_bootstrap_address(None) == target:
        from ray._common.utils import get_ray_address_file

        return (f"{target} (recorded by `ray start` in {get_ray_address_file(None)})",
                "restart that cluster with `ray start --head`, or clear the stale record with `ray stop`")
    return f"{target} (a Ray cluster running on this machine)", "pass its address as ray:HOST:PORT"


def _handshake(target: str, timeout: float) -> str | None:
    """Why ``target`` is not a Ray head, or None: a Ray head speaks gRPC, so it answers an HTTP/2 client
    preface with a SETTINGS frame; a closed port, a silent listener or another kind of server do not, and
    each is told apart within ``timeout`` seconds. With ``RAY_USE_TLS`` only the connection is checked."""
    host, _, port = target.rpartition(":")
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return None
            conn.sendall(HTTP2_HELLO)
            head = b""
            while len(head) < 9:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except TimeoutError:
        return f"nothing answered within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    if len(head) < 9 or head[3] != SETTINGS_FRAME:
        return "something listens there, but it is not a Ray cluster"
    return None


class _StderrRelay:
    """The messages a driver's Ray relays from the cluster ("(raylet) A worker died ...", "Task ... failed ...
    will be retried"), printed on stderr while at least one executor is open. Ray prints them on stdout,
    whatever ``log_to_driver`` says (``ray._private.worker.print_to_stdstream``, looked up by its error
    listener thread at each message), where they would break a command's ``--json`` output.

    One per process, counted: the first executor to open puts a stand-in in Ray's place, the last to close
    puts Ray's function back, so outside an executor's life the process's Ray (a caller's own session, a
    later ``ray.init`` that binds the function for its worker logs) prints as Ray does. A stand-in something
    else has replaced meanwhile is left to it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.ray_own: Any = None
        self.stand_in: Any = None

    def acquire(self) -> None:
        import ray._private.worker as worker

        with self.lock:
            self.users += 1
            if self.users > 1:
                return
            ray_own = worker.print_to_stdstream

            def to_stderr(data: dict, *args: Any, **kwargs: Any) -> Any:
                return ray_own({**data, "is_err": True}, *args, **kwargs)

            self.ray_own, self.stand_in = ray_own, to_stderr
            worker.print_to_stdstream = to_stderr

    def release(self) -> None:
        import ray._private.worker as worker

        with self.lock:
            if self.users == 0:
                return
            self.users -= 1
            if self.users == 0:
                if worker.print_to_stdstream is self.stand_in:
                    worker.print_to_stdstream = self.ray_own
                self.ray_own = self.stand_in = None


RELAY = _StderrRelay()


@contextmanager
def _worker_errors(ray: Any) -> Iterator[None]:
    """A ragassay error (or OSError) met on a worker raised here as itself, one line instead of the worker's
    traceback; a worker Ray gave up restarting, as one line saying how to finish the run."""
    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, RagassayError | OSError):
            raise exc.cause from None
        raise
    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as exc:
        raise RagassayError(f"a Ray worker of this run is gone for good (Ray restarts one at most {RESTARTS} times: "
                            f"{_first_line(exc)}); the rows stored so far are kept: finish with --resume RUN") from None


class _PipelineActor:
    """One worker: computes its share of the run's embedding calls, then builds the pipeline once — on
    the shared tables, lazily on its first batch, so an actor Ray restarts rebuilds it the same way — and
    runs and scores batches.

    Everything it needs comes with each call as ObjectRefs in one list, ``shared`` = [recipe, golden set,
    passage table, query table], fetched once: an actor built from constructor arguments in the object
    store makes Ray log an error about restarts on every run, and a retried call carries its inputs anyway.
    """

    def __init__(self) -> None:
        self.recipe: PipelineRecipe | None = None
        self.golden: Any = None
        self.emb: Any = None
        self.table: TableEmbedder | None = None
        self.pipe: Any = None
        self._queries: Any = None
        self._score: Score | None = None
        self._score_ref: Any = None

    def _load(self, shared: list[Any]) -> None:
        if self.recipe is None:
            self.recipe, self.golden = _ray().get(shared[:2])
            self.emb = self.recipe.embedder()

    def embed(self, shared: list[Any], kind: str, calls: list[list[str]]) -> list[tuple[Any, Any]]:
        self._load(shared)
        fn = self.emb.embed_passages if kind == "passages" else self.emb.embed_queries
        return [(fn(texts), self.emb.token_lengths(texts)) for texts in calls]

    def _ensure(self, shared: list[Any]) -> None:
        ray = _ray()
        self._load(shared)
        passages, queries = shared[2:]
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
        actor_cls = ray.remote(num_cpus=1, max_restarts=RESTARTS, max_task_retries=RESTARTS)(_PipelineActor)
        self.actors = [actor_cls.remote() for _ in range(workers)]
        self.config, self.config_sha = recipe.config, recipe.config_sha
        self.emb = recipe.embedder()
        # held for the life of the workers: a restarted actor rebuilds its pipeline from these
        self._shared = [ray.put(recipe), ray.put(golden), None, None]
        if self.emb is not None:
            self._shared[2] = self._compute("passages", [recipe.passage_call(self.emb)])

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
        refs = [a.embed.remote(self._shared, kind, share) for a, share in zip(self.actors, shares, strict=True)
                if share]
        with _worker_errors(ray):
            done = [pair for share_out in ray.get(refs) for pair in share_out]
        texts = [t for share in shares for p in share for t in p]
        return ray.put((texts, np.vstack([v for v, _ in done]), np.concatenate([n for _, n in done])))

    def header(self, dataset_version: str | None, run_name: str) -> RunHeader:
        # every actor starts building now; the header comes from the first
        for actor in self.actors[1:]:
            actor.header.remote(self._shared, dataset_version, run_name)
        with _worker_errors(self._ray):
            return self._ray.get(self.actors[0].header.remote(self._shared, dataset_version, run_name))

    def map(self, batches: Sequence[Sequence[Key]], batched: bool, score: Score) -> Iterator[BatchResult]:
        ray = self._ray
        if self.emb is not None:
            self._shared = [*self._shared[:3],
                            self._compute("queries", self.recipe.query_calls(self.emb, self.golden, batches, batched))]
        score_ref = [ray.put(score)]
        # two slots per actor: while one batch runs, the next waits on the actor, so none idles between
        # batches; the pool hands out results in submission order, at most 2 x workers in flight
        pool = ray.util.ActorPool(self.actors * 2)
        with _worker_errors(ray):
            yield from pool.map(lambda actor, keys: actor.run.remote(list(keys), batched, self._shared, score_ref),
                                batches)

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


class RayExecutor(LocalExecutor):
    """Work on a Ray cluster: the one :func:`connect` joins or starts for ``address``, left (and a local one
    shut down) on :meth:`close`; a process already connected keeps its session. Ray's relayed cluster events
    go to stderr from here until :meth:`close`."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        ray = _ray()
        # for the executor's life only: undone by close(), or here when joining or starting fails
        RELAY.acquire()
        self._relaying, self._started = True, False
        try:
            self._started = connect(address)
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        except BaseException:
            self.close()
            raise

    def pipeline_workers(self, recipe: PipelineRecipe, golden: Any) -> RayPipelineWorkers:
        # kept so a caller can watch (or, in the failure tests, kill) the actors of the run in progress
        self.last_workers = RayPipelineWorkers(recipe, golden, self.workers)
        return self.last_workers

    def map_ordered(self, fn: Callable[..., Any], items: Iterable[Any], *args: Any) -> Iterator[Any]:
        """``fn(item, *args)`` as Ray tasks (retried by Ray when a worker dies), in order, ``2 × workers`` in
        flight: the window moves on when its oldest task is fetched, so the results held here stay bounded
        too (a partition's rows can be 100 MB), however far ahead the other tasks finish."""
        ray = _ray()
        task = ray.remote(num_cpus=1, max_retries=RESTARTS)(_call)
        fn_ref = ray.put(fn)
        arg_refs = [ray.put(a) for a in args]
        source = iter(items)
        in_flight = deque(task.remote(fn_ref, item, *arg_refs) for item in islice(source, 2 * self.workers))
        with _worker_errors(ray):
            while in_flight:
                out = ray.get(in_flight.popleft())
                in_flight.extend(task.remote(fn_ref, item, *arg_refs) for item in islice(source, 1))
                yield out

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
        if self._relaying:
            RELAY.release()
            self._relaying = False
