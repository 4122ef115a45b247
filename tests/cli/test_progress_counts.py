"""The judge commands' bars count: `judge RUN` and `judge validate` show how many of the answers or labels are
judged (``3/6``) on a terminal, and nothing with --json. Under them, ``judge_stored_run`` and ``run_kind`` call
``progress(done, total)`` once per item for a local judge."""

from __future__ import annotations

import json
import re

import pytest
from tests.cli.test_progress_judge_golden import BAR, run_cli
from tests.judge_validation.labelgen import as_items, make_items, write_labels
from tests.judges.test_cli_judge import write_run_traces

from ragassay.analysis.runner import load_inputs
from ragassay.golden import bundled_golden_source
from ragassay.judges.config import JudgeConfig
from ragassay.judges.kinds import run_kind
from ragassay.judges.score import CountedItems, judge_stored_run
from ragassay.store import Store
from ragassay.trace.io import read_traces

LOCAL = "provider: local\nmodel: lexical\nmetrics: [faithfulness]\n"
LOCAL_CFG = JudgeConfig(provider="local", model="lexical", metrics=["faithfulness"])


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """A store with one scored run ``a`` of four bundled queries (three answered, one abstained), the traces
    and a local lexical judge config."""
    tmp = tmp_path_factory.mktemp("counts")
    traces = write_run_traces(tmp / "traces.jsonl", load_inputs(None, None))
    db = tmp / "s.duckdb"
    code, _, err = run_cli(["score", traces, "--golden", bundled_golden_source(), "--store", db, "--name", "a",
                            "--json"], tmp, stderr_tty=False)
    assert code == 0, err
    judge = tmp / "local.yaml"
    judge.write_text(LOCAL)
    return tmp, db, judge, traces


def test_judging_a_run_counts_its_answers_on_a_terminal_and_nothing_with_json(scored):
    tmp, db, judge, _ = scored
    code, out, err = run_cli(["judge", "a", "--judge", judge, "--store", db, "--resume"], tmp, stderr_tty=True)
    assert code == 0, err
    counts = re.findall(r"judging 4 answers of run a with local:lexical (\d)/(\d)", err)
    assert counts and counts[-1] == ("4", "4") and {t for _, t in counts} == {"4"}, err
    assert BAR in err and "judged run a" in out

    code, out, err = run_cli(["judge", "a", "--judge", judge, "--store", db, "--resume", "--json"], tmp,
                             stderr_tty=True)
    assert code == 0, err
    assert json.loads(out)["items"] == 4
    assert BAR not in err and "/4" not in err and "judging" not in err


def test_validating_a_judge_counts_its_labels_on_a_terminal_and_nothing_with_json(tmp_path):
    labels = write_labels(tmp_path / "labels.jsonl", make_items(12))
    judge = tmp_path / "local.yaml"
    judge.write_text(LOCAL)
    args = ["judge", "validate", "--judge", judge, "--labels", labels, "--store", tmp_path / "s.duckdb",
            "--min-items", "12", "--min-per-class", "3", "--resamples", "200"]
    code, out, err = run_cli(args, tmp_path, stderr_tty=True)
    assert code == 0, err
    counts = re.findall(r"judging 12 support labels with local:lexical (\d+)/(\d+)", err)
    assert counts and counts[-1] == ("12", "12"), err
    assert "validated local:lexical" in out

    code, out, err = run_cli([*args, "--json"], tmp_path, stderr_tty=True)
    assert code == 0, err
    assert json.loads(out)["figures"]["n_items"] == 12
    assert BAR not in err and "/12" not in err and "judging" not in err


def test_a_local_judge_reports_each_answer_as_it_is_judged(scored):
    _, db, _, traces = scored
    corpus, golden = load_inputs(None, None)
    header, recs, _ = read_traces(traces)
    seen: list[tuple[int, int]] = []
    with Store.open(db) as st:
        judge_stored_run(st, "a", recs, golden, corpus, LOCAL_CFG,
                         resume=True, header=header, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(k, 4) for k in range(5)]


def test_run_kind_counts_a_local_judges_items_and_never_goes_back():
    items = as_items(make_items(6))
    seen: list[tuple[int, int]] = []
    judged, calls = run_kind(LOCAL_CFG, "support", items,
                             progress=lambda done, total: seen.append((done, total)))
    assert len(judged) == 6 and sum(calls["calls"].values()) == 6
    assert seen == [(k, 6) for k in range(7)]

    walked: list[tuple[int, int]] = []
    counted = CountedItems(["x", "y", "z"], lambda d, t: walked.append((d, t)))
    assert list(counted) == ["x", "y", "z"] and list(counted) == ["x", "y", "z"]  # a second walk adds nothing
    assert counted[1] == "y" and len(counted) == 3
    assert walked == [(1, 3), (2, 3), (3, 3)]  # 0 is the caller's to report, before the work
