"""The labelling page in headless Chromium (driven by Playwright over the system's /usr/bin/chromium, the
binary the report's browser tests use): three items graded with the keyboard (with a move back, a regrade
and an undo), saved through the page's download, merged, and hostile corpus text kept inert."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pool_world import K, cli, make_world

from ragassay.golden.pool import render_page

pytestmark = pytest.mark.browser


def _chromium() -> str:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if exe is None:
        pytest.fail("headless Chromium not found at /usr/bin/chromium: run `apt-get install chromium` (or "
                    "`make browser`) to run the labelling page's browser tests")
    return exe


@pytest.fixture
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: `pip install -e .[dev]` to run the browser tests")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def _open(browser, page_path: Path):
    ctx = browser.new_context(accept_downloads=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(page_path.as_uri())
    assert page.get_attribute("body", "data-ready") == "1"
    return page, errors


def test_keyboard_labels_three_items_saves_jsonl_and_the_file_merges(tmp_path, capsys, browser):
    world = make_world(tmp_path, capsys)
    queue_dir = tmp_path / "queue"
    code, _, err = cli(["golden", "pool", "A", "B", "--store", world["store"], "--golden", world["golden_dir"],
                        "--corpus", world["corpus_dir"], "--k", K, "--out", queue_dir], capsys)
    assert code == 0, err
    queue = [json.loads(line) for line in (queue_dir / "queue.jsonl").read_text().splitlines()]
    page, errors = _open(browser, queue_dir / "label.html")
    assert page.inner_text("#progress") == "0 of 6 labelled"
    assert page.inner_text("#passage") == queue[0]["quote"]
    assert page.inner_text("#question") == queue[0]["question"]
    # 2 on item 1; 0 on item 2; back to item 2 and regrade it 1; undo that (item 2 is 0 again); on to item 3
    # and grade it 3
    for key in ("2", "0", "k", "1", "u", "ArrowDown", "3"):
        page.keyboard.press(key)
    assert page.inner_text("#progress") == "3 of 6 labelled"
    assert page.get_attribute("body", "data-position") == "3"
    assert page.inner_text("#passage") == queue[3]["quote"]
    with page.expect_download() as download:
        page.keyboard.press("s")
    saved = download.value
    assert saved.suggested_filename == "labels.jsonl"
    labels = tmp_path / "labels.jsonl"
    saved.save_as(labels)
    fields = ("query_id", "doc_id", "start", "end", "quote")
    assert [json.loads(line) for line in labels.read_text().splitlines()] == [
        {k: queue[i][k] for k in fields} | {"grade": g} for i, g in ((0, 2), (1, 0), (2, 3))]
    # the grades outlive a reload (local storage, keyed by the queue's sha256). Chromium commits local storage to
    # its browser process asynchronously, so on a loaded machine the reloaded page can read it a moment late: wait
    # for the restored count (bounded) rather than reading the first paint
    page.reload()
    page.wait_for_function("document.getElementById('progress').textContent === '3 of 6 labelled'", timeout=15_000)
    assert page.inner_text("#progress") == "3 of 6 labelled"
    assert errors == []

    code, out, err = cli(["golden", "merge-labels", world["authoring"], labels, "--queue", queue_dir, "--corpus",
                          world["corpus_dir"], "--out", tmp_path / "merged.jsonl", "--store", world["store"],
                          "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["judgements"]["per_query"] == {"q1": 3}
    assert all(r["after"] > r["before"] for r in rep["judged_fraction"]["runs"])


PWN = "</script><script>document.title='PWNED'</script><img src=x onerror=\"document.title='PWNED'\">"


def test_hostile_corpus_text_is_shown_as_text(tmp_path, browser):
    quote = f"clause 7 {PWN} <b>bold</b> & more"
    rec = {"query_id": "q<1>", "question": f"what? {PWN}", "stratum": "s", "doc_id": "d<x>", "start": 0,
           "end": len(quote), "quote": quote, "retrieved_by": [{"run": f"r{PWN}", "run_id": "r", "rank": 1}]}
    meta = {"dataset_version": "v@1", "k": 10, "runs": [{"name": "<i>r</i>"}], "queue_sha256": "f" * 64}
    # escaping alone must hold: the page's CSP, which would block an injected script anyway, is removed
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>\n?', "", render_page([rec], meta))
    html = html.replace("<head>", "<head><script>window.alert = function () { document.title = 'PWNED'; };"
                                  "</script>", 1)
    path = tmp_path / "label.html"
    path.write_text(html, encoding="utf-8")
    page, errors = _open(browser, path)
    assert page.title() != "PWNED" and "PWNED" not in page.title()
    assert page.inner_text("#passage") == quote
    assert page.inner_text("#question") == f"what? {PWN}"
    assert page.text_content("#qid") == "q<1>"
    assert page.locator("img").count() == 0 and page.locator("#passage b").count() == 0
    assert page.locator("script").count() == 3  # the prelude, the data and the page's own
    assert errors == []


def test_question_only_items_of_a_promote_queue_are_shown_skipped_and_never_saved(tmp_path, capsys, browser):
    from tests.online.test_judge_sample import write_records
    from tests.online.test_promote import corpus_dir, production

    from ragassay.corpus import load_corpus
    from ragassay.online.promote import promote

    rows = production()
    rows[2]["unit_ids"] = ["nowhere:0-5"]  # r02 (thumbs-down): no unit resolves, a question-only item
    db = tmp_path / "s.duckdb"
    write_records(db, rows)
    corpus = corpus_dir(tmp_path)
    queue_dir = tmp_path / "queue"
    promote(db, queue_dir, per_stratum=2, signals=("thumbs_down",),
            texts={d.doc_id: d.text for d in load_corpus(corpus)})
    queue = [json.loads(line) for line in (queue_dir / "queue.jsonl").read_text().splitlines()]
    only = [i for i, r in enumerate(queue) if r["doc_id"] == ""]
    assert len(queue) == 5 and len(only) == 1  # r01 and r03 two passages each, r02 none
    page, errors = _open(browser, queue_dir / "label.html")
    assert page.inner_text("#progress") == "0 of 4 labelled · 1 question-only"
    # grade every item in order with 3; the question-only one ignores the key and is stepped over with j
    for i in range(len(queue)):
        assert page.get_attribute("body", "data-position") == str(i)
        if i in only:
            assert page.inner_text("#passage") == "question only: no passage to grade"
            assert page.locator("#grades button:disabled").count() == 4
            page.keyboard.press("3")
            assert page.get_attribute("body", "data-position") == str(i)
            page.keyboard.press("j")
        else:
            assert page.inner_text("#passage") == queue[i]["quote"]
            assert page.locator("#grades button:disabled").count() == 0
            page.keyboard.press("3")
    assert page.inner_text("#progress") == "4 of 4 labelled · 1 question-only"
    with page.expect_download() as download:
        page.keyboard.press("s")
    labels = tmp_path / "labels.jsonl"
    download.value.save_as(labels)
    saved = [json.loads(line) for line in labels.read_text().splitlines()]
    assert saved == [{k: r[k] for k in ("query_id", "doc_id", "start", "end", "quote")} | {"grade": 3}
                     for i, r in enumerate(queue) if i not in only]
    assert errors == []

    authoring = tmp_path / "golden.yaml"
    authoring.write_text("dataset: small\nqueries:\n  - query_id: h1\n    question: Does credit expire?\n"
                         "    stratum: lexical\n    evidence:\n      - {doc_id: refunds, quote: Store credit never "
                         "expires., grade: 3}\n")
    code, out, err = cli(["golden", "merge-labels", authoring, labels, "--queue", queue_dir, "--corpus", corpus,
                          "--out", tmp_path / "merged.jsonl", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)["promoted"]
    assert len(rep["added"]) == 2 and rep["question_only"] == [queue[only[0]]["query_id"]]
