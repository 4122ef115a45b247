"""`ragassay demo` says where its golden labels came from (a synthetic-vs-human line) and how saturated each
stratum is (`golden status` on the demo store), and its report carries the provenance section. Figures are
checked against the bundled authoring file and an SQL + scipy computation over the demo's store."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import yaml
from scipy import stats as sps

from ragassay.cli.app import main
from ragassay.cli.demo import saturation_line, sources_line
from ragassay.golden import bundled_golden_source
from ragassay.store import Store


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    return tmp_path_factory.mktemp("demo") / "d"


@pytest.fixture(scope="module")
def demo_text(demo_out):
    """What `ragassay demo` prints, whitespace collapsed (rich wraps long lines at the console width)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
        main(["demo", "--out", str(demo_out), "--resamples", "200"])
    assert e.value.code in (0, None)
    return " ".join(buf.getvalue().split())


def test_demo_prints_the_golden_sources_counted_from_the_authoring_file(demo_text):
    queries = yaml.safe_load(bundled_golden_source().read_text())["queries"]
    n = len(queries)
    human = sum(q.get("source", "human") == "human" for q in queries)
    synthetic = sum(q.get("source") == "synthetic" for q in queries)
    assert (human, synthetic) == (n, 0)  # the bundled set is written by hand
    assert f"golden sources: human {human} (100%), synthetic 0 (0%) of {n} items" in demo_text
    assert "read the deltas" not in demo_text


def test_demo_saturation_line_matches_sql_and_a_t_interval(demo_out, demo_text):
    threshold, floor = 0.95, 0.90
    with Store.open(demo_out / "ragassay.duckdb", read_only=True) as st:
        con = st.connection
        item = ("SELECT run_id, query_id, any_value(stratum) AS stratum, avg(value) AS v FROM results "
                "WHERE metric = 'recall@10' GROUP BY run_id, query_id")
        cells = con.execute(f"SELECT stratum, run_id, avg(v), stddev_samp(v), count(v), count(*) FROM ({item}) "
                            "GROUP BY stratum, run_id").fetchall()
        with_metric = con.execute("SELECT count(DISTINCT run_id) FROM results WHERE metric = 'recall@10'").fetchone()[0]
        n_runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    verdict: dict[str, bool | None] = {}
    best: dict[str, float] = {}
    for stratum, _, mean, sd, n, _ in cells:
        if n < 2:
            v = None if mean is None or mean >= threshold else False
        else:
            v = bool(mean >= threshold and mean - sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n) >= floor)
        prev = verdict.get(stratum, True)
        verdict[stratum] = False if False in (prev, v) else (None if None in (prev, v) else True)
        if mean is not None:
            best[stratum] = max(best.get(stratum, -1.0), mean)
    saturated = sorted(s for s, v in verdict.items() if v)
    undefined = sorted(s for s, v in verdict.items() if v is None)
    room = max((1 - m, s) for s, m in best.items())
    assert undefined == ["negative"]  # recall has no relevant evidence to find there
    head = (f"saturation (golden status, recall@10 over {with_metric} configurations, {n_runs - with_metric} run(s) "
            f"left out): {len(saturated)} of {len(verdict)} strata saturated")
    assert head in demo_text
    assert f", 1 undefined (negative); most headroom: {room[1]} {room[0]:.3f}" in demo_text


def test_demo_report_has_the_provenance_section(demo_out, demo_text):
    page = (demo_out / "report" / "index.html").read_text(encoding="utf-8")
    assert '<section id="provenance">' in page and 'id="provenance-saturation"' in page
    assert page.count("<tr><td>", page.index('id="provenance-saturation"'), page.index('<section id="manifest">')) == 7


def test_sources_line_of_a_synthetic_and_a_mixed_set():
    pure = sources_line({"source_mix": {"synthetic": 150}}).plain
    assert pure.startswith("golden sources: human 0 (0%), synthetic 150 (100%) of 150 items; golden set: all 150 "
                           "items synthetic — read the deltas, not the absolute means")
    mixed = sources_line({"source_mix": {"human": 30, "synthetic": 10, "production": 10}}).plain
    assert mixed == ("golden sources: human 30 (60%), synthetic 10 (20%), production 10 (20%) of 50 items; golden "
                     "set: 10 of 50 items synthetic (20%); the absolute means lean on them")


def test_saturation_line_names_saturated_and_undefined_strata():
    def stratum(name, saturated, best):
        return {"stratum": name, "metrics": {"m": {"saturated": saturated, "best": best, "best_run": "r",
                                                   "headroom_best": None if best is None else 1 - best}}}

    status = {"metrics": ["m"], "configs": ["a", "b"], "excluded": {"n_other_version": 0, "n_unfinished": 0,
                                                                     "n_missing_metric": 0},
              "strata": [stratum("x", True, 0.98), stratum("y", False, 0.5), stratum("z", None, None)]}
    assert saturation_line(status).plain == ("saturation (golden status, m over 2 configurations): 1 of 3 strata "
                                             "saturated (x), 1 undefined (z); most headroom: y 0.500 (best r 0.500)")
