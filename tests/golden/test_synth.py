"""``ragassay golden synth``: synthetic questions whose excerpts are verified against the corpus, each filter
counted, the output built unchanged by ``golden build``."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.errors import InputError
from ragassay.golden import load_golden
from ragassay.golden.synth import (
    Candidate,
    answer_in_question,
    dedupe,
    dedupe_threshold,
    is_compound,
    parse_targets,
    sentences,
    verify_excerpts,
)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(bundled_corpus_dir())


def run(capsys, *args):
    from ragassay.cli.app import main

    capsys.readouterr()
    try:
        main([*map(str, args)])
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def _lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_the_offline_generator_writes_150_verified_questions_that_build_unchanged(tmp_path, capsys, corpus):
    out = tmp_path / "syn.jsonl"
    code, stdout, err = run(capsys, "golden", "synth", "--out", out, "--json")
    assert code == 0, err
    res = json.loads(stdout)
    meta, *items = _lines(out)
    assert res["n"] == len(items) == 150
    c = res["counts"]
    # every candidate is accounted for: generated = dropped by each filter + surplus + kept
    assert c["generated"] == c["out_of_corpus"] + c["compound"] + c["duplicates"] + c["surplus"] + c["kept"]
    assert c["kept"] == 150 and c["out_of_corpus"] == 0
    for it in items:
        ev = it["evidence"][0]
        text = corpus[ev["doc_id"]].text
        assert ev["quote"] in text  # an exact substring of the canonical text, checked here independently
        assert it["reference_answer"] == ev["quote"] and ev["grade"] == 3
        assert it["source"] == "synthetic" and it["stratum"] == "lexical" and it["answerable"] is True
        assert not is_compound(it["question"])
        if text.count(ev["quote"]) > 1:
            assert ev["occurrence"] >= 1
    assert len({it["question"] for it in items}) == 150  # no two identical questions
    gen = meta["generator"]
    assert gen["kind"] == "offline-templates-v1" and gen["model"] is None and gen["seed"] == 0
    assert gen["filters"] == c and gen["dedupe_threshold"] == res["dedupe_threshold"]
    # golden build takes it unchanged, and every quote resolves where the file says
    code, _, err = run(capsys, "golden", "build", out, "--corpus", bundled_corpus_dir(), "--out", tmp_path / "g")
    assert code == 0, err
    gs = load_golden(tmp_path / "g")
    assert len(gs.queries) == 150 and gs.manifest["source_mix"] == {"synthetic": 150}
    assert gs.manifest["generator"]["kind"] == "offline-templates-v1"
    by_id = {it["query_id"]: it for it in items}
    for q in gs.queries:
        (e,) = q.evidence
        assert corpus[e.doc_id].text[e.start:e.end] == by_id[q.query_id]["evidence"][0]["quote"]


def test_the_same_seed_writes_the_same_questions_and_another_seed_others(tmp_path, capsys):
    paths = [tmp_path / f"{i}.jsonl" for i in range(3)]
    for p, seed in zip(paths, (3, 3, 4), strict=True):
        code, _, err = run(capsys, "golden", "synth", "--out", p, "--seed", seed, "--per-stratum", "lexical=40")
        assert code == 0, err
    q = [[x["question"] for x in _lines(p)[1:]] for p in paths]
    assert q[0] == q[1] and q[0] != q[2] and len(q[0]) == 40


def test_the_terminal_summary_names_every_filter_and_says_deltas_only(tmp_path, capsys):
    code, out, err = run(capsys, "golden", "synth", "--out", tmp_path / "s.jsonl", "--per-stratum", "lexical=30",
                         "--show-pairs", "2")
    assert code == 0, err
    text = " ".join(out.split())
    assert "wrote 30 synthetic questions" in text
    for part in ("generated", "excerpts not in the corpus", "compound", "duplicates", "surplus", "kept"):
        assert part in text
    assert "duplicate threshold" in text and "not absolute scores" in text
    assert text.count(" above ") + text.count(" below ") >= 2  # the sampled pairs around the threshold


def test_negatives_come_from_outside_documents_and_never_from_phrases_the_corpus_holds(tmp_path, capsys, corpus):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "weather.txt").write_text(
        "The monsoon season brings heavy rainfall to the coastal plains every summer. "
        "Farmers plant rice seedlings before the first storms arrive in the lowlands. "
        "Meteorologists track cyclone formation using satellite imagery over warm oceans.\n", encoding="utf-8")
    # a sentence copied from the corpus: its phrases are in the corpus, so it can give no negative
    gpl = corpus["GPL-3"].text
    copied = next(s for _, s in sentences(gpl) if len(s.split()) < 30)
    (outside / "copy.txt").write_text(copied + "\n", encoding="utf-8")
    out = tmp_path / "n.jsonl"
    code, stdout, err = run(capsys, "golden", "synth", "--out", out, "--per-stratum", "lexical=10",
                            "--per-stratum", "negative=4", "--negatives-from", outside, "--json")
    assert code == 0, err
    res = json.loads(stdout)
    negs = [x for x in _lines(out)[1:] if x["stratum"] == "negative"]
    # three outside sentences give one each; the copied one is refused, so the fourth is short
    assert len(negs) == 3 and res["counts"]["negative"] == 3 and res["counts"]["negatives_in_corpus"] == 1
    assert res["short"] == {"negative": 1}
    canon = [" ".join(d.text.casefold().split()) for d in corpus]
    for x in negs:
        assert x["answerable"] is False and x["evidence"] == [] and "reference_answer" not in x
        phrase = x["question"].removeprefix("What is said about ").removesuffix("?")
        assert not any(" ".join(phrase.casefold().split()) in t for t in canon)


def test_asking_for_more_negatives_than_the_documents_give_says_short(tmp_path, capsys):
    outside = tmp_path / "o"
    outside.mkdir()
    (outside / "a.txt").write_text("Volcanic ash clouds disrupt transatlantic aviation routes for several days.\n",
                                   encoding="utf-8")
    code, stdout, err = run(capsys, "golden", "synth", "--out", tmp_path / "s.jsonl", "--per-stratum", "lexical=5",
                            "--per-stratum", "negative=4", "--negatives-from", outside, "--json")
    assert code == 0, err
    res = json.loads(stdout)
    assert res["counts"]["negative"] == 1 and res["short"] == {"negative": 3}


@pytest.mark.parametrize("question, compound", [
    ("What was the date and significance of the Gettysburg Address?", True),
    ("Who may copy and distribute the Program?", True),
    ("AND what else?", True),
    ("What do the Terms and Conditions require?", False),
    ("How does GPL-3 define Corresponding Source?", False),
    ("What is the Anderson clause?", False),
])
def test_the_and_rule(question, compound):
    assert is_compound(question) is compound


def test_an_excerpt_not_in_its_document_is_dropped_and_a_repeated_one_gets_its_occurrence(corpus):
    text = corpus["GPL-3"].text
    repeated = next(s for _, s in sentences(text) if text.count(s) > 1) if any(
        text.count(s) > 1 for _, s in sentences(text)) else None
    items = [Candidate("q1", "keywords", "lexical", "GPL-3", "This sentence is not in the GPL at all."),
             Candidate("q2", "keywords", "lexical", "no-such-doc", "anything"),
             Candidate("q3", "what_about", "negative")]
    if repeated:
        second = text.find(repeated, text.find(repeated) + 1)
        items.append(Candidate("q4", "keywords", "lexical", "GPL-3", repeated, second))
    kept, dropped = verify_excerpts(items, corpus)
    assert dropped == 2 and [k.question for k in kept][:1] == ["q3"]
    if repeated:
        assert kept[1].occurrence == 2 and kept[1].start == second


def test_the_threshold_search_lands_between_the_duplicates_and_the_rest():
    # four questions: 0 and 1 share an excerpt (similarity 0.95), every other pair differs (≤ 0.80)
    items = [Candidate(f"q{i}", "keywords", "lexical", "d", q, s) for i, (q, s) in
             enumerate([("alpha beta.", 0), ("alpha beta.", 0), ("gamma delta.", 20), ("epsilon zeta.", 40)])]
    sim = np.array([[1, .95, .8, .7], [.95, 1, .75, .6], [.8, .75, 1, .5], [.7, .6, .5, 1]])
    t, rule = dedupe_threshold(sim, items)
    assert t == 0.95 and "binary search" in rule
    # by hand: at 0.8, 1 of the 2 pairs at or above it share an answer (50% < 90%), so no value up to 0.8
    # qualifies and the answer is hi
    t, rule = dedupe_threshold(sim, items, hi=0.8)
    assert t == 0.8 and "no similarity" in rule


def test_dedupe_keeps_the_first_of_each_group_and_counts_the_rest():
    items = [Candidate(f"q{i}", "keywords", "lexical") for i in range(4)]
    v = np.array([[1, 0], [1, 0], [0, 1], [math.sqrt(.5), math.sqrt(.5)]], dtype=np.float32)
    kept, dropped, t, rule, _ = dedupe(items, v, 0.9)
    assert [k.question for k in kept] == ["q0", "q2", "q3"] and dropped == 1 and t == 0.9 and "given" in rule


def test_a_question_that_gives_its_answer_away_is_flagged():
    stop = frozenset({"the", "is", "of", "a"})
    assert answer_in_question("Is the licence of the library permissive?", "The library licence is permissive.", stop)
    assert not answer_in_question("library licence?", "The library licence is permissive and short.", stop)


@pytest.mark.parametrize("args, fragment", [
    (("--per-stratum", "tabular=5"), "the offline generator writes lexical and negative questions only"),
    (("--per-stratum", "lexical=0"), "write STRATUM=COUNT with a count ≥ 1"),
    (("--per-stratum", "lexical"), "write STRATUM=COUNT"),
    (("--per-stratum", "lexical=5", "--per-stratum", "lexical=6"), "--per-stratum lexical is given twice"),
    (("--per-stratum", "negative=5"), "needs --negatives-from DIR"),
    (("--dedupe-threshold", "0"), "--dedupe-threshold"),
    (("--dedupe-threshold", "1.5"), "--dedupe-threshold"),
    (("--dedupe-threshold", "nan"), "--dedupe-threshold"),
    (("--show-pairs", "-1"), "--show-pairs"),
    (("--seed", "-2"), "--seed"),
])
def test_bad_options_are_refused_before_anything_is_written(tmp_path, capsys, args, fragment):
    out = tmp_path / "s.jsonl"
    code, _, err = run(capsys, "golden", "synth", "--out", out, *args)
    assert code == 2 and fragment in err and "Traceback" not in err
    assert not out.exists()


def test_an_existing_file_it_did_not_write_is_never_replaced(tmp_path, capsys):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"question": "my hand-written golden set"}\n', encoding="utf-8")
    before = hashlib.sha256(mine.read_bytes()).hexdigest()
    code, _, err = run(capsys, "golden", "synth", "--out", mine, "--per-stratum", "lexical=5")
    assert code == 2 and "refusing to overwrite" in err
    assert hashlib.sha256(mine.read_bytes()).hexdigest() == before
    # its own earlier output it replaces
    own = tmp_path / "own.jsonl"
    assert run(capsys, "golden", "synth", "--out", own, "--per-stratum", "lexical=5")[0] == 0
    assert run(capsys, "golden", "synth", "--out", own, "--per-stratum", "lexical=6")[0] == 0
    assert len(_lines(own)) == 7


def test_a_merge_labels_output_of_a_synth_file_is_never_regenerated_over(tmp_path, capsys):
    from ragassay.cli.golden_pool import MERGED_KEY

    own = tmp_path / "own.jsonl"
    assert run(capsys, "golden", "synth", "--out", own, "--per-stratum", "lexical=5")[0] == 0
    # merge-labels keeps the synth generator and records the merge beside it; the file now holds people's grades
    lines = _lines(own)
    lines[0]["generator"][MERGED_KEY] = [{"labels": "labels.jsonl", "n": 3, "k": 10}]
    own.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    before = hashlib.sha256(own.read_bytes()).hexdigest()
    code, _, err = run(capsys, "golden", "synth", "--out", own, "--per-stratum", "lexical=6")
    assert code == 2 and "refusing to overwrite" in err
    assert hashlib.sha256(own.read_bytes()).hexdigest() == before


def test_a_non_jsonl_out_is_refused(tmp_path, capsys):
    code, _, err = run(capsys, "golden", "synth", "--out", tmp_path / "s.yaml")
    assert code == 2 and "--out must end in .jsonl" in err


def test_parse_targets_reads_each_stratum_once():
    assert parse_targets(["lexical=150", "negative=20"]) == {"lexical": 150, "negative": 20}
    with pytest.raises(InputError, match="multi_hop"):
        parse_targets(["multi_hop=3"])


def test_a_comparison_on_a_synthetic_set_says_to_read_the_deltas(tmp_path, capsys):
    from ragassay.analysis.demo import demo_config_dir

    src = tmp_path / "s.jsonl"
    assert run(capsys, "golden", "synth", "--out", src, "--per-stratum", "lexical=30")[0] == 0
    assert run(capsys, "golden", "build", src, "--corpus", bundled_corpus_dir(), "--out", tmp_path / "g")[0] == 0
    db = tmp_path / "r.duckdb"
    for name in ("bm25", "hybrid"):
        code, _, err = run(capsys, "run", demo_config_dir() / f"{name}.yaml", "--golden", tmp_path / "g",
                           "--corpus", bundled_corpus_dir(), "--store", db, "--name", name, "--json")
        assert code == 0, err
    code, out, err = run(capsys, "compare", "bm25", "hybrid", "--store", db)
    assert code == 0, err
    assert "golden set: all 30 items synthetic — read the deltas, not the absolute means" in " ".join(out.split())
    code, out, _ = run(capsys, "compare", "bm25", "hybrid", "--store", db, "--json")
    assert json.loads(out)["coverage"]["golden_sources"] == {"a": {"synthetic": 30}, "b": {"synthetic": 30}}
    # the report's comparison section carries the same line
    code, _, err = run(capsys, "report", "bm25", "hybrid", "--store", db, "--golden", tmp_path / "g",
                       "--corpus", bundled_corpus_dir(), "--out", tmp_path / "report")
    assert code == 0, err
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "golden set: all 30 items synthetic — read the deltas, not the absolute means" in page
