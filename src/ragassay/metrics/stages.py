"""Stage taps: recall at each depth of a retrieve -> fuse -> rerank pipeline, and rerank movement (4-way).

Depth names follow the spec: ``branch_depth`` (candidates per branch), ``fusion_depth`` (candidates entering
the reranker) and ``final_k`` (units reaching the prompt). recall@fusion_depth bounds everything downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ragassay.errors import InputError
from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import Metric
from ragassay.metrics.retrieval import MetricResult, evaluate
from ragassay.metrics.semantics import Semantics

MOVEMENTS = ("rescued", "broke", "kept", "missed_both")


def _same_queries(a: GradeMatrix, b: GradeMatrix, what: str) -> None:
    if a.n_queries != b.n_queries or not np.array_equal(a.query_ids, b.query_ids):
        raise InputError(f"{what}: grade matrices must cover the same queries in the same order")


@dataclass(frozen=True, eq=False)
class DepthTaps:
    """recall@branch_depth per branch, recall@fusion_depth, and recall/ndcg/rr at final_k."""

    branch_recall: dict[str, MetricResult]
    fusion_recall: MetricResult
    final: dict[str, MetricResult]
    depths: dict[str, int]

    def summary(self) -> dict[str, float]:
        out = {f"recall@branch_depth[{b}]": r.mean() for b, r in self.branch_recall.items()}
        out["recall@fusion_depth"] = self.fusion_recall.mean()
        out.update({f"{m.metric.name}@final_k": m.mean() for m in self.final.values()})
        return out


def depth_taps(
    branches: Mapping[str, GradeMatrix],
    fused: GradeMatrix,
    final: GradeMatrix,
    branch_depth: int | Mapping[str, int],
    fusion_depth: int,
    final_k: int,
    semantics: Semantics | None = None,
) -> DepthTaps:
    """Recall at each pipeline depth from the grade matrices of each stage's list (same queries, same order)."""
    sem = semantics or Semantics()
    depths = {b: (branch_depth[b] if isinstance(branch_depth, Mapping) else branch_depth) for b in branches}
    branch_recall = {}
    for name, gm in branches.items():
        _same_queries(gm, fused, f"branch {name!r}")
        m = Metric("recall", int(depths[name]))
        branch_recall[name] = evaluate(gm, [m], sem)[m]
    _same_queries(final, fused, "final list")
    fm = Metric("recall", fusion_depth)
    final_metrics = [Metric("recall", final_k), Metric("ndcg", final_k), Metric("rr", final_k)]
    fin = evaluate(final, final_metrics, sem)
    return DepthTaps(
        branch_recall=branch_recall,
        fusion_recall=evaluate(fused, [fm], sem)[fm],
        final={str(m): fin[m] for m in final_metrics},
        depths={
            **{f"branch_depth[{b}]": int(d) for b, d in depths.items()},
            "fusion_depth": fusion_depth,
            "final_k": final_k,
        },
    )


@dataclass(frozen=True, eq=False)
class RerankMovement:
    """Per-query movement labels ('' where the query has no relevant label) and the 4-way counts."""

    query_ids: np.ndarray
    labels: np.ndarray
    counts: dict[str, int]
    n_undefined: int
    final_k: int
    semantics: Semantics

    def fractions(self) -> dict[str, float]:
        n = sum(self.counts.values())
        return {k: (v / n if n else float("nan")) for k, v in self.counts.items()}


def rerank_movement(
    pre: GradeMatrix, post: GradeMatrix, final_k: int, semantics: Semantics | None = None
) -> RerankMovement:
    """Classify each query by whether a relevant unit is in the top final_k before / after reranking.

    rescued = after only, broke = before only, kept = both, missed_both = neither. Queries without any
    relevant label cannot move and are counted as undefined instead.
    """
    sem = semantics or Semantics()
    _same_queries(pre, post, "rerank_movement")
    if final_k < 1:
        raise InputError(f"final_k must be >= 1, got {final_k}")
    m = Metric("success", final_k)
    before = evaluate(pre, [m], sem)[m].values
    after = evaluate(post, [m], sem)[m].values
    undefined = np.isnan(before)
    b, a = before == 1, after == 1
    labels = np.select([a & ~b, b & ~a, a & b], ["rescued", "broke", "kept"], default="missed_both").astype(
        object
    )
    labels[undefined] = ""
    counts = {k: int(np.count_nonzero(labels == k)) for k in MOVEMENTS}
    return RerankMovement(pre.query_ids, labels, counts, int(undefined.sum()), final_k, sem)
