"""`score` over several trace files on a real local Ray cluster stores what local scoring stores."""

import pytest
from tests.scale.conftest import rows

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.analysis.stream import score_files_into_store
from ragassay.executors import get_executor
from ragassay.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trace_files(tmp_path_factory):
    corpus, golden = load_inputs(None, None)
    out = tmp_path_factory.mktemp("traces")
    with Store.open(out / "made.duckdb") as st:
        for name in ("bm25", "hybrid_rerank", "oracle"):
            run_pipeline_into_store(st, demo_config_dir() / f"{name}.yaml", corpus, golden,
                                    traces_dir=out / name)
    files = sorted(out.glob("*/*.jsonl"))
    assert len(files) == 3
    return corpus, golden, files


def _scored(store, runs):
    return [(store.get_run(r).name, store.get_run(r).extra, rows(store, r),
             store.query_status(r).drop_columns(["run_id", "written_at"]).to_pylist()) for r, _ in runs]


def test_score_of_several_files_on_ray_equals_local_scoring(tmp_path, trace_files, ray_cluster):
    corpus, golden, files = trace_files
    with Store.open(tmp_path / "local.duckdb") as st:
        local = score_files_into_store(st, files, corpus, golden, batch_size=100)
        want = _scored(st, local)
    ex = get_executor("ray")
    try:
        with Store.open(tmp_path / "ray.duckdb") as st:
            dist = score_files_into_store(st, files, corpus, golden, batch_size=100, executor=ex)
            got = _scored(st, dist)
            assert all(st.get_run(r).status == "complete" for r, _ in dist)
    finally:
        ex.close()
    assert [i["n_traces"] for _, i in dist] == [i["n_traces"] for _, i in local] == [171, 171, 171]
    assert [g[0] for g in got] == ["bm25", "hybrid_rerank", "oracle"]
    assert got == want
    assert sum(len(g[2]) for g in got) > 3 * 171 * 9
