"""TREC file reading/writing, malformed files (each error names file:line), coverage rules, and the CLI."""

import json
import math

import pytest
import pytrec_eval
import typer
from typer.testing import CliRunner

from ragassay.cli.trec import register
from ragassay.errors import InputError, SchemaError
from ragassay.metrics import Semantics, evaluate_trec, read_qrels, read_run, write_qrels, write_run

QRELS = "q1 0 a 2\nq1 0 b 0\nq1 0 c 1\nq2 0 a 1\nq3 0 z 0\n"
RUN = "q1 Q0 a 1 3.0 t\nq1 Q0 x 2 2.0 t\nq1 Q0 c 3 1.0 t\nq2 Q0 b 1 5 t\nq9 Q0 a 1 1 t\n"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_tabs_and_repeated_spaces_parse_like_single_spaces(tmp_path):
    q = write(tmp_path, "q", QRELS.replace(" ", "\t"))
    r = write(tmp_path, "r", "  " + RUN.replace(" ", "   ").replace("\n", " \r\n"))
    res, cov = evaluate_trec(q, r, ["ap"], Semantics.trec_eval())
    ref = pytrec_eval.RelevanceEvaluator(
        {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"a": 1}, "q3": {"z": 0}}, {"map"}
    ).evaluate({"q1": {"a": 3.0, "x": 2.0, "c": 1.0}, "q2": {"b": 5.0}, "q9": {"a": 1.0}})
    vals = next(iter(res.values())).per_query()
    assert vals["q1"] == pytest.approx(ref["q1"]["map"]) and vals["q2"] == ref["q2"]["map"] == 0.0
    assert math.isnan(vals["q3"])  # no relevant label: undefined, not 0
    assert cov == {"n_queries": 3, "n_missing": 1, "n_run_only": 1}


def test_write_then_read_round_trips(tmp_path):
    write_qrels(tmp_path / "q", ["q1", "q1"], ["a", "b"], [2, 0])
    write_run(tmp_path / "r", ["q1", "q1", "q2"], ["a", "b", "c"], [0.5, 0.25, 1.0])
    assert (tmp_path / "q").read_text() == "q1 0 a 2\nq1 0 b 0\n"
    assert (tmp_path / "r").read_text().splitlines()[1] == "q1 Q0 b 2 0.25 ragassay"
    run = read_run(tmp_path / "r")
    assert run.docid.to_pylist() == ["a", "b", "c"] and list(run.score) == [0.5, 0.25, 1.0]
    assert len(read_qrels(tmp_path / "q")) == 1


@pytest.mark.parametrize(
    ("kind", "text", "line", "needle"),
    [
        ("run", "q1 Q0 a 1 1.0 t\nq1 Q0 b 2 0.5\n", 2, "expected 6 fields"),
        ("run", "q1 Q0 a 1 1.0 t\n\nq1 Q0 b 2 high t\n", 3, "must be a number"),
        ("run", "q1 Q0 a 1 1.0 t\nq1 Q0 b 2 0.5 t\nq1 Q0 a 3 0.2 t\n", 3, "appears twice"),
        ("qrels", "q1 0 a 1\nq1 0 b x\n", 2, "must be an integer"),
        ("qrels", "q1 0 a 1\nq1 0 b 0 extra\n", 2, "expected 4 fields"),
        ("qrels", "q1 0 a 1\nq2 0 a 1\n\nq1 0 a 0\n", 4, "duplicate judgment"),
    ],
)
def test_malformed_files_name_the_line(tmp_path, kind, text, line, needle):
    good_q = write(tmp_path, "good_q", "q1 0 a 1\n")
    good_r = write(tmp_path, "good_r", "q1 Q0 a 1 1 t\n")
    bad = write(tmp_path, "bad", text)
    with pytest.raises(SchemaError) as exc:
        if kind == "run":
            evaluate_trec(good_q, bad, ["ap"])
        else:
            evaluate_trec(bad, good_r, ["ap"])
    assert f"{bad}:{line}:" in str(exc.value) and needle in str(exc.value)


def test_run_sharing_no_query_with_qrels_is_an_error(tmp_path):
    q = write(tmp_path, "q", "q1 0 a 1\n")
    r = write(tmp_path, "r", "q2 Q0 a 1 1 t\n")
    with pytest.raises(InputError, match="shares no query id"):
        evaluate_trec(q, r, ["ap"])


def test_cli_prints_means_and_json(tmp_path):
    q, r = write(tmp_path, "q", QRELS), write(tmp_path, "r", RUN)
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer in multi-command mode, as in the real app
        pass

    runner = CliRunner()
    out = runner.invoke(app, ["trec", str(q), str(r), "-m", "ndcg@10", "-m", "rr", "--json", "-q"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    ref = pytrec_eval.RelevanceEvaluator(
        {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"a": 1}}, {"ndcg_cut.10"}
    ).evaluate({"q1": {"a": 3.0, "x": 2.0, "c": 1.0}, "q2": {"b": 5.0}})
    nd = data["metrics"]["ndcg@10"]
    assert nd["per_query"]["q1"] == pytest.approx(ref["q1"]["ndcg_cut_10"])
    assert nd["per_query"]["q3"] is None and nd["n_undefined"] == 1
    assert nd["mean"] == pytest.approx((ref["q1"]["ndcg_cut_10"] + ref["q2"]["ndcg_cut_10"]) / 2)
    text = runner.invoke(app, ["trec", str(q), str(r), "-m", "rr"])
    assert text.exit_code == 0 and "rr" in text.output and "1 run-only" in text.output
    bad = runner.invoke(app, ["trec", str(q), str(r), "-m", "recall"])
    assert bad.exit_code == 2 and "ambiguous" in bad.output
