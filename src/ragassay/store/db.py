"""The results store: one DuckDB file holding runs, per-row results and per-query completion markers.

Writes are crash-safe and idempotent. Each ``write_batch`` is one transaction holding result rows *and* the
``query_status`` markers of the queries they complete, so after a crash (even SIGKILL) a query is either
fully present and marked done, or absent; DuckDB replays its write-ahead log on the next open. Rows are keyed
by (run_id, query_id, trial, metric); writing a key again replaces the row (last write wins), so a resumed run
may re-send work without creating duplicates. Batches enter through Arrow (a registered table and one
``INSERT ... SELECT``), never row by row.

The key is not a DuckDB index (schema version 2; see ``store.schema``). The writer remembers, per run, a
64-bit hash of every (query_id, trial) pair it has stored rows for: a batch whose pairs are all new is a plain
append, and only a batch that touches a stored pair first deletes the rows it replaces. A hash collision only
sends a batch down that exact path. ``finish_run`` then checks the whole run once, so rows written to one run
by two connections at once end in an error, never in silent duplicates; for a run this ``Store`` created and
alone wrote (its row count is what the writer accounts for) that bookkeeping is the proof, and the full
check is skipped.

Undefined metric values (NaN or null) are stored as ``value = NULL`` with ``defined = false`` and come back
as NaN, so an undefined value is never confused with 0 and can always be counted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragassay import fsio
from ragassay.errors import InputError, SchemaError
from ragassay.store.schema import (
    DDL,
    JUDGE_BATCH_COLUMNS,
    JUDGE_BATCH_STATUSES,
    JUDGE_BATCHES_DDL,
    JUDGE_CALL_COLUMNS,
    JUDGE_CALLS_DDL,
    JUDGE_CALLS_KEY,
    JUDGE_OUTCOMES,
    JUDGE_PAID_OUTCOMES,
    JUDGE_VALIDATION_ADDED,
    JUDGE_VALIDATION_COLUMNS,
    JUDGE_VALIDATION_JSON,
    JUDGE_VALIDATIONS_DDL,
    KEYED_RESULTS_VERSION,
    QUERY_STATUSES,
    READABLE_VERSIONS,
    REQUIRED_ROW_COLUMNS,
    RESULT_COLUMNS,
    ROW_SCHEMA,
    RUN_STATUSES,
    SCHEMA_VERSION,
    TABLES,
)
from ragassay.store.ulid import is_ulid, new_ulid

DEFAULT_PATH = "ragassay.duckdb"

# Commits below this WAL size do not trigger a checkpoint. Until a checkpoint, appended rows stay in memory
# uncompressed (~110 bytes per result row), so the threshold bounds what a long import holds: at 2.3 M rows
# 256 MB let ~300 MB pile up, 64 MB holds under ~80 MB for about 8% more write CPU (without the results key a
# checkpoint writes only the new row groups; 16 MB costs ~25% more). The WAL is replayed on the next open
# after a crash, so the threshold changes no durability.
_CHECKPOINT_THRESHOLD = "64MB"
# DuckDB's memory limit while a whole trace set is scored into the store (Store.memory_limited)
BULK_MEMORY_LIMIT = "512MB"
# DuckDB's worker threads while a whole trace set is scored into the store (Store.memory_limited)
BULK_THREADS = 1
_BATCH_VIEW = "_ragassay_batch"
_DONE_VIEW = "_ragassay_done"
_PAIRS_VIEW = "_ragassay_pairs"


def _now() -> datetime:
    """Current time as naive UTC (the store's TIMESTAMP columns are UTC)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _ragassay_version() -> str | None:
    try:
        return metadata.version("ragassay")
    except metadata.PackageNotFoundError:
        return None


def config_digest(config: Mapping[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys, no whitespace, UTF-8)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunRecord:
    """One row of ``runs``: a run's identity, status and every pin needed to compare it with another.

    ``run_id`` and ``created_at`` are filled by ``Store.create_run`` when left empty; ``config_sha`` defaults
    to ``config_digest(config)``. ``source`` is ``'pipeline'`` or ``'traces:<path>'``.
    """

    run_id: str = ""
    name: str = ""
    status: str = "running"
    created_at: datetime | None = None
    finished_at: datetime | None = None
    git_sha: str | None = None
    dataset_version: str | None = None
    corpus_digest: str | None = None
    golden_sha256: str | None = None
    config: Mapping[str, Any] | None = None
    config_sha: str | None = None
    metric_version: str | None = None
    judge_model: str | None = None
    rubric_sha: str | None = None
    gain: str | None = None
    relevance_threshold: int | None = None
    hit_rule: str | None = None
    ties: str | None = None
    trials: int | None = None
    n_queries: int | None = None
    source: str = "pipeline"
    ragassay_version: str | None = None
    extra: Mapping[str, Any] | None = None

    def traces_path(self) -> Path | None:
        """Where the run's trace JSONL is, for every reader (``judge``, pooling, slices' cases, the Python API):
        ``<extra.traces_dir>/<run_id>.jsonl`` when the run kept its traces, else the trace file it was scored
        from (``source`` ``traces:<path>``); None when it recorded neither. The file may since have moved."""
        folder = (self.extra or {}).get("traces_dir")
        if folder:
            return Path(folder) / f"{self.run_id}.jsonl"
        if self.source.startswith("traces:"):
            return Path(self.source.removeprefix("traces:"))
        return None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("created_at", "finished_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return out


_RUN_COLUMNS = tuple(f.name for f in fields(RunRecord))
_JSON_COLUMNS = ("config", "extra")


class WideResults(NamedTuple):
    """``results_wide`` output: rows are (query_id, trial) pairs sorted by query_id then trial."""

    query_ids: np.ndarray  # object array of str
    trials: np.ndarray  # int64
    strata: np.ndarray  # object array of str or None
    values: np.ndarray  # float64 (n rows x m metrics); NaN = undefined or missing


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Store:
    """A DuckDB results store. Open with ``Store.open(path)``; use as a context manager to close it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool):
        self._con = con
        self.path = path
        self.read_only = read_only
        # A read-only open of a store written before judge_calls existed has no such table.
        self._judge_calls_present = True
        self._validations_present = True
        self._validation_missing: set[str] = set()
        self._batches_present = True
        # Read-path memo for read-only stores (nothing can change under them): the report and analyses ask
        # for the same run and its metric names dozens of times, and at 100,000 queries each `metrics` is a
        # scan of millions of rows. A writable store is not memoized: its writers read runs mid-write.
        self._runs_cache: dict[str, RunRecord] = {}
        self._metrics_cache: dict[str, list[str]] = {}
        # A version-1 store's results table keeps its primary key (and the write path that relies on it).
        self._keyed_results = False
        # run_id -> sorted uint64 hashes of the (query_id, trial) pairs with stored rows (unkeyed stores).
        self._pairs: dict[str, np.ndarray] = {}
        # run_id -> rows of the run this object accounts for, kept only for runs it created (unkeyed stores):
        # see `_session_proves_unique`.
        self._own_rows: dict[str, int] = {}

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path = DEFAULT_PATH, read_only: bool = False) -> Store:
        """Open (and, unless ``read_only``, create) the store at ``path`` and check its schema version.

        DuckDB allows one writing process per file; a second writer gets an ``InputError`` naming the lock.
        After a crash the file opens normally: DuckDB replays committed transactions from its WAL.
        """
        path = Path(path)
        if read_only and not path.exists():
            raise InputError(f"{path}: no results store here; write a run first or pass the right store path")
        if not read_only and path.parent and not path.parent.exists():
            raise InputError(
                f"{path}: directory {path.parent} does not exist; create it or choose another path"
            )
        config = {} if read_only else {"checkpoint_threshold": _CHECKPOINT_THRESHOLD}
        try:
            con = duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            msg = str(exc)
            if "lock" in msg.lower():
                raise InputError(
                    f"{path}: the results store is locked by another process ({msg.splitlines()[0]}); "
                    "wait for that run to finish (DuckDB allows one writer per file)"
                ) from exc
            raise SchemaError(f"{path}: not a readable DuckDB results store ({msg}); check the path") from exc
        except duckdb.Error as exc:
            raise SchemaError(f"{path}: cannot open results store ({exc}); check the path") from exc
        store = cls(con, path, read_only)
        try:
            store._ensure_schema()
        except BaseException:
            con.close()
            raise
        return store

    def _ensure_schema(self) -> None:
        present = {
            r[0]
            for r in self._con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
                "AND table_schema = 'main'"
            ).fetchall()
        }
        if not present:
            if self.read_only:
                raise SchemaError(
                    f"{self.path}: the file holds no results store (no tables); write a run first"
                )
            self._con.execute("BEGIN TRANSACTION")
            self._con.execute(DDL)
            self._con.execute(JUDGE_CALLS_DDL)
            self._con.execute(JUDGE_VALIDATIONS_DDL)
            self._con.execute(JUDGE_BATCHES_DDL)
            self._con.execute(
                "INSERT INTO schema_info VALUES (?, ?, ?)", [SCHEMA_VERSION, _now(), _ragassay_version()]
            )
            self._con.execute("COMMIT")
            self._keyed_results = False
            return
        if "schema_info" not in present:
            raise SchemaError(
                f"{self.path}: not a ragassay results store (tables {sorted(present)} but no schema_info); "
                "use a different --store path"
            )
        versions = [r[0] for r in self._con.execute("SELECT version FROM schema_info").fetchall()]
        if len(versions) != 1:
            raise SchemaError(f"{self.path}: schema_info must hold exactly one version row, found {versions}")
        version = versions[0]
        if version not in READABLE_VERSIONS:
            hint = (
                "it was written by a newer ragassay; upgrade ragassay to read it"
                if version is not None and version > SCHEMA_VERSION
                else "this ragassay has no migration for it; export it with the ragassay that wrote it"
            )
            raise SchemaError(
                f"{self.path}: results store schema version {version}, this ragassay reads version "
                f"{SCHEMA_VERSION}; {hint}"
            )
        self._keyed_results = version == KEYED_RESULTS_VERSION
        missing = [t for t in TABLES if t not in present]
        if missing:
            raise SchemaError(
                f"{self.path}: results store is missing table(s) {missing}; the file is damaged"
            )
        if "judge_calls" not in present:
            if self.read_only:
                self._judge_calls_present = False
            else:
                self._con.execute(JUDGE_CALLS_DDL)
        elif not self.read_only:
            self._migrate_judge_calls_key()
        if "judge_validations" not in present:
            if self.read_only:
                self._validations_present = False
            else:
                self._con.execute(JUDGE_VALIDATIONS_DDL)
        else:
            have = {r[0] for r in self._con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'judge_validations' "
                "AND table_catalog = current_database() AND table_schema = 'main'").fetchall()}
            for col, kind in JUDGE_VALIDATION_ADDED.items():
                if col in have:
                    continue
                if self.read_only:
                    self._validation_missing.add(col)
                else:
                    self._con.execute(f"ALTER TABLE judge_validations ADD COLUMN {col} {kind}")
        if "judge_batches" not in present:
            if self.read_only:
                self._batches_present = False
            else:
                self._con.execute(JUDGE_BATCHES_DDL)

    def _migrate_judge_calls_key(self) -> None:
        """Move a store whose judge_calls key lacks the request sha to the append-only key (schema.py)."""
        keys = self._con.execute(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE table_name = 'judge_calls' "
            "AND constraint_type = 'PRIMARY KEY' AND database_name = current_database()").fetchall()
        if keys and tuple(keys[0][0]) == JUDGE_CALLS_KEY:
            return
        cols = ", ".join(JUDGE_CALL_COLUMNS)
        self._con.execute("BEGIN TRANSACTION")
        try:
            self._con.execute("DROP INDEX IF EXISTS judge_calls_request_sha")
            self._con.execute("ALTER TABLE judge_calls RENAME TO judge_calls_before_sha_key")
            self._con.execute(JUDGE_CALLS_DDL)
            self._con.execute(f"INSERT INTO judge_calls ({cols}) SELECT {cols} FROM judge_calls_before_sha_key")
            self._con.execute("DROP TABLE judge_calls_before_sha_key")
            self._con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def memory_limited(self, limit: str = BULK_MEMORY_LIMIT, threads: int | None = BULK_THREADS):
        """DuckDB's ``memory_limit`` set to ``limit`` inside the block, then back to DuckDB's default: bulk
        scoring and its summary at millions of rows stay bounded (DuckDB spills what does not fit) instead of
        growing towards DuckDB's default of most of the machine's memory.

        DuckDB's worker ``threads`` are also capped at ``threads`` inside the block (None leaves them), then
        set back to what they were. A bulk write runs beside the scorer and the trace reader, which keep the
        cores busy: a second DuckDB thread there wins no time and doubles the CPU an ``INSERT`` of a batch
        costs (each thread appends its own copy of the rows, merged afterwards)."""
        con = self._con
        con.execute(f"SET memory_limit = '{limit}'")
        before = None
        try:
            if threads is not None:
                before = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
                if before > threads:
                    con.execute(f"SET threads = {int(threads)}")
                else:
                    before = None
            yield self
        finally:
            con.execute("RESET memory_limit")
            if before is not None:
                con.execute(f"SET threads = {int(before)}")

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The underlying DuckDB connection, for ad-hoc SQL over the documented tables."""
        return self._con

    # ------------------------------------------------------------------ runs
    def create_run(self, record: RunRecord) -> str:
        """Insert a run with status 'running' and return its run_id (a new ULID unless one is given)."""
        self._check_writable()
        if not record.name or not isinstance(record.name, str):
            raise InputError("RunRecord.name is empty; give the run a name (e.g. the config file stem)")
        if record.source != "pipeline" and not record.source.startswith(("traces:", "judge:")):
            raise InputError(f"RunRecord.source {record.source!r} must be 'pipeline', 'traces:<path>' or "
                             "'judge:<purpose>' (a run that only owns judge calls)")
        run_id = record.run_id or new_ulid()
        if not is_ulid(run_id):
            raise InputError(f"run_id {run_id!r} is not a ULID (26 upper-case Crockford base32 characters)")
        if self._con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall():
            raise InputError(
                f"run_id {run_id} already exists in {self.path}; leave run_id empty for a new one"
            )
        config_sha = record.config_sha
        if config_sha is None and record.config is not None:
            config_sha = config_digest(record.config)
        values = {
            **{name: getattr(record, name) for name in _RUN_COLUMNS},
            "run_id": run_id,
            "status": "running",
            "created_at": record.created_at or _now(),
            "finished_at": None,
            "config_sha": config_sha,
            "ragassay_version": record.ragassay_version or _ragassay_version(),
        }
        for key in _JSON_COLUMNS:
            if values[key] is not None:
                values[key] = json.dumps(values[key], sort_keys=True, default=str)
        cols = ", ".join(_RUN_COLUMNS)
        marks = ", ".join("?::JSON" if c in _JSON_COLUMNS else "?" for c in _RUN_COLUMNS)
        self._con.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", [values[c] for c in _RUN_COLUMNS])
        self._pairs[run_id] = np.zeros(0, dtype=np.uint64)
        self._own_rows[run_id] = 0
        return run_id

    def finish_run(self, run_id: str, status: str = "complete") -> None:
        """Mark a run 'complete' or 'failed', stamp finished_at and fill n_queries if it was not given.

        First checks, once for the whole run, that no (query_id, trial, metric) key is stored twice (or that
        this object's own writes prove it: ``_session_proves_unique``); a run that fails the check raises
        ``SchemaError`` and stays 'running'."""
        self._check_writable()
        if status not in ("complete", "failed"):
            raise InputError(f"finish_run status {status!r} must be 'complete' or 'failed'")
        self._require_run(run_id)
        if not self._keyed_results:
            if not self._session_proves_unique(run_id):
                self._check_run_unique(run_id)
            self._pairs.pop(run_id, None)
            self._own_rows.pop(run_id, None)
        self._con.execute(
            "UPDATE runs SET status = ?, finished_at = ?, n_queries = coalesce(n_queries, "
            "(SELECT count(DISTINCT query_id) FROM results WHERE run_id = ?)) WHERE run_id = ?",
            [status, _now(), run_id, run_id],
        )

    def resume_run(self, run_id: str) -> set[tuple[str, int]]:
        """Set a run back to 'running' (after a crash or a 'failed' finish) and return its done keys."""
        self._check_writable()
        self._require_run(run_id)
        self._con.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?", [run_id])
        return self.done_keys(run_id)

    def list_runs(self) -> list[RunRecord]:
        """All runs, oldest first (ULID order is creation order)."""
        return self._fetch_runs("ORDER BY run_id", [])

    def get_run(self, ref: str) -> RunRecord:
        """Resolve ``ref`` as an exact run_id, else a run name (latest with that name), else a unique
        prefix of a run_id (case-insensitive). No match or several prefix matches raise ``InputError``
        listing the candidates."""
        ref = (ref or "").strip()
        if not ref:
            raise InputError("empty run reference; give a run_id, a unique run_id prefix or a run name")
        if not self.read_only:
            return self._resolve_run(ref)
        hit = self._runs_cache.get(ref)
        if hit is None:
            hit = self._runs_cache[ref] = self._resolve_run(ref)
        return hit

    def _resolve_run(self, ref: str) -> RunRecord:
        for where, params in (
            ("WHERE run_id = ?", [ref]),
            ("WHERE name = ? ORDER BY run_id DESC LIMIT 1", [ref]),
        ):
            found = self._fetch_runs(where, params)
            if found:
                return found[0]
        found = self._fetch_runs("WHERE starts_with(run_id, ?) ORDER BY run_id", [ref.upper()])
        if len(found) == 1:
            return found[0]
        if found:
            listing = "\n".join(
                f"  {r.run_id}  {r.name}  {r.created_at:%Y-%m-%d %H:%M:%S}" for r in found[:20]
            )
            more = f"\n  ... and {len(found) - 20} more" if len(found) > 20 else ""
            raise InputError(
                f"run reference {ref!r} is ambiguous: it prefixes {len(found)} runs; give more characters:\n"
                f"{listing}{more}"
            )
        recent = self._fetch_runs("ORDER BY run_id DESC LIMIT 10", [])
        listing = "\n".join(f"  {r.run_id}  {r.name}" for r in recent) or "  (the store has no runs)"
        raise InputError(
            f"no run matches {ref!r} in {self.path} (as run_id, run name or run_id prefix); recent runs:\n"
            f"{listing}"
        )

    def _fetch_runs(self, tail: str, params: list[Any]) -> list[RunRecord]:
        cols = ", ".join(_RUN_COLUMNS)
        rows = self._con.execute(f"SELECT {cols} FROM runs {tail}", params).fetchall()
        out = []
        for row in rows:
            rec = dict(zip(_RUN_COLUMNS, row, strict=True))
            for key in _JSON_COLUMNS:
                if rec[key] is not None:
                    rec[key] = json.loads(rec[key])
            out.append(RunRecord(**rec))
        return out

    def _require_run(self, run_id: str) -> str:
        rows = self._con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise InputError(
                f"run_id {run_id!r} is not in {self.path}; create_run first (writes need the full id)"
            )
        return rows[0][0]

    def _check_writable(self) -> None:
        if self.read_only:
            raise InputError(f"{self.path} was opened read-only; open it with read_only=False to write")

    # ------------------------------------------------------------------ writing
    def write_batch(
        self,
        run_id: str,
        rows: pa.Table | Mapping[str, Sequence[Any]],
        done: Iterable[tuple[str, int, str, str | None]] = (),
    ) -> int:
        """Write result rows and completion markers of one run in a single transaction; return rows written.

        ``rows`` is an Arrow table or a dict of equal-length columns: ``query_id``, ``metric``, ``value``
        are required, ``trial`` defaults to 0, the other ``results`` columns are optional (null). ``done``
        lists ``(query_id, trial, status, error)`` with status 'done' or 'error'. Keys already present are
        replaced (last write wins). Any failure rolls the whole batch back.
        """
        self._check_writable()
        status = self._require_run(run_id)
        if status != "running":
            raise InputError(
                f"run {run_id} is '{status}'; its results are frozen. Call resume_run({run_id!r}) to add to it"
            )
        table = _normalize_rows(rows)
        done_table = _normalize_done(done)
        con = self._con
        con.register(_BATCH_VIEW, table)
        con.register(_DONE_VIEW, done_table)
        try:
            if self._keyed_results:
                self._write_keyed(run_id, table, done_table.num_rows)
            else:
                self._write_unkeyed(run_id, table, done_table.num_rows)
        except duckdb.ConstraintException as exc:
            raise SchemaError(
                f"run {run_id}: batch violates the results schema ({exc}); nothing was written"
            ) from exc
        finally:
            con.unregister(_BATCH_VIEW)
            con.unregister(_DONE_VIEW)
        return table.num_rows

    def _write_keyed(self, run_id: str, table: pa.Table, n_done: int) -> None:
        """A version-1 store: the primary key refuses a stored key, and the batch is redone as an upsert."""
        self._transaction(
            lambda replace: self._insert(run_id, table.num_rows, n_done, replace_rows=replace,
                                         replace_done=replace),
            # The upsert silently keeps one of two equal keys in one statement, so a duplicate inside the
            # batch must be ruled out before taking that path.
            before_retry=lambda: _check_unique(table, ("query_id", "trial", "metric"), "result rows"),
        )

    def _write_unkeyed(self, run_id: str, table: pa.Table, n_done: int) -> None:
        """Append the batch, deleting first only the stored rows it replaces (see the module docstring)."""
        pairs = np.zeros(0, dtype=np.uint64)
        if table.num_rows:
            first_rows, unique = _pair_rows(table)
            if not unique:
                _check_unique(table, ("query_id", "trial", "metric"), "result rows")  # raises, naming a key
            pairs = self._pair_hashes(table, first_rows)
        stored = self._stored_pairs(run_id)
        seen = _members(pairs, stored)
        replace_rows = bool(seen.any())
        # Done markers keep their (small) primary key: a marker already stored is replaced on a second try.
        deleted = self._transaction(lambda replace: self._insert(run_id, table.num_rows, n_done,
                                                                 replace_rows=replace_rows, replace_done=replace))
        if run_id in self._own_rows:
            self._own_rows[run_id] += table.num_rows - deleted
        fresh = pairs[~seen]
        self._pairs[run_id] = np.insert(stored, np.searchsorted(stored, fresh), fresh)

    def _transaction(self, insert: Any, before_retry: Any = None) -> Any:
        """Run ``insert(False)`` in one transaction; on a key conflict roll back and run ``insert(True)``.
        Fresh keys are the common case, and a plain INSERT costs about half of an upsert. Returns what the
        committed call returned."""
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            try:
                out = insert(False)
            except duckdb.ConstraintException:
                con.execute("ROLLBACK")
                if before_retry is not None:
                    before_retry()
                con.execute("BEGIN TRANSACTION")
                out = insert(True)
            con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return out

    def _pair_hashes(self, table: pa.Table, rows: np.ndarray) -> np.ndarray:
        """Sorted distinct DuckDB ``hash(query_id, trial)`` of the batch's pairs, one row of each in ``rows``:
        the hash the stored pairs are remembered by (``_stored_pairs``), computed over the few pairs instead of
        grouping every row of the batch."""
        take = pa.array(rows)
        pairs = pa.table({"query_id": pc.cast(table["query_id"].take(take), pa.string()),
                          "trial": table["trial"].take(take)})
        con = self._con
        con.register(_PAIRS_VIEW, pairs)
        try:
            found = con.execute(f"SELECT hash(query_id, trial) AS h FROM {_PAIRS_VIEW}").fetchnumpy()["h"]
        finally:
            con.unregister(_PAIRS_VIEW)
        return np.unique(np.asarray(found, dtype=np.uint64))

    def _stored_pairs(self, run_id: str) -> np.ndarray:
        pairs = self._pairs.get(run_id)
        if pairs is None:
            found = self._con.execute(
                "SELECT DISTINCT hash(query_id, trial) AS h FROM results WHERE run_id = ? ORDER BY h", [run_id]
            ).fetchnumpy()["h"]
            pairs = self._pairs[run_id] = np.asarray(found, dtype=np.uint64)
        return pairs

    def _session_proves_unique(self, run_id: str) -> bool:
        """True when this object's own bookkeeping proves the run holds no key twice, so ``finish_run`` can
        skip the full check (0.4-0.9 s at 100,000 queries x 23 metrics).

        Every write of this object is unique within its batch (checked in ``_write_unkeyed``) and, against
        the stored rows, either touches only pairs it never stored (no stored row can share their keys) or
        first deletes the keys it replaces. So rows written only by this object are unique. That covers a
        run created by this object, whose every stored row it accounts for (rows inserted minus rows
        deleted); a resumed run may hold rows from before, which are checked in full. Any foreign write
        that adds rows - a second writer, a raw INSERT through ``connection`` - leaves the run with more
        rows than accounted for and sends it to the full check. (Only a foreign change that deletes as many
        rows as it adds duplicates could hide one; the Store's own writers never do that.)"""
        own = self._own_rows.get(run_id)
        if own is None:
            return False
        (n,) = self._con.execute("SELECT count(*) FROM results WHERE run_id = ?", [run_id]).fetchone()
        return n == own

    def _check_run_unique(self, run_id: str) -> None:
        """Raise ``SchemaError`` if a (query_id, trial, metric) key of the run is stored more than once.

        Equal keys hash equally, so as many distinct key hashes as rows proves every key distinct; only a
        shortfall (a duplicate, or a collision) needs the exact grouping."""
        n, k = self._con.execute(
            "SELECT count(*), count(DISTINCT hash(query_id, trial, metric)) FROM results WHERE run_id = ?", [run_id]
        ).fetchone()
        if n == k:
            return
        dup = self._con.execute(
            "SELECT query_id, trial, metric, count(*) AS n, count(*) OVER () AS keys FROM results "
            "WHERE run_id = ? GROUP BY query_id, trial, metric HAVING count(*) > 1 ORDER BY ALL LIMIT 1",
            [run_id],
        ).fetchall()
        if dup:
            q, t, m, times, keys = dup[0]
            raise SchemaError(
                f"run {run_id}: {keys} key(s) (query_id, trial, metric) are stored more than once, e.g. "
                f"({q!r}, {t}, {m!r}) {times} times; two writers wrote this run at once. Score it again into a "
                "new run"
            )

    def _insert(self, run_id: str, n_rows: int, n_done: int, *, replace_rows: bool, replace_done: bool) -> int:
        """Insert the registered batch; return how many stored result rows the unkeyed replace path deleted."""
        deleted = 0
        if n_rows:
            if replace_rows and not self._keyed_results:
                (deleted,) = self._con.execute(
                    f"DELETE FROM results USING {_BATCH_VIEW} b WHERE results.run_id = $run_id AND "
                    "results.query_id = b.query_id AND results.trial = b.trial AND results.metric = b.metric",
                    {"run_id": run_id},
                ).fetchone()
            verb = "INSERT OR REPLACE" if replace_rows and self._keyed_results else "INSERT"
            self._con.execute(
                f"{verb} INTO results ({', '.join(RESULT_COLUMNS)}) "
                "SELECT $run_id, query_id, trial, metric, "
                "CASE WHEN isnan(value) THEN NULL ELSE value END, coalesce(NOT isnan(value), false), "
                "stratum, judged_fraction, latency_ms, tokens_in, tokens_out, cost, trace_id "
                f"FROM {_BATCH_VIEW}",
                {"run_id": run_id},
            )
        if n_done:
            verb = "INSERT OR REPLACE" if replace_done else "INSERT"
            self._con.execute(
                f"{verb} INTO query_status (run_id, query_id, trial, status, error, written_at) "
                f"SELECT $run_id, query_id, trial, status, error, $now FROM {_DONE_VIEW}",
                {"run_id": run_id, "now": _now()},
            )
        return deleted

    def _rollback(self) -> None:
        try:
            self._con.execute("ROLLBACK")
        except duckdb.TransactionException:  # already rolled back by DuckDB
            pass

    # ------------------------------------------------------------------ reading
    def done_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(query_id, trial) pairs of the run marked 'done' — what a resumed run can skip.

        Pairs marked 'error' are not included, so a resume retries them."""
        rows = self._con.execute(
            "SELECT query_id, trial FROM query_status WHERE run_id = ? AND status = 'done'", [run_id]
        ).fetchall()
        return {(q, int(t)) for q, t in rows}

    def query_status(self, run_ref: str) -> pa.Table:
        """The run's ``query_status`` rows sorted by (query_id, trial)."""
        run_id = self.get_run(run_ref).run_id
        return self._con.sql(
            "SELECT * FROM query_status WHERE run_id = ? ORDER BY query_id, trial", params=[run_id]
        ).to_arrow_table()

    def results(self, run_ref: str, metrics: Sequence[str] | None = None, *,
                columns: Sequence[str] | None = None, ordered: bool = True) -> pa.Table:
        """The run's result rows sorted by (query_id, trial, metric): all ``results`` columns, or ``columns``
        in the order given. ``ordered=False`` returns them in storage order: DuckDB's sort of whole rows holds
        about 1.6x the table beside it (~430 MB at 2.3 M rows), which a caller that only groups need not pay.
        """
        run_id = self.get_run(run_ref).run_id
        where, params = "run_id = $run_id", {"run_id": run_id}
        if metrics is not None:
            where += " AND list_contains($metrics, metric)"
            params["metrics"] = list(_check_metric_names(metrics))
        names = list(RESULT_COLUMNS if columns is None else columns)
        if not names or len(set(names)) != len(names) or any(c not in RESULT_COLUMNS for c in names):
            raise InputError(f"results columns {names}: give distinct names among {list(RESULT_COLUMNS)}")
        order = " ORDER BY query_id, trial, metric" if ordered else ""
        return self._con.sql(f"SELECT {', '.join(names)} FROM results WHERE {where}{order}",
                             params=params).to_arrow_table()

    def trace_ids(self, run_ref: str) -> dict[tuple[str, int], str | None]:
        """(query_id, trial) -> the trace_id its result rows carry (None when they carry none)."""
        run_id = self.get_run(run_ref).run_id
        rows = self._con.execute(
            "SELECT query_id, trial, max(trace_id) FROM results WHERE run_id = ? GROUP BY query_id, trial",
            [run_id]).fetchall()
        return {(q, int(t)): tid for q, t, tid in rows}

    def metrics(self, run_ref: str) -> list[str]:
        """Distinct metric names of a run, sorted."""
        run_id = self.get_run(run_ref).run_id
        names = self._metrics_cache.get(run_id) if self.read_only else None
        if names is None:
            rows = self._con.execute(
                "SELECT DISTINCT metric FROM results WHERE run_id = ? ORDER BY metric", [run_id]
            ).fetchall()
            names = [r[0] for r in rows]
            if self.read_only:
                self._metrics_cache[run_id] = names
        return list(names)

    def results_wide(self, run_ref: str, metrics: Sequence[str]) -> WideResults:
        """Pivot a run to an (n, m) float matrix: one row per (query_id, trial), one column per metric.

        Rows are every (query_id, trial) with at least one result row in the run (any metric), sorted by
        query_id then trial; a cell is NaN when the value is undefined or the metric is missing for that
        row. Queries that only have an 'error' marker have no rows here (see ``query_status``). A metric
        with no rows at all in the run, or a query whose rows disagree on its stratum, raises.
        """
        run_id = self.get_run(run_ref).run_id
        names = _check_metric_names(metrics)
        available = set(self.metrics(run_id))
        unknown = [m for m in names if m not in available]
        if unknown:
            raise InputError(
                f"run {run_id} has no rows for metric(s) {unknown}; available: {sorted(available)}"
            )
        keys = self._con.sql(
            "SELECT query_id, trial, min(stratum) AS lo, max(stratum) AS hi FROM results "
            "WHERE run_id = ? GROUP BY query_id, trial ORDER BY query_id, trial",
            params=[run_id],
        ).to_arrow_table()
        lo = np.asarray(keys["lo"].to_pylist(), dtype=object)
        hi = np.asarray(keys["hi"].to_pylist(), dtype=object)
        clash = np.flatnonzero(lo != hi)
        if clash.size:
            i = int(clash[0])
            raise SchemaError(
                f"run {run_id}: query {keys['query_id'][i].as_py()!r} trial {keys['trial'][i].as_py()} has "
                f"rows with different strata ({lo[i]!r}, {hi[i]!r}); a query belongs to one stratum"
            )
        cells = self._con.sql(
            "WITH k AS (SELECT query_id, trial, row_number() OVER (ORDER BY query_id, trial) - 1 AS i "
            "           FROM (SELECT DISTINCT query_id, trial FROM results WHERE run_id = $run_id)), "
            "     m AS (SELECT unnest($metrics) AS metric, unnest(range(len($metrics))) AS j) "
            "SELECT k.i, m.j, r.value FROM results r JOIN k USING (query_id, trial) JOIN m USING (metric) "
            "WHERE r.run_id = $run_id",
            params={"run_id": run_id, "metrics": list(names)},
        ).to_arrow_table()
        values = np.full((keys.num_rows, len(names)), np.nan)
        values[cells["i"].to_numpy(), cells["j"].to_numpy()] = cells["value"].to_numpy(zero_copy_only=False)
        return WideResults(
            query_ids=np.asarray(keys["query_id"].to_pylist(), dtype=object),
            trials=keys["trial"].to_numpy().astype(np.int64),
            strata=lo,
            values=values,
        )

    # ------------------------------------------------------------------ judge pins
    def set_judge_pins(self, run_id: str, pins: Mapping[str, Any], summary: Mapping[str, Any] | None = None
                       ) -> None:
        """Record the judge a run's judge metrics were scored under: ``judge_model`` and ``rubric_sha`` in
        their columns, the whole pin set (prompt sha, sampling, metrics) in ``extra["judge"]`` and the run's
        judge summary (undefined counts, outcomes, cost line) in ``extra["judge_summary"]``."""
        self._check_writable()
        self._require_run(run_id)
        for key in ("judge_model", "rubric_sha", "prompt_sha"):
            if not isinstance(pins.get(key), str) or not pins[key]:
                raise InputError(f"judge pins need a non-empty {key!r}")
        extra = {**(self.get_run(run_id).extra or {}), "judge": dict(pins)}
        if summary is not None:
            extra["judge_summary"] = dict(summary)
        self._con.execute(
            "UPDATE runs SET judge_model = ?, rubric_sha = ?, extra = ?::JSON WHERE run_id = ?",
            [pins["judge_model"], pins["rubric_sha"], json.dumps(extra, sort_keys=True, default=str), run_id],
        )

    # ------------------------------------------------------------------ run extra
    def update_run_extra(self, run_id: str, updates: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``updates`` into a run's ``extra`` (top-level keys: each given key replaces the stored one,
        every other key is kept) in one transaction, so the read and the write see the same row; returns the
        new ``extra``. Values are stored as JSON (anything else as its ``str``)."""
        self._check_writable()
        if not isinstance(updates, Mapping):
            raise InputError(f"run extra updates must be a mapping of key to value, got {type(updates).__name__}")
        bad = [k for k in updates if not isinstance(k, str) or not k]
        if bad:
            raise InputError(f"run extra keys must be non-empty strings, got {bad[:3]}")
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            rows = con.execute("SELECT extra FROM runs WHERE run_id = ?", [run_id]).fetchall()
            if not rows:
                raise InputError(f"run_id {run_id!r} is not in {self.path}; give the run's full id "
                                 "(Store.get_run resolves a name or prefix)")
            extra = {**(json.loads(rows[0][0]) if rows[0][0] is not None else {}), **updates}
            text = json.dumps(extra, sort_keys=True, default=str)
            con.execute("UPDATE runs SET extra = ?::JSON WHERE run_id = ?", [text, run_id])
            con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return json.loads(text)

    # ------------------------------------------------------------------ judge calls
    def record_judge_calls(self, records: Sequence[Mapping[str, Any]]) -> int:
        """Insert judge-call records (dicts keyed by ``JUDGE_CALL_COLUMNS``) in one transaction; return the count.

        ``created_at`` defaults to now and ``verdict`` (a dict or None) is stored as JSON. The cache is
        append-only: a record for a (run_id, query_id, trial, item, request_sha) already present replaces it
        only when the stored one is an ``error`` (not billed) or a cache hit; a paid call is never replaced.
        Every run_id must exist; any invalid record rejects the whole batch with a ``SchemaError`` naming it,
        and nothing is written.
        """
        self._check_writable()
        rows = [_judge_call_row(k, rec) for k, rec in enumerate(records)]
        if not rows:
            return 0
        for run_id in sorted({r[0] for r in rows}):
            self._require_run(run_id)
        sha_at = JUDGE_CALL_COLUMNS.index("request_sha")
        keys = [(*r[:4], r[sha_at]) for r in rows]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise SchemaError(f"judge calls: key (run_id, query_id, trial, item, request_sha) = {dup} appears "
                              "twice in one batch; send each request once")
        cols = ", ".join(JUDGE_CALL_COLUMNS)
        # One Arrow view and one INSERT ... SELECT: row-by-row executemany holds the GIL ~10x longer.
        table = pa.table({c: pa.array([r[i] for r in rows], _JUDGE_ARROW[c])
                          for i, c in enumerate(JUDGE_CALL_COLUMNS)})
        select = ", ".join(f"{c}::JSON" if c == "verdict" else c for c in JUDGE_CALL_COLUMNS)
        con = self._con
        con.register(_JUDGE_VIEW, table)
        try:
            con.execute("BEGIN TRANSACTION")
            try:
                update = ", ".join(f"{c} = excluded.{c}" for c in JUDGE_CALL_COLUMNS if c not in JUDGE_CALLS_KEY)
                con.execute(f"INSERT INTO judge_calls ({cols}) SELECT {select} FROM {_JUDGE_VIEW} "
                            f"ON CONFLICT ({', '.join(JUDGE_CALLS_KEY)}) DO UPDATE SET {update} "
                            "WHERE judge_calls.cache_hit OR judge_calls.outcome = 'error'")
                con.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        finally:
            con.unregister(_JUDGE_VIEW)
        return len(rows)

    def cached_judge_calls(self, request_shas: Sequence[str]) -> list[dict[str, Any]]:
        """Every stored call with a paid outcome (not ``error``) for any of ``request_shas``, original paid
        calls before rows that were themselves cache hits: one query for a whole batch of lookups."""
        if not self._judge_calls_present or not request_shas:
            return []
        placeholders = ", ".join("?" for _ in JUDGE_PAID_OUTCOMES)
        rows = self._con.execute(
            f"SELECT {', '.join(JUDGE_CALL_COLUMNS)} FROM judge_calls "
            f"WHERE list_contains(?, request_sha) AND outcome IN ({placeholders}) "
            "ORDER BY request_sha, cache_hit, created_at",
            [list(request_shas), *JUDGE_PAID_OUTCOMES],
        ).fetchall()
        return [_judge_call_dict(r) for r in rows]

    def judge_call(self, run_id: str, query_id: str, trial: int, item: str) -> dict[str, Any] | None:
        """The latest call recorded for one (run, query, trial, item) (a paid one before a cache hit made at
        the same time), or None."""
        if not self._judge_calls_present:
            return None
        row = self._con.execute(
            f"SELECT {', '.join(JUDGE_CALL_COLUMNS)} FROM judge_calls "
            "WHERE run_id = ? AND query_id = ? AND trial = ? AND item = ? "
            "ORDER BY created_at DESC, cache_hit LIMIT 1",
            [run_id, query_id, trial, item],
        ).fetchone()
        return None if row is None else _judge_call_dict(row)

    def judge_calls(self, run_ref: str) -> list[dict[str, Any]]:
        """The run's judge calls sorted by (query_id, trial, item); ``verdict`` parsed back to a dict."""
        run_id = self.get_run(run_ref).run_id
        if not self._judge_calls_present:
            return []
        rows = self._con.execute(
            f"SELECT {', '.join(JUDGE_CALL_COLUMNS)} FROM judge_calls WHERE run_id = ? "
            "ORDER BY query_id, trial, item, created_at, request_sha",
            [run_id],
        ).fetchall()
        return [_judge_call_dict(r) for r in rows]

    # ------------------------------------------------------------------ judge batches
    def record_judge_batch(self, batch_id: str, *, provider: str, model: str, run_id: str,
                           request_shas: Sequence[str], worst_case: float) -> None:
        """Record a provider batch the moment it is created (status ``submitted``), so a killed run resumes it."""
        self._check_writable()
        if not isinstance(batch_id, str) or not batch_id:
            raise InputError("judge batch needs a non-empty batch_id")
        shas = list(request_shas)
        if not shas or not all(isinstance(s, str) and s for s in shas):
            raise InputError(f"judge batch {batch_id}: request_shas must be a non-empty list of shas")
        if not (isinstance(worst_case, int | float) and np.isfinite(worst_case) and worst_case >= 0):
            raise InputError(f"judge batch {batch_id}: worst_case = {worst_case!r} must be a number >= 0")
        now = _now()
        self._con.execute(
            f"INSERT INTO judge_batches ({', '.join(JUDGE_BATCH_COLUMNS)}) "
            "VALUES (?, ?, ?, ?, ?::JSON, ?, ?, 'submitted', NULL, NULL, ?, ?)",
            [batch_id, provider, model, run_id, json.dumps(shas), len(shas), float(worst_case), now, now],
        )

    def set_judge_batch_status(self, batch_id: str, status: str, *, provider_status: str | None = None,
                               billed_shas: Sequence[str] | None = None) -> None:
        """Move a batch to ``collected`` (its results are merged into ``judge_calls``) or ``lost`` (the provider
        no longer knows it); ``billed_shas`` are the requests it answered with a billed outcome."""
        self._check_writable()
        if status not in JUDGE_BATCH_STATUSES:
            raise InputError(f"judge batch status {status!r} must be one of {JUDGE_BATCH_STATUSES}")
        self._con.execute(
            "UPDATE judge_batches SET status = ?, provider_status = coalesce(?, provider_status), "
            "billed_shas = coalesce(?::JSON, billed_shas), updated_at = ? WHERE batch_id = ?",
            [status, provider_status, None if billed_shas is None else json.dumps(sorted(billed_shas)), _now(),
             batch_id],
        )

    def judge_batches(self, *, provider: str | None = None, model: str | None = None,
                      status: str | None = None) -> list[dict[str, Any]]:
        """Recorded batches matching the given fields, oldest first; ``request_shas``/``billed_shas`` as lists."""
        if not self._batches_present:
            return []
        where, params = [], []
        for col, v in (("provider", provider), ("model", model), ("status", status)):
            if v is not None:
                where.append(f"{col} = ?")
                params.append(v)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = self._con.execute(f"SELECT {', '.join(JUDGE_BATCH_COLUMNS)} FROM judge_batches {clause}"
                                 "ORDER BY created_at, batch_id", params).fetchall()
        out = []
        for row in rows:
            d = dict(zip(JUDGE_BATCH_COLUMNS, row, strict=True))
            for key in ("request_shas", "billed_shas"):
                d[key] = [] if d[key] is None else json.loads(d[key])
            out.append(d)
        return out

    def batch_billed_shas(self, request_shas: Sequence[str]) -> set[str]:
        """Those of ``request_shas`` that a collected batch answered with a billed outcome (batch prices)."""
        if not self._batches_present or not request_shas:
            return set()
        rows = self._con.execute(
            "SELECT DISTINCT s FROM (SELECT unnest(CAST(billed_shas AS VARCHAR[])) AS s FROM judge_batches "
            "WHERE status = 'collected' AND billed_shas IS NOT NULL) WHERE list_contains(?, s)",
            [list(request_shas)],
        ).fetchall()
        return {r[0] for r in rows}

    # ------------------------------------------------------------------ judge validations
    def record_judge_validation(self, record: Mapping[str, Any]) -> str:
        """Store one judge validation (keys of ``JUDGE_VALIDATION_COLUMNS``; ``validation_id`` and
        ``created_at`` are filled when absent) and return its id. Dict and list fields are stored as JSON."""
        self._check_writable()
        for key in ("judge_model", "rubric_sha", "prompt_sha", "kind", "label_set_version"):
            if not isinstance(record.get(key), str) or not record[key]:
                raise InputError(f"judge validation needs a non-empty {key!r}")
        for key in ("n_items", "n"):
            if not isinstance(record.get(key), int) or isinstance(record[key], bool) or record[key] < 0:
                raise InputError(f"judge validation needs an integer {key!r} >= 0")
        values = {c: record.get(c) for c in JUDGE_VALIDATION_COLUMNS}
        values["validation_id"] = values["validation_id"] or new_ulid()
        values["created_at"] = values["created_at"] or _now()
        if values["figures"] is None:
            raise InputError("judge validation needs its 'figures'")
        for key in JUDGE_VALIDATION_JSON:
            if values[key] is not None:
                values[key] = json.dumps(values[key], sort_keys=True, default=str, allow_nan=False)
        for key in ("kappa", "kappa_low", "kappa_high", "agreement", "min_class_recall", "passes_kappa"):
            v = values[key]
            values[key] = None if v is None or (isinstance(v, float) and v != v) else float(v)
        cols = ", ".join(JUDGE_VALIDATION_COLUMNS)
        marks = ", ".join("?::JSON" if c in JUDGE_VALIDATION_JSON else "?" for c in JUDGE_VALIDATION_COLUMNS)
        self._con.execute(f"INSERT INTO judge_validations ({cols}) VALUES ({marks})",
                          [values[c] for c in JUDGE_VALIDATION_COLUMNS])
        return values["validation_id"]

    def judge_validations(self, *, judge_model: str | None = None, rubric_sha: str | None = None,
                          prompt_sha: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Validations matching every given pin, oldest first; JSON fields parsed back."""
        if not self._validations_present:
            return []
        where, params = [], []
        for col, v in (("judge_model", judge_model), ("rubric_sha", rubric_sha), ("prompt_sha", prompt_sha),
                       ("kind", kind)):
            if v is not None:
                where.append(f"{col} = ?")
                params.append(v)
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        select = ", ".join(f"NULL AS {c}" if c in self._validation_missing else c for c in JUDGE_VALIDATION_COLUMNS)
        rows = self._con.execute(f"SELECT {select} FROM judge_validations {clause}"
                                 "ORDER BY created_at, validation_id", params).fetchall()
        out = []
        for row in rows:
            d = dict(zip(JUDGE_VALIDATION_COLUMNS, row, strict=True))
            for key in JUDGE_VALIDATION_JSON:
                if d[key] is not None:
                    d[key] = json.loads(d[key])
            out.append(d)
        return out

    # ------------------------------------------------------------------ export
    def export_parquet(self, out_dir: str | Path, run_ids: Sequence[str] | None = None, *,
                       partitioned: bool = False) -> dict[str, Path]:
        """Write ``runs``, ``results``, ``query_status`` and ``judge_calls`` (all runs, or the given run refs) as
        Parquet files ``<table>.parquet`` in ``out_dir``, sorted by key; return {table: path}. ``judge_calls`` is
        left out only for a store written before that table existed, opened read-only.

        ``partitioned=True`` writes a dataset partitioned by run instead: ``runs.parquet`` and, for each other
        table, ``<table>/run_id=<id>/part-0.parquet`` (Hive layout: ``run_id`` is in the path, not in the
        file), which DuckDB (``hive_partitioning``), pyarrow.dataset and Polars read directly and
        ``store.parquet.ParquetResults`` compares without importing; {table: path} then names the table's
        folder. The dataset holds exactly the exported runs: partitions an earlier export left for other runs
        are removed after the new ones are in place.

        ``out_dir`` must be new, empty or an earlier export (recognised by its ``.ragassay-export`` marker);
        anything else — a file, a folder of the user's — is refused with an ``InputError`` before a byte is
        written. Each file is written under a temporary name and moved into place, so an interrupted export
        leaves the previous file, never half of one."""
        out = Path(out_dir)
        fsio.check_output_dir(out, EXPORT_KIND)
        where = ""
        if run_ids is not None:
            ids = [self.get_run(ref).run_id for ref in run_ids]
            # Resolved ids are validated ULIDs (Crockford digits only), so inlining them is safe.
            where = (
                "WHERE run_id IN (" + ", ".join(_quote_literal(i) for i in ids) + ")"
                if ids
                else "WHERE false"
            )
        order = {
            "runs": "run_id",
            "results": "run_id, query_id, trial, metric",
            "query_status": "run_id, query_id, trial",
        }
        if self._judge_calls_present:
            order["judge_calls"] = "run_id, query_id, trial, item, judge, request_sha"
        fsio.make_dir(out)
        fsio.mark_output_dir(out, EXPORT_KIND)
        if partitioned:
            return self._export_partitioned(out, where, order)
        paths = {}
        for table, key in order.items():
            target = out / f"{table}.parquet"
            _export_table(self._con, f"SELECT * FROM {table} {where} ORDER BY {key}", target)
            paths[table] = target
        return paths


    def _export_partitioned(self, out: Path, where: str, order: Mapping[str, str]) -> dict[str, Path]:
        ids = [r[0] for r in self._con.execute(f"SELECT run_id FROM runs {where} ORDER BY run_id").fetchall()]
        paths = {"runs": out / "runs.parquet"}
        _export_table(self._con, f"SELECT * FROM runs {where} ORDER BY run_id", paths["runs"])
        for table, key in order.items():
            if table == "runs":
                continue
            folder = fsio.make_dir(out / table)
            # One file per run (not DuckDB's PARTITION_BY) so each file is replaced atomically and a run with
            # no rows still has a partition carrying the table's schema.
            for run_id in ids:
                part = fsio.make_dir(folder / f"run_id={run_id}")
                _export_table(self._con, f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = "
                              f"{_quote_literal(run_id)} ORDER BY {key}", part / "part-0.parquet")
            # A flat file of an earlier export into this folder would be read as a second copy of the table.
            (out / f"{table}.parquet").unlink(missing_ok=True)
            keep = {f"run_id={i}" for i in ids}
            for stale in folder.glob("run_id=*"):
                if stale.name not in keep and stale.is_dir():
                    shutil.rmtree(stale)
            paths[table] = folder
        return paths


EXPORT_KIND = "export"


def _export_table(con: duckdb.DuckDBPyConnection, query: str, target: Path) -> None:
    """COPY ``query`` to a temporary sibling of ``target`` (DuckDB creates it with the umask's mode), then
    move it into place."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        con.execute(f"COPY ({query}) TO {_quote_literal(str(tmp))} (FORMAT PARQUET)")
        os.replace(tmp, target)
    except (duckdb.Error, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{target}: cannot write the export ({e}); choose an empty or new folder you can "
                         "write to") from e


_JUDGE_REQUIRED = ("run_id", "query_id", "trial", "item", "judge", "request_sha", "provider", "model",
                   "outcome", "attempts", "cache_hit")
_JUDGE_VIEW = "_ragassay_judge_calls"
_JUDGE_ARROW = {
    **{c: pa.string() for c in JUDGE_CALL_COLUMNS},
    "trial": pa.int32(), "max_tokens": pa.int32(), "input_tokens": pa.int32(), "output_tokens": pa.int32(),
    "cached_tokens": pa.int32(), "attempts": pa.int32(), "temperature": pa.float64(), "cost": pa.float64(),
    "latency_ms": pa.float64(), "cache_hit": pa.bool_(), "created_at": pa.timestamp("us"),
}
_JUDGE_INT = ("trial", "max_tokens", "input_tokens", "output_tokens", "cached_tokens", "attempts")


def _judge_call_row(k: int, rec: Mapping[str, Any]) -> list[Any]:
    """Validate one judge-call record and return its values in ``JUDGE_CALL_COLUMNS`` order."""
    if not isinstance(rec, Mapping):
        raise SchemaError(f"judge call {k}: expected a mapping of columns, got {type(rec).__name__}")
    unknown = sorted(set(rec) - set(JUDGE_CALL_COLUMNS))
    if unknown:
        raise SchemaError(f"judge call {k}: unknown column(s) {unknown}; allowed: {list(JUDGE_CALL_COLUMNS)}")
    missing = [c for c in _JUDGE_REQUIRED if rec.get(c) is None]
    if missing:
        raise SchemaError(f"judge call {k}: required column(s) {missing} missing or null")
    for c in _JUDGE_INT:
        v = rec.get(c)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0):
            raise SchemaError(f"judge call {k}: {c} = {v!r} must be an integer >= 0")
    if rec["outcome"] not in JUDGE_OUTCOMES:
        raise SchemaError(f"judge call {k}: outcome {rec['outcome']!r} must be one of {JUDGE_OUTCOMES}")
    if not isinstance(rec["cache_hit"], bool):
        raise SchemaError(f"judge call {k}: cache_hit must be true or false, got {rec['cache_hit']!r}")
    for c in ("cost", "latency_ms", "temperature"):
        v = rec.get(c)
        if v is not None and not (isinstance(v, int | float) and np.isfinite(v) and v >= 0):
            raise SchemaError(f"judge call {k}: {c} = {v!r} must be a finite number >= 0 or null")
    verdict = rec.get("verdict")
    if verdict is not None and not isinstance(verdict, Mapping):
        raise SchemaError(f"judge call {k}: verdict must be a mapping or null, got {type(verdict).__name__}")
    values = {c: rec.get(c) for c in JUDGE_CALL_COLUMNS}
    values["verdict"] = None if verdict is None else json.dumps(verdict, sort_keys=True, ensure_ascii=False)
    values["created_at"] = values["created_at"] or _now()
    return [values[c] for c in JUDGE_CALL_COLUMNS]


def _judge_call_dict(row: Sequence[Any]) -> dict[str, Any]:
    rec = dict(zip(JUDGE_CALL_COLUMNS, row, strict=True))
    if rec["verdict"] is not None:
        rec["verdict"] = json.loads(rec["verdict"])
    return rec


def _check_metric_names(metrics: Sequence[str]) -> tuple[str, ...]:
    if isinstance(metrics, str):
        metrics = [metrics]
    names = tuple(metrics)
    if not names:
        raise InputError("no metrics requested; pass at least one metric name (see Store.metrics(run))")
    bad = [m for m in names if not isinstance(m, str) or not m]
    if bad:
        raise InputError(f"metric names must be non-empty strings, got {bad}")
    if len(set(names)) != len(names):
        dup = sorted({m for m in names if names.count(m) > 1})
        raise InputError(f"metric names repeated: {dup}; list each metric once")
    return names


_DICT_STRING = pa.dictionary(pa.int32(), pa.string())


def _string_dictionary(t: pa.DataType) -> bool:
    return pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))


def _normalize_rows(rows: pa.Table | Mapping[str, Sequence[Any]]) -> pa.Table:
    """Validate a batch and cast it to ``ROW_SCHEMA`` (missing optional columns become null); a string column
    given as an Arrow dictionary of strings stays one (``dictionary<int32, string>``)."""
    if isinstance(rows, pa.RecordBatch):
        rows = pa.Table.from_batches([rows])
    if not isinstance(rows, pa.Table):
        if not isinstance(rows, Mapping):
            raise SchemaError(f"rows must be a pyarrow.Table or a dict of columns, got {type(rows).__name__}")
        try:
            arrays = pa.Array | pa.ChunkedArray | np.ndarray
            rows = pa.table({k: v if isinstance(v, arrays) else list(v) for k, v in rows.items()})
        except (pa.ArrowException, ValueError, TypeError) as exc:
            raise SchemaError(
                f"rows could not be read as columns ({exc}); give equal-length columns"
            ) from exc
    names = rows.column_names
    allowed = ROW_SCHEMA.names
    unknown = [c for c in names if c not in allowed]
    if unknown:
        raise SchemaError(f"unknown result column(s) {unknown}; allowed: {allowed} (run_id is an argument)")
    missing = [c for c in REQUIRED_ROW_COLUMNS if c not in names]
    if missing:
        raise SchemaError(f"result rows lack required column(s) {missing}")
    if len(set(names)) != len(names):
        raise SchemaError(f"result columns repeated: {names}")
    n = rows.num_rows
    columns = []
    for f in ROW_SCHEMA:
        if f.name in names:
            col = rows[f.name]
            # A dictionary-encoded string column stays encoded (DuckDB stores it as VARCHAR all the same, and
            # reads each distinct string once); one whose dictionary holds a null is decoded, so that null
            # is counted like any other.
            to = (_DICT_STRING if f.type == pa.string() and _string_dictionary(col.type)
                  and not any(c.dictionary.null_count for c in col.chunks) else f.type)
            try:
                col = pc.cast(col, to, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(f"result column {f.name!r} cannot be read as {f.type} ({exc})") from exc
        elif f.name == "trial":
            col = pa.chunked_array([pa.array(np.zeros(n, dtype=np.int32))])
        else:
            col = pa.chunked_array([pa.nulls(n, f.type)])
        columns.append(col)
    table = pa.Table.from_arrays(columns, names=ROW_SCHEMA.names)
    for key in ("query_id", "trial", "metric"):
        nulls = table[key].null_count
        if nulls:
            first = int(np.flatnonzero(table[key].is_null().to_numpy(zero_copy_only=False))[0])
            raise SchemaError(f"result rows: column {key!r} is null in {nulls} row(s), first at row {first}")
    if n:
        if pc.min(table["trial"]).as_py() < 0:
            raise SchemaError("result rows: trial must be >= 0")
        if pc.any(pc.is_inf(table["value"])).as_py():
            raise SchemaError("result rows: value is infinite; a metric value is finite or NaN (undefined)")
        jf = table["judged_fraction"]
        # NaN compares false and null stays null, so both pass; a ChunkedArray's to_numpy would import pandas
        if jf.null_count < n and pc.any(pc.or_(pc.less(jf, 0), pc.greater(jf, 1))).as_py():
            jf = jf.to_numpy(zero_copy_only=False)
            raise SchemaError(
                f"result rows: judged_fraction must lie in [0, 1] (NaN/null = unknown), got "
                f"[{np.nanmin(jf)}, {np.nanmax(jf)}]"
            )
    return table


def _normalize_done(done: Iterable[tuple[str, int, str, str | None]]) -> pa.Table:
    """The done markers as an Arrow table (query_id, trial, status, error), checked as columns.

    ``write_batch`` runs on the store's writer thread while the next batch is scored, so the checks work on
    whole columns (type sets, set membership, one Arrow grouping), not one Python step per marker. Only a
    batch that fails them goes through ``_explain_bad_done``, which words the error for the first bad marker.
    """
    entries = done if isinstance(done, list) else list(done)
    table = _done_columns(entries)
    if table is None:
        _explain_bad_done(entries)
        # the column checks refused something the per-marker rules accept (e.g. a str subclass as query_id)
        table = _done_table(entries)
    return table


_DONE_TRIAL_TYPES: dict[type, bool] = {}


def _trial_type_ok(t: type) -> bool:
    ok = _DONE_TRIAL_TYPES.get(t)
    if ok is None:
        ok = _DONE_TRIAL_TYPES[t] = t is int or issubclass(t, np.integer)
    return ok


def _done_columns(entries: list[Any]) -> pa.Table | None:
    """The markers' table when every column check passes, else None (some marker is bad, or unusual)."""
    if not entries:
        return _done_table(entries)
    if not set(map(type, entries)) <= {tuple, list} or set(map(len, entries)) != {4}:
        return None
    query_ids, trials, statuses, errors = zip(*entries, strict=True)
    if set(map(type, query_ids)) != {str} or "" in query_ids:
        return None
    if not all(map(_trial_type_ok, set(map(type, trials)))):
        return None
    try:
        if not set(statuses) <= set(QUERY_STATUSES):
            return None
    except TypeError:  # an unhashable status
        return None
    if not set(map(type, errors)) <= {str, type(None)}:
        return None
    try:
        trial = pa.array(trials, pa.int64())
    except (pa.ArrowException, OverflowError):
        return None
    lo, hi = pc.min_max(trial).values()
    if lo.as_py() < 0 or hi.as_py() > np.iinfo(np.int32).max:
        return None
    if len(set(zip(query_ids, trials, strict=True))) != len(entries):  # a repeated (query_id, trial)
        return None
    return pa.table({
        "query_id": pa.array(query_ids, pa.string()),
        "trial": pc.cast(trial, pa.int32()),
        "status": pa.array(statuses, pa.string()),
        "error": pa.array(errors, pa.string()),
    })


def _done_table(entries: Sequence[Any]) -> pa.Table:
    return pa.table(
        {
            "query_id": pa.array([e[0] for e in entries], pa.string()),
            "trial": pa.array([int(e[1]) for e in entries], pa.int32()),
            "status": pa.array([e[2] for e in entries], pa.string()),
            "error": pa.array([e[3] for e in entries], pa.string()),
        }
    )


def _explain_bad_done(entries: Sequence[Any]) -> None:
    """Raise ``SchemaError`` naming the first bad marker (by its index) or the first repeated one."""
    for k, entry in enumerate(entries):
        if not isinstance(entry, Sequence) or isinstance(entry, str) or len(entry) != 4:
            raise SchemaError(f"done[{k}] = {entry!r}; expected (query_id, trial, status, error)")
        query_id, trial, status, error = entry
        if not isinstance(query_id, str) or not query_id:
            raise SchemaError(f"done[{k}]: query_id {query_id!r} must be a non-empty string")
        if isinstance(trial, bool) or not isinstance(trial, int | np.integer) or trial < 0:
            raise SchemaError(f"done[{k}]: trial {trial!r} must be an integer >= 0")
        if status not in QUERY_STATUSES:
            raise SchemaError(f"done[{k}]: status {status!r} must be one of {QUERY_STATUSES}")
        if error is not None and not isinstance(error, str):
            raise SchemaError(f"done[{k}]: error must be a string or None, got {type(error).__name__}")
    seen: set[tuple[str, int]] = set()
    for query_id, trial, _, _ in entries:
        if (query_id, int(trial)) in seen:
            raise SchemaError(
                f"done markers: ({query_id!r}, {trial}) appears twice in one batch; send it once"
            )
        seen.add((query_id, int(trial)))


def _members(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the sorted array ``sorted_set`` (a binary search each)."""
    if not sorted_set.size or not values.size:
        return np.zeros(values.shape, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return sorted_set[at] == values


def _dense_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Integer codes of a non-null string column (equal strings, equal codes) and how many distinct codes."""
    if pa.types.is_dictionary(col.type):
        col = col.unify_dictionaries() if col.num_chunks > 1 else col
        enc = col.combine_chunks()
        if pc.count_distinct(enc.dictionary).as_py() != len(enc.dictionary):  # a dictionary may repeat values
            enc = pc.dictionary_encode(enc.dictionary_decode())
    else:
        enc = pc.dictionary_encode(col).combine_chunks()
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False), len(enc.dictionary)


def _first_of_each(key: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """For integer keys in [0, span): one row index per distinct key, and each row's dense key rank."""
    n = len(key)
    if span <= 4 * n + 1024:  # a table over the key range: no sort
        row = np.full(span, -1, dtype=np.int64)
        row[key] = np.arange(n, dtype=np.int64)  # any one row of each key will do
        present = row >= 0
        return row[present], (np.cumsum(present) - 1)[key]
    _, first, rank = np.unique(key, return_index=True, return_inverse=True)
    return first, rank.reshape(-1)


def _pair_rows(table: pa.Table) -> tuple[np.ndarray, bool]:
    """One row of each distinct (query_id, trial) pair of a normalized, non-empty batch, and whether its
    (query_id, trial, metric) keys are all distinct: integer codes and a count per key, no row-wise Python."""
    n = table.num_rows
    q, n_q = _dense_codes(table["query_id"])
    m, n_m = _dense_codes(table["metric"])
    trial = table["trial"].to_numpy().astype(np.int64, copy=False)
    span_t = int(trial.max()) + 1
    rows, pair = _first_of_each(q * span_t + trial, n_q * span_t)
    cell = pair * n_m + m
    n_cells = len(rows) * n_m
    if n_cells <= 4 * n + 1024:
        unique = bool(np.bincount(cell, minlength=n_cells).max() <= 1)
    else:
        unique = len(np.unique(cell)) == n
    return rows, unique


def _check_unique(table: pa.Table, key: tuple[str, ...], what: str) -> None:
    # plain strings: an Arrow dictionary may hold one string twice, which grouping would keep apart
    table = pa.table({k: pc.cast(table[k], pa.string()) if pa.types.is_dictionary(table[k].type) else table[k]
                      for k in key})
    counts = table.group_by(list(key)).aggregate([([], "count_all")])
    if counts.num_rows == table.num_rows:
        return
    dup = counts.filter(pc.greater(counts["count_all"], 1))
    example = {k: dup[k][0].as_py() for k in key}
    raise SchemaError(
        f"{what}: {dup.num_rows} key(s) {key} appear more than once in one batch, e.g. {example}; "
        "send each key once per batch"
    )


__all__ = ["DEFAULT_PATH", "RUN_STATUSES", "RunRecord", "Store", "WideResults", "config_digest"]
