"""DeepEval test cases, as DeepEval writes them to JSON, -> ragassay traces.

``EvaluationDataset.save_as(file_type="json", ...)`` writes a JSON list with one object per golden (test
cases too, when it is asked to include them) under DeepEval's own field names. The keys read, and nothing
else:

- ``input`` (a string): the question, matched to a golden query by its text (the rule of the RAGAS
  importer, :class:`ragassay.trace.adapters.QuestionMatcher`) unless the row names its query;
- ``retrieval_context`` (a list of strings, best first): what the system retrieved, each placed in the
  corpus as a unit of the fused and packed lists (:func:`ragassay.trace.adapters.locate`);
- ``actual_output`` (a string; null or empty = abstained): the answer;
- ``additional_metadata.query_id`` (when ``additional_metadata`` is an object), else a top-level
  ``query_id``: the golden query id, matched by id instead of by question;
- ``expected_output``, ``context`` (DeepEval's ideal context, not what was retrieved) and ``name``: copied
  into the trace's ``meta``, not scored.

A row whose ``retrieval_context`` is null or missing (a golden the system has not answered yet, or a test
case made for a metric without retrieval) is skipped and counted: scoring it would read "nothing retrieved".
Matching, problems and errors are those of :func:`ragassay.trace.adapters.traces_from_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragassay.errors import InputError
from ragassay.trace.adapters import RowFormat, load_rows, traces_from_rows
from ragassay.trace.io import Problem
from ragassay.trace.schema import RunHeader, Trace


def _query_id(row: dict) -> Any:
    meta = row.get("additional_metadata")
    if isinstance(meta, dict) and meta.get("query_id") not in (None, ""):
        return meta["query_id"]
    return row.get("query_id")


DEEPEVAL = RowFormat("deepeval", "input", "retrieval_context", "actual_output",
                     keep=("expected_output", "context", "name"), query_id=_query_id)


def traces_from_deepeval(
    cases: str | Path | Sequence[dict],
    corpus: Any,
    golden: Any,
    *,
    threshold: float = 90.0,
    run_name: str = "deepeval-import",
) -> tuple[RunHeader, list[Trace], list[Problem]]:
    """DeepEval test cases (a ``save_as`` JSON file, a ``.jsonl`` file or a list of dicts) -> traces matched
    to ``golden``; see the module docstring for the keys read."""
    source, data = load_rows(cases, what="DeepEval test cases", columns=False)
    if not data:
        raise InputError(f"{source}: no test cases; expected a JSON list of objects with 'input' and "
                         "'retrieval_context', as EvaluationDataset.save_as(file_type='json') writes")
    rows, skipped = [], []
    for n, row in enumerate(data, start=1):
        if isinstance(row, dict) and "input" in row and row.get("retrieval_context") is None:
            skipped.append(Problem(n, "retrieval_context is null or missing (a golden the system has not "
                                      "answered, or a test case without retrieval); skipped"))
        else:
            rows.append((n, row))
    return traces_from_rows(rows, corpus, golden, DEEPEVAL, source=source, total=len(data), threshold=threshold,
                            run_name=run_name, kind="deepeval", problems=skipped)
