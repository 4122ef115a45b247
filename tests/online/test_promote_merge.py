"""The flywheel closed through the CLI: a promote queue's labels come back through `golden merge-labels` as new
golden queries (from the queue's queries.jsonl stubs) carrying the cohort tag, question-only items are refused
by merge (the page cannot save them: tests/golden/test_labelling_browser.py), a question whose every passage
was graded 0 is left out and counted, and an end-to-end run over simulated traffic ingested beside a demo store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.online.test_judge_sample import write_records
from tests.online.test_promote import DOCS, corpus_dir, production

from ragassay.cli.app import main
from ragassay.corpus import bundled_corpus_dir
from ragassay.golden import load_golden
from ragassay.golden.set import bundled_golden_source
from ragassay.online.promote import query_id
from ragassay.online.simulate import TOPICS

FIELDS = ("query_id", "doc_id", "start", "end", "quote")
AUTHORING = """dataset: small
queries:
  - query_id: h1
    question: Does store credit expire?
    stratum: lexical
    evidence:
      - {doc_id: refunds, quote: "Store credit never expires.", grade: 3}
"""


def cli(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_labels(path: Path, graded: list[tuple[dict, int]]) -> Path:
    """What the labelling page saves: the queued unit's fields and a grade, one line each."""
    path.write_text("".join(json.dumps({k: it[k] for k in FIELDS} | {"grade": g}) + "\n" for it, g in graded))
    return path


# ------------------------------------------------------------------------------------ a small world

@pytest.fixture
def small(tmp_path):
    """Twelve production requests (tests/online/test_promote.py) promoted with the corpus: the odd requests
    (billing_faq) carry two resolvable units, the even ones (shipping) one; r01..r06 carry failure signals."""
    db = tmp_path / "s.duckdb"
    rows = production()
    rows[6]["unit_ids"] = ["nowhere:0-5"]  # r06 (escalated): no unit resolves, a question-only item
    write_records(db, rows)
    corpus = corpus_dir(tmp_path)
    authoring = tmp_path / "golden.yaml"
    authoring.write_text(AUTHORING)
    queue = tmp_path / "queue"
    return {"db": db, "corpus": corpus, "authoring": authoring, "queue": queue, "tmp": tmp_path}


def _promote(w, capsys, *extra):
    code, out, err = cli(["online", "promote", "--store", w["db"], "--out", w["queue"], "--corpus", w["corpus"],
                          "--per-stratum", "10", "--cohort", "prod-dec", "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(out), read_jsonl(w["queue"] / "queue.jsonl")


def _merge(w, capsys, labels, *extra, out_name="merged.jsonl", authoring=None):
    return cli(["golden", "merge-labels", authoring or w["authoring"], labels, "--queue", w["queue"], "--corpus",
                w["corpus"], "--out", w["tmp"] / out_name, *extra], capsys)


def test_graded_production_questions_join_as_new_queries_and_all_zero_ones_are_left_out(small, capsys):
    meta, queue = _promote(small, capsys)
    item = {(r["query_id"], r["doc_id"]): r for r in queue}
    r01, r03, r02, r04, r05 = (query_id(f"r0{i}") for i in (1, 3, 2, 4, 5))
    graded = [(item[(r01, "refunds")], 3), (item[(r01, "shipping")], 0),  # r01: enters, its 0 recorded
              (item[(r03, "refunds")], 0), (item[(r03, "shipping")], 0),  # r03: every passage 0, left out
              (item[(r02, "shipping")], 2)]                                # r02: enters
    labels = write_labels(small["tmp"] / "labels.jsonl", graded)
    code, out, err = _merge(small, capsys, labels, "--json")
    assert code == 0, err
    rep = json.loads(out)
    # the hand count: 3 labels merged (r01's two, r02's one); r03's two are left out
    assert rep["judgements"] == {"n": 3, "per_query": {r01: 2, r02: 1},
                                 "per_stratum": {"billing_faq": 2, "shipping": 1},
                                 "per_grade": {"0": 1, "1": 0, "2": 1, "3": 1}}
    # six requests promoted: r01 r03 r05 (billing_faq), r02 r04 r06 (shipping); r06 is question-only
    assert rep["promoted"] == {"cohort": "prod-dec", "stubs": 6, "added": [r01, r02], "all_zero": [r03],
                               "not_graded": [r05, r04], "question_only": [query_id("r06")],
                               "already_in_set": [], "left_out_labels": 2}
    assert meta["counts"]["question_only"] == 1
    assert rep["new_version"] != rep["old_version"]
    lines = read_jsonl(small["tmp"] / "merged.jsonl")
    assert lines[0]["dataset"] == "small" and lines[0]["generator"]["merged_labels"] == [
        {"labels": "labels.jsonl", "n": 3, "promoted": "prod-dec", "added": 2, "queue_sha256": meta["queue_sha256"]}]
    assert [q["query_id"] for q in lines[1:]] == ["h1", r01, r02]

    code, _, err = cli(["golden", "build", small["tmp"] / "merged.jsonl", "--corpus", small["corpus"], "--out",
                        small["tmp"] / "g2"], capsys)
    assert code == 0, err
    g2 = load_golden(small["tmp"] / "g2")
    assert g2.dataset_version == rep["new_version"]
    q1 = g2[r01]
    assert [(e.doc_id, e.start, e.end, e.grade) for e in q1.evidence] == [("refunds", 0, 47, 3),
                                                                         ("shipping", 0, 31, 0)]
    assert q1.source == "production" and str(q1.created) == "2026-12-02" and q1.stratum == "billing_faq"
    assert q1.tags == ["source:production", "date:2026-12-02", "signal:thumbs_down", "cohort:prod-dec"]
    assert g2["h1"].evidence == load_golden_h1(small, capsys)

    code, text, err = _merge(small, capsys, labels)  # the text summary, replacing its own output
    assert code == 0, err
    assert f"merged 3 label(s) into {small['tmp'] / 'merged.jsonl'}" in text
    assert "promoted questions (cohort prod-dec): 2 of 6 added as new queries" in text
    assert f"left out, every graded passage 0 (2 label(s) not merged): 1 ({r03})" in text
    assert f"left out, no passage graded: 2 ({r05}, {r04})" in text
    assert "left out, question-only (no passage to grade" in text
    assert "analyze slices A B --golden G --by tag:cohort:prod-dec" in text
    assert "§" not in text


def load_golden_h1(w, capsys):
    code, _, err = cli(["golden", "build", w["authoring"], "--corpus", w["corpus"], "--out", w["tmp"] / "g1"],
                       capsys)
    assert code == 0, err
    return load_golden(w["tmp"] / "g1")["h1"].evidence


def test_evidence_quoted_by_hand_in_a_stub_brings_a_question_only_item_in(small, capsys):
    _, queue = _promote(small, capsys)
    r06 = query_id("r06")
    stubs_file = small["queue"] / "queries.jsonl"
    stubs = read_jsonl(stubs_file)
    for s in stubs:
        if s["query_id"] == r06:
            s["evidence"] = [{"doc_id": "shipping", "quote": "Express takes 1 day.", "grade": 3}]
        if s["query_id"] == query_id("r04"):
            s["answerable"] = False  # the labeller's call: the corpus has no answer to it
    stubs_file.write_text("".join(json.dumps(s) + "\n" for s in stubs))
    r02 = next(r for r in queue if r["query_id"] == query_id("r02"))
    code, out, err = _merge(small, capsys, write_labels(small["tmp"] / "l.jsonl", [(r02, 1)]), "--json")
    assert code == 0, err
    rep = json.loads(out)["promoted"]
    assert rep["added"] == [query_id("r04"), query_id("r02"), r06] and rep["question_only"] == []
    code, _, err = cli(["golden", "build", small["tmp"] / "merged.jsonl", "--corpus", small["corpus"], "--out",
                        small["tmp"] / "g2"], capsys)
    assert code == 0, err
    g2 = load_golden(small["tmp"] / "g2")
    start = DOCS["shipping"].index("Express takes 1 day.")
    assert [(e.doc_id, e.start, e.end, e.grade) for e in g2[r06].evidence] == [("shipping", start, start + 20, 3)]
    assert not g2[query_id("r04")].answerable and g2[query_id("r04")].evidence == []


def test_merge_refuses_question_only_labels_and_labels_of_questions_already_in_the_file(small, capsys):
    _, queue = _promote(small, capsys)
    q_only = next(r for r in queue if r["doc_id"] == "")
    r01 = next(r for r in queue if r["query_id"] == query_id("r01"))
    labels = write_labels(small["tmp"] / "labels.jsonl", [(r01, 2), (q_only, 1)])
    code, out, err = _merge(small, capsys, labels)
    assert code == 2 and out == "" and not (small["tmp"] / "merged.jsonl").exists()
    assert err.splitlines() == [
        f"error: {labels}:2: {q_only['query_id']} is a question-only item: no retrieved unit resolved, so there is "
        "no passage to grade; quote its evidence by hand in the queue's queries.jsonl stub instead"]

    # merged once, the same labels again into the merged file: refused; a stub in the file with no label is
    # counted as already there
    labels = write_labels(small["tmp"] / "labels.jsonl", [(r01, 2)])
    code, _, err = _merge(small, capsys, labels)
    assert code == 0, err
    code, _, err = _merge(small, capsys, labels, authoring=small["tmp"] / "merged.jsonl", out_name="again.jsonl")
    assert code == 2
    assert err.splitlines() == [
        f"error: {labels}:1: {r01['query_id']} is already in the authoring file (merged from an earlier queue?); "
        "merge into the file from before that merge, or drop the label"]
    r02 = next(r for r in queue if r["query_id"] == query_id("r02"))
    code, out, err = _merge(small, capsys, write_labels(small["tmp"] / "l2.jsonl", [(r02, 3)]), "--json",
                            authoring=small["tmp"] / "merged.jsonl", out_name="again.jsonl")
    assert code == 0, err
    rep = json.loads(out)["promoted"]
    assert rep["already_in_set"] == [r01["query_id"]] and rep["added"] == [r02["query_id"]]


def test_merge_refuses_a_bad_stub_another_corpus_and_a_store(small, capsys):
    _, queue = _promote(small, capsys)
    labels = write_labels(small["tmp"] / "labels.jsonl", [(queue[0], 2)])
    stubs_file = small["queue"] / "queries.jsonl"
    good = stubs_file.read_text()
    stubs = read_jsonl(stubs_file)
    stubs[1]["stratum"] = "Bad Stratum"
    stubs[2]["answerable"] = False
    stubs[2]["evidence"] = [{"doc_id": "refunds", "quote": "Store credit never expires.", "grade": 0}]
    stubs[3]["answerable"] = False
    labels = write_labels(small["tmp"] / "labels.jsonl", [(queue[0], 2)] + [
        (r, 1) for r in queue if r["query_id"] == stubs[3]["query_id"] and r["doc_id"]][:1])
    stubs_file.write_text("".join(json.dumps(s) + "\n" for s in [*stubs, stubs[0]]))
    code, _, err = _merge(small, capsys, labels)
    assert code == 2
    assert err.splitlines() == [
        f"error: {stubs_file}:2: stratum: String should match pattern '^[a-z][a-z0-9_]*$'; fix the stub or promote "
        "again",
        f"error: {stubs_file}:3: {stubs[2]['query_id']} is marked answerable: false but has evidence; a negative "
        "question keeps its evidence empty",
        f"error: {stubs_file}:4: {stubs[3]['query_id']} is marked answerable: false but has labels; a negative "
        "question keeps its evidence empty",
        f"error: {stubs_file}:{len(stubs) + 1}: {stubs[0]['query_id']} is given twice (first at line 1); keep one"]
    labels = write_labels(small["tmp"] / "labels.jsonl", [(queue[0], 2)])
    stubs_file.write_text(good)

    other = small["tmp"] / "other"
    other.mkdir()
    for doc, text in DOCS.items():
        (other / f"{doc}.txt").write_text(text + "\nMore text.")
    (small["tmp"] / "o.yaml").write_text(AUTHORING)
    code, _, err = cli(["golden", "merge-labels", small["tmp"] / "o.yaml", labels, "--queue", small["queue"],
                        "--corpus", other, "--out", small["tmp"] / "m.jsonl"], capsys)
    assert code == 2 and "was promoted with the corpus" in err and "pass the corpus its unit ids point into" in err
    code, _, err = _merge(small, capsys, labels, "--store", small["db"])
    assert code == 2 and "is a promote queue; its questions are new" in err
    assert "§" not in err


# ------------------------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo (four pipelines over the bundled licenses; about 8 s), run once for this module."""
    from ragassay.analysis.demo import run_demo

    return run_demo(tmp_path_factory.mktemp("demo") / "out", n_resamples=100, report=None)


def _units_for_topics(demo) -> dict[tuple[str, int], list[str]]:
    """(stratum, topic) of the simulator -> the top 3 unit ids bm25 returned for one demo query: production
    traffic of a reference pipeline names its units DOC:START-END, which promote resolves in the corpus."""
    traces = [t for t in read_jsonl(demo.out / "traces" / f"{demo.run_ids['bm25']}.jsonl") if t["type"] == "trace"]
    lists = [[u["unit_id"] for u in (t.get("reranked") or t["fused"])[:3]] for t in traces if t["fused"]]
    keys = [(s, i) for s in sorted(TOPICS) for i in range(len(TOPICS[s]))]
    return {k: lists[3 * n] for n, k in enumerate(keys)}


@pytest.mark.slow  # the demo (~8 s) and two runs on the new set
def test_simulated_failures_promoted_labelled_merged_and_built_into_the_demo_set(demo, tmp_path, capsys):
    store = tmp_path / "store.duckdb"
    shutil.copy(demo.out / "ragassay.duckdb", store)
    sim = tmp_path / "sim.jsonl"
    code, _, err = cli(["online", "simulate", "--records", "2000", "--days", "5", "--out", sim], capsys)
    assert code == 0, err
    # shipping keeps the simulator's kb-... ids (they resolve nowhere: question-only); the others get demo units
    units = _units_for_topics(demo)
    topic = {w: (s, i) for s, ts in TOPICS.items() for i, ws in enumerate(ts) for w in ws}
    rows = read_jsonl(sim)
    for r in rows:
        if topic[r["question"]][0] != "shipping" and r.get("unit_ids"):
            r["unit_ids"] = units[topic[r["question"]]]
    sim.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli(["online", "ingest", sim, "--store", store], capsys)
    assert code == 0, err
    queue_dir = tmp_path / "queue"
    code, out, err = cli(["online", "promote", "--store", store, "--out", queue_dir, "--corpus", bundled_corpus_dir(),
                          "--per-stratum", "6", "--json"], capsys)
    assert code == 0, err
    meta = json.loads(out)
    cohort = meta["cohort"]
    assert cohort == "production-2026-03"
    queue = read_jsonl(queue_dir / "queue.jsonl")
    stubs = {s["query_id"]: s for s in read_jsonl(queue_dir / "queries.jsonl")}
    by_query: dict[str, list[dict]] = {}
    for it in queue:
        by_query.setdefault(it["query_id"], []).append(it)
    with_passages = [q for q in stubs if any(it["doc_id"] for it in by_query[q])]
    q_only = [q for q in stubs if not any(it["doc_id"] for it in by_query[q])]
    assert len(with_passages) >= 4 and q_only  # the world the test needs
    # the page's save: grades for a few items. A: 3 on the first passage, 0 on the rest; B: 1 then 2;
    # C: every passage 0 (left out); the rest not graded
    a, b, c = with_passages[:3]
    graded = ([(by_query[a][0], 3)] + [(it, 0) for it in by_query[a][1:]]
              + [(by_query[b][0], 1), (by_query[b][1], 2)] + [(it, 0) for it in by_query[c]])
    labels = write_labels(tmp_path / "labels.jsonl", graded)
    authoring = tmp_path / "licenses.yaml"
    shutil.copy(bundled_golden_source(), authoring)
    merged = tmp_path / "merged.yaml"
    args = ["golden", "merge-labels", authoring, labels, "--queue", queue_dir, "--corpus", bundled_corpus_dir(),
            "--out", merged]
    code, text, err = cli(args, capsys)
    assert code == 0, err
    n_merged = len(by_query[a]) + 2
    grades = [g for it, g in graded if it["query_id"] in (a, b)]
    assert f"merged {n_merged} label(s) into {merged}: {demo.golden.dataset_version} -> " in text
    assert "per grade: " + ", ".join(f"{g}: {grades.count(g)}" for g in range(4)) in text
    assert f"promoted questions (cohort {cohort}): 2 of {len(stubs)} added as new queries ({a}, {b})" in text
    assert f"left out, every graded passage 0 ({len(by_query[c])} label(s) not merged): 1 ({c})" in text
    assert f"left out, no passage graded: {len(with_passages) - 3} " in text
    assert f"left out, question-only (no passage to grade, no evidence quoted in {queue_dir / 'queries.jsonl'}): " \
           f"{len(q_only)} " in text
    code, out, err = cli([*args, "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    new_version = rep["new_version"]
    assert new_version != demo.golden.dataset_version and rep["old_version"] == demo.golden.dataset_version

    code, _, err = cli(["golden", "build", merged, "--corpus", bundled_corpus_dir(), "--out", tmp_path / "g2"], capsys)
    assert code == 0, err
    g2 = load_golden(tmp_path / "g2")
    assert g2.dataset_version == new_version
    assert len(g2.queries) == len(demo.golden.queries) + 2
    assert g2.manifest["dataset"] == demo.golden.manifest["dataset"]
    for qid, items in ((a, by_query[a]), (b, by_query[b][:2])):
        q = g2[qid]
        assert q.question == stubs[qid]["question"] and q.stratum == stubs[qid]["stratum"]
        assert q.source == "production" and str(q.created) == stubs[qid]["created"]
        assert q.tags == stubs[qid]["tags"] and f"cohort:{cohort}" in q.tags and "source:production" in q.tags
        assert [(e.doc_id, e.start, e.end, e.grade) for e in q.evidence] == [
            (it["doc_id"], it["start"], it["end"], g) for it, g in graded if it in items]
    old = {q.query_id: q for q in demo.golden.queries}
    assert all(g2[qid].evidence == q.evidence and g2[qid].question == q.question for qid, q in old.items())
    assert c not in g2

    # the cohort is measurable on its own: two pipelines scored on the new set, sliced by the cohort tag
    configs = Path(bundled_golden_source()).parents[1] / "configs"
    for name in ("bm25", "hybrid"):
        code, _, err = cli(["run", configs / f"{name}.yaml", "--golden", tmp_path / "g2", "--corpus",
                            bundled_corpus_dir(), "--store", store, "--name", f"{name}-new"], capsys)
        assert code == 0, err
    code, out, err = cli(["analyze", "slices", "bm25-new", "hybrid-new", "--store", store, "--golden", tmp_path / "g2",
                          "--by", f"tag:cohort:{cohort}", "-m", "recall@10", "--resamples", "200", "--json"], capsys)
    assert code == 0, err
    (key,) = json.loads(out)["keys"]
    assert {s["name"]: s["n"] for s in key["slices"]} == {f"cohort:{cohort}": 2, f"not cohort:{cohort}": key["n"] - 2}


def test_a_queue_promoted_without_a_corpus_merges_hand_quoted_stubs_and_refuses_a_merge_adding_nothing(small,
                                                                                                    capsys):
    code, out, err = cli(["online", "promote", "--store", small["db"], "--out", small["queue"], "--per-stratum",
                          "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["counts"] == {"requests": 2, "items": 2, "unit_items": 0, "question_only": 2,
                                         "unresolved_units": 4}  # two unit ids each
    empty = small["tmp"] / "labels.jsonl"
    empty.write_text("")  # the page saved nothing: every item is question-only
    code, out, err = _merge(small, capsys, empty)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: no promoted question of {small['queue']} has evidence graded 1 or more, so nothing would be added "
        f"(0 with every graded passage 0, 0 not graded, 2 question-only, 0 already in {small['authoring']}); grade "
        "passages on the page, or quote evidence by hand in the queue's queries.jsonl"]
    stubs_file = small["queue"] / "queries.jsonl"
    stubs = read_jsonl(stubs_file)
    stubs[0]["evidence"] = [{"doc_id": "refunds", "quote": "Refunds are paid within 30 days", "grade": 2}]
    stubs_file.write_text("".join(json.dumps(s) + "\n" for s in stubs))
    code, out, err = _merge(small, capsys, empty, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["judgements"]["n"] == 0
    assert rep["promoted"]["added"] == [stubs[0]["query_id"]]
    assert rep["promoted"]["question_only"] == [stubs[1]["query_id"]]
