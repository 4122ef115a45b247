"""Read a partitioned export (``export --partitioned``) as a read-only store, without importing it back.

``ParquetResults.open(DIR)`` puts DuckDB views named like the store's tables over the dataset's files and
answers through the store's own read methods (``get_run``, ``metrics``, ``results``, ``results_wide``,
``query_status``, ``judge_calls``...), so ``compare_runs`` and the other analyses get the rows a store would
give them from the same queries. Every write is refused: the instance is opened read-only.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from ragassay.errors import InputError, SchemaError
from ragassay.store.db import _RUN_COLUMNS, Store, _quote_literal
from ragassay.store.schema import RESULT_COLUMNS

_PARTITIONED = ("results", "query_status", "judge_calls")


class ParquetResults(Store):
    """A partitioned Parquet export of runs, read in place (see the module docstring)."""

    @classmethod
    def open(cls, path: str | Path, read_only: bool = True) -> ParquetResults:  # type: ignore[override]
        """Open the dataset in folder ``path``: ``runs.parquet`` and ``results/run_id=<id>/*.parquet`` are
        required (``query_status`` and ``judge_calls`` are read when present). Anything else is an
        ``InputError`` naming the folder and how to write one."""
        if not read_only:
            raise InputError(f"{path}: a Parquet export is read-only; import it into a store to write")
        root = Path(path)
        fix = "write one with `ragassay export --partitioned -o DIR`"
        if not root.is_dir():
            raise InputError(f"{root}: no such folder; {fix}")
        if not (root / "runs.parquet").is_file() or not any((root / "results").glob("run_id=*/*.parquet")):
            raise InputError(f"{root}: not a partitioned export (needs runs.parquet and "
                             f"results/run_id=<id>/*.parquet); {fix}")
        con = duckdb.connect(":memory:")
        try:
            runs = _quote_literal(str(root / "runs.parquet"))
            con.execute(f"CREATE VIEW runs AS SELECT * FROM read_parquet({runs})")
            present = {}
            for table in _PARTITIONED:
                files = root / table
                present[table] = any(files.glob("run_id=*/*.parquet"))
                if present[table]:
                    glob = _quote_literal(str(files / "run_id=*" / "*.parquet"))
                    # run_id comes from the folder name; typed VARCHAR so an id is never read as a number, and
                    # put first, where the store's tables have it.
                    con.execute(f"CREATE VIEW {table} AS SELECT run_id, * EXCLUDE (run_id) FROM read_parquet("
                                f"{glob}, hive_partitioning = true, hive_types = {{'run_id': VARCHAR}})")
            _check_columns(con, root, "runs", _RUN_COLUMNS)
            _check_columns(con, root, "results", RESULT_COLUMNS)
        except duckdb.Error as e:
            con.close()
            raise InputError(f"{root}: cannot read the Parquet export ({e}); {fix}") from e
        except SchemaError:
            con.close()
            raise
        store = cls(con, root, read_only=True)
        store._judge_calls_present = present["judge_calls"]
        store._validations_present = False
        store._batches_present = False
        if not present["query_status"]:
            con.execute("CREATE VIEW query_status AS SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS query_id, "
                        "NULL::INTEGER AS trial, NULL::VARCHAR AS status, NULL::VARCHAR AS error, "
                        "NULL::TIMESTAMP AS written_at WHERE false")
        return store


def _check_columns(con: duckdb.DuckDBPyConnection, root: Path, table: str, wanted) -> None:
    have = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    missing = [c for c in wanted if c not in have]
    if missing:
        raise SchemaError(f"{root}: {table} lacks column(s) {missing}; was it written by another ragassay "
                          "version? Export it again with `ragassay export --partitioned`")


__all__ = ["ParquetResults"]
