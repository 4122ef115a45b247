"""One concurrency limit and one spend cap for judge clients on every worker of a Ray cluster.

Each worker's ``JudgeClient`` keeps its own limits (its semaphore, its own spend cap); the provider's rate
limit and the budget, though, are per account, so a cluster of W workers with ``concurrency`` 8 each would
send 8·W calls at once and could spend W caps. A ``RayLimiter`` passed as ``limiter=`` makes every client ask
one Ray actor first: the actor holds the global count of calls in flight and the global spend, reserves a
call's worst-case cost before it starts (the same bound the client uses locally) and settles it with the real
cost after, so the cap is never overshot by calls in flight anywhere in the cluster.

The actor is async: a waiting ``acquire`` costs no thread, and requests are served in arrival order (an
``asyncio.Condition`` wakes waiters first come, first served). A worker that dies holding a lease keeps its
slot and its reservation: the cluster then runs with one slot fewer and a smaller budget, never more.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from ragassay.errors import InputError


class _LimiterActor:
    def __init__(self, concurrency: int, spend_cap: float | None) -> None:
        self.concurrency = concurrency
        self.spend_cap = spend_cap
        self.inflight = 0
        self.max_inflight = 0
        self.spent = 0.0
        self.reserved: dict[int, float] = {}
        self.next_lease = 0
        self.refused = 0
        self.stopped: str | None = None
        self.cond = asyncio.Condition()

    async def acquire(self, estimate: float) -> int | str:
        async with self.cond:
            await self.cond.wait_for(lambda: self.inflight < self.concurrency or self.stopped is not None)
            if self.stopped is None and self.spend_cap is not None:
                committed = self.spent + sum(self.reserved.values())
                if committed + estimate > self.spend_cap:
                    # Once one call is refused no call starts anywhere, as in one client: a later, cheaper
                    # call must not slip under the cap ahead of the refused one.
                    self.stopped = (f"shared spend cap ${self.spend_cap:.4f} reached (spent ${self.spent:.4f}"
                                    f" across the cluster, the next call could cost up to ${estimate:.4f})")
            if self.stopped is not None:
                self.refused += 1
                self.cond.notify_all()
                return self.stopped
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            lease = self.next_lease
            self.next_lease += 1
            self.reserved[lease] = estimate
            return lease

    async def release(self, lease: int, cost: float) -> None:
        async with self.cond:
            if self.reserved.pop(lease, None) is None:
                return
            self.inflight -= 1
            self.spent += cost
            self.cond.notify()

    def stats(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "spend_cap": self.spend_cap, "inflight": self.inflight,
                "max_inflight": self.max_inflight, "spent": self.spent, "reserved": sum(self.reserved.values()),
                "leases": self.next_lease, "refused": self.refused, "stopped": self.stopped}


class RayLimiter:
    """A ``Limiter`` (see ``providers.base``) backed by one Ray actor; pickles as its actor handle, so it can be
    passed to tasks and actors that build their own judge clients. Needs ``ray.init`` first."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @classmethod
    def create(cls, concurrency: int, spend_cap: float | None = None, *, name: str | None = None) -> RayLimiter:
        """Start the limiter actor (named ``name`` if given, so other drivers can ``lookup`` it)."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 100_000:
            raise InputError(f"shared limiter: concurrency = {concurrency!r} must be an integer in [1, 100000]")
        if spend_cap is not None and (isinstance(spend_cap, bool) or not isinstance(spend_cap, int | float)
                                      or not math.isfinite(spend_cap) or spend_cap < 0):
            raise InputError(f"shared limiter: spend_cap = {spend_cap!r} must be a number >= 0 (USD) or None")
        import ray

        # Each waiting acquire is one pending actor call: allow more of them than any cluster has in flight.
        options: dict[str, Any] = {"max_concurrency": 10_000, "num_cpus": 0}
        if name is not None:
            options["name"] = name
        actor = ray.remote(_LimiterActor).options(**options).remote(concurrency, spend_cap)
        return cls(actor)

    @classmethod
    def lookup(cls, name: str) -> RayLimiter:
        import ray

        return cls(ray.get_actor(name))

    async def acquire(self, estimate: float) -> int | str:
        return await self._handle.acquire.remote(float(estimate))

    async def release(self, lease: int, cost: float) -> None:
        await self._handle.release.remote(lease, float(cost))

    def stats(self) -> dict[str, Any]:
        """The actor's counters: calls in flight now and at most, spend, open reservations, refusals."""
        import ray

        return ray.get(self._handle.stats.remote())

    def kill(self) -> None:
        import ray

        ray.kill(self._handle)


__all__ = ["RayLimiter"]
