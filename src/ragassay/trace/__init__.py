"""Traces: the record every pipeline under test emits, its JSONL reader/writer, and importers."""

from ragassay.trace.io import Problem, TraceReader, TraceWriter, format_problems, read_traces, write_traces
from ragassay.trace.schema import Citation, RunHeader, Trace, Unit, canonical_json, config_sha, make_trace_id

__all__ = [
    "Citation", "Problem", "RunHeader", "Trace", "TraceReader", "TraceWriter", "Unit", "canonical_json",
    "config_sha", "format_problems", "make_trace_id", "read_traces", "write_traces",
]
