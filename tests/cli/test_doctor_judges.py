"""`ragassay doctor` says precisely why a stored judge metric is not fit to gate: never validated, or validated
and below the floor (with kappa, its interval, and whose labels), and passes once a validation meets the floor."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.analysis.conftest import make_run
from tests.judge_validation.labelgen import make_items, write_labels

from ragassay.cli.app import main as _main
from ragassay.judges.config import JudgeConfig
from ragassay.store import Store

FLOOR = ("at the lower end of each 95% interval kappa >= 0.6 and every class recall >= 0.5, over at least 100 "
         "items and 10 per class")


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    cap = capsys.readouterr()
    return (e.value.code or 0), cap.out, cap.err


def judge_lines(db, capsys) -> list[dict]:
    code, out, err = cli(["doctor", "--store", db, "--json"], capsys)
    assert code == 0, err
    return [c for c in json.loads(out)["checks"] if c["area"] == "judges"]


@pytest.mark.slow  # validates the lexical judge three times (2-6 s)
def test_doctor_names_the_judge_its_record_and_whose_labels(tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    pins = JudgeConfig(provider="local", model="lexical", metrics=["faithfulness"]).pins()
    with Store.open(db) as st:
        for name in ("a", "b"):
            st.set_judge_pins(make_run(st, name, {"faithfulness": np.linspace(0, 1, 20), "ndcg@5": np.ones(20)}),
                              pins)
    (line,) = judge_lines(db, capsys)
    assert line["verdict"] == "WARN"
    assert line["detail"] == ("faithfulness on 2 run(s) (a, b) were scored by judge local:lexical, which has no "
                              "validation record for these pins (see docs/judge-validation.md)")
    assert line["fix"].startswith("ragassay judge validate --judge JUDGE.yaml --labels LABELS.jsonl (the gate's "
                                  f"floor: {FLOOR}; the target kappa for gating is 0.7)")

    local = tmp_path / "local.yaml"
    local.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    # the bundled calibration set (no --labels): the lexical judge is below the floor there
    code, out, err = cli(["judge", "validate", "--judge", local, "--store", db, "--json"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    k = rec["kappa"] if isinstance(rec.get("kappa"), float) else rec["figures"]["kappa"]["value"]
    assert k < 0.6
    (line,) = judge_lines(db, capsys)
    assert line["verdict"] == "WARN"
    assert "which was validated and falls below the floor: kappa " in line["detail"]
    lo = rec["figures"]["kappa"]["ci_low"]
    assert f"kappa {k:.3f} [" in line["detail"] and f"]: lower bound {lo:.3f} < 0.6 on n = " in line["detail"]
    assert "of the 249 items of the bundled calibration set, labelled by two blind automated annotators, not " \
           "people" in line["detail"]
    assert "human" not in line["detail"]
    assert line["fix"].endswith("until then these metrics can neither PASS nor FAIL a gate (WARN [unvalidated])")

    # someone else's labels that contradict the judge: named by path, nothing said about who labelled them
    flipped = [{**it, "label": {"supported": "unsupported", "unsupported": "supported"}.get(it["label"],
                                                                                          it["label"])}
               for it in make_items(120)]
    path = write_labels(tmp_path / "flipped.jsonl", flipped)
    code, _, err = cli(["judge", "validate", "--judge", local, "--labels", path, "--store", db], capsys)
    assert code == 0, err
    (line,) = judge_lines(db, capsys)
    assert f"items of label set {path} (validation" in line["detail"] and "automated" not in line["detail"]

    # a validation meeting the floor: the check passes and says what it checked
    good = write_labels(tmp_path / "good.jsonl", make_items(120))
    code, _, err = cli(["judge", "validate", "--judge", local, "--labels", good, "--store", db], capsys)
    assert code == 0, err
    (line,) = judge_lines(db, capsys)
    assert line == {"area": "judges", "verdict": "PASS", "fix": "",
                    "detail": f"2 judge metric(s) over 1 judge(s), every judge meets the floor ({FLOOR})"}
