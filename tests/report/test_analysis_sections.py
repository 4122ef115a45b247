"""The report's analysis sections: computed from stored runs and traces, their numbers on the page, undefined
shown as undefined, every user string inert; and `compare` printing the change split into delivery and use."""

from __future__ import annotations

import html as htmllib
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from report_fixtures import HOSTILE, make_data
from tests.analyses._runs import make_run

from ragassay.analysis.compare import compare_runs
from ragassay.analysis.report_data import RunTraces, analysis_sections, read_report_traces
from ragassay.cli.app import main
from ragassay.report import fmt, render_report
from ragassay.store import Store

BAD = "<script>alert(1)</script>"


def _system(hits: int, hit_correct: int, miss_correct: int, n: int = 400):
    """The chapter's runbook systems: y correct, h complete evidence delivered."""
    h, y = np.zeros(n), np.zeros(n)
    h[:hits] = 1
    y[:hit_correct] = 1
    y[hits:hits + miss_correct] = 1
    return y, h


def _section_text(page: str, anchor: str) -> str:
    i = page.index(f'<section id="{anchor}"')
    body = page[i:page.index("</section>", i)]
    return re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture
def runbook(tmp_path):
    """Two stored runs of 400 queries with the chapter's numbers: A = 0.66 for both, h = 0.85 and 0.65."""
    with Store.open(tmp_path / "r.duckdb") as st:
        ids = []
        for name, (hits, hc, mc) in (("sys1", (340, 255, 9)), ("sys2", (260, 252, 12))):
            y, h = _system(hits, hc, mc)
            ids.append(make_run(st, name, {"answer_f1": y, "recall@context": h,
                                           "recall@fusion_depth": np.clip(h + 0.1, 0, 1)}))
        yield st, [st.get_run(i) for i in ids]


def test_decomposition_and_slices_sections_carry_the_runbook_numbers_onto_the_page(runbook, tmp_path):
    st, recs = runbook
    comp = compare_runs(st, recs[0].run_id, recs[1].run_id, n_resamples=300)
    sec = analysis_sections(st, recs, None, {}, [comp], n_resamples=300)
    assert set(sec) == {"analysis_resamples", "decomposition", "slices"}  # no oracle run, traces or trials
    d1, d2 = (r["rows"][0] for r in sec["decomposition"]["runs"])
    assert d1["h"]["value"] == pytest.approx(0.85) and d1["c1"]["value"] == pytest.approx(0.75)
    assert d2["c0"]["value"] == pytest.approx(3 / 35) and d2["A"]["value"] == pytest.approx(0.66)
    change = sec["decomposition"]["changes"][0]["rows"][0]["change"]
    u = ((0.75 - 0.15) + (63 / 65 - 3 / 35)) / 2
    assert change["delivery"]["value"] == pytest.approx(u * (0.65 - 0.85))
    assert change["delivery"]["value"] + change["use"]["value"] == pytest.approx(0.0, abs=1e-12)
    key = sec["slices"][0]["keys"][0]
    assert key["by"] == "stratum" and key["sum_of_contributions"] == pytest.approx(key["delta"])

    page = render_report({"title": "t", "runs": [{"name": r.name} for r in recs], **sec}, tmp_path / "out")
    page = page.read_text(encoding="utf-8")
    text = _section_text(page, "decomposition")
    assert "sys1 all 400 0.660" in text and "0.850" in text and "0.750" in text and "300 resamples" in text
    assert f"{u * (0.65 - 0.85):+.3f}".replace("-", "−") in text  # the delivery term, signed
    slices = _section_text(page, "slices")
    for r in key["slices"]:
        assert f"{r['name']} {r['n']} {r['weight']:.3f} {r['mean_a']:.3f} {r['mean_b']:.3f}" in slices
    assert "Δ 0.000 over 400 queries = Σ contributions 0.000" in slices  # A is 0.66 for both systems
    assert "exploratory" in slices


def test_an_empty_cell_is_undefined_on_the_page_not_zero(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as st:
        # every query delivered: no miss cell, so c0 is undefined, and so is the split between runs
        rid = make_run(st, "all-hit", {"answer_f1": np.r_[np.ones(10), np.zeros(10)], "recall@context": np.ones(20)})
        sec = analysis_sections(st, [st.get_run(rid)], None, {}, n_resamples=200)
    row = sec["decomposition"]["runs"][0]["rows"][0]
    assert row["c0"]["value"] is None and row["c0"]["defined"] is False
    page = render_report({"title": "t", "runs": [{"name": "all-hit"}], **sec}, tmp_path / "out")
    text = _section_text(page.read_text(encoding="utf-8"), "decomposition")
    assert "all-hit all 20 0.500" in text and text.count("undefined n=0") == 1


def test_stage_latency_section_matches_the_traces_percentiles(tmp_path):
    rng = np.random.default_rng(3)
    n = 500
    a, b = rng.gamma(2.0, 10.0, n), rng.gamma(2.0, 30.0, n)
    total = a + b + rng.gamma(1.0, 2.0, n)
    path = tmp_path / "run.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"type": "trace", "query_id": f"q{i}", "trial": 0, "outcome": "abstained",
                                 "durations_ms": {"retrieve": a[i], "generate": b[i], "total": total[i]}}) + "\n")
    traces = read_report_traces(path)
    assert traces.problems == [] and len(traces.durations) == n
    rec = SimpleNamespace(run_id="r1", name="run", trials=1)
    sec = analysis_sections(None, [rec], None, {"r1": traces}, skip=("decomposition", "oracle_ladder"))
    lat = sec["latency_stages"][0]
    p99 = float(np.percentile(total, 99, method="inverted_cdf"))
    stage_p99 = sum(float(np.percentile(x, 99, method="inverted_cdf")) for x in (a, b))
    assert lat["end_to_end"]["p99"] == pytest.approx(p99) and p99 in total  # a latency some request had
    assert lat["sum_of_stage_percentiles"]["p99"] == pytest.approx(stage_p99)
    slow = (a > np.percentile(a, 99, method="inverted_cdf")) | (b > np.percentile(b, 99, method="inverted_cdf"))
    assert lat["exceedance"]["observed_any"] == pytest.approx(slow.mean())
    page = render_report({"title": "t", "runs": [{"name": "run"}], **sec}, tmp_path / "out").read_text()
    text = _section_text(page, "latency-stages")
    assert f"end to end (per-request total) {n} " in text
    assert f"{fmt.ms(p99)} sum of stage percentiles (not a latency) " in text and f" {fmt.ms(stage_p99)} " in text
    assert f"observed {slow.mean():.4f} of {n} requests" in text


def test_a_trace_with_non_numeric_durations_is_counted_not_crashed_on(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"type": "trace", "query_id": "q1", "outcome": "abstained",
                                "durations_ms": {"total": "fast"}}) + "\n")
    traces = read_report_traces(path)
    assert traces.problems == [(1, "durations_ms must map stage names to numbers of milliseconds")]
    assert traces.durations == []


def test_consistency_section_clusters_the_answers_the_report_read(tmp_path):
    with Store.open(tmp_path / "r.duckdb") as st:
        # q000 passes 4 of 5 trials, q001 all 5
        f1 = np.r_[[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]].astype(float)
        rid = make_run(st, "rep", {"answer_f1": f1}, trials=5)
        rec = st.get_run(rid)
        answers = ["x", "x", "x", "x", "y"]  # q000: clusters (4, 1): modal 0.8, pair agreement 6/10
        tr = RunTraces(shown={"q000": ("answered", "x", []), "q001": ("answered", "z", [])},
                       later_trials={**{("q000", t): ("answered", answers[t]) for t in range(1, 5)},
                                     **{("q001", t): ("answered", "z") for t in range(1, 5)}})
        sec = analysis_sections(st, [rec], None, {rid: tr}, skip=("decomposition", "oracle_ladder"))
    c = sec["consistency"][0]
    assert c["trials"] == 5 and c["answers_clustered"] is True
    assert c["summary"]["pass@1"] == pytest.approx(0.9) and c["summary"]["pass^5"] == pytest.approx(0.5)
    assert c["summary"]["modal_fraction"] == pytest.approx((0.8 + 1.0) / 2)
    assert c["summary"]["pair_agreement"] == pytest.approx((0.6 + 1.0) / 2)
    page = render_report({"title": "t", "runs": [{"name": "rep"}], **sec}, tmp_path / "out").read_text()
    text = _section_text(page, "consistency")
    assert "pass@1 0.900" in text and "pass^5 0.500" in text and "modal fraction 0.900" in text
    assert "pair agreement 0.800" in text and "q000 5 0.800 0.000" in text and "4 + 1" in text


def _hostile_sections() -> dict:
    stat = {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 10, "defined": True}
    undefined = {"value": None, "ci_low": None, "ci_high": None, "n": 0, "defined": False}
    row = {"stratum": HOSTILE, "n": 10, "n_excluded": 0, "A": stat, "h": stat, "c1": stat, "c0": undefined}
    run = {"run": {"name": HOSTILE}, "correct_rule": BAD, "delivery_rule": BAD, "rows": [{**row, "stratum": "all"}, row]}
    change = {"run_a": {"name": HOSTILE}, "run_b": {"name": BAD},
              "rows": [{"stratum": "all", "a": row, "b": row,
                        "change": {"n": 10, "delta_A": stat, "delivery": stat, "use": undefined}}]}
    return {
        "analysis_resamples": 2000,
        "decomposition": {"runs": [run], "changes": [change], "skipped": [{"run": HOSTILE, "reason": BAD}],
                          "n_resamples": 2000},
        "oracle_ladder": {"correct_rule": BAD, "rungs": [{"name": HOSTILE, "oracle": True, "correct": stat}],
                          "diagnosis": BAD, "best_pipeline": HOSTILE, "oracle_gap": stat},
        "slices": [{"run_a": {"name": HOSTILE}, "run_b": {"name": "b"}, "metric": BAD,
                    "keys": [{"by": HOSTILE, "exploratory": True, "n": 3, "delta": 0.1, "sum_of_contributions": 0.1,
                              "slices": [{"name": HOSTILE, "n": 3, "weight": 1.0, "mean_a": 0.2, "mean_b": 0.3,
                                          "delta": 0.1, "ci_low": 0.05, "ci_high": 0.15, "p_adj": 0.01,
                                          "contribution": 0.1}]}]}],
        "latency_stages": [{"run": HOSTILE, "stages": {HOSTILE: {"n": 3, "p50": 1.0, "p90": 2.0, "p99": 3.0}},
                            "end_to_end": {"n": 3, "p50": 1.5, "p90": 2.5, "p99": 3.5},
                            "sum_of_stage_percentiles": {"p50": 1.0, "p99": 3.0},
                            "exceedance": {"threshold_rule": BAD, "observed_any": 0.1, "independent_prediction": 0.1,
                                           "lower_bound": 0.1, "union_bound": 0.1, "n": 3}}],
        "consistency": [{"run": {"name": HOSTILE}, "trials": 3, "correct_rule": BAD, "cluster_rule": BAD,
                         "note": BAD, "summary": {"n_items": 1, "k": 3, "pass@1": 0.5, "pass^3": 0.0},
                         "high_variance_items": [{"item": HOSTILE, "trials": 3, "pass@1": 0.5, "pass^3": 0.0,
                                                  "pass_variance": 0.25, "clusters": [2, 1]}]}],
        "attribution": {"metric": BAD, "policy": {"duplicates": BAD}, "shapley": BAD, "n_queries": 1, "calls": 3,
                        "n_undefined": 0, "limit_note": BAD,
                        "groups": [{"group": HOSTILE, "figure": BAD, "n_queries": 1, "mean": 0.1, "ci_low": 0.0,
                                    "ci_high": 0.2, "defined": True}],
                        "top_queries": [{"query_id": HOSTILE, "stratum": HOSTILE, "baseline": 0.5, "empty": 0.0,
                                         "method": BAD, "items": [{"doc_id": HOSTILE, "start": 0, "end": 5,
                                                                   "relevant": True, "loo_delta": 0.2,
                                                                   "shapley": None}]}]},
        "ablation": {"name": HOSTILE, "metric": BAD, "margin": 0.02, "placebo": {"passed": True, "delta": 0.0},
                     "expectations": [{"stratum": HOSTILE, "role": BAD, "expect": "help", "n": 5, "delta": 0.1,
                                       "ci_low": 0.05, "ci_high": 0.2, "verdict": "confirmed"}]},
    }


def test_hostile_text_in_every_analysis_section_stays_inert(tmp_path):
    data = {**make_data(hostile=True), **_hostile_sections()}
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    assert page.count("<script") == 2  # the report's own script and its per-query data, nothing injected
    assert "<script>alert(1)" not in page and "<img" not in page and "<svg onload" not in page
    for anchor in ("oracle", "decomposition", "slices", "latency-stages", "consistency", "attribution", "ablation"):
        i = page.index(f'<section id="{anchor}"')
        body = page[i:page.index("</section>", i)]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, anchor
        assert "onerror=" not in re.sub(r"&lt;img src=x onerror=alert\(1\)&gt;", "", body), anchor
        assert f'href="#{anchor}"' in page  # listed in the navigation
    assert "undefined" in _section_text(page, "decomposition")  # c0 and the use term


def test_malformed_section_numbers_are_refused_with_the_path(tmp_path):
    from ragassay.errors import SchemaError

    bad = _hostile_sections()
    bad["decomposition"]["runs"][0]["rows"][0]["A"] = {"value": "0.5", "n": 10, "defined": True}
    with pytest.raises(SchemaError, match=r"decomposition\.runs\[0\]\.rows\[0\]\.A\.value"):
        render_report({"title": "t", "runs": [], **bad}, tmp_path / "out")


def test_compare_prints_the_change_split_into_delivery_and_use(runbook, tmp_path, capsys):
    st, recs = runbook
    db = str(st.path)
    st.close()
    for args in ([], ["--json"]):
        with pytest.raises(SystemExit) as e:
            main(["compare", "sys1", "sys2", "--store", db, "--resamples", "200", "--overall-only", *args])
        assert e.value.code in (0, None)
    out = capsys.readouterr().out
    text, blob = out[:out.index("{")], json.loads(out[out.index("{"):])
    u = ((0.75 - 0.15) + (63 / 65 - 3 / 35)) / 2
    d = u * (0.65 - 0.85)
    assert re.search(rf"ΔA [+-]0\.000 \[[^\]]+\] = delivery {re.escape(f'{d:+.3f}')} \[[^\]]+\] \+ use "
                     rf"{re.escape(f'{-d:+.3f}')} \[",
                     " ".join(text.split()))
    assert "h 0.850 → 0.650, c1 0.750 → 0.969, c0 0.150 → 0.086" in " ".join(text.split())
    change = blob["decomposition"]["rows"][0]["change"]
    assert change["delivery"]["value"] == pytest.approx(u * (0.65 - 0.85)) and blob["decomposition_skipped"] is None
    assert blob["decomposition"]["n_resamples"] == 2000


def test_compare_skips_the_split_quietly_when_a_run_lacks_recall_at_context(tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    with Store.open(db) as st:
        for name in ("a", "b"):
            make_run(st, name, {"answer_f1": np.linspace(0, 1, 30)})
    with pytest.raises(SystemExit) as e:
        main(["compare", "a", "b", "--store", str(db), "--resamples", "200", "--json"])
    assert e.value.code in (0, None)
    blob = json.loads(capsys.readouterr().out)
    assert blob["decomposition"] is None and blob["decomposition_skipped"] == "run a has no recall@context rows"


def test_analysis_resamples_are_capped_at_scale_and_the_page_says_so(tmp_path):
    from ragassay.analysis.report_data import ANALYSIS_DRAW_BUDGET, capped_resamples

    assert capped_resamples(2000, 171) == 2000 and capped_resamples(2000, 25_000) == 2000
    assert capped_resamples(2000, 100_000) == 500 == ANALYSIS_DRAW_BUDGET // 100_000
    assert capped_resamples(2000, 10_000_000) == 500 and capped_resamples(300, 100_000) == 300
    data = {"title": "t", "runs": [{"name": "x"}], **_hostile_sections(), "analysis_resamples": 500,
            "analysis_resamples_note": "capped from 2,000 at 100,000 queries to bound the report's build time"}
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    assert "500, capped from 2,000 at 100,000 queries" in _section_text(page, "decomposition")
