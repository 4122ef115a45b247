"""Pure, vectorized scorers: ranking metrics over grade matrices, stage taps, generation and nugget metrics."""

from ragassay.metrics.matrix import GradeMatrix
from ragassay.metrics.names import Metric
from ragassay.metrics.retrieval import MetricResult, evaluate
from ragassay.metrics.semantics import Semantics
from ragassay.metrics.trec import (
    Qrels,
    Run,
    build_grade_matrix,
    evaluate_trec,
    read_qrels,
    read_run,
    write_qrels,
    write_run,
)

__all__ = [
    "GradeMatrix",
    "Metric",
    "MetricResult",
    "Qrels",
    "Run",
    "Semantics",
    "build_grade_matrix",
    "evaluate",
    "evaluate_trec",
    "read_qrels",
    "read_run",
    "write_qrels",
    "write_run",
]
