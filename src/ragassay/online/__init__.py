"""Production traffic: request records beside a store (date-partitioned Parquet), their ingest from JSONL or
OpenTelemetry spans, daily signal rates with alarms, and a traffic simulator. Sits between ``analysis`` and
``report``."""

from __future__ import annotations

from ragassay._lazy import lazy_exports

_EXPORTS = {
    "RECORD_SCHEMA": "store", "append_records": "store", "open_records": "store", "records_dir": "store",
    "ingest": "ingest", "signals": "signals", "simulate": "simulate",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
