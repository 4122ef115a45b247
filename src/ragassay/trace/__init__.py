"""Traces: the record every pipeline under test emits, its JSONL reader/writer, and importers."""

from ragassay.trace.io import Problem, TraceReader, TraceWriter, format_problems, read_traces, write_traces
from ragassay.trace.schema import (
    RAW_OFFSETS_HINT,
    Citation,
    RunHeader,
    Trace,
    Unit,
    UnitCheck,
    UnitFailure,
    canonical_json,
    config_sha,
    make_trace_id,
    validate_units,
)

__all__ = [
    "RAW_OFFSETS_HINT", "Citation", "Problem", "RunHeader", "Trace", "TraceReader", "TraceWriter", "Unit",
    "UnitCheck", "UnitFailure", "canonical_json", "config_sha", "format_problems", "make_trace_id",
    "read_traces", "validate_units", "write_traces",
]
