"""``ragassay golden synth --generator llm``: questions from a model through the real SDKs (pointed at the fake
provider on 127.0.0.1), filtered like the offline generator's, pinned in the manifest, cached in the store (a
rerun pays nothing), costed, under the spend cap, and every fault counted as an outcome."""

from __future__ import annotations

import hashlib
import json
import re

import duckdb
import pytest
from tests.judges.fake_provider import FakeProvider

from ragassay.corpus import load_corpus
from ragassay.errors import InputError
from ragassay.golden import load_golden
from ragassay.golden.synth import Candidate, Excerpt, parse_targets, passages, verify_excerpts
from ragassay.judges.question_gen import (
    PROMPT,
    PROMPT_SHA,
    TEMPLATE,
    Passage,
    QuestionsVerdict,
    candidates_from,
    in_passage,
    n_passages,
)

KEY_ENV = "SYNTH_TEST_KEY"
# One paragraph per document, so one passage each; beta's first sentence is broken over two lines.
DOCS = {
    "alpha": "The Alpha licence lets anyone copy the software without paying a fee. A copy must keep the original "
             "copyright notice in every file.",
    "beta": "The Beta licence forbids selling modified\nversions of the program to third parties. Modified versions "
            "must be marked as changed in a visible place.",
    "gamma": "Gamma releases are supported for five years after their first publication. Security fixes for Gamma "
             "are published on the second Tuesday of every month.",
    "delta": "Delta requires written consent before its logo appears in any advertising. Requests for consent go "
             "to the trademark office in Geneva by post.",
    "epsilon": "Copyright holders and contributors are listed below in alphabetical order by surname only.",
}
FABRICATED = "Beta may be sold freely by anyone."


def q(question, *excerpts):
    return {"question": question, "excerpts": list(excerpts)}


def sentence(doc_id, i):
    return re.split(r"(?<=\.) ", DOCS[doc_id])[i]


# What the scripted model answers per document: 8 questions; 2 quote nothing in the corpus (a fabricated quote,
# an empty excerpt list), 1 is compound; epsilon is boilerplate (the escape hatch).
ANSWERS = {
    "alpha": [q("Can I copy the Alpha software for free?", sentence("alpha", 0)),
              q("Which notice has to stay in copies of Alpha?", sentence("alpha", 1))],
    "beta": [q("May I sell a changed Beta program?",
               "The Beta licence forbids selling modified versions of the program to third parties."),
             q("Can Beta be resold?", FABRICATED)],
    "gamma": [q("How long are Gamma releases supported and when do fixes come out?", sentence("gamma", 0)),
              q("What is the Gamma maintenance schedule?", sentence("gamma", 0), sentence("gamma", 1))],
    "delta": [q("Who approves the Delta logo in adverts?", sentence("delta", 0), sentence("delta", 1)),
              q("Where is the Delta trademark office?")],
    "epsilon": [],
}


def doc_of(user):
    return re.search(r'<document id="([^"]+)">', user).group(1)


def respond(system, user):
    assert system == PROMPT
    doc = doc_of(user)
    assert f"\n{DOCS[doc]}\n</document>" in user  # the whole passage, verbatim
    return {"justification": "scripted", "cannot_judge": doc == "epsilon", "questions": ANSWERS[doc]}


@pytest.fixture
def fake_provider():
    server = FakeProvider(lifetime_s=120.0)
    server.start()
    server.responder = respond
    server.item_of = doc_of
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def corpus_dir(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    for doc_id, text in DOCS.items():
        (root / f"{doc_id}.txt").write_text(text + "\n", encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-synth-SENTINEL-42")


def judge_yaml(tmp_path, server, provider="openai", name="judge.yaml", **extra):
    cfg = {"provider": provider, "model": "gen-m", "base_url": server.base_url, "max_tokens": 256,
           "api_key_env": KEY_ENV, "concurrency": 4,
           "retry": {"max_attempts": 2, "timeout_s": 2, "backoff_base_s": 0.001},
           "prices": {"gen-m": {"input": 1.0, "output": 2.0}}, **extra}
    path = tmp_path / name
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    return path


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


def synth(capsys, tmp_path, corpus_dir, cfg, *extra, out="llm.jsonl"):
    return run(capsys, "golden", "synth", "--generator", "llm", "--judge", cfg, "--store", tmp_path / "s.duckdb",
               "--corpus", corpus_dir, "--out", tmp_path / out, "--dedupe-threshold", "1",
               *(() if "--per-stratum" in extra else ("--per-stratum", "paraphrase=5")), *extra)


def lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def stored_calls(tmp_path):
    with duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True) as con:
        return con.execute("SELECT query_id, outcome, cache_hit FROM judge_calls JOIN runs USING (run_id) "
                           "WHERE source = 'judge:golden-synth' AND judge = 'golden-synth' ORDER BY query_id"
                           ).fetchall()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_questions_are_filtered_pinned_costed_and_a_rerun_pays_nothing(provider, tmp_path, capsys, corpus_dir,
                                                                          fake_provider):
    cfg = judge_yaml(tmp_path, fake_provider, provider)
    code, stdout, err = synth(capsys, tmp_path, corpus_dir, cfg, "--json")
    assert code == 0, err
    res = json.loads(stdout)
    c = res["counts"]
    # 8 questions came back; the fabricated quote and the empty excerpt list are dropped, the compound refused
    assert (c["generated"], c["out_of_corpus"], c["compound"], c["duplicates"], c["surplus"], c["kept"]) == \
        (8, 2, 1, 0, 0, 5)
    assert c["generated"] == c["out_of_corpus"] + c["compound"] + c["duplicates"] + c["surplus"] + c["kept"]
    assert c["passages"] == 5 and c["asked"] == 5 and c["blank_questions"] == 0
    assert res["calls"] == {"ok": 4, "cannot_judge": 1, "refused": 0, "truncated": 0, "malformed": 0, "error": 0,
                            "not_started": 0}
    assert fake_provider.paid == 5
    # each call is billed 1,000 input tokens at $1/M and 50 output tokens at $2/M (cache reads at the input price)
    cost = res["cost"]
    assert cost["paid_calls"] == 5 and cost["cache_hits"] == 0 and cost["errors"] == 0
    assert cost["spend"] == pytest.approx(5 * 0.0011)
    assert cost["per_1000_queries"] == pytest.approx(5 * 0.0011 / 5 * 1000)

    corpus = load_corpus(corpus_dir)
    meta, *items = lines(tmp_path / "llm.jsonl")
    assert len(items) == res["n"] == 5
    for it in items:
        assert it["stratum"] == "paraphrase" and it["source"] == "synthetic" and it["answerable"] is True
        assert "form:llm" in it["tags"] and " and " not in it["question"]
        for ev in it["evidence"]:
            assert ev["quote"] in corpus[ev["doc_id"]].text and ev["grade"] == 3  # independent substring check
        assert it["reference_answer"] == " ".join(ev["quote"] for ev in it["evidence"])
    quotes = [ev["quote"] for it in items for ev in it["evidence"]]
    assert FABRICATED not in quotes
    # the excerpt quoted with a space where the text breaks the line is written as the text has it
    assert "The Beta licence forbids selling modified\nversions of the program to third parties." in quotes
    two = next(it for it in items if it["question"] == "What is the Gamma maintenance schedule?")
    assert [ev["quote"] for ev in two["evidence"]] == [sentence("gamma", 0), sentence("gamma", 1)]

    gen = meta["generator"]
    assert gen["kind"] == "llm" and gen["model"] == f"{provider}:gen-m"
    assert gen["prompt_sha"] == hashlib.sha256((PROMPT + "\n\x1e" + TEMPLATE).encode()).hexdigest() == PROMPT_SHA
    assert gen["settings"] == "max_tokens=256; structured_output=json_schema"
    assert gen["calls"] == res["calls"] and gen["filters"] == c and gen["seed"] == 0 and gen["date"]
    assert res["generator"]["prompt_sha"] == PROMPT_SHA

    # golden build takes it unchanged and every quote resolves where the file says
    code, _, err = run(capsys, "golden", "build", tmp_path / "llm.jsonl", "--corpus", corpus_dir,
                       "--out", tmp_path / "g")
    assert code == 0, err
    gs = load_golden(tmp_path / "g")
    assert len(gs.queries) == 5 and gs.manifest["generator"]["kind"] == "llm"
    assert gs.manifest["generator"]["prompt_sha"] == PROMPT_SHA
    for qy in gs.queries:
        for e in qy.evidence:
            assert corpus[e.doc_id].text[e.start:e.end] == e.quote

    # the calls are judge_calls rows; the rerun is answered by them: nothing paid, the same file written
    assert [(k, o, hit) for k, o, hit in stored_calls(tmp_path)] == [
        ("alpha@0", "ok", False), ("beta@0", "ok", False), ("delta@0", "ok", False),
        ("epsilon@0", "cannot_judge", False), ("gamma@0", "ok", False)]
    before = (tmp_path / "llm.jsonl").read_bytes()
    fake_provider.reset_counts()
    code, out, err = synth(capsys, tmp_path, corpus_dir, cfg)
    assert code == 0, err
    assert fake_provider.paid == 0 and len(fake_provider.seen) == 0
    assert (tmp_path / "llm.jsonl").read_bytes() == before
    text = " ".join(out.split())
    assert "wrote 5 synthetic questions" in text
    assert f"generator: llm {provider}:gen-m (prompt sha {PROMPT_SHA[:12]}), 5 passages asked: ok 4, cannot_judge 1" \
        in text
    assert "cost: 5 calls (0 paid, 0 errors)" in text and "cache hits 100%" in text and "spend $0.0000" in text
    assert "per 1,000 queries" in text and "$0.00 per" not in text  # the projection prices the cached calls
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert b"sk-synth-SENTINEL-42" not in f.read_bytes()


def test_faults_are_outcomes_and_only_errors_are_asked_again(tmp_path, capsys, corpus_dir, fake_provider):
    fake_provider.hang_s = 1.0
    fake_provider.plan = {"alpha": ["timeout"], "beta": ["429", "ok"], "gamma": ["malformed"],
                          "delta": ["refusal"]}
    cfg = judge_yaml(tmp_path, fake_provider, retry={"max_attempts": 2, "timeout_s": 0.2, "backoff_base_s": 0.001})
    code, stdout, err = synth(capsys, tmp_path, corpus_dir, cfg, "--json")
    assert code == 0, err
    assert "Traceback" not in err
    res = json.loads(stdout)
    # alpha timed out twice (error), beta was rate limited once then answered, gamma's text is not JSON
    assert res["calls"] == {"ok": 1, "cannot_judge": 1, "refused": 1, "truncated": 0, "malformed": 1, "error": 1,
                            "not_started": 0}
    assert [x["question"] for x in lines(tmp_path / "llm.jsonl")[1:]] == ["May I sell a changed Beta program?"]
    assert res["short"] == {"paraphrase": 4} and res["cost"]["errors"] == 1
    assert [s.action for s in fake_provider.seen if s.item == "beta"] == ["429", "ok"]

    # the error was not billed, so the next run asks it again; the other outcomes are answered by the store
    fake_provider.reset_counts()
    fake_provider.plan = {}
    code, stdout, err = synth(capsys, tmp_path, corpus_dir, cfg, "--json")
    assert code == 0, err
    assert [s.item for s in fake_provider.seen] == ["alpha"] and fake_provider.paid == 1
    res = json.loads(stdout)
    assert res["calls"]["ok"] == 2 and res["calls"]["malformed"] == 1 and res["calls"]["error"] == 0
    assert res["cost"]["paid_calls"] == 1 and res["cost"]["cache_hits"] == 4
    assert res["n"] == 3  # beta's and alpha's questions


def test_the_spend_cap_stops_cleanly_keeps_finished_calls_and_a_rerun_pays_only_for_the_rest(
        tmp_path, capsys, corpus_dir, fake_provider):
    # one call at a time; each costs $0.0011 and may start only while the spend so far plus its worst case
    # (request bytes + 256 tokens at $1/M, 256 output tokens at $2/M: about $0.0028) stays within the cap, so
    # $0.0045 lets two calls start ($0 + 0.0028, $0.0011 + 0.0028) and refuses the third ($0.0022 + 0.0028)
    capped = judge_yaml(tmp_path, fake_provider, concurrency=1, spend_cap=0.0045, name="capped.yaml")
    code, out, err = synth(capsys, tmp_path, corpus_dir, capped)
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: golden synth stopped: spend cap $0.0045 reached")
    assert "2 of 5 passage(s) asked, 3 not started, $0.0022 spent, nothing written" in err
    assert not (tmp_path / "llm.jsonl").exists()
    first = fake_provider.paid
    assert first == 2 and len(stored_calls(tmp_path)) == 2  # the finished calls are kept

    fake_provider.reset_counts()
    code, out, err = synth(capsys, tmp_path, corpus_dir, judge_yaml(tmp_path, fake_provider), "--json")
    assert code == 0, err
    assert fake_provider.paid == 5 - first
    res = json.loads(out)
    assert res["cost"]["cache_hits"] == first and res["cost"]["paid_calls"] == 5 - first
    assert res["cost"]["spend"] == pytest.approx(3 * 0.0011)


def test_batch_mode_is_priced_at_batch_rates(tmp_path, capsys, corpus_dir, fake_provider):
    cfg = judge_yaml(tmp_path, fake_provider, mode="batch",
                     prices={"gen-m": {"input": 1.0, "output": 2.0, "batch_input": 0.5, "batch_output": 1.0}},
                     batch={"poll_interval_s": 0.01, "max_poll_interval_s": 0.02, "max_wait_s": 30})
    code, out, err = synth(capsys, tmp_path, corpus_dir, cfg, "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["n"] == 5 and res["cost"]["batch_calls"] == 5 and len(fake_provider.created_batches()) == 1
    assert res["cost"]["spend"] == pytest.approx(5 * 0.00055)  # half the sync price of each call


@pytest.mark.parametrize("args, fragment", [
    (("--generator", "llm"), "--generator llm needs --judge JUDGE.yaml"),
    (("--judge", "JUDGE"), "--judge is for --generator llm; the offline generator makes no calls"),
    (("--store", "STORE"), "--store is for --generator llm"),
    (("--generator", "gpt"), "--generator 'gpt': pick offline"),
    (("--generator", "llm", "--judge", "JUDGE", "--per-stratum", "lexical=5"),
     "the llm generator writes paraphrase and negative questions only"),
    (("--generator", "llm", "--judge", "NOFILE"), "no such judge config file"),
    (("--generator", "llm", "--judge", "NOPRICE"), "prices: no price for model 'gen-m'"),
    (("--generator", "llm", "--judge", "LOCAL"), "provider local is a judge without a model"),
    (("--generator", "llm", "--judge", "NOKEY"), "$SYNTH_UNSET_KEY is not set"),
])
def test_bad_inputs_are_one_error_line_each_and_exit_2(tmp_path, capsys, fake_provider, args, fragment):
    good = judge_yaml(tmp_path, fake_provider)
    bad = {"JUDGE": good, "STORE": tmp_path / "s.duckdb", "NOFILE": tmp_path / "missing.yaml",
           "NOPRICE": judge_yaml(tmp_path, fake_provider, name="np.yaml", prices={"other": {"input": 1, "output": 1}}),
           "LOCAL": tmp_path / "local.yaml",
           "NOKEY": judge_yaml(tmp_path, fake_provider, name="nk.yaml", api_key_env="SYNTH_UNSET_KEY")}
    bad["LOCAL"].write_text('{"provider": "local", "model": "lexical", "metrics": ["faithfulness"]}')
    out = tmp_path / "s.jsonl"
    code, _, err = run(capsys, "golden", "synth", "--out", out, *(bad.get(a, a) for a in args))
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error: ") and fragment in err
    assert not out.exists() and not (tmp_path / "s.duckdb").exists() and fake_provider.paid == 0


def test_passages_group_the_sentences_of_one_paragraph_up_to_the_word_limit():
    s1 = "The first sentence has exactly nine words in it."
    s2 = "A second sentence follows it with another nine words."
    s3 = "After a blank line a new paragraph starts right here."
    text = f"{s1} Tiny. {s2}\n\n{s3}"
    got = passages(text)
    # the short "Tiny." between two sentences is kept inside the passage: a passage is one substring
    assert got == [(0, f"{s1} Tiny. {s2}"), (text.index(s3), s3)]
    assert passages(text, max_words=12) == [(0, s1), (text.index(s2), s2), (text.index(s3), s3)]
    for start, p in passages(text, max_words=12):
        assert text[start:start + len(p)] == p


def test_an_excerpt_is_located_verbatim_or_across_whitespace_and_never_invented():
    p = Passage("d", 100, "Modified versions\nmust be marked. They are free.")
    assert in_passage(p, "They are free.") == ("They are free.", 100 + p.text.index("They"))
    assert in_passage(p, "versions must  be marked.") == ("versions\nmust be marked.", 109)
    assert in_passage(p, "They are not free.") == ("They are not free.", -1)
    assert in_passage(p, "  ") == ("  ", -1)


def test_candidates_keep_every_excerpt_and_the_filter_drops_a_question_with_any_fabricated_one(corpus_dir):
    corpus = load_corpus(corpus_dir)
    text = corpus["alpha"].text
    p = Passage("alpha", 0, text.rstrip("\n"))
    verdict = QuestionsVerdict(justification="x", cannot_judge=False, questions=[
        {"question": "  Can I copy Alpha?  ", "excerpts": [sentence("alpha", 0), sentence("alpha", 0),
                                                           sentence("alpha", 1)]},
        {"question": "Is Alpha free?", "excerpts": [sentence("alpha", 0), "Alpha costs nothing at all."]},
        {"question": "Where?", "excerpts": []},
        {"question": "   ", "excerpts": [sentence("alpha", 0)]},
    ])
    cands, blank = candidates_from(verdict, p)
    assert blank == 1 and [c.question for c in cands] == ["Can I copy Alpha?", "Is Alpha free?", "Where?"]
    assert cands[0].quotes == [sentence("alpha", 0), sentence("alpha", 1)]  # the repeat is removed
    assert cands[2].quote == "" and cands[2].answerable  # no excerpt: dropped below, never a negative
    kept, dropped = verify_excerpts(cands, corpus)
    assert dropped == 2 and [c.question for c in kept] == ["Can I copy Alpha?"]
    assert kept[0].start == 0 and kept[0].more[0].start == text.index(sentence("alpha", 1))


def test_a_repeated_further_excerpt_gets_its_occurrence(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "d.txt").write_text("Keep the notice. Keep the notice. Other words follow here.\n")
    corpus = load_corpus(root)
    cand = Candidate("q", "llm", "paraphrase", "d", "Other words follow here.", -1,
                     more=[Excerpt("Keep the notice.", 17)])
    (kept,), dropped = verify_excerpts([cand], corpus)
    assert dropped == 0 and kept.occurrence is None and (kept.more[0].start, kept.more[0].occurrence) == (17, 2)


def test_passages_asked_and_strata_per_generator():
    assert [n_passages(n) for n in (0, 1, 4, 5, 150)] == [0, 3, 4, 5, 113]
    assert parse_targets(["paraphrase=20", "negative=3"], "llm") == {"paraphrase": 20, "negative": 3}
    with pytest.raises(InputError, match="the offline generator writes lexical and negative"):
        parse_targets(["paraphrase=20"])


def test_llm_negatives_come_from_outside_documents_and_short_strata_are_named(tmp_path, capsys, corpus_dir,
                                                                             fake_provider):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.txt").write_text("The monsoon season brings heavy rainfall to the coastal plains every summer.\n",
                                   encoding="utf-8")
    cfg = judge_yaml(tmp_path, fake_provider)
    code, out, err = synth(capsys, tmp_path, corpus_dir, cfg, "--per-stratum", "paraphrase=6", "--per-stratum",
                           "negative=1", "--negatives-from", outside)
    assert code == 0, err
    text = " ".join(out.split())
    assert "short: 1 fewer paraphrase questions than asked (the passages, their calls" in text
    items = lines(tmp_path / "llm.jsonl")[1:]
    assert [x["stratum"] for x in items] == ["paraphrase"] * 5 + ["negative"]
    assert items[-1]["question"].startswith("What is said about ") and items[-1]["evidence"] == []


def test_the_prompt_and_schema_ask_for_single_questions_with_verbatim_excerpts():
    assert "never join two questions with 'and'" in PROMPT and "'Terms and Conditions'" in PROMPT
    assert "Copy each excerpt verbatim from the passage" in PROMPT
    schema = QuestionsVerdict.json_schema()
    item = schema["$defs"]["SynthQuestion"]
    # strict structured output on both providers: every field required, no extra keys, at every level
    assert item["required"] == ["question", "excerpts"] and item["additionalProperties"] is False
    assert schema["required"] == ["justification", "cannot_judge", "questions"]
    assert schema["additionalProperties"] is False


def test_blank_questions_from_the_model_are_counted_in_the_summary(tmp_path, capsys, corpus_dir, fake_provider):
    def with_blank(system, user):
        got = respond(system, user)
        if doc_of(user) == "alpha":
            got = {**got, "questions": [*got["questions"], q("   ", sentence("alpha", 0))]}
        return got

    fake_provider.responder = with_blank
    cfg = judge_yaml(tmp_path, fake_provider)
    code, out, err = synth(capsys, tmp_path, corpus_dir, cfg)
    assert code == 0, err
    assert "filters: 1 blank questions dropped, 8 generated," in " ".join(out.split())
    code, out, err = synth(capsys, tmp_path, corpus_dir, cfg, "--json")
    c = json.loads(out)["counts"]
    assert code == 0 and (c["blank_questions"], c["generated"], c["kept"]) == (1, 8, 5)
