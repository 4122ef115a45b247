"""Slices and cases: the chapter's 1,200-query weighted identity, tag and field slicing from a golden set,
declared vs exploratory keys, and the case export with traces side by side."""

import datetime as dt
import json

import numpy as np
import pytest
from tests.analyses._runs import make_run

from ragassay.analysis.slicing import export_cases, read_declared, slice_analysis, slice_labels, write_cases
from ragassay.errors import InputError
from ragassay.golden import GoldenSet
from ragassay.golden.schema import GoldenQuery


def _with_means(n: int, mean: float, rng) -> np.ndarray:
    """n scores in [0, 1] whose mean is exactly ``mean`` (a symmetric spread around it)."""
    half = np.minimum(mean, 1 - mean) * rng.uniform(0, 1, n // 2)
    return np.concatenate([mean + half, mean - half])


def test_chapter_example_contributions_sum_to_the_overall_change(store):
    rng = np.random.default_rng(0)
    strata = ["multi_hop"] * 240 + ["single_hop"] * 960
    a = np.concatenate([_with_means(240, 0.68, rng), _with_means(960, 0.80, rng)])
    b = np.concatenate([_with_means(240, 0.83, rng), _with_means(960, 0.78, rng)])
    make_run(store, "off", {"answer_f1": a}, strata=strata)
    make_run(store, "on", {"answer_f1": b}, strata=strata)
    res = slice_analysis(store, "off", "on", n_resamples=300)
    key = res["keys"][0]
    assert key["mean_a"] == pytest.approx(0.776) and key["mean_b"] == pytest.approx(0.79)
    assert key["delta"] == pytest.approx(0.014)
    rows = {r["name"]: r for r in key["slices"]}
    assert rows["multi_hop"]["weight"] == pytest.approx(0.2)
    assert rows["multi_hop"]["contribution"] == pytest.approx(0.03)
    assert rows["single_hop"]["contribution"] == pytest.approx(-0.016)
    assert key["sum_of_contributions"] == pytest.approx(key["delta"])
    assert rows["multi_hop"]["ci_low"] < 0.15 < rows["multi_hop"]["ci_high"]
    assert key["exploratory"] is True


def _golden(n: int) -> GoldenSet:
    qs = [GoldenQuery(query_id=f"q{i:03d}", question=f"question {i}", stratum="s1" if i % 2 else "s2",
                      tags=["held_out"] if i < 4 else [], answerable=i % 5 != 0, reference_answer="x",
                      source="llm" if i % 3 == 0 else "human", created=f"2026-0{1 + i % 2}-15")
          for i in range(n)]
    return GoldenSet(qs, {"dataset_version": "ds@1"})


def test_tag_and_field_slices_partition_every_query(store):
    g = _golden(10)
    qids = [f"q{i:03d}" for i in range(10)]
    held = slice_labels(g, qids, [None] * 10, "tag:held_out")
    assert list(held).count("held_out") == 4 and list(held).count("not held_out") == 6
    assert list(slice_labels(g, qids, [None] * 10, "created")) == ["2026-01", "2026-02"] * 5
    assert list(slice_labels(g, qids, [None] * 10, "source")).count("llm") == 4
    with pytest.raises(InputError, match="needs the golden set"):
        slice_labels(None, qids, [None] * 10, "source")
    with pytest.raises(InputError, match="unknown slice key"):
        slice_labels(g, qids, [None] * 10, "colour")


def test_a_key_is_confirmatory_only_when_declared_before_both_runs(store, tmp_path):
    make_run(store, "a", {"answer_f1": np.linspace(0, 1, 10)})
    make_run(store, "b", {"answer_f1": np.linspace(0.1, 1, 10)})
    early = tmp_path / "early.yaml"
    early.write_text("declared_at: 2000-01-01T00:00:00\nslices: [stratum]\n")
    late = tmp_path / "late.yaml"
    late.write_text(f"declared_at: {(dt.datetime.now() + dt.timedelta(days=2)).isoformat()}\nslices: [stratum]\n")
    g = _golden(10)
    res = slice_analysis(store, "a", "b", by=("stratum", "source"), golden=g, declared=read_declared(early),
                         n_resamples=100)
    assert [k["exploratory"] for k in res["keys"]] == [False, True]
    res = slice_analysis(store, "a", "b", golden=g, declared=read_declared(late), n_resamples=100)
    assert res["keys"][0]["exploratory"] is True


def test_case_export_lists_gains_losses_random_and_severe(store, tmp_path):
    a = np.array([1.0, 0.5, 0.2, 0.9, 0.0, 0.6])
    b = np.array([0.0, 0.9, 0.2, 0.1, 1.0, 0.6])
    make_run(store, "a", {"answer_f1": a, "error": np.zeros(6)})
    make_run(store, "b", {"answer_f1": b, "error": np.array([0, 0, 0, 0, 0, 1.0])})
    ex = export_cases(store, "a", "b", n_top=2, n_random=3, golden=_golden(6))
    kinds = {}
    for c in ex["cases"]:
        kinds.setdefault(c["kind"], []).append(c["query_id"])
    assert kinds["gain"] == ["q004", "q001"] and kinds["loss"] == ["q000", "q003"]
    assert len(kinds["random"]) == 3
    # q000 lost a correct answer (1 -> 0); q005 errored
    assert kinds["severe"] == ["q000", "q005"]
    md = write_cases(ex, tmp_path / "cases.md").read_text()
    assert "## severe: q005" in md and "question 5" in md
    lines = (write_cases(ex, tmp_path / "cases.jsonl")).read_text().splitlines()
    assert json.loads(lines[0])["query_id"] == "q004"
