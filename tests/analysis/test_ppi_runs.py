"""PPI-corrected judge means of stored runs (ragassay.analysis.ppi): labels file, refusals, warnings, the
corrected mean and paired difference against closed forms, compare and gate with --labels, `judge ppi`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from tests.analysis.conftest import make_run
from typer.testing import CliRunner

from ragassay.analysis.compare import compare_runs
from ragassay.analysis.gate import GatePolicy, run_gate
from ragassay.analysis.ppi import load_ppi_labels, paired_ppi, run_ppi
from ragassay.errors import InputError
from ragassay.stats.ppi import ppi_paired_difference

N = 300


def _world(seed=0):
    """Human values y of faithfulness for A and B (B no better), and a judge that over-credits A's answers."""
    rng = np.random.default_rng(seed)
    ya = (rng.random(N) < 0.7).astype(float)
    yb = np.where(rng.random(N) < 0.9, ya, 1 - ya)
    fa = np.where(ya == 1, rng.random(N) < 0.97, rng.random(N) < 0.6).astype(float)   # lenient on A
    fb = np.where(yb == 1, rng.random(N) < 0.9, rng.random(N) < 0.05).astype(float)   # strict on B
    return ya, yb, fa, fb


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _qid(i):
    return f"q{i:03d}"


def _labels(path, run, idx, y, metric="faithfulness", **extra):
    return [{"run": run, "query_id": _qid(i), "metric": metric, "value": float(y[i]), "labelled_by": "human",
             **extra} for i in idx]


@pytest.fixture
def world(store, tmp_path):
    ya, yb, fa, fb = _world()
    a = make_run(store, "base", {"faithfulness": fa, "recall@10": np.full(N, 0.5)})
    b = make_run(store, "cand", {"faithfulness": fb, "recall@10": np.full(N, 0.5)})
    rng = np.random.default_rng(1)
    idx = np.sort(rng.choice(N, 80, replace=False))
    return {"a": a, "b": b, "ya": ya, "yb": yb, "fa": fa, "fb": fb, "idx": idx, "tmp": tmp_path}


def test_corrected_mean_is_the_ppi_closed_form(store, world):
    w = world
    path = _write(w["tmp"] / "l.jsonl", _labels(None, "base", w["idx"], w["ya"]))
    out = run_ppi(store, "base", path, "faithfulness", lam="ppi")
    m = np.zeros(N, bool)
    m[w["idx"]] = True
    f, y = w["fa"], w["ya"]
    want = f[~m].mean() + (y[m] - f[m]).mean()
    se = math.sqrt(f[~m].var() / (~m).sum() + (y[m] - f[m]).var() / m.sum())
    assert out["ppi"]["estimate"] == pytest.approx(want, abs=1e-12)
    assert out["ppi"]["ci_low"] == pytest.approx(want - 1.959963984540054 * se, abs=1e-12)
    assert out["raw_judge_mean"] == pytest.approx(f.mean())
    assert (out["n_items"], out["n_labelled"]) == (N, 80)
    assert out["lam_mode"] == "PPI (lam = 1)"
    # the judge over-credits A; the correction moves the mean down toward the human mean
    assert out["ppi"]["estimate"] < out["raw_judge_mean"] - 0.05
    assert abs(out["ppi"]["estimate"] - y.mean()) < abs(out["raw_judge_mean"] - y.mean())


def test_paired_difference_equals_the_stats_function_shared_and_separate(store, world):
    w = world
    shared = _write(w["tmp"] / "s.jsonl", _labels(None, "base", w["idx"], w["ya"])
                    + _labels(None, "cand", w["idx"], w["yb"]))
    out = paired_ppi(store, "base", "cand", shared, "faithfulness")
    want = ppi_paired_difference(w["fa"], w["idx"], w["ya"][w["idx"]], w["fb"], w["idx"], w["yb"][w["idx"]],
                                 lam="tuned")
    assert out["mode"] == "shared"
    assert out["difference"]["estimate"] == pytest.approx(want.estimate, abs=1e-12)
    assert out["difference"]["ci_high"] == pytest.approx(want.ci_high, abs=1e-12)
    assert out["raw_judge_mean"] == pytest.approx({"a": w["fa"].mean(), "b": w["fb"].mean()})
    other = np.sort(np.random.default_rng(5).choice(N, 70, replace=False))
    sep = _write(w["tmp"] / "p.jsonl", _labels(None, "base", w["idx"], w["ya"])
                 + _labels(None, "cand", other, w["yb"]))
    out = paired_ppi(store, "base", "cand", sep, "faithfulness", lam="ppi")
    want = ppi_paired_difference(w["fa"], w["idx"], w["ya"][w["idx"]], w["fb"], other, w["yb"][other], lam=1.0)
    assert out["mode"] == "separate" and out["n_labelled"] == {"a": 80, "b": 70}
    assert out["difference"]["estimate"] == pytest.approx(want.estimate, abs=1e-12)
    assert out["difference"]["se"] == pytest.approx(want.se, abs=1e-12)


def test_labels_for_answers_the_run_does_not_have_are_refused(store, world):
    w = world
    lines = _labels(None, "base", w["idx"][:5], w["ya"]) + [
        {"run": "base", "query_id": "nope", "metric": "faithfulness", "value": 1},
        {"run": "base", "query_id": "q001", "trial": 3, "metric": "faithfulness", "value": 1}]
    with pytest.raises(InputError) as e:
        run_ppi(store, "base", _write(w["tmp"] / "l.jsonl", lines), "faithfulness")
    text = str(e.value)
    assert "2 problem(s)" in text and "l.jsonl:6" in text and "'nope'" in text and "l.jsonl:7" in text
    assert "no trial 3" in text


def test_every_bad_line_is_listed_with_its_place(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([
        "{not json",
        json.dumps({"query_id": "q1", "metric": "faithfulness"}),
        json.dumps({"query_id": "q1", "metric": "faithfulness", "value": 1.5}),
        json.dumps({"query_id": "q1", "metric": "faithfulness", "value": 1, "label": "supported"}),
        json.dumps({"query_id": "q1", "metric": "faithfulness", "value": 1, "colour": "red"}),
        json.dumps({"query_id": "q2", "metric": "answer_relevance", "label": "supported"}),
        json.dumps({"query_id": "q3", "metric": "faithfulness", "value": 1}),
        json.dumps({"query_id": "q3", "metric": "faithfulness", "value": 0}),
        json.dumps({"query_id": "q4", "metric": "recall@10", "label": "relevant"}),
        json.dumps({"query_id": "q5", "metric": "faithfulness", "value": True}),
    ]) + "\n")
    with pytest.raises(InputError) as e:
        load_ppi_labels(path)
    text = str(e.value)
    assert "9 problem(s)" in text and "nothing was computed" in text
    for line in (1, 2, 3, 4, 5, 6, 8, 9, 10):
        assert f"bad.jsonl:{line}:" in text
    assert "bad.jsonl:7:" not in text
    assert "labelled again (line 7)" in text


def test_kind_labels_map_onto_the_metric_scale_and_cannot_tell_is_counted(store, tmp_path):
    make_run(store, "r", {"answer_relevance": np.linspace(0, 1, 40)})
    lines = [{"query_id": _qid(i), "metric": "answer_relevance",
              "label": ["relevant", "partially relevant", "irrelevant"][i % 3]} for i in range(12)]
    lines.append({"query_id": _qid(20), "metric": "answer_relevance", "label": "cannot_tell"})
    got = load_ppi_labels(_write(tmp_path / "l.jsonl", lines))
    assert [x.value for x in got.lines[:3]] == [1.0, 0.5, 0.0] and got.lines[-1].value is None
    out = run_ppi(store, "r", got, "answer_relevance")
    assert out["n_labelled"] == 12 and out["not_used"] == {"cannot_tell": 1}
    assert out["ppi"]["classical"] == pytest.approx(0.5)


def test_selected_labels_tiny_sets_and_automated_labels_are_warned(store, world):
    w = world
    worst = np.argsort(w["fa"] + np.arange(N) * 1e-6)[:25]  # the items the judge scored lowest
    lines = [{"run": "base", "query_id": _qid(i), "metric": "faithfulness", "value": 0.0,
              "labelled_by": "automated"} for i in worst]
    out = run_ppi(store, "base", _write(w["tmp"] / "l.jsonl", lines), "faithfulness")
    text = " | ".join(out["warnings"])
    assert "look selected" in text and "all failures" in text and "only 25 labelled" in text
    assert "automated" in text
    random_lines = _labels(None, "base", w["idx"], w["ya"])
    clean = run_ppi(store, "base", _write(w["tmp"] / "r.jsonl", random_lines), "faithfulness")
    assert clean["warnings"] == []


def test_two_runs_need_named_runs_and_other_runs_lines_are_counted(store, world):
    w = world
    make_run(store, "third", {"faithfulness": w["fa"]})
    lines = _labels(None, "base", w["idx"], w["ya"]) + _labels(None, "cand", w["idx"], w["yb"])
    lines += _labels(None, "third", w["idx"][:4], w["ya"])
    out = paired_ppi(store, "base", "cand", _write(w["tmp"] / "l.jsonl", lines), "faithfulness")
    assert out["not_used"]["a"] == {"other_runs": 4}
    no_run = [{k: v for k, v in x.items() if k != "run"} for x in lines[:3]]
    with pytest.raises(InputError, match="name the run"):
        paired_ppi(store, "base", "cand", _write(w["tmp"] / "n.jsonl", no_run + lines), "faithfulness")
    with pytest.raises(InputError, match="not in the store"):
        paired_ppi(store, "base", "cand", _write(w["tmp"] / "x.jsonl", lines + [
            {"run": "ghost", "query_id": "q001", "metric": "faithfulness", "value": 1}]), "faithfulness")


def test_a_trace_id_of_another_answer_is_refused_and_undefined_judge_values_are_counted(store, tmp_path):
    f = np.linspace(0, 1, 50)
    f[3] = np.nan
    make_run(store, "r", {"faithfulness": f})
    lines = [{"query_id": _qid(i), "metric": "faithfulness", "value": 1.0} for i in range(10)]
    out = run_ppi(store, "r", _write(tmp_path / "l.jsonl", lines), "faithfulness")
    assert out["not_used"] == {"judge_undefined": 1} and out["n_items"] == 49 and out["n_labelled"] == 9
    lines[0]["trace_id"] = "tr-other"
    with pytest.raises(InputError, match="another answer"):
        run_ppi(store, "r", _write(tmp_path / "t.jsonl", lines), "faithfulness")


def test_several_trials_make_queries_the_items(store, tmp_path):
    from ragassay.store import RunRecord

    rid = store.create_run(RunRecord(name="multi", dataset_version="d", corpus_digest="c", metric_version="m",
                                     config={"name": "multi"}, trials=2, n_queries=30))
    rng = np.random.default_rng(3)
    f = rng.random((30, 2))
    cols = {"query_id": [], "trial": [], "metric": [], "value": [], "stratum": []}
    for q in range(30):
        for t in range(2):
            cols["query_id"].append(_qid(q))
            cols["trial"].append(t)
            cols["metric"].append("faithfulness")
            cols["value"].append(float(f[q, t]))
            cols["stratum"].append("s")
    store.write_batch(rid, cols, done=[(_qid(q), t, "done", None) for q in range(30) for t in range(2)])
    store.finish_run(rid)
    lines = [{"query_id": _qid(q), "trial": t, "metric": "faithfulness", "value": 0.5}
             for q in range(10) for t in range(2)]
    lines.append({"query_id": _qid(15), "trial": 0, "metric": "faithfulness", "value": 0.5})  # one trial only
    out = run_ppi(store, "multi", _write(tmp_path / "l.jsonl", lines), "faithfulness", lam="ppi")
    assert out["unit"] == "query" and out["n_items"] == 30 and out["n_labelled"] == 10
    assert out["not_used"] == {"partial_query": 1}
    per_q = f.mean(1)
    want = per_q[10:].mean() + (0.5 - per_q[:10]).mean()
    assert out["ppi"]["estimate"] == pytest.approx(want, abs=1e-12)
    no_trial = [{"query_id": _qid(0), "metric": "faithfulness", "value": 1}]
    with pytest.raises(InputError, match="say which answer"):
        run_ppi(store, "multi", _write(tmp_path / "n.jsonl", no_trial * 1), "faithfulness")


# ------------------------------------------------------------------------------------------ compare and gate
def _gate_world(store, tmp_path):
    """Humans see no change between A and B; the judge is lenient on A and strict on B, so the raw judge
    delta is a large regression."""
    ya, _, fa, fb = _world(2)
    u = np.random.default_rng(6).random(N)
    yb = np.where(ya == 1, u >= 0.05, u < 0.35 / 3)  # B changes answers both ways, none better on average
    make_run(store, "base", {"faithfulness": fa})
    make_run(store, "cand", {"faithfulness": fb})
    idx = np.sort(np.random.default_rng(4).choice(N, 150, replace=False))
    lines = _labels(None, "base", idx, ya) + _labels(None, "cand", idx, yb)
    return _write(tmp_path / "labels.jsonl", lines), fa, fb


def test_compare_carries_the_corrected_difference_beside_the_raw_rows(store, tmp_path):
    path, fa, fb = _gate_world(store, tmp_path)
    comp = compare_runs(store, "base", "cand", n_resamples=500, labels=path)
    row = comp.overall("faithfulness")
    assert row.delta == pytest.approx(fb.mean() - fa.mean())  # the raw row stays the judge's
    (entry,) = comp.ppi
    assert entry["metric"] == "faithfulness" and entry["mode"] == "shared"
    d = entry["difference"]
    assert d["ci_low"] < 0 < d["ci_high"] and row.ci_high < 0
    assert comp.to_dict()["ppi"][0]["difference"]["estimate"] == d["estimate"]


def test_gate_decides_on_the_corrected_difference(store, tmp_path):
    path, _, _ = _gate_world(store, tmp_path)
    policy = GatePolicy(metrics={"faithfulness": {"min_effect": 0.05}}, n_resamples=500,
                        hard={"max_error_rise": None, "max_refusal_rise": None, "min_citation_validity": None})
    raw = run_gate(store, "base", "cand", policy)
    assert next(c for c in raw.checks if c.name == "faithfulness").verdict == "FAIL"
    fixed = run_gate(store, "base", "cand", policy, labels=path)
    check = next(c for c in fixed.checks if c.name == "faithfulness")
    assert check.verdict != "FAIL" and check.detail.startswith("PPI-corrected (n labelled = 150/150")
    assert "raw judge Δ" in check.detail


def test_compare_and_gate_cli_take_labels(store, tmp_path, capsys):
    from ragassay.cli.app import main

    path, _, _ = _gate_world(store, tmp_path)
    db = store.path if hasattr(store, "path") else None
    store.close()
    db = db or tmp_path / "r.duckdb"
    with pytest.raises(SystemExit) as e:
        main(["compare", "base", "cand", "--store", str(db), "--labels", str(path), "--resamples", "200", "--json"])
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ppi"][0]["n_labelled"] == {"a": 150, "b": 150}
    with pytest.raises(SystemExit):
        main(["compare", "base", "cand", "--store", str(db), "--labels", str(path), "--resamples", "200"])
    text = capsys.readouterr().out
    assert "PPI-corrected: faithfulness: raw judge" in text and "PPI-corrected (n labelled = 150/150" in text
    with pytest.raises(SystemExit):
        main(["compare", "base", "cand", "--store", str(db), "--labels", str(path), "--resamples", "200",
              "--format", "markdown"])
    assert "| faithfulness | base → cand |" in capsys.readouterr().out
    policy = tmp_path / "policy.yaml"
    policy.write_text("n_resamples: 200\nmetrics:\n  faithfulness: {min_effect: 0.05}\nhard:\n"
                      "  max_error_rise: null\n  max_refusal_rise: null\n")
    with pytest.raises(SystemExit) as e:
        main(["gate", "base", "cand", "--store", str(db), "--policy", str(policy), "--labels", str(path), "--json"])
    captured = capsys.readouterr()
    assert e.value.code == 0, captured.err
    out = json.loads(captured.out)
    assert out["ppi"][0]["metric"] == "faithfulness"
    check = next(c for c in out["checks"] if c["name"] == "faithfulness")
    assert check["detail"].startswith("PPI-corrected") and check["verdict"] != "FAIL"
    with pytest.raises(SystemExit) as e:
        main(["gate", "base", "cand", "--store", str(db), "--policy", str(policy)])
    assert e.value.code == 1  # the raw judge delta alone fails the build
    capsys.readouterr()


def test_judge_ppi_command(store, world, tmp_path):
    from ragassay.cli.judge_ppi import ppi

    w = world
    path = _write(tmp_path / "l.jsonl", _labels(None, "base", w["idx"], w["ya"])
                  + _labels(None, "cand", w["idx"], w["yb"]))
    db = tmp_path / "r.duckdb"
    store.close()
    app = typer.Typer()
    app.command("ppi")(ppi)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    res = runner.invoke(app, ["ppi", "base", "--labels", str(path), "--store", str(db), "--metric", "faithfulness",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["n_labelled"] == 80 and out["ppi"]["lam"] is not None
    res = runner.invoke(app, ["ppi", "base", "--labels", str(path), "--store", str(db), "-m", "faithfulness",
                              "--against", "cand"])
    assert res.exit_code == 0, res.output
    assert "PPI-corrected (n labelled = 80/80, shared labels" in res.output
    assert "§" not in res.output
    res = runner.invoke(app, ["ppi", "base", "--labels", str(path), "--store", str(db), "-m", "faithfulness",
                              "--method", "magic"])
    assert res.exit_code != 0


def test_human_labels_let_an_unvalidated_judge_decide_and_other_labels_do_not(store, tmp_path):
    path, _, _ = _gate_world(store, tmp_path)
    pins = {"judge_model": "m", "rubric_sha": "r", "prompt_sha": "p"}
    for name in ("base", "cand"):
        store.set_judge_pins(store.get_run(name).run_id, pins)
    policy = GatePolicy(metrics={"faithfulness": {"min_effect": 0.05}}, n_resamples=500,
                        hard={"max_error_rise": None, "max_refusal_rise": None, "min_citation_validity": None})
    bare = next(c for c in run_gate(store, "base", "cand", policy).checks if c.name == "faithfulness")
    assert (bare.verdict, bare.status) == ("WARN", "unvalidated")
    human = next(c for c in run_gate(store, "base", "cand", policy, labels=path).checks if c.name == "faithfulness")
    assert human.status == "ppi" and human.verdict == "PASS" and "decided on the human-label correction" in human.detail
    unstated = [{k: v for k, v in json.loads(x).items() if k != "labelled_by"}
                for x in path.read_text().splitlines()]
    other = _write(tmp_path / "unstated.jsonl", unstated)
    check = next(c for c in run_gate(store, "base", "cand", policy, labels=other).checks if c.name == "faithfulness")
    assert (check.verdict, check.status) == ("WARN", "unvalidated")
    assert "would have been PASS: PPI-corrected" in check.detail


def test_two_human_labels_that_agree_with_the_judge_do_not_let_an_unvalidated_judge_decide(store, tmp_path):
    # the fooling attempt: label two answers where the judge is right; the rectifier's variance is 0, so the
    # corrected interval is the judge's own and narrow. Under 30 labels per run the correction decides nothing.
    _, fa, fb = _gate_world(store, tmp_path)
    pins = {"judge_model": "m", "rubric_sha": "r", "prompt_sha": "p"}
    for name in ("base", "cand"):
        store.set_judge_pins(store.get_run(name).run_id, pins)
    policy = GatePolicy(metrics={"faithfulness": {"min_effect": 0.05}}, n_resamples=500,
                        hard={"max_error_rise": None, "max_refusal_rise": None, "min_citation_validity": None})
    agree = [i for i in range(N) if fa[i] == 1 and fb[i] == 1][:2]
    few = _write(tmp_path / "two.jsonl", _labels(None, "base", agree, fa) + _labels(None, "cand", agree, fb))
    check = next(c for c in run_gate(store, "base", "cand", policy, labels=few).checks if c.name == "faithfulness")
    assert (check.verdict, check.status) == ("WARN", "unvalidated")
    assert "PPI not used: 2/2 (shared labels" in check.detail and "fewer than 30 labelled items" in check.detail


def test_under_thirty_labels_the_judges_own_figure_decides_with_a_note(store, tmp_path):
    _, fa, fb = _gate_world(store, tmp_path)
    policy = GatePolicy(metrics={"faithfulness": {"min_effect": 0.05}}, n_resamples=500,
                        hard={"max_error_rise": None, "max_refusal_rise": None, "min_citation_validity": None})
    idx = list(range(29))
    few = _write(tmp_path / "few.jsonl", _labels(None, "base", idx, fa) + _labels(None, "cand", idx, fb))
    raw = next(c for c in run_gate(store, "base", "cand", policy).checks if c.name == "faithfulness")
    check = next(c for c in run_gate(store, "base", "cand", policy, labels=few).checks if c.name == "faithfulness")
    assert (check.verdict, check.value) == (raw.verdict, raw.value) == ("FAIL", raw.value)
    assert check.detail == f"{raw.detail}; PPI not used: 29/29 (shared labels, PPI++ (tuned lam)) is fewer than 30 " \
                           "labelled items per run, too few for its interval to decide the gate"
