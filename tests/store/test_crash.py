"""Crash safety for real: a writer process is SIGKILLed mid-run, then the run is resumed from the store."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ragassay.errors import InputError
from ragassay.store import RunRecord, Store

N_QUERIES = 3000  # far more batches than are written before the kill, so the writer is always mid-run
METRICS = ("ndcg@10", "recall@10", "rr", "faithfulness")
TRIALS = 2

WRITER = textwrap.dedent(
    """
    import sys
    from ragassay.store import Store

    path, run_id, side, n, metrics, trials = sys.argv[1:7]
    metrics = metrics.split(",")
    with Store.open(path) as store, open(side, "a", buffering=1) as log:
        for i in range(int(n)):
            q = f"q{i:05d}"
            rows = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": []}
            for t in range(int(trials)):
                for j, m in enumerate(metrics):
                    rows["query_id"].append(q)
                    rows["trial"].append(t)
                    rows["metric"].append(m)
                    rows["value"].append((i * 7 + j + t) % 10 / 10)
                    rows["stratum"].append(f"s{i % 3}")
            store.write_batch(run_id, rows, done=[(q, t, "done", None) for t in range(int(trials))])
            log.write(q + "\\n")
    """
)


def _value(i, j, t):
    return (i * 7 + j + t) % 10 / 10


def _rows_for(indices):
    rows = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": []}
    for i in indices:
        for t in range(TRIALS):
            for j, m in enumerate(METRICS):
                rows["query_id"].append(f"q{i:05d}")
                rows["trial"].append(t)
                rows["metric"].append(m)
                rows["value"].append(_value(i, j, t))
                rows["stratum"].append(f"s{i % 3}")
    return rows


def _wait_for_lines(side, proc, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if side.exists() and len(side.read_text().splitlines()) >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.stderr.read().decode()}")
        time.sleep(0.005)
    raise AssertionError("writer made no progress")


def test_sigkilled_writer_leaves_whole_queries_and_resume_completes_without_duplicates(tmp_path):
    path, side = tmp_path / "r.duckdb", tmp_path / "committed.log"
    with Store.open(path) as store:
        run_id = store.create_run(RunRecord(name="crash", trials=TRIALS))

    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            str(path),
            run_id,
            str(side),
            str(N_QUERIES),
            ",".join(METRICS),
            str(TRIALS),
        ],
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_lines(side, proc, 5)
        # While the writer holds the file, a second writer is refused with a clear message.
        with pytest.raises(InputError, match="locked by another process"):
            Store.open(path)
        assert proc.poll() is None, "the writer finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    logged = side.read_text().splitlines()
    # The committed batches live only in the write-ahead log, so reopening must replay it.
    assert (tmp_path / "r.duckdb.wal").stat().st_size > 0

    with Store.open(path) as store:  # DuckDB replays the WAL of the killed writer here
        assert store.get_run(run_id).status == "running"
        done = store.resume_run(run_id)
        done_queries = {q for q, _ in done}
        # Every logged query committed; at most the one in flight committed without reaching the log.
        assert set(logged) <= done_queries and len(done_queries) - len(logged) <= 1
        assert done == {(q, t) for q in done_queries for t in range(TRIALS)}
        assert done_queries == {f"q{i:05d}" for i in range(len(done_queries))}
        # Atomicity: exactly the done queries have rows, and each has all of them.
        con = store.connection
        per_query = dict(
            con.execute(
                "SELECT query_id, count(*) FROM results WHERE run_id = ? GROUP BY query_id", [run_id]
            ).fetchall()
        )
        assert set(per_query) == done_queries
        assert set(per_query.values()) == {len(METRICS) * TRIALS}

        todo = [i for i in range(N_QUERIES) if f"q{i:05d}" not in done_queries]
        # Resume in a few large batches, and re-send one query that was already done.
        redo = sorted(done_queries)[0]
        for k in range(0, len(todo), 1000):
            chunk = todo[k : k + 1000]
            store.write_batch(
                run_id,
                _rows_for(chunk),
                done=[(f"q{i:05d}", t, "done", None) for i in chunk for t in range(TRIALS)],
            )
        i_redo = int(redo[1:])
        store.write_batch(run_id, _rows_for([i_redo]), done=[(redo, t, "done", None) for t in range(TRIALS)])
        store.finish_run(run_id)

    with Store.open(path, read_only=True) as store:
        con = store.connection
        expected = N_QUERIES * len(METRICS) * TRIALS
        assert con.execute("SELECT count(*) FROM results WHERE run_id = ?", [run_id]).fetchall() == [
            (expected,)
        ]
        dup = con.execute(
            "SELECT count(*) FROM (SELECT query_id, trial, metric FROM results WHERE run_id = ? "
            "GROUP BY ALL HAVING count(*) > 1)",
            [run_id],
        ).fetchall()
        assert dup == [(0,)]
        keys = con.execute(
            "SELECT count(DISTINCT (query_id, trial, metric)), count(DISTINCT query_id) FROM results WHERE run_id = ?",
            [run_id],
        ).fetchall()
        assert keys == [(expected, N_QUERIES)]
        assert store.done_keys(run_id) == {(f"q{i:05d}", t) for i in range(N_QUERIES) for t in range(TRIALS)}
        status = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM query_status WHERE run_id = ?",
            [run_id],
        ).fetchall()
        assert status == [(N_QUERIES * TRIALS, N_QUERIES * TRIALS)]
        # Values are exactly what the formula gives, whether written before the crash or after it.
        wide = store.results_wide(run_id, list(METRICS))
        idx = [int(q[1:]) for q in wide.query_ids]
        for j in range(len(METRICS)):
            assert [wide.values[r, j] for r in range(len(idx))] == [
                _value(i, j, t) for i, t in zip(idx, wide.trials, strict=True)
            ]
        rec = store.get_run(run_id)
        assert rec.status == "complete" and rec.n_queries == N_QUERIES
