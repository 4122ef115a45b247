"""JSONL trace files: a header line, then one trace per line.

Format: line 1 is ``{"type": "header", ...RunHeader}``; every further non-blank line is
``{"type": "trace", ...Trace}``. The reader never drops a record silently: every malformed line is
returned as a :class:`Problem` with its 1-based line number, and strict mode raises on any.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

from pydantic import ValidationError

from ragassay.errors import SchemaError
from ragassay.trace.schema import RunHeader, Trace


class Problem(NamedTuple):
    """A record that could not be used: where (1-based line or row number) and why."""

    line: int
    message: str


def _first_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return "; ".join(parts) + more


class TraceReader:
    """Stream traces from a JSONL file; ``header`` and ``problems`` fill in as lines are read.

    Duplicate (query_id, trial) keys are reported as problems and the later record is skipped, because a
    resumed run that re-wrote a record must not count a query twice. A line that is not UTF-8 is one
    problem; the lines around it still read. :attr:`lines` maps each trace's (query_id, trial) to its line,
    for :func:`~ragassay.trace.schema.validate_units`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.is_dir():
            inside = sorted(p.name for p in self.path.glob("*.jsonl"))[:3]
            hint = f" (it holds {', '.join(inside)})" if inside else ""
            raise SchemaError(f"{self.path}: is a directory, not a trace file; pass the .jsonl trace file "
                              f"inside it{hint}")
        if not self.path.is_file():
            raise SchemaError(f"{self.path}: trace file not found; pass the path of a .jsonl trace file")
        self.header: RunHeader | None = None
        self.problems: list[Problem] = []
        self.lines: dict[tuple[str, int], int] = {}
        self.n_records = 0

    def __iter__(self) -> Iterator[Trace]:
        seen = self.lines
        header_reported = False
        try:
            fh = self.path.open("rb")
        except OSError as exc:
            raise SchemaError(f"{self.path}: cannot read the trace file ({exc.strerror}); check its "
                              "permissions") from exc
        with fh:
            for lineno, blob in enumerate(fh, start=1):
                try:
                    raw = blob.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self.n_records += 1
                    self.problems.append(Problem(lineno, f"not UTF-8 (byte 0x{blob[exc.start]:02x} at column "
                                                         f"{exc.start + 1}); re-encode the file as UTF-8"))
                    continue
                if lineno == 1:
                    raw = raw.removeprefix("\ufeff")  # a byte-order mark some editors write
                if not raw.strip():
                    continue
                self.n_records += 1
                try:
                    rec = json.loads(raw)
                except RecursionError:
                    self.problems.append(Problem(lineno, "JSON nested too deeply to read"))
                    continue
                except ValueError as exc:  # JSONDecodeError, or an integer literal too long to convert
                    msg = (f"not valid JSON ({exc.msg} at column {exc.colno})"
                           if isinstance(exc, json.JSONDecodeError) else f"not valid JSON ({exc})")
                    self.problems.append(Problem(lineno, msg))
                    continue
                if not isinstance(rec, dict):
                    self.problems.append(Problem(lineno, f"expected a JSON object, got {type(rec).__name__}"))
                    continue
                kind = rec.pop("type", None)
                if kind == "header":
                    if lineno != 1 or self.header is not None:
                        self.problems.append(Problem(lineno, "header record after the first line; ignored"))
                        continue
                    try:
                        self.header = RunHeader.model_validate(rec)
                    except ValidationError as exc:
                        header_reported = True
                        self.problems.append(Problem(lineno, "bad header: " + _first_error(exc)))
                    continue
                if kind != "trace":
                    self.problems.append(
                        Problem(lineno, f"unknown record type {kind!r}; expected 'header' or 'trace'")
                    )
                    continue
                try:
                    tr = Trace.model_validate(rec)
                except ValidationError as exc:
                    self.problems.append(Problem(lineno, _first_error(exc)))
                    continue
                if tr.key in seen:
                    self.problems.append(
                        Problem(lineno, f"duplicate trace for query {tr.query_id!r} trial {tr.trial} "
                                        f"(first at line {seen[tr.key]}); skipped")
                    )
                    continue
                seen[tr.key] = lineno
                yield tr
        if self.header is None and not header_reported and self.n_records:
            self.problems.insert(0, Problem(1, "no header record on line 1; run pins are unknown"))


def format_problems(path: str | Path, problems: list[Problem], limit: int = 20) -> str:
    lines = [f"{path}:{p.line}: {p.message}" for p in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"... and {len(problems) - limit} more")
    return "\n".join(lines)


def read_traces(
    path: str | Path, strict: bool = False
) -> tuple[RunHeader | None, list[Trace], list[Problem]]:
    """Read a whole trace file. With ``strict=True`` any problem raises :class:`SchemaError` listing lines."""
    reader = TraceReader(path)
    traces = list(reader)
    if strict and reader.problems:
        raise SchemaError(
            f"{path}: {len(reader.problems)} malformed record(s); fix or remove them, or read with "
            f"strict=False to skip and count them\n" + format_problems(path, reader.problems)
        )
    return reader.header, traces, reader.problems


def _line(kind: str, model) -> str:
    body = model.model_dump(mode="json")
    return json.dumps({"type": kind, **body}, ensure_ascii=False, separators=(",", ":")) + "\n"


class TraceWriter:
    """Write a trace file as a stream.

    ``mode="w"`` writes to a temporary file in the same folder and moves it into place with
    ``os.replace`` on a clean close, so a crash never leaves a half-written file under the final name.
    ``mode="a"`` appends to an existing file (resumable runs): every line is flushed and fsynced, and the
    existing header must carry the same config_sha. :attr:`done` holds the (query_id, trial) keys already
    present so a caller can skip them.
    """

    def __init__(self, path: str | Path, header: RunHeader, mode: str = "w"):
        if mode not in ("w", "a"):
            raise ValueError("mode must be 'w' (atomic rewrite) or 'a' (append, resumable)")
        self.path = Path(path)
        self.header = header
        self.mode = mode
        self.done: set[tuple[str, int]] = set()
        self._tmp: str | None = None
        self._fh: IO[str]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if mode == "a" and self.path.exists() and self.path.stat().st_size > 0:
            old_header, old, _ = read_traces(self.path)
            if old_header is None or old_header.config_sha != header.config_sha:
                raise SchemaError(
                    f"{self.path}: cannot append, the file was written by a different config "
                    f"(config_sha {getattr(old_header, 'config_sha', None)} vs {header.config_sha}); "
                    "write to a new file"
                )
            self.done = {t.key for t in old}
            self._fh = self.path.open("a", encoding="utf-8")
            self._ensure_newline()
        elif mode == "a":
            self._fh = self.path.open("w", encoding="utf-8")
            self._fh.write(_line("header", header))
            self._sync()
        else:
            fd, self._tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
            self._fh = os.fdopen(fd, "w", encoding="utf-8")
            self._fh.write(_line("header", header))

    def _ensure_newline(self) -> None:
        # A crash mid-line leaves a partial record; start the next record on a fresh line so that only the
        # partial one is reported as malformed.
        with self.path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                self._fh.write("\n")

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def write(self, trace: Trace) -> None:
        self._fh.write(_line("trace", trace))
        self.done.add(trace.key)
        if self.mode == "a":
            self._sync()

    def write_all(self, traces: Iterable[Trace]) -> None:
        for t in traces:
            self.write(t)

    def close(self, ok: bool = True) -> None:
        if self._fh.closed:
            return
        self._sync()
        self._fh.close()
        if self._tmp is not None:
            if ok:
                os.replace(self._tmp, self.path)
            else:
                os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)


def write_traces(path: str | Path, header: RunHeader, traces: Iterable[Trace]) -> Path:
    """Write header + traces atomically; returns the path."""
    with TraceWriter(path, header, mode="w") as w:
        w.write_all(traces)
    return Path(path)
