"""The offline–online gap: one idempotent row per release, online deltas (signal rates and judge-on-sample
quality), offline deltas from compare's machinery, the calibration against numpy, and the escaped report."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import typer
from statsmodels.stats.proportion import confint_proportions_2indep
from tests.online.test_judge_sample import LOCAL, judge_file, validated, write_records

from ragassay.cli.online_flywheel import register
from ragassay.errors import InputError
from ragassay.judges.config import load_judge_config
from ragassay.online.gap import calibration, gap_path, measure_gap, read_gap
from ragassay.online.judge import judge_key, run_online_judge
from ragassay.report.online import calibration_svg, gap_html, gap_report_section
from ragassay.store import RunRecord, Store

DAY0 = datetime(2026, 11, 2, 8, tzinfo=UTC)
# release -> (requests, thumbs-down count, unfaithful answers)
RELEASES = {"v1": (50, 10, 10), "v2": (40, 4, 8), "v3": (60, 3, 6), "v4": (50, 10, 5)}


def releases_traffic():
    rows = []
    for d, (rel, (n, down, bad)) in enumerate(RELEASES.items()):
        for i in range(n):
            rows.append({"request_id": f"{rel}-{i:03d}", "ts": DAY0 + timedelta(days=d, minutes=i), "release": rel,
                         "stratum": "billing" if i % 2 else "shipping", "question": f"q {i}?",
                         "answer": "The moon is cheese." if i < bad else "Refunds take 30 days.",
                         "outcome": "answered", "context": f"Ticket {rel}-{i}. Refunds take 30 days.",
                         "thumbs": -1 if i >= n - down else 1, "n_retrieved": 2})
    return rows


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    Store.open(path).close()
    write_records(path, releases_traffic())
    return path


def rate(rel):
    n, down, _ = RELEASES[rel]
    return down / n


def test_a_signal_delta_is_the_rate_difference_with_the_wald_interval(db):
    out = measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_delta=0.03)
    row = out["row"]
    assert row["previous"] == "v1"
    assert row["online"]["delta"] == pytest.approx(rate("v2") - rate("v1"))
    lo, hi = confint_proportions_2indep(4, 40, 10, 50, method="wald", compare="diff")
    assert (row["online"]["ci_low"], row["online"]["ci_high"]) == pytest.approx((lo, hi))
    assert row["online"]["release"] == {"name": "v2", "value": 0.1, "n": 40}
    assert row["offline"] == {"source": "given", "delta": 0.03, "ci_low": None, "ci_high": None, "n": None}


def test_gap_rows_are_idempotent_per_release_and_metric(db):
    measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_delta=0.03)
    measure_gap(db, "v3", "answer_f1", "signal:thumbs_down", offline_delta=0.01)
    measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_delta=0.05)  # again: replaces v2's row
    measure_gap(db, "v2", "ndcg@10", "signal:thumbs_down", offline_delta=0.02)  # another metric: its own row
    rows = read_gap(db)
    assert [(r["release"], r["metric"]) for r in rows] == [("v2", "answer_f1"), ("v3", "answer_f1"),
                                                            ("v2", "ndcg@10")]
    assert rows[0]["offline"]["delta"] == 0.05
    assert len(gap_path(db).read_text().splitlines()) == 3
    # a damaged line is named, not skipped
    gap_path(db).write_text(gap_path(db).read_text() + "{not json\n")
    with pytest.raises(InputError, match=r"gap.jsonl:4: not a JSON line"):
        read_gap(db)


def test_calibration_matches_numpy_polyfit_and_is_undefined_under_three_releases(db):
    offline = {"v2": 0.04, "v3": 0.01, "v4": -0.02}
    outs = [measure_gap(db, rel, "answer_f1", "signal:thumbs_down", offline_delta=x) for rel, x in offline.items()]
    assert outs[1]["calibration"]["slope"] is None and "2 release(s)" in outs[1]["calibration"]["undefined"]
    cal = outs[2]["calibration"]
    x = np.array(list(offline.values()))
    y = np.array([rate("v2") - rate("v1"), rate("v3") - rate("v2"), rate("v4") - rate("v3")])
    slope, intercept = np.polyfit(x, y, 1)
    assert (cal["slope"], cal["intercept"]) == pytest.approx((slope, intercept))
    assert cal["r"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert cal["n"] == 3 and cal["releases"] == ["v2", "v3", "v4"]
    flat = [{"release": r, "metric": "m", "online_measure": "o", "offline": {"delta": 0.1}, "online": {"delta": v}}
            for r, v in (("a", 0.1), ("b", 0.2), ("c", 0.3))]
    assert "the slope is not identified" in calibration(flat, "m", "o")["undefined"]


def test_the_offline_delta_of_two_stored_runs_is_compares_paired_delta(db):
    rng = np.random.default_rng(1)
    a = rng.random(40)
    b = np.clip(a + 0.05 + rng.normal(0, 0.02, 40), 0, 1)
    with Store.open(db) as st:
        for name, v in (("base", a), ("cand", b)):
            run_id = st.create_run(RunRecord(name=name, dataset_version="ds@1", corpus_digest="sha256:c",
                                             metric_version="m1", config={"name": name}, n_queries=40))
            qids = [f"q{i:02d}" for i in range(40)]
            st.write_batch(run_id, {"query_id": qids, "metric": ["answer_f1"] * 40, "value": v.tolist(),
                                    "stratum": ["s"] * 40}, done=[(q, 0, "done", None) for q in qids])
            st.finish_run(run_id)
    out = measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_runs=["base", "cand"], n_resamples=500)
    off = out["row"]["offline"]
    assert off["source"] == "runs" and (off["baseline"], off["candidate"]) == ("base", "cand")
    assert off["delta"] == pytest.approx(float((b - a).mean()))
    assert off["ci_low"] < off["delta"] < off["ci_high"]
    with pytest.raises(InputError, match="give the offline prediction once"):
        measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_delta=0.1, offline_runs=["base", "cand"])
    _cli(["gap", "--store", str(db), "--release", "v3", "--metric", "answer_f1", "--offline", "base", "cand",
          "--resamples", "500"])
    assert read_gap(db)[-1]["offline"]["delta"] == pytest.approx(off["delta"])


def test_a_judge_delta_reads_the_stored_verdicts_per_release(db, tmp_path):
    """Every request sampled (rate 1): each release's weighted estimate is its exact faithfulness, with no
    sampling variance left (the finite-population correction is 0)."""
    path = judge_file(tmp_path, LOCAL)
    cfg = load_judge_config(path)
    validated(db, cfg)
    run_online_judge(db, cfg, str(path), rate=1.0)
    out = measure_gap(db, "v3", "faithfulness", "judge:faithfulness", offline_delta=0.02,
                      judge_key=judge_key(cfg.pins()))
    on = out["row"]["online"]
    good = {rel: 1 - bad / n for rel, (n, _, bad) in RELEASES.items()}
    assert on["release"]["value"] == pytest.approx(good["v3"]) and on["previous"]["value"] == pytest.approx(good["v2"])
    assert on["delta"] == pytest.approx(good["v3"] - good["v2"])
    assert on["se"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(InputError, match="needs the judge"):
        measure_gap(db, "v3", "faithfulness", "judge:faithfulness", offline_delta=0.02)


def test_bad_releases_and_measures_are_refused(db):
    with pytest.raises(InputError, match="first one in the records"):
        measure_gap(db, "v1", "m", "signal:thumbs_down", offline_delta=0.0)
    with pytest.raises(InputError, match="--release 'v9': no production record carries it"):
        measure_gap(db, "v9", "m", "signal:thumbs_down", offline_delta=0.0)
    with pytest.raises(InputError, match="--online 'signal:sadness'"):
        measure_gap(db, "v2", "m", "signal:sadness", offline_delta=0.0)
    out = measure_gap(db, "v4", "m", "signal:thumbs_down", offline_delta=0.0, previous="v1")
    assert out["row"]["previous"] == "v1" and out["row"]["online"]["delta"] == pytest.approx(0.0)


HOSTILE = "<script>alert(1)</script>&[bold]x[/]"


def test_the_report_fragments_escape_hostile_release_and_metric_names():
    rows = [{"release": HOSTILE, "previous": "v0", "metric": HOSTILE, "online_measure": "signal:thumbs_down",
             "offline": {"delta": x, "ci_low": x - 0.01, "ci_high": x + 0.01},
             "online": {"delta": -x, "ci_low": -x - 0.02, "ci_high": -x + 0.02}} for x in (0.01, 0.02, 0.04)]
    cal = calibration(rows, HOSTILE, "signal:thumbs_down")
    svg = str(calibration_svg(rows, cal))
    page = str(gap_html({"rows": rows, "calibration": cal}))
    for text in (svg, page):
        assert "<script>" not in text and "&lt;script&gt;" in text
    assert svg.startswith("<svg") and svg.count('class="release"') == 3 and 'class="calibration-line"' in svg
    sec = gap_report_section({"rows": rows, "calibration": cal})
    assert sec["tables"][0]["rows"][0][0] == HOSTILE  # raw in the section; the report template escapes it
    assert cal["slope"] == pytest.approx(-1.0)
    assert sec["notes"][0].endswith("slope -1.0000, intercept 0.0000, r -1.000")


def _cli(args):
    app = typer.Typer()
    group = typer.Typer()
    register(group)
    app.add_typer(group, name="online")
    return app(args=["online", *args], standalone_mode=False)


def test_the_gap_command_prints_json_and_writes_the_svg_it_may_replace(db, tmp_path, capsys):
    svg = tmp_path / "gap.svg"
    for rel, x in (("v2", 0.04), ("v3", 0.01), ("v4", -0.02)):
        _cli(["gap", "--store", str(db), "--release", rel, "--metric", "answer_f1", "--offline-delta", str(x),
              "--svg", str(svg), "--json"])
        out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "online-gap" and out["calibration"]["n"] == 3 and out["svg"] == str(svg)
    assert svg.read_text().startswith('<svg class="plot plot-online-gap"')
    other = tmp_path / "mine.svg"
    other.write_text("<svg>my drawing</svg>")
    gap_file = db.parent / f"{db.name}.online" / "gap.jsonl"
    before = gap_file.read_bytes()
    with pytest.raises(InputError, match="refusing to overwrite"):
        _cli(["gap", "--store", str(db), "--release", "v2", "--metric", "answer_f1", "--offline-delta", "0.1",
              "--svg", str(other)])
    assert gap_file.read_bytes() == before  # a refused command records nothing (v2 keeps its 0.04)
    _cli(["gap", "--store", str(db), "--release", "v4", "--metric", "answer_f1", "--offline-delta", "-0.02"])
    text = capsys.readouterr().out
    assert "calibration over 3 releases" in text and "recorded release v4 (vs v3)" in text


def test_the_sections_fit_the_reports_generic_include_view(db, tmp_path):
    """What `report --include` renders: each section passes include.section_view with its undefined cells."""
    from ragassay.online.promote import promote
    from ragassay.report.include import section_view
    from ragassay.report.online import judge_report_section, promote_report_section

    gap = measure_gap(db, "v2", "answer_f1", "signal:thumbs_down", offline_delta=0.03)
    view = section_view(gap_report_section(json.loads(json.dumps(gap))), 0)
    assert view["tables"][0]["rows"][0][0]["text"] == "v2"
    assert "calibration undefined: 1 release(s)" in view["notes"][0]
    path = judge_file(tmp_path, LOCAL)
    cfg = load_judge_config(path)
    validated(db, cfg)
    judged = run_online_judge(db, cfg, str(path), rate=0.2)
    view = section_view(judge_report_section(json.loads(json.dumps(judged))), 1)
    assert len(view["tables"][0]["rows"]) == len(judged["quality"])
    meta = promote(db, tmp_path / "queue", per_stratum=2)
    view = section_view(promote_report_section(json.loads(json.dumps(meta))), 2)
    assert [r[0]["text"] for r in view["tables"][0]["rows"]] == ["billing", "shipping"]
