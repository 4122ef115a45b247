"""A resume with other pins is refused (JSONL and Parquet share the check), and a Parquet column of a type
that does not cast to the trace schema is a one-line SchemaError naming the file and column."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs, score_traces_into_store
from ragassay.analysis.scoring import ScoringOptions
from ragassay.errors import InputError, SchemaError
from ragassay.pipeline import Pipeline
from ragassay.store import Store
from ragassay.trace import write_traces
from ragassay.trace.parquet import ParquetTraceReader, write_parquet_traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    corpus, golden = load_inputs(None, None)
    pipe = Pipeline.from_config(demo_config_dir() / "oracle.yaml", corpus)
    header, out = pipe.run(golden.queries[:20], trials=1, progress=False, dataset_version=golden.dataset_version)
    root = tmp_path_factory.mktemp("t")
    return (corpus, golden, write_traces(root / "t.jsonl", header, out),
            write_parquet_traces(root / "t.parquet", header, out))


@pytest.mark.parametrize("kind", [0, 1], ids=["jsonl", "parquet"])
def test_resuming_with_other_pins_is_refused_and_with_the_same_pins_finishes(traces, tmp_path, kind):
    corpus, golden, *paths = traces
    path = paths[kind]
    with Store.open(tmp_path / "s.duckdb") as st:
        run_id, _ = score_traces_into_store(st, path, corpus, golden)
        want = st.results(run_id).num_rows
        with pytest.raises(InputError) as err:
            score_traces_into_store(st, path, corpus, golden, options=ScoringOptions(relevance_threshold=1),
                                    resume=run_id)
        assert str(err.value) == (f"run {st.get_run(run_id).name} ({run_id}) was scored from {path} with other "
                                  "pins; resume it with the same traces, golden set, corpus and options")
        again, _ = score_traces_into_store(st, path, corpus, golden, resume=run_id)
        assert again == run_id and st.results(run_id).num_rows == want


def test_a_column_that_does_not_cast_to_the_trace_schema_is_named(tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"query_id": ["q1"], "trial": pa.array([{"a": 1}])}), bad)
    with pytest.raises(SchemaError) as err:
        ParquetTraceReader(bad, 64)
    assert str(err.value).startswith(f"{bad}: column 'trial' is struct<a: int64>, which does not cast to int64; ")
