"""Pure, vectorized scorers: ranking metrics over grade matrices, stage taps, generation and nugget metrics.

The names below load their module on first use (PEP 562), so importing a light submodule such as
``ragassay.metrics.names`` or ``ragassay.metrics.semantics`` does not pull in numpy and pyarrow.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "GradeMatrix": "matrix",
    "Metric": "names",
    "MetricResult": "retrieval",
    "evaluate": "retrieval",
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


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'ragassay.metrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ragassay.metrics.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
