"""Pure, vectorized scorers: ranking metrics over grade matrices, stage taps, generation and nugget metrics.

The names below load their module on first use (PEP 562), so importing a light submodule such as
``ragassay.metrics.names`` or ``ragassay.metrics.semantics`` does not pull in numpy and pyarrow.
"""

from __future__ import annotations

from ragassay._lazy import lazy_exports

_WHERE = {
    "GradeMatrix": "matrix",
    "Metric": "names",
    "MetricResult": "retrieval",
    "evaluate": "retrieval",
    "parse_measure": "names",
    "Semantics": "semantics",
    "Qrels": "trec",
    "Run": "trec",
    "build_grade_matrix": "trec",
    "evaluate_trec": "trec",
    "read_qrels": "trec",
    "read_run": "trec",
    "write_qrels": "trec",
    "write_run": "trec",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
