"""The demo validates its local judge on the bundled calibration set before comparing anything, judges every
run with it, and shows faithfulness only beside that judge's validation status (issue 13 item 6).

One demo run into a temporary folder is shared by the module; the oracles are scikit-learn on the same judge
outputs and the store's own rows.
"""

from __future__ import annotations

import copy
import html as htmllib
import io
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from markupsafe import escape
from rich.console import Console
from sklearn.metrics import cohen_kappa_score, confusion_matrix, recall_score

from ragassay.analysis.demo import DEMO_CONFIGS, demo_judge_config, run_demo
from ragassay.cli.demo import _claim_rows, _judge_block, _stage_table, demo_json
from ragassay.judges.labels import bundled_labels, load_labels
from ragassay.judges.validate import run_judge
from ragassay.report import analyses
from ragassay.report.html import _environment, build_context
from ragassay.store import Store
from ragassay.trace.io import read_traces

pytestmark = pytest.mark.slow  # one whole demo (four pipelines, judge, comparisons, report): 15-25 s here

CLASSES = ("not_supported", "supported")
PAYLOAD = "<script>document.title='PWNED'</script><img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("demo-judges") / "out", n_resamples=1_000)


@pytest.fixture(scope="module")
def judge_outputs():
    """The lexical judge's binary verdicts on the bundled set, humans' cannot_tell left out, as codes."""
    labels = load_labels(bundled_labels())
    judged, _ = run_judge(demo_judge_config(), labels.items)
    human = {"supported": 1, "partially_supported": 0, "unsupported": 0}
    pairs = [(human[it.label], int(j.label == "supported")) for it, j in zip(labels.items, judged, strict=True)
             if it.label != "cannot_tell" and j.label is not None]
    h, j = (np.array(x) for x in zip(*pairs, strict=True))
    return h, j


def test_demo_kappa_and_class_recall_equal_sklearn_on_the_same_judge_outputs(demo, judge_outputs):
    h, j = judge_outputs
    v = demo.judge_validation["summary"]
    assert v["judge_model"] == "local:lexical" and v["n"] == h.size and v["n_items"] == 249
    assert v["kappa"]["value"] == pytest.approx(cohen_kappa_score(h, j), abs=1e-12)
    assert v["kappa"]["value"] == pytest.approx(0.493, abs=0.0005)
    recall = recall_score(h, j, average=None, labels=[0, 1])
    for i, c in enumerate(CLASSES):
        assert v["recall"][c]["value"] == pytest.approx(recall[i], abs=1e-12)
        assert v["recall"][c]["ci_low"] <= recall[i] <= v["recall"][c]["ci_high"]
    assert v["kappa"]["ci_low"] < v["kappa"]["value"] < v["kappa"]["ci_high"]
    assert v["min_class_recall"] == pytest.approx(recall.min(), abs=1e-12)
    # the lexical judge fails the default floor on kappa, so its metrics are unvalidated everywhere
    assert v["meets_floor"] is False and v["status"] == "unvalidated"
    k = v["kappa"]
    assert v["floor_detail"].startswith(f"kappa 0.493 [{k['ci_low']:.3f}, {k['ci_high']:.3f}]: lower bound "
                                        f"{k['ci_low']:.3f} < 0.6 (validation {v['validation_id']}, binary scale")
    assert v["floor"] == {"min_kappa": 0.6, "min_class_recall": 0.5, "min_per_class": 10, "min_items": 100}
    assert v["labelled_by"] == "automated"
    # the record the store keeps is the same validation
    with Store.open(demo.out / "ragassay.duckdb", read_only=True) as st:
        recs = st.judge_validations(judge_model="local:lexical", kind="support")
    assert len(recs) == 1 and recs[0]["validation_id"] == v["validation_id"]
    assert recs[0]["kappa"] == pytest.approx(cohen_kappa_score(h, j), abs=1e-12) and recs[0]["n"] == h.size
    # --json carries the summary and every run's statuses
    out = demo_json(demo)["judge_validation"]
    assert out["validation"] == v and set(out["statuses"]) == set(DEMO_CONFIGS)


def test_faithfulness_rows_exist_for_every_demo_run_and_are_null_where_nothing_was_answered(demo):
    pins = demo_judge_config().pins()
    with Store.open(demo.out / "ragassay.duckdb", read_only=True) as st:
        for name in DEMO_CONFIGS:
            run_id = demo.run_ids[name]
            rec = st.get_run(run_id)
            assert rec.judge_model == pins["judge_model"] and rec.rubric_sha == pins["rubric_sha"]
            rows = st.results(run_id, ["faithfulness"]).to_pydict()
            assert sorted(rows["query_id"]) == sorted(q.query_id for q in demo.golden.queries)
            values = {q: v for q, v in zip(rows["query_id"], rows["value"], strict=True)}
            _, traces, problems = read_traces(demo.out / "traces" / f"{run_id}.jsonl")
            assert not problems
            unanswered = {t.query_id for t in traces if t.outcome != "answered"}
            assert all(values[q] is None for q in unanswered)
            defined = np.array([v for v in values.values() if v is not None])
            assert defined.size > 50 and ((defined >= 0) & (defined <= 1)).all()
            # the demo's table mean is the mean of the stored rows, and carries the status
            row = next(m for m in demo.summaries[name]["metrics"] if m["metric"] == "faithfulness")
            assert row["mean"] == pytest.approx(defined.mean(), abs=1e-12)
            assert row["n_undefined"] == len(values) - defined.size
            assert row["judge_status"] == "unvalidated"
            assert demo.judge_validation["statuses"][name]["faithfulness"]["status"] == "unvalidated"


def test_faithfulness_claims_carry_the_unvalidated_marker_and_the_gate_is_untouched(demo):
    for comp in demo.comparisons:
        status = next(s for s in comp.judge_validation if s["metric"] == "faithfulness")
        assert status["status"] == "unvalidated"
        assert any("kappa 0.493 [" in r and "lower bound" in r and "< 0.6" in r for r in status["reasons"])
        row = comp.overall("faithfulness")
        assert row is not None and row.defined
        claim = comp.claim(row)
        assert claim.startswith("faithfulness ") and "[rests on an unvalidated judge: " in claim
        faith = [c for c in comp.claims if c.startswith("faithfulness ")]
        assert faith == [claim]
        # the terminal prints the faithfulness claim in every comparison, with its marker
        printed = [comp.claim(r) for r in _claim_rows(comp)]
        assert claim in printed
    # the gate's policy names no judge metric: its checks are the ones it always had
    assert {c.name for c in demo.gate.checks} >= {"recall@fusion_depth", "ndcg@5"}
    assert not any(c.name in ("faithfulness", "citation_precision") for c in demo.gate.checks)


def _rendered(renderable) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(renderable)
    return buf.getvalue()


def test_terminal_never_shows_faithfulness_without_its_status(demo):
    table = _rendered(_stage_table(demo.summaries))
    line = next(x for x in table.splitlines() if " faithfulness " in x)
    cells = [c.strip() for c in line.split("│")[2:]]
    assert len(cells) == len(DEMO_CONFIGS)
    for name, cell in zip(demo.summaries, cells, strict=True):
        mean = next(m["mean"] for m in demo.summaries[name]["metrics"] if m["metric"] == "faithfulness")
        assert cell == f"{mean:.3f} (unvalidated)"
    block = "\n".join(str(t) for t in _judge_block(demo.judge_validation["summary"]))
    v = demo.judge_validation["summary"]
    k = v["kappa"]
    assert f"kappa {k['value']:.3f} [{k['ci_low']:.3f}, {k['ci_high']:.3f}]" in block
    for c in CLASSES:
        assert f"{c} {v['recall'][c]['value']:.3f} [" in block
    assert ("does NOT meet the gate floor (at the lower end of each interval kappa ≥ 0.6 and every class recall "
            "≥ 0.5, over ≥ 100 items and 10 per class, on labels given by people)") in block
    assert f"{v['n']} of 249 items compared (human_cannot_tell 18 left out)" in block


def test_the_demo_validates_two_kinds_and_measures_a_cascade_saving(demo):
    """Support on the calibration set and citation support on the bundled example, each a stored record that
    the gate's matching uses; and the lexical → embedding cascade's time saving with its interval."""
    kinds = demo.judge_validation["kinds"]
    assert list(kinds) == ["support", "citation"]
    assert kinds["citation"]["metrics"] == ["citation_precision", "citation_recall"]
    # both rest on automated labels, so neither earns the floor, and the metrics they speak for say so
    for v in kinds.values():
        assert v["labelled_by"] == "automated" and v["meets_floor"] is False
    assert "the labels are automated (a model or a script), not people's" in kinds["citation"]["floor_detail"]
    for name in demo.run_ids:
        st = demo.judge_validation["statuses"][name]
        assert st["citation_precision"]["status"] == "unvalidated"
        assert kinds["citation"]["validation_id"] in st["citation_precision"]["reason"]
    c = demo.judge_validation["cascade"]
    assert (c["tier1"], c["tier2"]) == ("local:lexical", "local:embedding")
    assert round(c["escalated"]["value"], 2) == 0.44  # the README's "escalates 44% of the items"
    saved = c["latency"]["saved"]
    # the saving is measured: 1 - (tier-1 time + escalated tier-2 time) / tier-2 time on every item
    assert saved["value"] == pytest.approx(1 - c["latency"]["cascade_ms"] / c["latency"]["tier2_alone_ms"])
    assert 0 < saved["ci_low"] <= saved["value"] <= saved["ci_high"] < 1
    assert c["cost"]["saved"]["value"] is None  # both tiers are local: no money to save, undefined not 0
    with Store.open(demo.out / "ragassay.duckdb", read_only=True) as st:
        stored = {r["validation_id"]: r for r in st.judge_validations()}
    assert {kinds["support"]["validation_id"], kinds["citation"]["validation_id"], c["validation_id"]} <= set(stored)
    assert stored[c["validation_id"]]["cascade"]["tier1"] == "local:lexical"


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, [k for k, _ in attrs]))


def _page(section: dict) -> str:
    """The report page with the judge-validation section, rendered by the report's own template."""
    ctx = build_context({"title": "judges", "runs": [{"name": n} for n in DEMO_CONFIGS]})
    ctx["judge_validation"] = analyses.judge_validation_view(section)
    return _environment().get_template("report.html.j2").render(**ctx)


def test_report_section_shows_kappa_confusion_probes_and_statuses(demo, judge_outputs):
    section = demo.judge_validation["section"]
    page = _page(section)
    body = re.search(r'<section id="judge-validation">.*?</section>', page, flags=re.S).group(0)
    k = section["kappa"]
    assert f'<span class="jv-kappa">{k["value"]:.3f}</span> <span class="note">[{k["ci_low"]:.3f}, ' \
           f'{k["ci_high"]:.3f}]</span>' in body
    assert "<strong>Unvalidated.</strong>" in body
    assert f"kappa 0.493 [{k['ci_low']:.3f}, {k['ci_high']:.3f}]: lower bound {k['ci_low']:.3f} &lt; 0.6" in body
    h, j = judge_outputs
    conf = confusion_matrix(h, j, labels=[0, 1])
    for i, c in enumerate(CLASSES):
        cells = "".join(f'<td class="num">{v}</td>' for v in conf[i])
        assert f"<tr><td>{c}</td>{cells}</tr>" in body
    slope = section["bias"]["verbosity_slope_per_100_words"]
    assert f"{'−' if slope['value'] < 0 else '+'}{abs(slope['value']):.3f}" in body
    for case, row in section["by_case"].items():
        assert f"<td>{case}</td><td class=\"num\">{row['n']}</td><td class=\"num\">{row['agreement']:.3f}</td>" in body
    # every judge metric of every run is listed with its status, never a bare number
    text = htmllib.unescape(re.sub(r"<[^>]+>", " ", body))
    for m in section["metrics"]:
        assert m["status"] == "unvalidated"
        assert re.search(rf"{m['run']}\s+{m['metric']}\s+\S+\s+unvalidated", text)
    assert len(section["metrics"]) == 4 * len(DEMO_CONFIGS)
    # reliability bins of P(bad) on the report split, before and after recalibration, as the record has them
    rel = section["reliability"]
    assert rel["raw"] and rel["recalibrated"]
    assert sum(b["count"] for b in rel["raw"]) == sum(b["count"] for b in rel["recalibrated"])
    for b in rel["raw"] + rel["recalibrated"]:
        assert (f'<td class="num">{b["mean_score"]:.3f}</td><td class="num">{b["frac_positive"]:.3f}</td>'
                f'<td class="num">{b["count"]}</td>') in body


def test_report_section_stays_inert_with_hostile_text(demo):
    section = copy.deepcopy(demo.judge_validation["section"])
    section["judge_model"] = PAYLOAD
    section["by_case"] = {PAYLOAD: {"n": 3, "agreement": 0.5}}
    section["metrics"][0]["reason"] = PAYLOAD
    section["metrics"][0]["run"] = PAYLOAD
    page = _page(section)
    body = re.search(r'<section id="judge-validation">.*?</section>', page, flags=re.S).group(0)
    assert PAYLOAD not in page and str(escape(PAYLOAD)) in body
    parser = _Tags()
    parser.feed(body)
    assert not {t for t, _ in parser.tags} & {"script", "img"}
    assert not [a for _, attrs in parser.tags for a in attrs if a.startswith("on")]
    # the page's own script is its only one
    assert len(re.findall(r"<script\b", page)) == 1


def test_report_view_refuses_a_malformed_confusion_matrix(demo):
    from ragassay.errors import SchemaError

    section = copy.deepcopy(demo.judge_validation["section"])
    section["confusion"] = [[1, 2, 3]]
    with pytest.raises(SchemaError, match=r"judge_validation.confusion` must be 2 x 2"):
        analyses.judge_validation_view(section)
