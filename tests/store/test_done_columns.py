"""Done markers are checked as columns; a bad batch still fails with the per-marker message it always had."""

from __future__ import annotations

import re
from collections import namedtuple

import numpy as np
import pyarrow as pa
import pytest

from ragassay.errors import SchemaError
from ragassay.store import RunRecord, Store
from ragassay.store.db import _normalize_done

STATUSES = ("done", "error")


def _reference(entries):
    """The per-marker validation and table building as they were before the column checks (the oracle)."""
    entries = list(entries)
    for k, entry in enumerate(entries):
        if not isinstance(entry, (list, tuple)) or isinstance(entry, str) or len(entry) != 4:
            raise SchemaError(f"done[{k}] = {entry!r}; expected (query_id, trial, status, error)")
        query_id, trial, status, error = entry
        if not isinstance(query_id, str) or not query_id:
            raise SchemaError(f"done[{k}]: query_id {query_id!r} must be a non-empty string")
        if isinstance(trial, bool) or not isinstance(trial, int | np.integer) or trial < 0:
            raise SchemaError(f"done[{k}]: trial {trial!r} must be an integer >= 0")
        if status not in STATUSES:
            raise SchemaError(f"done[{k}]: status {status!r} must be one of {STATUSES}")
        if error is not None and not isinstance(error, str):
            raise SchemaError(f"done[{k}]: error must be a string or None, got {type(error).__name__}")
    seen = set()
    for query_id, trial, _, _ in entries:
        if (query_id, int(trial)) in seen:
            raise SchemaError(f"done markers: ({query_id!r}, {trial}) appears twice in one batch; send it once")
        seen.add((query_id, int(trial)))
    return pa.table({"query_id": pa.array([e[0] for e in entries], pa.string()),
                     "trial": pa.array([int(e[1]) for e in entries], pa.int32()),
                     "status": pa.array([e[2] for e in entries], pa.string()),
                     "error": pa.array([e[3] for e in entries], pa.string())})


def _outcome(fn, entries):
    try:
        return ("ok", fn(entries))
    except SchemaError as exc:
        return ("error", str(exc))


def _good(rng, n):
    return [(f"q{k}", int(rng.integers(0, 3)), STATUSES[int(rng.integers(0, 2))],
             None if rng.random() < 0.7 else f"boom {k}") for k in range(n)]


BAD_VALUES = {
    "entry": ["q1-0-done", ("q", 0, "done"), ("q", 0, "done", None, 1), {"q": 0}, None, 7],
    0: ["", 3, None, b"q", ["q"]],
    1: [-1, True, 1.0, "0", None, np.float64(2.0)],
    2: ["DONE", "ok", None, 1, ["done"], float("nan")],
    3: [3, b"x", ["x"], 1.5],
}


def test_random_batches_with_one_bad_marker_fail_with_the_reference_message():
    rng = np.random.default_rng(7)
    Mk = namedtuple("Mk", "query_id trial status error")
    for case in range(400):
        entries = _good(rng, int(rng.integers(1, 40)))
        at = int(rng.integers(0, len(entries)))
        where = list(BAD_VALUES)[case % len(BAD_VALUES)]
        bad = BAD_VALUES[where][int(rng.integers(0, len(BAD_VALUES[where])))]
        if where == "entry":
            entries[at] = bad
        else:
            marker = list(entries[at])
            marker[where] = bad
            entries[at] = tuple(marker) if case % 3 else marker
        if case % 5 == 0:  # a later, second problem must not change which one is reported
            entries.append(entries[0])
        if case % 7 == 0 and isinstance(entries[-1], tuple) and len(entries[-1]) == 4:
            entries[-1] = Mk(*entries[-1])
        want = _outcome(_reference, entries)
        assert want[0] == "error", entries
        assert _outcome(_normalize_done, entries) == want
        assert _outcome(_normalize_done, iter(entries)) == want  # any iterable, read once


def test_duplicates_and_accepted_spellings_match_the_reference():
    rng = np.random.default_rng(11)
    for case in range(200):
        entries = _good(rng, int(rng.integers(1, 30)))
        entries = [(q, t, s, e) for q, t, s, e in {(q, t): (q, t, s, e) for q, t, s, e in entries}.values()]
        if case % 4 == 1:
            entries = [[q, np.int64(t), s, e] for q, t, s, e in entries]  # lists and numpy trials are accepted
        if case % 4 == 2:
            entries = [(q, np.uint8(t), np.str_(s), e) for q, t, s, e in entries]
        if case % 4 == 3:  # the same (query_id, trial) twice, possibly as different integer types
            q, t, _, _ = entries[int(rng.integers(0, len(entries)))]
            entries.insert(int(rng.integers(0, len(entries) + 1)), (q, np.int16(t), "error", "again"))
        want = _outcome(_reference, entries)
        got = _outcome(_normalize_done, entries)
        assert got[0] == want[0]
        if want[0] == "error":
            assert got[1] == want[1] and "appears twice" in got[1]
        else:
            assert got[1].equals(want[1])


@pytest.mark.parametrize(("marker", "message"), [
    (("q", 0, "done"), "done[1] = ('q', 0, 'done'); expected (query_id, trial, status, error)"),
    (("", 0, "done", None), "done[1]: query_id '' must be a non-empty string"),
    (("q", -2, "done", None), "done[1]: trial -2 must be an integer >= 0"),
    (("q", True, "done", None), "done[1]: trial True must be an integer >= 0"),
    (("q", 0, "finished", None), "done[1]: status 'finished' must be one of ('done', 'error')"),
    (("q", 0, "error", 3), "done[1]: error must be a string or None, got int"),
    (("a", 0, "error", "again"), "done markers: ('a', 0) appears twice in one batch; send it once"),
])
def test_write_batch_reports_a_bad_marker_and_writes_nothing(tmp_path, marker, message):
    with Store.open(tmp_path / "d.duckdb") as store:
        run = store.create_run(RunRecord(name="r"))
        rows = {"query_id": ["a", "b"], "metric": ["rr", "rr"], "value": [1.0, 0.5]}
        with pytest.raises(SchemaError, match=f"^{re.escape(message)}$"):
            store.write_batch(run, rows, done=[("a", 0, "done", None), marker])
        assert store.connection.execute("SELECT count(*) FROM results").fetchone() == (0,)
        assert store.connection.execute("SELECT count(*) FROM query_status").fetchone() == (0,)
        store.write_batch(run, rows, done=[("a", 0, "done", None), ("b", 0, "error", "x")])
        assert store.done_keys(run) == {("a", 0)}


def test_a_large_batch_round_trips_through_the_column_path(tmp_path):
    n = 20_000
    done = [(f"q{k:05d}", k % 3, "done" if k % 11 else "error", None if k % 11 else f"e{k}") for k in range(n)]
    table = _normalize_done(done)
    assert table.equals(_reference(done))
    assert table.schema.field("trial").type == pa.int32()
