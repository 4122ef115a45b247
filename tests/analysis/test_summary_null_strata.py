"""Rows without a stratum (NULL) count in their metric's mean and in no stratum's row, in both summaries."""

import math

import numpy as np
import pyarrow as pa
import pytest

from ragassay.analysis.summary import run_summary, stored_run_summary
from ragassay.store import RunRecord, Store


def _rows(strata):
    n = len(strata)
    return pa.table({"query_id": [f"q{i:03d}" for i in range(n)], "trial": pa.array([0] * n, pa.int32()),
                     "metric": ["mrr@10"] * n, "value": pa.array(np.linspace(0.0, 1.0, n)),
                     "stratum": pa.array(strata, pa.string()), "latency_ms": pa.array([1.0] * n)})


@pytest.mark.parametrize("strata", [[None] * 5, ["a", None, "b", None, "a"], ["b", "a", "b", "a", "a"]])
def test_null_strata_are_left_out_of_per_stratum_only(tmp_path, strata):
    with Store.open(tmp_path / "s.duckdb") as st:
        run = st.create_run(RunRecord(name="r", source="pipeline"))
        st.write_batch(run, _rows(strata))
        st.finish_run(run)
        full = run_summary(st.results(run))
        assert stored_run_summary(st, run) == full
    values = np.linspace(0.0, 1.0, len(strata))
    assert math.isclose(full["metrics"][0]["mean"], values.mean())
    assert full["metrics"][0]["n_defined"] == len(strata)
    named = sorted({s for s in strata if s is not None})
    assert full["strata"] == named
    for row in full["per_stratum"]:
        own = values[[s == row["stratum"] for s in strata]]
        assert row["n_defined"] == len(own) and math.isclose(row["mean"], own.mean())
    assert sum(r["n_defined"] for r in full["per_stratum"]) == sum(s is not None for s in strata)
