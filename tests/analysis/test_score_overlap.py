"""The streaming scorer's overlap: batch N+1 is read on a helper thread while batch N is scored, and batches
are written by one writer thread. Order, failures and resume must be exactly those of the plain loop."""

from __future__ import annotations

import re
import threading

import pytest
from tests.analysis.test_stream_score import _random_file, _stored

from ragassay.analysis.runner import load_inputs, score_traces_into_store
from ragassay.analysis.stream import BatchWriter, ReadAhead
from ragassay.store import Store


def test_prefetched_yields_in_order_and_holds_the_lock_while_reading():
    lock = threading.Lock()
    held = []

    def batches():
        for i in range(50):
            held.append(lock.locked())
            yield i

    ahead = ReadAhead(batches, lock)
    try:
        assert list(ahead.batches()) == list(range(50))
    finally:
        ahead.close()
    assert held == [True] * 50  # a replay on the scoring thread cannot run beside a read


def test_prefetched_raises_the_readers_error_after_the_batches_before_it():
    def batches():
        yield from range(3)
        raise ValueError("line 7: broken")

    got = []
    ahead = ReadAhead(batches, threading.Lock())
    with pytest.raises(ValueError, match="line 7"):
        for b in ahead.batches():
            got.append(b)
    ahead.close()
    assert got == [0, 1, 2]


def test_prefetched_reader_stops_when_the_consumer_stops():
    produced = []

    def batches():
        for i in range(10_000):
            produced.append(i)
            yield i

    ahead = ReadAhead(batches, threading.Lock())
    gen = ahead.batches()
    assert [next(gen) for _ in range(3)] == [0, 1, 2]
    ahead.close()  # the scoring loop raised: the reader must not run on through the file
    assert not any(t.name == "ragassay-trace-reader" for t in threading.enumerate())
    assert len(produced) <= 6  # one batch handed over, one in the queue, one read and refused


def test_writer_runs_jobs_in_order_on_one_thread_and_stops_at_the_first_failure():
    done, threads = [], set()

    def job(i):
        def run():
            threads.add(threading.get_ident())
            if i == 4:
                raise RuntimeError("disk full")
            done.append(i)
        return run

    w = BatchWriter(store=None)
    submitted = 0
    with pytest.raises(RuntimeError, match="disk full"):
        for i in range(10):
            w.submit(job(i))  # raises once the failure is seen (at the latest two jobs after it)
            submitted += 1
    assert 5 <= submitted < 10
    with pytest.raises(RuntimeError, match="disk full"):
        w.close()  # the jobs still queued are dropped, and the failure raised again
    assert not w._thread.is_alive()
    assert done == [0, 1, 2, 3]  # nothing after the failing write ran
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_a_failed_write_stops_the_score_like_the_plain_loop_and_resume_finishes_it(tmp_path, monkeypatch):
    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 5)
    real = Store.write_batch
    calls = []

    def failing(self, run_id, rows, done=()):
        calls.append(len(calls))
        if len(calls) == 3:
            raise OSError("no space left on device")
        return real(self, run_id, rows, done=done)

    with Store.open(tmp_path / "s.duckdb") as st:
        monkeypatch.setattr(Store, "write_batch", failing)
        with pytest.raises(OSError, match="no space"):
            score_traces_into_store(st, path, corpus, golden, batch_size=16)
        monkeypatch.setattr(Store, "write_batch", real)
        assert len(calls) == 3  # the writes queued behind the failure never ran
        (run,) = st.list_runs()
        assert run.status == "running"
        # exactly the two batches written before the failure: 32 lines of the file, minus the header and
        # any broken or unknown line among them
        partial = {(r["query_id"], r["trial"]) for r in st.query_status(run.run_id).to_pylist()}
        assert 0 < len(partial) <= 32
        resumed_id, resumed_info = score_traces_into_store(st, path, corpus, golden, batch_size=16,
                                                           resume=run.run_id)
        fresh_id, fresh_info = score_traces_into_store(st, path, corpus, golden, batch_size=16)
        assert resumed_id == run.run_id and st.get_run(resumed_id).status == "complete"
        resumed, fresh = _stored(st, resumed_id), _stored(st, fresh_id)
    assert resumed_info == fresh_info
    assert resumed[:4] == fresh[:4] and len(resumed[0]) > 1000


def test_a_scoring_failure_stops_the_reader_and_writer_threads(tmp_path, monkeypatch):
    import ragassay.analysis.stream as stream

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 2)
    real, calls = stream.validate_unit_columns, []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("batch 3")
        return real(*a, **k)

    monkeypatch.setattr(stream, "validate_unit_columns", failing)
    with Store.open(tmp_path / "s.duckdb") as st, pytest.raises(MemoryError, match="batch 3"):
        score_traces_into_store(st, path, corpus, golden, batch_size=16)
    alive = {t.name for t in threading.enumerate()}
    assert not alive & {"ragassay-trace-reader", "ragassay-store-writer"}


def _wait_for(cond, timeout=10.0):
    import time

    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def test_read_ahead_reads_early_batches_before_the_first_is_taken_then_keeps_two():
    from ragassay.analysis.stream import ReadAhead

    produced = []

    def batches():
        for i in range(100):
            produced.append(i)
            yield i

    ahead = ReadAhead(batches, early=6)
    try:
        assert _wait_for(lambda: len(produced) == 6)
        assert not _wait_for(lambda: len(produced) > 6, timeout=0.3)  # no further than ``early`` untaken
        got = ahead.batches()
        assert [next(got) for _ in range(5)] == [0, 1, 2, 3, 4]  # one left queued: room for one more
        assert _wait_for(lambda: len(produced) == 7)
        assert not _wait_for(lambda: len(produced) > 7, timeout=0.3)  # steady state: two ahead, no more
        assert list(got) == list(range(5, 100))
    finally:
        ahead.close()
    assert not any(t.name == "ragassay-trace-reader" for t in threading.enumerate())


def test_trace_read_ahead_raises_an_open_error_where_batches_are_taken_and_closes(tmp_path):
    from ragassay.analysis.stream import TraceReadAhead
    from ragassay.errors import RagassayError

    with TraceReadAhead(tmp_path / "missing.jsonl", 16) as ahead:  # no error yet: the inputs load first
        with pytest.raises(RagassayError, match="missing.jsonl"):
            next(ahead.batches())
    assert not any(t.name == "ragassay-trace-reader" for t in threading.enumerate())


def test_score_read_ahead_gives_the_rows_of_a_plain_score(tmp_path):
    from ragassay.analysis.stream import TraceReadAhead, stream_score_into_store

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 11)
    with Store.open(tmp_path / "s.duckdb") as st:
        plain_id, plain_info = score_traces_into_store(st, path, corpus, golden, batch_size=16)
        ahead = TraceReadAhead(path, 16, early=4)
        assert _wait_for(lambda: ahead.reader is not None and ahead.reader.n_traces > 0)  # read before scoring
        early_id, early_info = stream_score_into_store(st, path, corpus, golden, batch_size=16, read_ahead=ahead)
        assert early_info == plain_info
        assert _stored(st, early_id)[:4] == _stored(st, plain_id)[:4]
        with pytest.raises(ValueError, match="another source"):
            stream_score_into_store(st, path, corpus, golden, batch_size=8, read_ahead=TraceReadAhead(path, 16))
    assert not any(t.name == "ragassay-trace-reader" for t in threading.enumerate())


def test_score_cli_with_a_bad_golden_set_reports_it_and_stops_the_read_ahead(tmp_path, capsys):
    from ragassay.cli.app import main

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 3)
    with pytest.raises(SystemExit) as exc:
        main(["score", str(path), "--golden", str(tmp_path / "nope"), "--store", str(tmp_path / "s.duckdb")])
    assert exc.value.code == 2
    assert "nope: no such golden-set source" in capsys.readouterr().err
    assert not any(t.name == "ragassay-trace-reader" for t in threading.enumerate())


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_score_reports_progress_after_each_batch_up_to_the_whole_source(tmp_path, kind):
    """progress(done, total) after every batch: done grows, ends at total, and total is the JSONL file's
    bytes or the Parquet dataset's rows; the rows stored are those of a score without it."""
    from ragassay.analysis.stream import stream_score_into_store
    from ragassay.trace.convert import convert_jsonl_to_parquet

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 5)
    total = path.stat().st_size
    if kind == "parquet":
        convert_jsonl_to_parquet(path, tmp_path / "ds", rows_per_file=100)
        path = tmp_path / "ds"
        total = None
    calls: list[tuple[int, int]] = []
    with Store.open(tmp_path / "s.duckdb") as st:
        plain_id, _ = stream_score_into_store(st, path, corpus, golden, batch_size=32)
        run_id, _ = stream_score_into_store(st, path, corpus, golden, batch_size=32,
                                            progress=lambda d, t: calls.append((d, t)))
        assert _stored(st, run_id)[:4] == _stored(st, plain_id)[:4]
    done = [d for d, _ in calls]
    assert len(calls) >= 5 and done == sorted(done) and len({t for _, t in calls}) == 1
    assert done[-1] == calls[-1][1]
    if kind == "jsonl":
        assert calls[-1][1] == total
    else:
        import pyarrow.dataset as ds

        assert calls[-1][1] == ds.dataset(path, format="parquet").count_rows()


def test_score_cli_shows_a_bar_on_a_terminal_and_none_with_json(tmp_path, monkeypatch, capsys):
    import io

    from rich.console import Console

    from ragassay.cli import run as run_cli
    from ragassay.cli.app import main
    from ragassay.golden import bundled_golden_source

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 9)
    for json_out in (False, True):
        term = io.StringIO()
        monkeypatch.setattr(run_cli, "console", Console(file=term, force_terminal=True, width=100))
        args = ["score", str(path), "--golden", str(bundled_golden_source()), "--store",
                str(tmp_path / f"s{json_out}.duckdb"), "--batch-size", "16"]
        with pytest.raises(SystemExit) as exc:
            main(args + (["--json"] if json_out else []))
        assert exc.value.code in (0, None)
        shown = term.getvalue()
        assert ("scoring r.jsonl" in shown) is not json_out
    capsys.readouterr()


def test_evaluate_with_progress_shows_the_scoring_bar_and_none_without(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    import ragassay
    from ragassay import api

    corpus, golden = load_inputs(None, None)
    path = _random_file(tmp_path / "r.jsonl", corpus, golden, 9)
    rows = []
    for progress in (True, False):
        term = io.StringIO()
        monkeypatch.setattr(api, "_stderr_console", lambda term=term: Console(file=term, force_terminal=True, width=100))
        run = ragassay.evaluate(path, golden=golden, corpus=corpus, store=tmp_path / f"s{progress}.duckdb",
                                progress=progress)
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.getvalue())  # the bar's colours and cursor moves
        assert ("scoring r.jsonl" in shown and "100%" in shown) is progress
        rows.append(run.to_arrow().drop_columns(["run_id"]).sort_by([("query_id", "ascending"), ("trial", "ascending"),
                                                                     ("metric", "ascending")]))
    with Store.open(tmp_path / "cli.duckdb") as st:  # the file starts with a byte-order mark: still traces
        run_id, _ = score_traces_into_store(st, path, corpus, golden)
        want = st.results(run_id).drop_columns(["run_id"]).sort_by([("query_id", "ascending"), ("trial", "ascending"),
                                                                     ("metric", "ascending")])
    assert rows[0].num_rows > 100 and rows[0].equals(rows[1]) and rows[0].equals(want)
