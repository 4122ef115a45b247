"""The executor seam: where a run's query batches and a score's trace partitions are computed.

``local`` (the default and the reference) computes everything in this process. ``ray[:ADDRESS]`` ships
the work to a Ray cluster: the one ``ray.init`` would use (``RAY_ADDRESS``, else a ``ray start`` cluster of
this machine, else a new local one), or the one at ADDRESS (``auto``: the local ``ray start`` cluster).
Either way the driver — this process — is the single writer of the store, and work comes back in
submission order, so the stored rows are the same.
"""

from __future__ import annotations

from ragassay.errors import InputError
from ragassay.executors.local import LocalExecutor, PipelineWorkers

__all__ = ["Executor", "LocalExecutor", "PipelineWorkers", "check_executor", "get_executor"]

Executor = LocalExecutor  # the interface; RayExecutor subclasses it (imported only when asked for)


def get_executor(spec: str | LocalExecutor | None = None) -> LocalExecutor:
    """``None`` / ``"local"`` / ``"ray"`` / ``"ray:ADDRESS"`` (or an executor, returned as is)."""
    if isinstance(spec, LocalExecutor):
        return spec
    text = _normalized(spec)
    if text == "local":
        return LocalExecutor()
    from ragassay.executors.ray import RayExecutor

    return RayExecutor(address=text[4:] or None)


def check_executor(spec: str | None) -> str:
    """The executor spec, normalized, or :class:`InputError` — without starting anything, so a command can
    call it before it loads or creates anything. For ``ray[:ADDRESS]`` that includes the cluster: Ray is
    installed, and the cluster the executor would join answers as one within seconds and takes this
    driver's token (:func:`ragassay.executors.ray.check_cluster`)."""
    text = _normalized(spec)
    if text != "local":
        from ragassay.executors.ray import check_cluster

        check_cluster(text[4:] or None)
    return text


def _normalized(spec: str | None) -> str:
    text = (spec or "local").strip()
    if text == "local" or text == "ray" or (text.startswith("ray:") and len(text) > 4):
        return text
    raise InputError(f"--executor {text!r}: use local, ray (RAY_ADDRESS, else this machine's `ray start` "
                     "cluster, else a new local one) or ray:ADDRESS (e.g. ray:auto or ray:10.0.0.5:6379)")
