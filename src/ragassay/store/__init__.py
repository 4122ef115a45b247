"""Results store: DuckDB tables of runs, per-(run, query, trial, metric) rows and completion markers."""

from ragassay.store.db import DEFAULT_PATH, RunRecord, Store, WideResults, config_digest
from ragassay.store.schema import SCHEMA_VERSION
from ragassay.store.ulid import is_ulid, new_ulid, ulid_time

__all__ = [
    "DEFAULT_PATH",
    "SCHEMA_VERSION",
    "RunRecord",
    "Store",
    "WideResults",
    "config_digest",
    "is_ulid",
    "new_ulid",
    "ulid_time",
]
