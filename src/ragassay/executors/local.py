"""The local executor: the reference every other executor must reproduce row for row."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ragassay.trace import RunHeader, Trace

Key = tuple[str, int]


@dataclass
class BatchResult:
    """One batch, computed and scored: the rows and done markers the driver writes, each stage's summed
    seconds, the seconds spent scoring, and the traces themselves when the run keeps them."""

    scored: Any  # ragassay.analysis.scoring.ScoredRun
    done: list[tuple[str, int, str, str | None]]
    stage_s: dict[str, float]
    score_s: float
    traces: list[Trace] | None


Score = Callable[[Sequence[Key], list[Trace]], BatchResult]


class PipelineWorkers:
    """A built pipeline (or several, elsewhere) that turns batches of (query_id, trial) into scored rows.

    ``config``, ``config_sha`` and ``header`` describe the pipeline; :meth:`map` yields each batch's
    :class:`BatchResult` in the order the batches were given, whatever order they were computed in.
    """

    def __init__(self, pipe: Any, golden: Any) -> None:
        self.pipe, self.golden = pipe, golden
        self.config, self.config_sha = pipe.config, pipe.config_sha

    def header(self, dataset_version: str | None, run_name: str) -> RunHeader:
        return self.pipe.header(dataset_version, run_name)

    def map(self, batches: Sequence[Sequence[Key]], batched: bool, score: Score) -> Iterator[BatchResult]:
        for keys in batches:
            yield score(keys, run_keys(self.pipe, self.golden, keys, batched))

    def close(self) -> None:
        """Nothing to release locally."""


def run_keys(pipe: Any, golden: Any, keys: Sequence[Key], batched: bool) -> list[Trace]:
    """One batch, exactly as the local runner always ran it (shared by every executor)."""
    items = [(golden[q], tr) for q, tr in keys]
    return pipe.run_batch(items) if batched else [pipe.run_query(q, tr) for q, tr in items]


class LocalExecutor:
    """Everything in this process."""

    name = "local"

    def pipeline_workers(self, recipe: Callable[[], Any], golden: Any) -> PipelineWorkers:
        """``recipe()`` builds the pipeline (:class:`~ragassay.executors.shared.PipelineRecipe`; called once
        here, once per worker elsewhere, where the recipe's embedding calls are computed once)."""
        return PipelineWorkers(recipe(), golden)

    def map_ordered(self, fn: Callable[..., Any], items: Iterable[Any], *args: Any) -> Iterator[Any]:
        """``fn(item, *args)`` for each item, in order (``fn`` must be a module-level function)."""
        for item in items:
            yield fn(item, *args)

    def close(self) -> None:
        """Nothing to release locally."""
