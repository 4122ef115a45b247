"""`ragassay judge validate` defaults to the bundled calibration set; its figures match scikit-learn on the
judge's own verdicts, and the two annotation passes' kappa is reported."""

import json

import pytest
from sklearn.metrics import cohen_kappa_score

from ragassay.cli.app import main as _main
from ragassay.judges.config import JudgeConfig, build_judge
from ragassay.judges.labels import bundled_labels, load_labels
from ragassay.judges.validate import judge_local


def test_validate_defaults_to_the_bundled_set_and_matches_scikit_learn(tmp_path, capsys):
    cfg = tmp_path / "local.yaml"
    cfg.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    with pytest.raises(SystemExit) as e:
        _main(["judge", "validate", "--judge", str(cfg), "--store", str(tmp_path / "s.duckdb"), "--json",
               "--resamples", "300"])
    out = capsys.readouterr()
    assert (e.value.code or 0) == 0, out.err
    rec = json.loads(out.out)
    labels = load_labels(bundled_labels())
    assert rec["label_set_version"] == labels.version and rec["n_items"] == len(labels) >= 240
    judged = judge_local(build_judge(JudgeConfig(provider="local", model="lexical", metrics=["faithfulness"])),
                         labels.items)
    pairs = [(it.label == "supported", j.label == "supported") for it, j in zip(labels.items, judged, strict=True)
             if it.label != "cannot_tell" and j.label is not None]
    assert rec["n"] == len(pairs)
    assert rec["kappa"] == pytest.approx(cohen_kappa_score([h for h, _ in pairs], [j for _, j in pairs]))
    both = [(it.label_a, it.label_b) for it in labels.items if it.label_a and it.label_b]
    assert rec["passes_kappa"] == pytest.approx(cohen_kappa_score([a for a, _ in both], [b for _, b in both],
                                                                  labels=["supported", "partially_supported",
                                                                          "unsupported", "cannot_tell"]))
