"""`run` writes its commit groups on a writer thread while later batches run: a run stopped mid-way holds
exactly the groups handed to the writer before the stop, and resumes to the uninterrupted run's rows."""

import math

import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import BATCH_QUERIES, load_inputs, run_pipeline_into_store
from ragassay.store import Store

pytestmark = pytest.mark.slow  # three runs of the demo set (~9 s on a loaded machine)


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def _rows(st: Store, run_id: str) -> list[tuple]:
    res = st.results(run_id).to_pydict()
    cols = ("query_id", "trial", "metric", "value", "stratum", "judged_fraction", "trace_id")
    rows = zip(*(res[c] for c in cols), strict=True)
    return sorted(tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows)


def test_stopped_run_keeps_whole_groups_and_resumes_to_the_same_rows(tmp_path, inputs):
    corpus, golden = inputs
    cfg = demo_config_dir() / "bm25.yaml"
    n = len(golden)
    assert n > 2 * BATCH_QUERIES  # a group is one batch at this size: several groups go through the writer

    def stop_after_two(done: int, total: int) -> None:
        if done >= 2 * BATCH_QUERIES:
            raise Stop

    with Store.open(tmp_path / "r.duckdb") as st:
        with pytest.raises(Stop):
            run_pipeline_into_store(st, cfg, corpus, golden, batched=True, name="stopped", progress=stop_after_two)
        (rec,) = st.list_runs()
        assert rec.status == "running"
        # both groups were handed to the writer before the stop, and the writer finished them
        want = {(q.query_id, 0) for q in golden.queries[:2 * BATCH_QUERIES]}
        assert st.done_keys(rec.run_id) == want
        assert {q for q in st.results(rec.run_id).to_pydict()["query_id"]} == {q for q, _ in want}
        run_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, batched=True, resume=rec.run_id)
        resumed = _rows(st, run_id)
        fresh_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, batched=True, name="fresh")
        fresh = _rows(st, fresh_id)
        assert st.get_run(run_id).status == "complete"
    assert len(resumed) == len(fresh) == n * len({r[2] for r in fresh})
    assert [r[:6] for r in resumed] == [r[:6] for r in fresh]
