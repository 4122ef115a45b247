"""Where a stored run's LLM judge calls are made: the executor's hand-off to
:func:`ragassay.judges.score.judge_stored_run`, which sits below the executors and takes it as
``open_client``. ``judge_stored_run(..., open_client=executor_client("ray"))`` judges on a Ray cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ragassay.executors import LocalExecutor, get_executor
from ragassay.judges.score import OpenClient


def executor_client(executor: str | LocalExecutor | None = None) -> OpenClient:
    """``open_client`` for ``executor`` (``"local"`` by default, ``"ray[:ADDRESS]"`` or an executor object).

    On the local executor the client is the judge itself; on Ray it is a
    :class:`~ragassay.executors.judging.ClusterJudge`, which makes the paid calls on the workers. The
    executor starts only when an LLM judge runs (a local judge starts no cluster); one given by name is
    closed after, one given as an object belongs to the caller."""

    @contextmanager
    def open_client(judge: Any, cfg: Any) -> Iterator[Any]:
        owned = not isinstance(executor, LocalExecutor)
        ex = get_executor(executor)
        try:
            if ex.name == "local":
                yield judge
                return
            from ragassay.executors.judging import ClusterJudge

            with ClusterJudge(judge, cfg, ex) as client:
                yield client
        finally:
            if owned:
                ex.close()

    return open_client
