"""`ragassay demo` end to end, and its report in headless Chromium with a hostile corpus document.

The bundled corpus is copied and one document added whose text carries script and onerror payloads; a
golden query quotes it, so the payload reaches the report's per-query evidence. The page must show it as
text and run none of it, while its own scripts run.
"""

from __future__ import annotations

import html as htmllib
import re
import shutil
from html.parser import HTMLParser

import pytest
import yaml
from test_browser import ARTIFACTS, _head_title, _run

from ragassay.analysis.demo import DEMO_CONFIGS, run_demo
from ragassay.corpus import bundled_corpus_dir
from ragassay.golden import bundled_golden_source
from ragassay.report import render_report
from ragassay.store import Store

PAYLOAD_SCRIPT = "<script>document.title='PWNED'</script>"
PAYLOAD_IMG = "<img src=x onerror=\"document.title='PWNED'\">"
HOSTILE_TEXT = (f"NOTICE FILE\n\nThis notice is not a license. It quotes markup: {PAYLOAD_SCRIPT} and "
                f"{PAYLOAD_IMG} must both render as plain text.\n")


def _start_tags(markup: str) -> list[tuple[str, list[str]]]:
    """Every element the browser built, with its attribute names (text stays text)."""
    out: list[tuple[str, list[str]]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            out.append((tag, [k for k, _ in attrs]))

    P().feed(markup)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    corpus = root / "corpus"
    shutil.copytree(bundled_corpus_dir(), corpus)
    (corpus / "NOTICE-hostile.txt").write_text(HOSTILE_TEXT)
    golden = yaml.safe_load(bundled_golden_source().read_text())
    golden["queries"].append({
        "query_id": "hostile-001", "question": "What does the notice file say must render as plain text?",
        "stratum": "lexical", "tags": ["notice"], "answerable": True,
        "evidence": [{"doc_id": "NOTICE-hostile", "quote": f"It quotes markup: {PAYLOAD_SCRIPT} and {PAYLOAD_IMG}",
                      "grade": 3}],
        "reference_answer": "Markup quoted in the notice.", "source": "human", "created": "2026-11-29"})
    src = root / "golden.yaml"
    src.write_text(yaml.safe_dump(golden, sort_keys=False, allow_unicode=True))
    return run_demo(root / "out", n_resamples=1000, corpus_path=corpus, golden_path=src, report=render_report)


def test_demo_writes_store_traces_report_and_gates(demo):
    out = demo.out
    assert set(demo.run_ids) == set(DEMO_CONFIGS)
    with Store.open(out / "ragassay.duckdb", read_only=True) as st:
        runs = {r.name: r for r in st.list_runs()}
        assert set(runs) == set(DEMO_CONFIGS) and all(r.status == "complete" for r in runs.values())
        for name in DEMO_CONFIGS:
            assert len(st.done_keys(runs[name].run_id)) == len(demo.golden)
    assert sorted(p.stem for p in (out / "traces").glob("*.jsonl")) == sorted(demo.run_ids.values())
    assert demo.report == out / "report" / "index.html" and demo.report.stat().st_size > 100_000
    assert [c.run_b.name for c in demo.comparisons] == ["hybrid", "hybrid_rerank", "oracle"]
    assert all(c.run_a.name == "bm25" for c in demo.comparisons)
    assert demo.gate.verdict in ("PASS", "WARN", "FAIL") and len(demo.gate.checks) >= 3
    # the README's finding: with the golden evidence handed to it the generator still answers poorly
    assert demo.ladder["fault"] == "generation" and demo.ladder["diagnosis"].startswith("generation: ")
    oracle = next(r for r in demo.ladder["rungs"] if r["name"] == "oracle")
    assert oracle["oracle"] and oracle["recall@context"]["value"] == 1.0
    # the decomposition per configuration adds up, and the oracle rung delivers every span (no miss cell)
    for run in demo.decomposition["runs"]:
        row = run["rows"][0]
        a, h, c1, c0 = (row[k]["value"] for k in ("A", "h", "c1", "c0"))
        assert a == pytest.approx(h * c1 + (1 - h) * (c0 or 0.0))
    orc = next(r for r in demo.decomposition["runs"] if r["run"]["name"] == "oracle")["rows"][0]
    assert orc["h"]["value"] == 1.0 and orc["c0"]["defined"] is False and orc["c0"]["value"] is None
    # the leave-one-out table: a few queries, each with its items' deltas
    att = demo.attribution
    assert 1 <= len(att["top_queries"]) <= 6 and att["calls"] > 0
    assert all(q["items"] and all("loo_delta" in it for it in q["items"]) for q in att["top_queries"])
    page = demo.report.read_text(encoding="utf-8")
    for anchor in ("oracle", "decomposition", "attribution", "slices", "latency-stages", "judge-validation"):
        assert f'<section id="{anchor}"' in page, anchor


def test_demo_report_renders_in_chromium_and_runs_no_injected_script(demo, tmp_path):
    page = demo.report.read_text(encoding="utf-8")
    # the query's texts are data for the page's script, with every < written as an escape
    assert PAYLOAD_SCRIPT not in page and "\\u003cscript\\u003edocument.title=" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", page)
    # opened at the hostile query's anchor: the script pages to it and builds its details
    dom = _run(["--dump-dom", demo.report.as_uri() + "#q-hostile-001"], tmp_path).stdout
    assert _head_title(dom) == "ragassay demo: four configurations on the license corpus"
    assert "PWNED" not in _head_title(dom)
    assert 'data-ready="1"' in dom  # the report's own script ran
    for plot in ("plot-forest", "plot-recall", "plot-rerank", "plot-abstention", "plot-latency"):
        assert re.search(rf'<svg[^>]*class="[^"]*{plot}', dom), plot
    table = re.search(r'<table[^>]*id="queries".*?</table>', dom, flags=re.S).group(0)
    n = len(demo.golden)
    assert f'<span id="q-count" class="note">{n} queries</span>' in dom
    assert len(re.findall(r'<tbody', table)) == n - 100  # its page: the queries after the first hundred
    assert "hostile-001" in table and '<div class="detail-body">' in table
    text = htmllib.unescape(re.sub(r"<[^>]+>", "", table))
    assert PAYLOAD_SCRIPT in text and "onerror=\"document.title='PWNED'\"" in text
    tags = _start_tags(table)
    assert "img" not in {t for t, _ in tags} and not [a for _, attrs in tags for a in attrs if a.startswith("on")]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "demo-report.png"
    _run([f"--screenshot={shot}", "--window-size=1280,2400", demo.report.as_uri()], tmp_path)
    assert shot.exists() and shot.stat().st_size > 10_000
