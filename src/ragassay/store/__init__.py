"""Results store: DuckDB tables of runs, per-(run, query, trial, metric) rows and completion markers.

Names are imported on first use (PEP 562): ``ragassay.store.ulid`` and the schema version do not load DuckDB.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DEFAULT_PATH": "db", "RunRecord": "db", "Store": "db", "WideResults": "db", "config_digest": "db",
    "SCHEMA_VERSION": "schema",
    "is_ulid": "ulid", "new_ulid": "ulid", "ulid_time": "ulid",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
