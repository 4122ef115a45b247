"""Results store: DuckDB tables of runs, per-(run, query, trial, metric) rows and completion markers.

Names are imported on first use (PEP 562): ``ragassay.store.ulid`` and the schema version do not load DuckDB.
"""

from __future__ import annotations

from ragassay._lazy import lazy_exports

_EXPORTS = {
    "DEFAULT_PATH": "db", "RunRecord": "db", "Store": "db", "WideResults": "db", "config_digest": "db",
    "SCHEMA_VERSION": "schema",
    "is_ulid": "ulid", "new_ulid": "ulid", "ulid_time": "ulid",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
