"""The bundled judge calibration set: every item labelled once, the documented agreement and counts hold."""

import json
import re
from collections import Counter
from importlib import resources

from sklearn.metrics import cohen_kappa_score

LABELS = {"supported", "partially_supported", "unsupported", "cannot_tell"}


def _read(name):
    path = resources.files("ragassay") / "data" / "judge_calibration" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_item_has_one_label_and_disagreements_are_exactly_the_adjudicated_rows():
    items, labels = _read("items.jsonl"), _read("labels.jsonl")
    assert [i["item_id"] for i in items] == [lab["item_id"] for lab in labels]
    assert len(items) >= 240
    for lab in labels:
        assert {lab["label"], lab["label_a1"], lab["label_a2"]} <= LABELS
        assert lab["adjudicated"] == (lab["label_a1"] != lab["label_a2"])
        assert lab["adjudicated"] == (lab["adjudication"] is not None)
        if not lab["adjudicated"]:
            assert lab["label"] == lab["label_a1"]


def test_documented_pass_agreement_and_counts():
    labels = _read("labels.jsonl")
    a1, a2 = [x["label_a1"] for x in labels], [x["label_a2"] for x in labels]
    readme = (resources.files("ragassay") / "data" / "judge_calibration" / "README.md").read_text(encoding="utf-8")
    kappa = float(re.search(r"κ = (0\.\d+)", readme).group(1))
    assert round(cohen_kappa_score(a1, a2), 3) == kappa
    assert sum(x == y for x, y in zip(a1, a2, strict=True)) == 244
    assert Counter(x["label"] for x in labels) == {"unsupported": 101, "supported": 68,
                                                   "partially_supported": 62, "cannot_tell": 18}


def test_raw_passes_match_the_merged_file():
    merged = {x["item_id"]: x for x in _read("labels.jsonl")}
    for name, key in (("labels_a1.jsonl", "label_a1"), ("labels_a2.jsonl", "label_a2")):
        assert {x["item_id"]: x["label"] for x in _read(name)} == {k: v[key] for k, v in merged.items()}
