"""Promote: production failures into a labelling queue in `golden pool`'s format that the pool and
merge-labels path reads, authoring stubs that build into golden entries, and the refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import typer
from tests.online.test_judge_sample import write_records

from ragassay.cli.online_flywheel import register
from ragassay.corpus import load_corpus
from ragassay.errors import InputError
from ragassay.golden import build_golden
from ragassay.golden.pool import merge_into, read_labels, read_queue
from ragassay.golden.schema import AuthoredQuery
from ragassay.online.promote import promote, query_id, resolve_units, stratum_id
from ragassay.report.online import promote_html

DAY0 = datetime(2026, 12, 1, 10, tzinfo=UTC)
DOCS = {"refunds": "Refunds are paid within 30 days of the return.\nStore credit never expires.",
        "shipping": "Parcels ship in 5 working days. Express takes 1 day."}
HOSTILE = "</script><script>alert(1)</script> & [bold]x[/]"


def corpus_dir(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    for doc, text in DOCS.items():
        (folder / f"{doc}.txt").write_text(text)
    return folder


def production():
    rows = []
    for i in range(12):
        rows.append({"request_id": f"r{i:02d}", "ts": DAY0 + timedelta(days=i % 3, minutes=i),
                     "release": "v1", "stratum": "Billing FAQ" if i % 2 else "shipping",
                     "question": HOSTILE if i == 1 else f"question {i}?", "answer": "an answer",
                     "outcome": "answered", "context": "ctx", "n_retrieved": 2,
                     "unit_ids": ["refunds:0-47", "shipping:0-31"] if i % 2 else ["shipping:32-52", "bogus"],
                     "thumbs": -1 if i in (1, 2, 3) else None, "rephrased": i in (3, 4, 5),
                     "escalated": i == 6, "abandoned": i == 7})
    return rows


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    write_records(path, production())
    return path


def texts(tmp_path):
    return {d.doc_id: d.text for d in load_corpus(corpus_dir(tmp_path))}


def test_failures_become_pool_items_with_units_tags_and_a_cohort(db, tmp_path):
    out = tmp_path / "queue"
    meta = promote(db, out, per_stratum=10, texts=texts(tmp_path))
    q = read_queue(out)
    # failure signals: thumbs-down 1, 2, 3; rephrased 3, 4, 5; escalated 6 (abandoned 7 is not one by default)
    picked = sorted({rec["request_id"] for rec in q.items.values()})
    assert picked == ["r01", "r02", "r03", "r04", "r05", "r06"]
    assert meta["counts"]["requests"] == 6
    item = q.items[(query_id("r03"), "refunds", 0, 47)]
    assert item["quote"] == DOCS["refunds"][:47] and item["stratum"] == "billing_faq"
    assert item["tags"] == ["source:production", "date:2026-12-01", "signal:thumbs_down", "signal:rephrased",
                            "cohort:production-2026-12"]
    # the even requests' second unit id resolves nowhere: one passage each, the bad id counted
    assert q.items[(query_id("r04"), "shipping", 32, 52)]["quote"] == DOCS["shipping"][32:52]
    assert meta["counts"] == {"requests": 6, "items": 9, "unit_items": 9, "question_only": 0, "unresolved_units": 3}
    assert q.meta["cohort"] == "production-2026-12" and "own cohort" in q.meta["measure_separately"]
    assert meta["per_stratum"] == {"billing_faq": {"candidates": 3, "promoted": 3, "repeats": 0},
                                   "shipping": {"candidates": 3, "promoted": 3, "repeats": 0}}


def test_a_question_asked_again_is_promoted_once(tmp_path):
    db = tmp_path / "s.duckdb"
    rows = production()
    for i, r in enumerate(rows):
        if i in (2, 4):
            r["question"] = "Where is my  PARCEL?" if i == 2 else "where is my parcel?"
    write_records(db, rows)
    meta = promote(db, tmp_path / "queue", per_stratum=10)
    assert meta["per_stratum"]["shipping"] == {"candidates": 3, "promoted": 2, "repeats": 1}
    assert meta["counts"]["requests"] == 5


def test_the_queue_goes_through_merge_labels_and_builds_into_golden_entries(db, tmp_path):
    out = tmp_path / "queue"
    promote(db, out, per_stratum=2, signals=("thumbs_down",), texts=texts(tmp_path), cohort="prod-dec")
    q = read_queue(out)
    stubs = [json.loads(line) for line in (out / "queries.jsonl").read_text().splitlines()]
    # per stratum at most 2: billing_faq has r01 and r03 with a thumbs-down, shipping r02
    assert sorted(s["query_id"] for s in stubs[:2]) == [query_id("r01"), query_id("r03")]
    assert stubs[2]["query_id"] == query_id("r02")
    assert all(s["source"] == "production" and "cohort:prod-dec" in s["tags"] for s in stubs)
    labels = tmp_path / "labels.jsonl"
    # what the labelling page saves: the queued unit with a grade
    labels.write_text("".join(json.dumps({k: rec[k] for k in ("query_id", "doc_id", "start", "end", "quote")}
                                         | {"grade": 3 if rec["doc_id"] == "refunds" else 1}) + "\n"
                              for rec in q.items.values()))
    got = read_labels(labels, q, {s["query_id"] for s in stubs})
    assert len(got) == len(q.items) == 5
    merged = merge_into(stubs, got, texts(tmp_path))
    for m in merged:
        AuthoredQuery.model_validate(m)
    authoring = tmp_path / "authoring.jsonl"
    authoring.write_text("".join(json.dumps(r) + "\n" for r in [{"type": "meta", "dataset": "prod"}, *merged]))
    built = build_golden(authoring, load_corpus(corpus_dir(tmp_path)))
    q1 = built[query_id("r01")]
    assert q1.question == HOSTILE and q1.stratum == "billing_faq"
    assert [(e.doc_id, e.start, e.end, e.grade) for e in q1.evidence] == [("refunds", 0, 47, 3), ("shipping", 0, 31, 1)]


def test_without_a_corpus_every_item_is_question_only(db, tmp_path):
    out = tmp_path / "queue"
    meta = promote(db, out, per_stratum=1)
    q = read_queue(out)
    assert meta["counts"]["question_only"] == meta["counts"]["items"] == 2
    assert all(r["doc_id"] == "" and r["quote"] == "" and r["start"] == r["end"] == 0 for r in q.items.values())
    assert resolve_units(["refunds:0-7", "refunds:60-999", "x"], {"refunds": DOCS["refunds"]}) == (
        [("refunds", 0, 7, "Refunds")], 2)


def test_a_folder_ragassay_did_not_write_is_refused_and_its_own_queue_is_replaced(db, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="not an earlier ragassay online-promote output"):
        promote(db, mine)
    assert (mine / "notes.txt").read_text() == "keep me" and not (mine / "queue.jsonl").exists()
    out = tmp_path / "queue"
    promote(db, out, per_stratum=1)
    again = promote(db, out, per_stratum=3, signals=("abandoned",))
    assert again["counts"]["requests"] == 1 and len(read_queue(out).items) == 1


def test_the_labelling_page_and_the_report_escape_production_text(db, tmp_path):
    out = tmp_path / "queue"
    meta = promote(db, out, per_stratum=5, texts=texts(tmp_path))
    page = (out / "label.html").read_text()
    assert HOSTILE not in page and "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in page
    html = str(promote_html({**meta, "cohort": HOSTILE, "per_stratum": {HOSTILE: {"candidates": 1, "promoted": 1}}}))
    assert "<script>" not in html and "&lt;/script&gt;&lt;script&gt;" in html


def test_strata_and_ids_become_golden_identifiers():
    assert stratum_id("Billing FAQ") == "billing_faq"
    assert stratum_id("2fa") == "s_2fa"
    assert stratum_id(None) == stratum_id("  ") == "unstratified"
    assert query_id("a b\tc") == "prod-a_b_c"


def test_the_promote_command_prints_a_summary_and_json(db, tmp_path, capsys):
    app = typer.Typer()
    group = typer.Typer()
    register(group)
    app.add_typer(group, name="online")
    out = tmp_path / "queue"
    app(args=["online", "promote", "--store", str(db), "--out", str(out), "--corpus", str(corpus_dir(tmp_path)),
              "--signals", "thumbs_down,escalated", "--per-stratum", "2", "--json"], standalone_mode=False)
    meta = json.loads(capsys.readouterr().out)
    assert meta["signals"] == ["thumbs_down", "escalated"] and meta["counts"]["requests"] == 4
    app(args=["online", "promote", "--store", str(db), "--out", str(out), "--signals", "rephrased"],
        standalone_mode=False)
    text = capsys.readouterr().out
    assert "promoted 3 production request(s) with rephrased" in text and "question-only" in text
    with pytest.raises(InputError, match="--signals 'sadness': unknown sadness"):
        app(args=["online", "promote", "--store", str(db), "--out", str(out), "--signals", "sadness"],
            standalone_mode=False)
