"""`run` on a real local Ray cluster stores the local executor's rows, also after a worker or driver dies."""

import pytest
from tests.scale.conftest import rows

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.executors import get_executor
from ragassay.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


@pytest.fixture(scope="module")
def ray_ex(ray_cluster):
    ex = get_executor("ray")
    assert ex.workers == 2
    yield ex
    ex.close()


def _local(tmp_path, inputs, config, trials=1):
    corpus, golden = inputs
    with Store.open(tmp_path / "local.duckdb") as st:
        run_id, _ = run_pipeline_into_store(st, config, corpus, golden, trials=trials)
        return rows(st, run_id)


@pytest.mark.parametrize("name", ["bm25", "hybrid", "hybrid_rerank", "oracle"])
def test_ray_run_stores_the_local_rows_for_each_demo_config(tmp_path, inputs, ray_ex, name):
    corpus, golden = inputs
    config = demo_config_dir() / f"{name}.yaml"
    want = _local(tmp_path, inputs, config)
    with Store.open(tmp_path / "ray.duckdb") as st:
        run_id, _ = run_pipeline_into_store(st, config, corpus, golden, executor=ray_ex)
        got = rows(st, run_id)
        assert st.get_run(run_id).status == "complete"
    assert len(got) == len(want) >= 171 * 9
    assert got == want


def test_a_killed_worker_batch_is_retried_and_rows_are_unchanged(tmp_path, inputs, ray_ex, ray_cluster):
    corpus, golden = inputs
    config = demo_config_dir() / "bm25.yaml"
    want = _local(tmp_path, inputs, config, trials=2)
    seen = []

    def kill_a_worker(done, total):
        seen.append(done)
        if len(seen) == 1:
            # the executor keeps batches in flight on both actors: killing one loses its current batch
            ray_cluster.kill(ray_ex.last_workers.actors[1], no_restart=False)

    with Store.open(tmp_path / "ray.duckdb") as st:
        run_id, _ = run_pipeline_into_store(st, config, corpus, golden, trials=2, executor=ray_ex,
                                            progress=kill_a_worker)
        got = rows(st, run_id)
    assert seen[-1] == 2 * 171 and len(seen) == 6
    assert got == want


def test_a_killed_driver_resumes_on_ray_to_the_local_rows(tmp_path, inputs, ray_ex):
    corpus, golden = inputs
    config = demo_config_dir() / "bm25.yaml"
    want = _local(tmp_path, inputs, config, trials=2)

    class DriverDied(Exception):
        pass

    def die(done, total):
        if done >= 128:
            raise DriverDied

    with Store.open(tmp_path / "ray.duckdb") as st:
        with pytest.raises(DriverDied):
            run_pipeline_into_store(st, config, corpus, golden, trials=2, executor=ray_ex, progress=die)
        (rec,) = st.list_runs()
        assert rec.status == "running"
        assert 0 < len(st.done_keys(rec.run_id)) < 2 * 171
        run_id, _ = run_pipeline_into_store(st, config, corpus, golden, resume=rec.run_id, executor=ray_ex)
        assert run_id == rec.run_id
        got = rows(st, run_id)
    assert got == want
