"""trec_eval 9.x (float32) and 10.0 (double) tie rules, comment lines and extra run fields, undefined-as-zero
means, and the light import graph of ``ragassay trec``."""

import json
import subprocess
import sys

import pytest
import pytrec_eval

from ragassay.cli.app import main
from ragassay.errors import InputError
from ragassay.metrics import Qrels, Run, Semantics, build_grade_matrix, evaluate, evaluate_trec
from ragassay.metrics.semantics import tie_rule

# a and b differ by 1e-8: one float32 value (1.0), two different doubles
RUN = {"q": {"a": 1.0 + 1e-8, "b": 1.0, "c": 1.0, "d": 0.5}}
QRELS = {"q": {"a": 1, "c": 1, "d": 1}}


def _rr_ap(ties):
    q, d, s = zip(*[(q, d, s) for q, docs in RUN.items() for d, s in docs.items()], strict=True)
    labels = [(q, d, g) for q, docs in QRELS.items() for d, g in docs.items()]
    gm = build_grade_matrix(Qrels.from_arrays(*zip(*labels, strict=True)), Run.from_arrays(q, d, s), ties=ties)
    res = evaluate(gm, ["rr", "ap"], Semantics.trec_eval(ties=ties))
    return [float(r.values[0]) for r in res.values()]


def cli_json(capsys, *args):
    try:
        main([*map(str, args), "--json"])
    except SystemExit as e:
        assert e.code in (0, None), capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_float32_and_double_tie_rules_rank_differently_as_worked_by_hand():
    # trec_eval9: a, b, c tie at float32 1.0 -> doc id descending: c(rel) b a(rel) d(rel)
    #   rr = 1; ap = (1/1 + 2/3 + 3/4) / 3
    # trec_eval10: a (1+1e-8) first, then b, c tied -> c, b, then d: a(rel) c(rel) b d(rel)
    #   rr = 1; ap = (1/1 + 2/2 + 3/4) / 3
    nine, ten = _rr_ap("trec_eval9"), _rr_ap("trec_eval10")
    assert nine == pytest.approx([1.0, (1 + 2 / 3 + 3 / 4) / 3], abs=1e-15)
    assert ten == pytest.approx([1.0, (1 + 1 + 3 / 4) / 3], abs=1e-15)
    # pytrec_eval is trec_eval 9.x: the float32 rule is its oracle
    ref = pytrec_eval.RelevanceEvaluator(QRELS, {"map", "recip_rank"}).evaluate(RUN)["q"]
    assert nine == [ref["recip_rank"], ref["map"]]
    assert ten[1] != ref["map"]


def test_old_trec_eval_spelling_is_the_float32_rule():
    assert tie_rule("trec_eval") == "trec_eval9"
    assert Semantics(ties="trec_eval").ties == "trec_eval9"
    assert _rr_ap("trec_eval") == _rr_ap("trec_eval9")
    with pytest.raises(InputError, match="unknown tie rule 'trec_eval11'"):
        Semantics(ties="trec_eval11")


def test_cli_ties_option_reaches_both_rules(tmp_path, capsys):
    qrels = tmp_path / "qrels"
    qrels.write_text("".join(f"q 0 {d} {g}\n" for d, g in QRELS["q"].items()))
    run = tmp_path / "run"
    run.write_text("".join(f"q Q0 {d} {i} {s!r} t\n" for i, (d, s) in enumerate(RUN["q"].items(), 1)))
    out = {}
    for ties in ("trec_eval9", "trec_eval10", "trec_eval"):
        data = cli_json(capsys, "trec", qrels, run, "-m", "ap", "--ties", ties)
        out[ties] = (data["semantics"]["ties"], data["metrics"]["ap"]["mean"])
    assert out["trec_eval9"] == ("trec_eval9", pytest.approx((1 + 2 / 3 + 3 / 4) / 3, abs=1e-15))
    assert out["trec_eval10"] == ("trec_eval10", pytest.approx((1 + 1 + 3 / 4) / 3, abs=1e-15))
    assert out["trec_eval"] == out["trec_eval9"]


QRELS_TEXT = "q1 0 a 2\nq1 0 b 0\nq1 0 c 1\nq2 0 a 1\nq2 0 d 1\nq3 0 z 0\n"
RUN_TEXT = "q1 Q0 a 1 3.0 t\nq1 Q0 x 2 2.0 t\nq1 Q0 c 3 1.0 t\nq2 Q0 b 1 5 t\nq2 Q0 d 2 4 t\nq3 Q0 z 1 1 t\n"
QRELS_DICT = {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"a": 1, "d": 1}, "q3": {"z": 0}}
RUN_DICT = {"q1": {"a": 3.0, "x": 2.0, "c": 1.0}, "q2": {"b": 5.0, "d": 4.0}, "q3": {"z": 1.0}}


def test_comment_lines_and_fields_after_the_run_tag_are_ignored_like_trec_eval(tmp_path):
    qrels = tmp_path / "qrels"
    qrels.write_text("# judged by a test\n" + QRELS_TEXT.replace("q2 0 a 1\n", "q2 0 a 1\n  # indented\n"))
    run = tmp_path / "run"
    lines = RUN_TEXT.splitlines()
    # a comment with exactly six fields and a numeric fifth parses as a data row; it must still be skipped
    run.write_text("# q1 Q0 zz 1 9.5 t\n" + "\n".join(f"{ln} extra {i}" for i, ln in enumerate(lines)) + "\n")
    res, cov = evaluate_trec(qrels, run, ["ap", "ndcg@10"], Semantics.trec_eval())
    ref = pytrec_eval.RelevanceEvaluator(QRELS_DICT, {"map", "ndcg_cut.10"}).evaluate(RUN_DICT)
    ap, nd = (r.per_query() for r in res.values())
    for q in ("q1", "q2"):
        assert ap[q] == ref[q]["map"] and nd[q] == ref[q]["ndcg_cut_10"]
    assert cov == {"n_queries": 3, "n_missing": 0, "n_run_only": 0}


def test_extra_fields_in_qrels_stay_an_error(tmp_path):
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 a 1\nq1 0 b 0 extra\n")
    run = tmp_path / "run"
    run.write_text("q1 Q0 a 1 1 t\n")
    with pytest.raises(InputError, match=r"qrels:2: expected 4 fields \(qid iter docid rel\), found 5"):
        evaluate_trec(qrels, run, ["ap"])


def test_undefined_as_zero_mean_equals_pytrec_evals_mean(tmp_path, capsys):
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text(QRELS_TEXT)
    run.write_text(RUN_TEXT)
    ref = pytrec_eval.RelevanceEvaluator(QRELS_DICT, {"map", "recall.10", "ndcg_cut.10"}).evaluate(RUN_DICT)
    assert ref["q3"]["map"] == 0.0  # no relevant label: pytrec_eval says 0, ragassay says undefined
    metrics = ("-m", "ap", "-m", "recall@10", "-m", "ndcg@10")
    plain = cli_json(capsys, "trec", qrels, run, *metrics)["metrics"]
    data = cli_json(capsys, "trec", qrels, run, *metrics, "--undefined-as-zero")
    assert data["undefined_as_zero"] is True
    for ours, theirs in (("ap", "map"), ("recall@10", "recall_10"), ("ndcg@10", "ndcg_cut_10")):
        per_q = [ref[q][theirs] for q in ("q1", "q2", "q3")]
        assert data["metrics"][ours]["mean"] == pytest.approx(sum(per_q) / 3, abs=1e-15)
        assert plain[ours]["mean"] == pytest.approx(sum(per_q[:2]) / 2, abs=1e-15)
        assert data["metrics"][ours]["n_undefined"] == 1  # still counted


def test_cli_prints_user_text_without_markup(tmp_path, capsys):
    qrels, run = tmp_path / "[red]q", tmp_path / "[bold]r"
    qrels.write_text("[/bold] 0 a 1\n")
    run.write_text("[/bold] Q0 a 1 1 t\n")
    with pytest.raises(SystemExit) as e:
        main(["trec", str(qrels), str(run), "-m", "rr", "-q"])
    out = capsys.readouterr().out
    assert e.value.code in (0, None)
    assert "rr             [/bold]          1.0000" in out and "[bold]r vs [red]q" in out


def test_importing_the_trec_command_loads_no_engine_and_running_it_no_heavy_module(tmp_path):
    qrels, run = tmp_path / "qrels", tmp_path / "run"
    qrels.write_text(QRELS_TEXT)
    run.write_text(RUN_TEXT)
    code = (
        "import sys, typer\n"
        "import ragassay.cli.trec as t\n"
        "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))\n"
        "app = typer.Typer(); t.register(app)\n"
        "app.command('noop')(lambda: None)\n"
        f"try: app(['trec', {str(qrels)!r}, {str(run)!r}, '--json'])\n"
        "except SystemExit: pass\n"
        "heavy = ('duckdb', 'scipy', 'rapidfuzz', 'numba', 'sklearn', 'torch')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             or m.startswith(('ragassay.analysis', 'ragassay.store'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[0] == "[]" and lines[-1] == "[]", out
