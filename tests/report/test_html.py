"""The HTML report: sections, numbers, undefined values, SVG geometry, escaping, no network, atomic write."""

from __future__ import annotations

import base64
import hashlib
import html as htmllib
import json
import math
import os
import re
import statistics
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import N_QUERIES, PAYLOADS, PWN_IMG, PWN_SCRIPT, make_data

from ragassay.errors import InputError, SchemaError
from ragassay.report import fmt as F
from ragassay.report import render_report

PLOTS = ("plot-forest", "plot-recall", "plot-rerank", "plot-abstention", "plot-latency")
SECTIONS = (
    "gate",
    "comparisons",
    "forest",
    "stages",
    "strata",
    "recall",
    "rerank",
    "abstention",
    "latency",
    "oracle",
    "runs",
    "manifest",
    "worst",
    "per-query",
)


class _Collect(HTMLParser):
    """Every start tag with its attributes, and the visible text outside <script>/<style>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, d):
        if not self._skip:
            self.text.append(d)


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    return p


def _render(data: dict, tmp_path: Path) -> str:
    return render_report(data, tmp_path / "out").read_text(encoding="utf-8")


def _embedded(page: str) -> tuple[str, dict]:
    """The per-query data block as written in the page, and what JSON.parse reads from it."""
    raw = re.search(r'<script type="application/json" id="q-data">(.*?)</script>', page, flags=re.S).group(1)
    return raw, json.loads(raw)


def _svgs(page: str) -> dict[str, ET.Element]:
    out = {}
    for block in re.findall(r"<svg\b.*?</svg>", page, flags=re.S):
        root = ET.fromstring(block)
        cls = next(c for c in root.get("class", "").split() if c.startswith("plot-"))
        out[cls] = root
    return out


def test_every_section_and_plot_renders(data, tmp_path):
    page = _render(data, tmp_path)
    ids = {a.get("id") for _, a in _parse(page).tags}
    for s in SECTIONS:
        assert s in ids, s
    assert set(_svgs(page)) == set(PLOTS)
    # the rows are data for the page's script, not pre-built elements
    assert page.count('<tbody class="q"') == 0
    _, q = _embedded(page)
    assert q["id"] == [x["query_id"] for x in data["queries"]] and len(q["id"]) == N_QUERIES
    assert re.search(r'<table id="queries"', page)
    # the nav lists exactly the rendered sections
    nav = re.search(r"<nav.*?</nav>", page, flags=re.S).group(0)
    assert re.findall(r'href="#([^"]+)"', nav) == list(SECTIONS)


def test_minimal_report_renders_only_what_is_given(tmp_path):
    page = _render({"title": "just runs", "runs": [{"name": "a", "run_id": "r1"}]}, tmp_path)
    ids = {a.get("id") for _, a in _parse(page).tags}
    assert "runs" in ids
    assert not (ids & (set(SECTIONS) - {"runs"}))
    assert "<svg" not in page
    assert "<title>just runs</title>" in page


def test_comparison_numbers_are_formatted(data, tmp_path):
    page = _render(data, tmp_path)
    text = " ".join(_parse(page).text)
    for s in (
        "+0.070",
        "[0.030, 0.110]",
        "<0.001",
        "0.002",
        "−0.125",
        "[-0.200, -0.010]",
        "9/3/12",
        "0.143",
        "0.812",
        "0.625",
        "0.833",
        "demo-2024.1",
        "c0ffee2",
    ):
        assert s in text, s
    # claim sentences and the config diff are shown verbatim
    assert "recall@10 went from 0.610 to 0.700 (+0.070, 95% paired-bootstrap CI [0.030, 0.110]" in text
    assert re.search(r"retrieval\.fusion\.depth</th><td[^>]*>50</td><td[^>]*>52</td>", page)


def test_undefined_values_are_shown_as_undefined_with_counts(data, tmp_path):
    page = _render(data, tmp_path)
    text = " ".join(_parse(page).text)
    assert not re.search(r"\bnan\b", text, flags=re.I)
    # stage table: value None with n_undefined=24, NaN without counts, defined values with their undefined count
    assert re.search(r'undefined <span class="note">\(n=24\)</span>', page)
    assert re.search(r'0\.812 <span class="note">\(6 undefined\)</span>', page)
    stage = re.search(r'<section id="stages">.*?</section>', page, flags=re.S).group(0)
    assert stage.count(">undefined") == 2
    # the all-undefined comparison row prints "undefined", never 0
    row = re.search(r"<tr class=\"overall\"><td class=\"mono\">ndcg@10</td>.*?</tr>", page, flags=re.S).group(
        0
    )
    assert (
        row.count(">undefined</td>") == 6
        and '>undefined <span class="note">(undefined)</span></td>' in row
        and "0/0/24" in row
    )
    # the abstention bar of an undefined rate is text, not a zero-width bar
    ab = _svgs(page)["plot-abstention"]
    assert len(ab.findall(".//{*}rect[@class='bar bar-abstention_recall']")) == 2
    assert [t.text for t in ab.iter("text") if "undef-abstention_recall" in (t.get("class") or "")] == [
        "undefined"
    ]


def test_differing_definition_pins_are_flagged_but_config_pins_are_not(data, tmp_path):
    page = _render(data, tmp_path)  # only config_sha differs: expected between two configurations
    assert "not directly comparable" not in page
    assert page.count('<tr class="differs"><th scope="row">config_sha</th>') == 1
    data["runs"][1]["pins"]["hit_rule"] = "min_fraction:0.5"
    page = _render(data, tmp_path)
    assert "different definitions (hit_rule)" in page
    assert "Pins differ between runs: hit_rule." in page


def test_svgs_are_well_formed_and_accessible(data, tmp_path):
    page = _render(data, tmp_path)
    blocks = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    assert len(blocks) == len(PLOTS)
    for block in blocks:
        root = ET.fromstring(block)  # raises on malformed XML
        assert root.get("role") == "img"
        assert root.get("aria-label")
        assert root[0].tag == "title" and root[0].text == root.get("aria-label")
        assert root[1].tag == "desc" and root[1].text


def test_no_external_urls_or_network_fetches(hostile_data, tmp_path):
    page = _render(hostile_data, tmp_path)
    assert not re.search(
        r"""\b(?:src|href|xlink:href|action|poster|srcset)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I
    )
    assert not re.search(r"https?://", page)
    css = "".join(re.findall(r"<style>(.*?)</style>", page, flags=re.S))
    assert css and "@import" not in css and "url(" not in css
    for tag, attrs in _parse(page).tags:
        assert tag not in ("img", "link", "iframe", "object", "embed", "image", "use"), tag
        for k, v in attrs.items():
            if k in ("src", "href"):
                assert v.startswith("#"), (tag, k, v)


def test_content_security_policy_allows_only_the_report_script(data, tmp_path):
    page = _render(data, tmp_path)
    csp = htmllib.unescape(
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page).group(1)
    )
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_hostile_strings_appear_only_escaped(hostile_data, tmp_path):
    page = _render(hostile_data, tmp_path)
    assert page.count("<script") == 2  # the report's own script and its per-query data, nothing injected
    raw, q = _embedded(page)
    # inside the data block no character can end the element, open a comment or a tag
    assert not set(raw) & {"<", ">", "&", "\u2028", "\u2029"}
    assert PWN_SCRIPT in q["question"] and PWN_IMG in q["runs"][0]["answer"]
    assert "<script>alert(1)" not in page and "document.title='PWNED'</script>" not in page
    assert "<img" not in page and "</textarea>" not in page and "<svg onload" not in page
    tags = _parse(page).tags
    assert not [
        (t, k) for t, a in tags for k in a if k.startswith("on")
    ]  # no event-handler attribute anywhere
    assert [t for t, _ in tags].count("svg") == 5  # the injected <svg onload> did not become an element
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&#34;&gt;&lt;svg onload=alert(1)&gt;" in page
    assert "&lt;/textarea&gt;" in page
    assert "{{ 7*7 }}" in page  # data is never evaluated as a template
    text = " ".join(_parse(page).text)
    for payload in PAYLOADS:
        assert payload in text, payload  # shown to the reader as text
    # SVG labels (run names, strata, comparison label) are escaped too and decode back to the payload
    svgs = _svgs(page)
    titles = " ".join(t.text or "" for root in svgs.values() for t in root.iter("title"))
    assert "<script>alert(1)</script>" in titles


@pytest.mark.parametrize(
    "field", ["question", "evidence", "answer", "doc_id", "run", "config", "stratum", "claim"]
)
def test_each_hostile_field_is_escaped(field, tmp_path):
    bad = "<script>alert(1)</script>"
    d = {
        "title": "t",
        "runs": [{"name": "a", "config": {}}],
        "queries": [
            {
                "query_id": "q1",
                "stratum": "s",
                "question": "q",
                "answerable": True,
                "evidence": [{"doc_id": "d", "start": 0, "end": 3, "grade": 2, "text": "abc"}],
                "runs": {
                    "a": {
                        "outcome": "answered",
                        "answer": "x",
                        "metrics": {"recall@10": 1.0},
                        "retrieved": [
                            {"rank": 1, "doc_id": "d", "start": 0, "end": 3, "grade": 2, "text": "abc"}
                        ],
                    }
                },
            }
        ],
    }
    q = d["queries"][0]
    if field == "question":
        q["question"] = bad
    elif field == "evidence":
        q["evidence"][0]["text"] = bad
    elif field == "answer":
        q["runs"]["a"]["answer"] = bad
    elif field == "doc_id":
        q["evidence"][0]["doc_id"] = bad
        q["runs"]["a"]["retrieved"][0]["doc_id"] = bad
    elif field == "run":
        d["runs"][0]["name"] = bad
        q["runs"] = {bad: q["runs"]["a"]}
        d["latency"] = [{"run": bad, "values_ms": [1.0, 2.0, 3.0]}]
    elif field == "config":
        d["runs"][0]["config"] = {bad: {"k": bad}}
    elif field == "stratum":
        q["stratum"] = bad
        d["forest"] = {
            "metric": "m",
            "comparisons": [
                {
                    "label": "c",
                    "rows": [{"stratum": bad, "delta": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n": 3}],
                }
            ],
        }
    elif field == "claim":
        d["comparisons"] = [{"baseline": "a", "candidate": "a", "rows": [], "claims": [bad]}]
    page = _render(d, tmp_path)
    assert page.count("<script") == 2
    raw, q = _embedded(page)
    assert "<" not in raw
    if field in ("config", "claim"):  # server-rendered sections only
        assert bad not in json.dumps(q, ensure_ascii=False)
    else:
        assert bad in json.dumps(q, ensure_ascii=False)
    if field in ("run", "config", "stratum", "claim"):  # also in a server-rendered section
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def _forest_rows(root: ET.Element):
    for g in root.iter("g"):
        if "forest-row" in (g.get("class") or ""):
            yield g


def test_forest_plot_places_deltas_and_cis_on_one_linear_axis(data, tmp_path):
    page = _render(data, tmp_path)
    root = _svgs(page)["plot-forest"]
    zero = next(line for line in root.iter("line") if line.get("class") == "zero-line")
    zx = float(zero.get("x1"))
    rows = [r for r in data["forest"]["comparisons"][0]["rows"]]
    gs = list(_forest_rows(root))
    assert len(gs) == len(rows)
    widest = max((r for r in rows if r["ci_low"] is not None), key=lambda r: r["ci_high"] - r["ci_low"])
    wl = next(g for r, g in zip(rows, gs, strict=True) if r is widest).findall("line")[0]
    slope = (float(wl.get("x2")) - float(wl.get("x1"))) / (widest["ci_high"] - widest["ci_low"])
    assert slope > 0
    classes = set()
    for r, g in zip(rows, gs, strict=True):
        cls = g.get("class").split()[1]
        if r["delta"] is None:
            assert cls == "ci-undef" and g.find("circle") is None
            continue
        assert cls == ("ci-pos" if r["ci_low"] > 0 else "ci-neg" if r["ci_high"] < 0 else "ci-zero")
        classes.add(cls)
        assert float(g.find("circle").get("cx")) == pytest.approx(zx + slope * r["delta"], abs=0.05)
        whisker = g.findall("line")[0]
        assert float(whisker.get("x1")) == pytest.approx(zx + slope * r["ci_low"], abs=0.05)
        assert float(whisker.get("x2")) == pytest.approx(zx + slope * r["ci_high"], abs=0.05)
        # filled marker exactly when the CI excludes zero
        assert (g.find("circle").get("fill") == "#ffffff") == (cls == "ci-zero")
    assert classes == {"ci-pos", "ci-neg", "ci-zero"}


def test_recall_curves_follow_the_data_and_break_at_undefined_points(data, tmp_path):
    root = _svgs(_render(data, tmp_path))["plot-recall"]
    curves = [g for g in root.iter("g") if g.get("class") == "curve"]
    assert len(curves) == 3
    xs_all, ks_all = [], []
    for c, g in zip(data["recall_curves"], curves, strict=True):
        defined = [(k, r) for k, r in zip(c["k"], c["recall"], strict=True) if r is not None]
        pts = [(float(m.get("cx")), float(m.get("cy"))) for m in g.findall("circle")]
        assert len(pts) == len(defined)
        # lines join consecutive defined points only: an undefined point splits the line, it is not drawn as 0
        runs_of_defined = [
            len(s) for s in "".join("x" if r is not None else " " for r in c["recall"]).split()
        ]
        assert [len(pl.get("points").split()) for pl in g.findall("polyline")] == [
            n for n in runs_of_defined if n >= 2
        ]
        # y is linear in recall, x is linear in log10(k): residuals of a straight-line fit vanish
        ys, rs = np.array([p[1] for p in pts]), np.array([r for _, r in defined])
        fit = np.polyfit(rs, ys, 1)
        assert fit[0] < 0 and np.abs(np.polyval(fit, rs) - ys).max() < 0.02
        xs_all += [p[0] for p in pts]
        ks_all += [k for k, _ in defined]
    fit = np.polyfit(np.log10(ks_all), xs_all, 1)
    assert np.abs(np.polyval(fit, np.log10(ks_all)) - np.array(xs_all)).max() < 0.02


def test_rerank_bar_segments_are_proportional_to_counts(data, tmp_path):
    root = _svgs(_render(data, tmp_path))["plot-rerank"]
    rows = [g for g in root.iter("g") if g.get("class") == "rerank-row"]
    assert len(rows) == len(data["rerank_movement"])
    for r, g in zip(data["rerank_movement"], rows, strict=True):
        segs = [s for s in g.iter("rect")]
        counts = [int(s.get("data-count")) for s in segs]
        assert counts == [r[k] for k in ("rescued", "broke", "kept", "missed_both")]
        widths = np.array([float(s.get("width")) for s in segs])
        per_query = widths / np.array(counts)
        assert np.ptp(per_query) < 0.02
        xs = [float(s.get("x")) for s in segs]
        assert np.allclose(np.diff(xs), widths[:-1], atol=0.02)  # stacked without gaps


def test_latency_percentiles_match_statistics_quantiles(data, tmp_path):
    page = _render(data, tmp_path)
    table = re.search(r'<table class="data latency">.*?</table>', page, flags=re.S).group(0)
    rows = re.findall(r"<tr><td>.*?</tr>", table, flags=re.S)
    assert len(rows) == 3
    for spec, row in zip(data["latency"], rows, strict=True):
        vals = [v for v in spec["values_ms"] if v is not None and not math.isnan(v)]
        q = statistics.quantiles(
            vals, n=100, method="inclusive"
        )  # type-7 interpolation, independent of numpy
        for name, idx in (("p50", 49), ("p95", 94), ("p99", 98)):
            cell = re.search(rf'<td class="num {name}">([^<]+)</td>', row).group(1)
            assert cell == F.ms(q[idx]), (name, cell, q[idx])
    assert re.search(r'198 <span class="note">\(2 undefined\)</span>', table)
    root = _svgs(page)["plot-latency"]
    marks = [ln for ln in root.iter("line") if (ln.get("class") or "").startswith("pct")]
    assert len(marks) == 9


def test_anchors_are_sanitized_unique_and_every_link_has_a_target(hostile_data, tmp_path):
    page = _render(hostile_data, tmp_path)
    tags = _parse(page).tags
    ids = [a["id"] for _, a in tags if "id" in a]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)
    _, q = _embedded(page)
    rows = [q["anchor"].get(str(i), "q-" + qid) for i, qid in enumerate(q["id"])]  # as the script names them
    assert len(rows) == len(set(rows)) and not set(rows) & set(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in rows)
    assert "q-q_002__b_" in rows and q["anchor"] == {"2": "q-q_002__b_"}
    links = [a["href"][1:] for t, a in tags if t == "a" and a.get("href", "").startswith("#")]
    assert set(links) <= set(ids) | set(rows)
    worst = re.search(r'<ol class="worst">.*?</ol>', page, flags=re.S).group(0)
    assert re.findall(r'href="#([^"]+)"', worst) == ["q-q005", "q-q009", "q-q_002__b_"]
    assert 'q-missing</span> <span class="note">(not in the query table)' in worst


def test_anchor_ids_resolve_collisions():
    assert F.anchor_ids(["a b", "a_b", "a/b", "x"]) == {
        "a b": "q-a_b",
        "a_b": "q-a_b-2",
        "a/b": "q-a_b-3",
        "x": "q-x",
    }


def test_number_formatting():
    assert F.num(0.70449) == "0.704" and F.num(None) == "undefined" and F.num(float("nan")) == "undefined"
    assert F.num(np.float32(0.5)) == "0.500" and F.num(np.int64(7)) == "7" and F.num(-0.0001) == "0.000"
    assert F.signed(0.07) == "+0.070" and F.signed(-0.125) == "−0.125" and F.signed(0.0) == "0.000"
    assert F.signed(-0.0001) == "0.000" and F.signed(math.inf) == "+∞"
    assert F.pvalue(0.0004) == "<0.001" and F.pvalue(0.0) == "0.000" and F.pvalue(None) == "undefined"
    assert F.ci(0.03, 0.11) == "[0.030, 0.110]" and F.ci(None, 0.1) == "undefined"
    assert F.ms(1234.4) == "1,234" and F.ms(42.25) == "42.2" and F.ms(3.14159) == "3.14"


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.pop("title"), "`title`"),
        (lambda d: d.pop("runs"), "`runs`"),
        (lambda d: d["runs"][0].pop("name"), "`runs[0].name`"),
        (
            lambda d: d["stage_table"]["rows"][0].__setitem__("values", [0.1, 0.2]),
            "`stage_table.rows[0].values`",
        ),
        (
            lambda d: d["strata_table"]["rows"][1]["values"].__setitem__(0, "high"),
            "`strata_table.rows[1].values[0]`",
        ),
        (lambda d: d["rerank_movement"][1].__setitem__("broke", -1), "`rerank_movement[1].broke`"),
        (lambda d: d["latency"][0].__setitem__("values_ms", "fast"), "`latency[0].values_ms`"),
        (lambda d: d["queries"][3].pop("query_id"), "`queries[3].query_id`"),
        (lambda d: d["recall_curves"][0]["recall"].pop(), "`recall_curves[0].recall`"),
    ],
)
def test_malformed_data_raises_schema_error_naming_the_path(mutate, path, tmp_path):
    d = make_data()
    mutate(d)
    with pytest.raises(SchemaError, match=re.escape(path)):
        render_report(d, tmp_path / "out")
    assert not (tmp_path / "out" / "index.html").exists()


def test_write_is_atomic_and_leaves_no_temp_files(data, tmp_path, monkeypatch):
    out = tmp_path / "deep" / "out"
    p = render_report(data, out)
    assert p == out / "index.html" and os.listdir(out) == ["index.html"]
    before = p.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    # a failed write is a clean error naming the file, and the earlier report is untouched
    with pytest.raises(InputError, match=r"index.html: cannot write the file \(disk full\)"):
        render_report({"title": "other", "runs": [{"name": "x"}]}, out)
    assert os.listdir(out) == ["index.html"] and p.read_bytes() == before
    monkeypatch.undo()
    render_report({"title": "other", "runs": [{"name": "x"}]}, out)
    assert "<title>other</title>" in p.read_text(encoding="utf-8") and os.listdir(out) == ["index.html"]


def test_template_never_marks_data_safe():
    root = Path(__import__("ragassay.report", fromlist=["x"]).__file__).parent
    template = (root / "templates" / "report.html.j2").read_text(encoding="utf-8")
    assert not re.search(r"\|\s*safe\b", template)
    assert "autoescape false" not in template.lower()


def test_warnings_refused_metrics_and_rebaselined_pins_are_shown_as_text(data, tmp_path):
    hostile = "[/bold]<script>alert(1)</script>"
    data = {**data, "warnings": [f"run {hostile}: traces folder /x does not exist; pass --traces-dir"],
            "traces_unavailable": [{"run": hostile, "reason": "traces folder /x does not exist"}]}
    data["comparisons"][0] = {**data["comparisons"][0],
                              "pin_differences": [{"pin": "hit_rule", "a": "any_overlap", "b": hostile}],
                              "excluded": [{"metric": "recall@final_k", "reason": "final_k differs: 10 (A) vs 5 (B)"}]}
    page = render_report(data, tmp_path / "r").read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page
    esc = "[/bold]&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"Warning: run {esc}: traces folder /x does not exist; pass --traces-dir" in page
    assert f'Per-query traces unavailable for <span class="run-chip">{esc}</span>' in page
    assert f'<span class="mono">hit_rule</span> any_overlap → {esc}' in page
    assert ('Not compared: <span class="mono">recall@final_k</span> — final_k differs: 10 (A) vs 5 (B).'
            in page)


def test_a_derived_pin_missing_on_one_run_is_not_a_conflict(data):
    from ragassay.report.html import build_context

    data = {**data, "runs": [{**r, "pins": {**r.get("pins", {}), "cutoffs": [1, 5, 10] if i else None,
                                            "final_k": 10}} for i, r in enumerate(data["runs"])]}
    ctx = build_context(data)
    assert "cutoffs" not in ctx["runs"]["pins_conflict"] and "final_k" not in ctx["runs"]["pins_conflict"]
    data["runs"][1]["pins"]["final_k"] = 5
    assert "final_k" in build_context(data)["runs"]["pins_conflict"]
