"""The streaming scorer's overlap: batch N+1 is read on a helper thread while batch N is scored, and batches
are written by one writer thread. Order, failures and resume must be exactly those of the plain loop."""

from __future__ import annotations

import threading

import pytest
from tests.analysis.test_stream_score import _random_file, _stored

from ragassay.analysis.runner import load_inputs, score_traces_into_store
from ragassay.analysis.stream import BatchWriter, _prefetched
from ragassay.store import Store


def test_prefetched_yields_in_order_and_holds_the_lock_while_reading():
    lock = threading.Lock()
    held = []

    def batches():
        for i in range(50):
            held.append(lock.locked())
            yield i

    assert list(_prefetched(batches(), lock)) == list(range(50))
    assert held == [True] * 50  # a replay on the scoring thread cannot run beside a read


def test_prefetched_raises_the_readers_error_after_the_batches_before_it():
    def batches():
        yield from range(3)
        raise ValueError("line 7: broken")

    got = []
    with pytest.raises(ValueError, match="line 7"):
        for b in _prefetched(batches(), threading.Lock()):
            got.append(b)
    assert got == [0, 1, 2]


def test_prefetched_reader_stops_when_the_consumer_stops():
    produced = []

    def batches():
        for i in range(10_000):
            produced.append(i)
            yield i

    gen = _prefetched(batches(), threading.Lock())
    assert [next(gen) for _ in range(3)] == [0, 1, 2]
    gen.close()  # the scoring loop raised: the reader must not run on through the file
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
