"""Where production records live: a hive-partitioned Parquet dataset beside a store file.

Layout, for a store ``S`` (a DuckDB file, which need not exist)::

    <S>.online/records/date=YYYY-MM-DD/part-<n>.parquet   one file per (ingest, UTC day), zstd
    <S>.online/ingests.jsonl                              one line per ingested source file (sha256, counts)
    <S>.online/.lock                                      held (flock) while an ingest writes

The day is the UTC calendar day of ``ts``. Files are written to a hidden temporary name in their folder and
renamed into place only after every file of the ingest is complete, so a reader never sees a partial file;
a crash before the renames leaves nothing, a crash between them leaves whole files whose rows a re-run
skips (``request_id`` is unique across the dataset: every writer removes the ids already stored).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ragassay.errors import InputError
from ragassay.fsio import make_dir

OUTCOMES = ("answered", "abstained", "refused", "error")
REFUSAL_OUTCOMES = ("refused", "abstained")

# The columns of every record file (the day is the hive partition key ``date``, not a file column).
RECORD_SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("session_id", pa.string()),
    pa.field("release", pa.string()),
    pa.field("stratum", pa.string()),
    pa.field("question", pa.string(), nullable=False),
    pa.field("answer", pa.string()),
    pa.field("outcome", pa.string()),
    pa.field("n_retrieved", pa.int32()),
    pa.field("context", pa.string()),
    pa.field("unit_ids", pa.list_(pa.string())),
    pa.field("latency_ms", pa.float64()),
    pa.field("thumbs", pa.int8()),
    pa.field("escalated", pa.bool_()),
    pa.field("abandoned", pa.bool_()),
    pa.field("copied", pa.bool_()),
    # derived at ingest
    pa.field("rephrased", pa.bool_()),
    pa.field("empty_retrieval", pa.bool_()),
    pa.field("refusal", pa.bool_()),
])
DERIVED = ("rephrased", "empty_retrieval", "refusal")
# The columns a source record gives (everything but the derived ones).
SOURCE_SCHEMA = pa.schema([f for f in RECORD_SCHEMA if f.name not in DERIVED])

VIEW = "online_records"
_PART = re.compile(r"^part-(\d+)\.parquet$")


def online_dir(store: str | Path) -> Path:
    """``<S>.online``: the folder beside store ``S`` that holds its production records."""
    return Path(f"{Path(store)}.online")


def records_dir(store: str | Path) -> Path:
    """``<S>.online/records``: the root of the date-partitioned record dataset."""
    return online_dir(store) / "records"


def manifest_path(store: str | Path) -> Path:
    """``<S>.online/ingests.jsonl``: one JSON line per ingested source file."""
    return online_dir(store) / "ingests.jsonl"


def record_files(store: str | Path) -> list[Path]:
    """Every record file of the dataset, sorted by path (temporary files excluded)."""
    root = records_dir(store)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("date=*/part-*.parquet") if _PART.match(p.name))


def open_records(con, store: str | Path, name: str = VIEW) -> str:
    """Create (or replace) the view ``name`` over the store's records on DuckDB connection ``con`` and return
    its name. Columns: those of :data:`RECORD_SCHEMA` plus ``date`` (DATE, the hive partition key), so a
    filter on ``date`` reads only the matching folders. With no record yet, the view is empty with the same
    columns."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InputError(f"view name {name!r}: use letters, digits and underscores")
    con.execute("SET TimeZone = 'UTC'")
    if record_files(store):
        glob = str(records_dir(store) / "**" / "*.parquet").replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{glob}', "
                    "hive_partitioning = true, hive_types = {'date': DATE}, union_by_name = true)")
    else:
        empty = RECORD_SCHEMA.empty_table().append_column("date", pa.array([], pa.date32()))
        con.register(f"_{name}_empty", empty)
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_empty")
    return name


@contextmanager
def write_lock(store: str | Path) -> Iterator[None]:
    """Hold ``<S>.online/.lock`` exclusively: one writer at a time; a second one waits."""
    folder = make_dir(online_dir(store))
    with open(folder / ".lock", "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _next_part(folder: Path) -> int:
    taken = [int(m.group(1)) for p in folder.glob("part-*.parquet") if (m := _PART.match(p.name))]
    return max(taken, default=-1) + 1


class PartitionWriter:
    """Writes record batches that arrive sorted by day (a ``date`` column, date32) into one new
    ``part-<n>.parquet`` per day, under temporary names until :meth:`commit` renames them all."""

    def __init__(self, store: str | Path, row_group_size: int = 65536):
        self.root = records_dir(store)
        self.row_group_size = row_group_size
        self._day = None
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[tuple[Path, Path]] = []  # (temporary, final)
        self.rows = 0
        self.days: dict[str, int] = {}

    def _open(self, day) -> None:
        folder = make_dir(self.root / f"date={day.isoformat()}")
        final = folder / f"part-{_next_part(folder):05d}.parquet"
        tmp = folder / f".{final.name}.{secrets.token_hex(6)}.tmp"
        self._writer = pq.ParquetWriter(tmp, RECORD_SCHEMA, compression="zstd")
        self._pending.append((tmp, final))
        self._day = day

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if not table.num_rows:
            return
        days = table.column("date").to_pylist()
        start = 0
        while start < len(days):
            end = start
            while end < len(days) and days[end] == days[start]:
                end += 1
            day = days[start]
            if day != self._day:
                if self._day is not None and day < self._day:
                    raise ValueError("PartitionWriter needs rows sorted by date")
                self._close()
                self._open(day)
            part = table.slice(start, end - start).drop_columns(["date"]).select(RECORD_SCHEMA.names)
            self._writer.write_table(part.cast(RECORD_SCHEMA), row_group_size=self.row_group_size)
            self.rows += end - start
            self.days[day.isoformat()] = self.days.get(day.isoformat(), 0) + end - start
            start = end

    def commit(self) -> list[Path]:
        """Close the open file and rename every written file to its final name; the paths written."""
        self._close()
        out = []
        for tmp, final in self._pending:
            folder = final.parent
            if final.exists():  # another part appeared meanwhile (the lock prevents it; never overwrite)
                final = folder / f"part-{_next_part(folder):05d}.parquet"
            os.replace(tmp, final)
            out.append(final)
        self._pending = []
        return out

    def abort(self) -> None:
        self._close()
        for tmp, _ in self._pending:
            tmp.unlink(missing_ok=True)
        self._pending = []


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_records` did: rows written, rows whose request_id repeats an earlier row of the same
    table, rows whose request_id is already stored, and the files written."""

    written: int
    duplicates: int
    already_stored: int
    files: tuple[Path, ...]


def derive_flags(table: pa.Table) -> pa.Table:
    """``table`` with ``empty_retrieval`` (n_retrieved == 0; null when unknown) and ``refusal`` (outcome in
    refused/abstained; null when the outcome is null) computed, and ``rephrased`` null when absent."""
    import pyarrow.compute as pc

    n = table.column("n_retrieved")
    outcome = table.column("outcome")
    cols = {
        "empty_retrieval": pc.equal(n, pa.scalar(0, n.type)),
        "refusal": pc.if_else(pc.is_null(outcome), pa.scalar(None, pa.bool_()),
                              pc.is_in(outcome, value_set=pa.array(REFUSAL_OUTCOMES))),
    }
    if "rephrased" not in table.column_names:
        cols["rephrased"] = pa.nulls(table.num_rows, pa.bool_())
    for name, arr in cols.items():
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, arr)
    return table


def append_records(store: str | Path, table: pa.Table) -> AppendResult:
    """Append ``table`` (the columns of :data:`SOURCE_SCHEMA`, plus ``rephrased`` if known) to the store's
    records: the first row of each request_id not yet stored is written, in one new file per UTC day;
    ``empty_retrieval`` and ``refusal`` are derived here. Holds the write lock."""
    import duckdb

    missing = [n for n in SOURCE_SCHEMA.names if n not in table.column_names]
    if missing:
        raise InputError(f"records lack column(s) {', '.join(missing)}; see RECORD_SCHEMA in ragassay.online.store")
    table = derive_flags(table.select([*SOURCE_SCHEMA.names, *(["rephrased"] if "rephrased" in
                                                                table.column_names else [])]))
    table = table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    with write_lock(store):
        con = duckdb.connect()
        try:
            view = open_records(con, store)
            con.register("_incoming", table.append_column("_seq", pa.array(range(table.num_rows), pa.int64())))
            first = ("SELECT * FROM _incoming QUALIFY row_number() OVER (PARTITION BY request_id ORDER BY _seq) = 1")
            dup = con.execute(f"SELECT count(*) - (SELECT count(*) FROM ({first})) FROM _incoming").fetchall()[0][0]
            stored = con.execute(f"SELECT count(*) FROM ({first}) f WHERE f.request_id IN "
                                 f"(SELECT request_id FROM {view})").fetchall()[0][0]
            rows = con.sql(f"SELECT * EXCLUDE (_seq), CAST(ts AS DATE) AS date FROM ({first}) f "
                               f"WHERE f.request_id NOT IN (SELECT request_id FROM {view}) "
                               "ORDER BY date, ts, request_id").to_arrow_table()
        finally:
            con.close()
        files = write_sorted(store, [rows])
    return AppendResult(rows.num_rows, int(dup), int(stored), tuple(files))


def write_sorted(store: str | Path, batches: Iterable[pa.RecordBatch | pa.Table]) -> list[Path]:
    """Write batches sorted by ``date`` as new partition files (all renamed into place at the end, none on
    error). The caller holds :func:`write_lock`."""
    writer = PartitionWriter(store)
    try:
        for b in batches:
            writer.write(b)
    except BaseException:
        writer.abort()
        raise
    return writer.commit()
