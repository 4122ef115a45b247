import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs
from ragassay.pipeline import Pipeline


@pytest.fixture(scope="session")
def bundled(tmp_path_factory):
    """The BM25 reference pipeline over the bundled corpus and golden set, with its traces."""
    corpus, golden = load_inputs(None, None, tmp_path_factory.mktemp("golden"))
    pipe = Pipeline.from_config(demo_config_dir() / "bm25.yaml", corpus)
    _, traces = pipe.run(golden.queries, progress=False)
    return pipe, golden, traces, corpus


@pytest.fixture
def store(tmp_path):
    from ragassay.store import Store

    with Store.open(tmp_path / "r.duckdb") as st:
        yield st
