"""`run --judge` judges the run inline; `run`/`score` take the hit rule and threshold from the golden set."""

import json

import pytest

from ragassay.analysis.demo import demo_config_dir
from ragassay.cli.app import main


def cli(args, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    c = capsys.readouterr()
    return (e.value.code or 0), c.out, c.err


def test_run_with_a_local_judge_stores_judge_metrics_and_prints_them(tmp_path, capsys):
    judge = tmp_path / "judge.yaml"
    judge.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    db = tmp_path / "s.duckdb"
    code, out, err = cli(["run", demo_config_dir() / "bm25.yaml", "--store", db, "--traces-dir",
                          tmp_path / "traces", "--judge", judge, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    faith = next(m for m in res["summary"]["metrics"] if m["metric"] == "faithfulness")
    assert faith["stage"] == "generate" and faith["n_defined"] + faith["n_undefined"] == 171
    assert res["judge"]["metrics"]["faithfulness"]["mean"] == pytest.approx(faith["mean"])
    assert res["run"]["judge_model"] == "local:lexical"
    code, out, _ = cli(["runs", "--store", db, "--json"], capsys)
    assert [r["name"] for r in json.loads(out)] == ["bm25"]


def test_run_judge_needs_a_valid_config(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    bad = tmp_path / "bad.yaml"
    bad.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulnes]\n")
    code, _, err = cli(["run", demo_config_dir() / "bm25.yaml", "--store", db, "--traces-dir", tmp_path / "t",
                        "--judge", bad], capsys)
    assert code == 2 and "bad.yaml" in err and not db.exists()


def test_scoring_options_default_to_the_golden_manifest(tmp_path, capsys):
    from ragassay.cli.run import _options

    class G:
        manifest = {"hit_rule": "doc", "relevance_threshold": 1}

    assert _options(G(), None, None, "exp").pins()["hit_rule"] == "doc"
    assert _options(G(), None, None, "exp").relevance_threshold == 1
    assert _options(G(), "any_overlap", 3, "exp").pins()["hit_rule"] == "any_overlap"
    assert _options(G(), "any_overlap", 3, "exp").relevance_threshold == 3
    G.manifest = {}
    assert (_options(G(), None, None, "exp").hit_rule, _options(G(), None, None, "exp").relevance_threshold) \
        == ("any_overlap", 2)
    code, _, err = cli(["score", tmp_path / "x.jsonl", "--golden", tmp_path, "--threshold", "9"], capsys)
    assert code == 2 and "threshold 9" in err
