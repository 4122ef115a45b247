"""A Parquet trace dataset scored on a real local Ray cluster (its files the partitions) is one run with the
rows, query status and run extras of scoring it on one machine, including after its driver is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tests.scale.conftest import rows
from tests.trace.test_parquet_dataset_reader import random_records

from ragassay.analysis.partitions import score_dataset_into_store
from ragassay.analysis.runner import load_inputs
from ragassay.analysis.stream import stream_score_into_store
from ragassay.executors import get_executor
from ragassay.store import Store
from ragassay.trace.parquet import write_parquet_traces
from ragassay.trace.schema import RunHeader

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    corpus, golden = load_inputs(None, None)
    header = RunHeader(run_name="rand", config={"reranker": {"final_k": 5}}, corpus_digest=corpus.digest,
                       dataset_version=golden.dataset_version)
    records = random_records(corpus, golden, 11, n=330)
    ds = tmp_path_factory.mktemp("ds")
    for i, start in enumerate(range(0, len(records), 60)):  # 6 files; later files repeat earlier keys
        write_parquet_traces(ds / f"part-{i:02d}.parquet", header, records[start:start + 60], row_group_size=20)
    return corpus, golden, ds


def _scored(store, run_id):
    rec = store.get_run(run_id)
    return (rows(store, run_id), store.query_status(run_id).drop_columns(["run_id", "written_at"]).to_pylist(),
            rec.extra, rec.trials, rec.status)


def _local(tmp_path, corpus, golden, ds):
    with Store.open(tmp_path / "local.duckdb") as st:
        run_id, info = stream_score_into_store(st, ds, corpus, golden, batch_size=16)
        return _scored(st, run_id), info


def test_a_dataset_scored_on_ray_is_the_local_run(tmp_path, dataset, ray_cluster):
    corpus, golden, ds = dataset
    want, want_info = _local(tmp_path, corpus, golden, ds)
    ex = get_executor("ray")
    seen = []
    try:
        with Store.open(tmp_path / "ray.duckdb") as st:
            run_id, info = score_dataset_into_store(st, ds, corpus, golden, batch_size=16, executor=ex,
                                                    progress=lambda i, n: seen.append((i, n)))
            got = _scored(st, run_id)
    finally:
        ex.close()
    assert seen == [(i, 6) for i in range(1, 7)]
    assert info == want_info
    assert any("duplicate trace" in p and "first at line" in p for p in info["problems"])
    assert info["schema_failures"] > 10 and info["unit_failures"] > 20 and info["missing"] > 50
    assert got == want
    assert got[4] == "complete" and len(got[0]) > 3000


DRIVER = textwrap.dedent("""
    import sys
    from ragassay.analysis.partitions import score_dataset_into_store
    from ragassay.analysis.runner import load_inputs
    from ragassay.store import Store

    corpus, golden = load_inputs(None, None)

    def tell(i, n):
        print(i, flush=True)
        if i >= 2:
            sys.stdin.readline()  # wait here to be killed, files 3.. in flight or unwritten

    with Store.open(sys.argv[1]) as st:
        score_dataset_into_store(st, sys.argv[2], corpus, golden, batch_size=16, executor="ray:" + sys.argv[3],
                                 progress=tell)
""")


def test_a_killed_driver_resumes_on_ray_without_lost_or_duplicated_rows(tmp_path, dataset, ray_cluster):
    corpus, golden, ds = dataset
    want, _ = _local(tmp_path, corpus, golden, ds)
    db = tmp_path / "ray.duckdb"
    address = ray_cluster.get_runtime_context().gcs_address
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(db), str(ds), address], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        assert proc.stdout.readline().strip() == "1"
        assert proc.stdout.readline().strip() == "2"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    ex = get_executor("ray")
    try:
        with Store.open(db) as st:
            (rec,) = st.list_runs()
            assert rec.status == "running"
            stored = {(r["query_id"], r["trial"]) for r in st.query_status(rec.run_id).to_pylist()}
            assert 0 < len(stored) < len(want[1])
            run_id, _ = score_dataset_into_store(st, ds, corpus, golden, batch_size=16, executor=ex,
                                                 resume=rec.run_id)
            got = _scored(st, run_id)
    finally:
        ex.close()
    assert run_id == rec.run_id
    assert got == want
    assert json.dumps(got[2], sort_keys=True) == json.dumps(want[2], sort_keys=True)
