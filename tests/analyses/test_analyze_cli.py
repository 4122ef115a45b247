"""`ragassay analyze`: every kind is registered from the table, --json output, and errors exit 2."""

import json

import numpy as np
import pytest
from tests.analyses._runs import make_run

from ragassay.cli.analyze import KINDS
from ragassay.cli.app import main
from ragassay.store import Store


def _run(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    with Store.open(path) as st:
        y1 = np.r_[np.ones(30), np.zeros(10)]
        make_run(st, "a", {"answer_f1": y1, "recall@context": np.r_[np.ones(25), np.zeros(15)]},
                 latency=np.arange(1, 41, dtype=float))
        make_run(st, "b", {"answer_f1": np.r_[np.ones(20), np.zeros(20)], "recall@context": np.ones(40)})
    return path


def test_every_kind_has_help(capsys):
    code, out, _ = _run(["analyze", "--help"], capsys)
    assert code == 0
    for name in KINDS:
        assert name in out


def test_decomposition_json_splits_the_change(db, capsys):
    code, out, _ = _run(["analyze", "decomposition", "a", "b", "--store", str(db), "--json", "--resamples", "100"],
                        capsys)
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["stratum"] == "all"
    assert row["change"]["delta_A"]["value"] == pytest.approx(-0.25)
    # run b delivers everything: its c0 cell is empty, so the split is undefined, printed as null
    assert row["b"]["c0"]["value"] is None and row["change"]["delivery"]["value"] is None


def test_latency_from_stored_per_request_totals(db, capsys):
    code, out, _ = _run(["analyze", "latency", "a", "--store", str(db), "--json"], capsys)
    assert code == 0
    e2e = json.loads(out)["end_to_end"]
    assert e2e["p50"] == 20.0 and e2e["p99"] == 40.0 and e2e["n"] == 40


def test_bad_correctness_rule_and_missing_store_exit_2(db, tmp_path, capsys):
    code, _, err = _run(["analyze", "decomposition", "a", "--store", str(db), "--correct", "f1>0.5"], capsys)
    assert code == 2 and "METRIC>=THRESHOLD" in err
    code, _, err = _run(["analyze", "consistency", "a", "--store", str(tmp_path / "none.duckdb")], capsys)
    assert code == 2 and "no results store" in err
