"""Pairwise judging with a position swap: `ragassay judge pairwise A B` on stored runs against the fake
provider (both orders, the cache, the refusals), the figures of a slot-1 judge and of a content judge worked
by hand, the cluster bootstrap over trials, and `validate_pairwise` (kappa against scikit-learn, the label
format, the label-set floor before any call, the bundled example file)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from tests.analysis.conftest import make_run
from tests.judges.conftest import fake_provider  # noqa: F401  (the shared fixture, imported not copied)

from ragassay.analysis.runner import load_inputs
from ragassay.cli.app import main as _main
from ragassay.errors import InputError
from ragassay.golden import bundled_golden_source
from ragassay.judges.config import JudgeConfig
from ragassay.judges.pairwise import (
    RUBRIC,
    PairJudgement,
    bundled_pairwise_labels,
    load_pairwise_labels,
    pairwise_pins,
    preference_counts,
    preference_figures,
    validate_pairwise,
)
from ragassay.judges.validate import Floor, validation_record, validation_report_section
from ragassay.store import Store
from ragassay.trace.io import write_traces
from ragassay.trace.schema import RunHeader, Trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

CHEESE = "The moon is made of cheese."


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    out = capsys.readouterr()
    return (e.value.code or 0), out.out, out.err


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def judge_yaml(tmp_path, server, model):
    cfg = {"provider": "openai", "model": model, "base_url": server.base_url, "max_tokens": 256,
           "api_key_env": "JUDGE_TEST_KEY", "concurrency": 8,
           "retry": {"max_attempts": 2, "timeout_s": 2, "backoff_base_s": 0.001},
           "prices": {model: {"input": 1.0, "output": 2.0}}}
    path = tmp_path / f"judge-{model}.yaml"
    path.write_text(json.dumps(cfg))
    return path


def _between(text, tag):
    return text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]


def _verdict(preferred):
    return {"justification": "scripted", "cannot_judge": False, "preferred": preferred}


def script(server, labels=None, *, slot1=False):
    """The fake judge: with ``slot1`` it always prefers slot 1; otherwise it prefers by content — the
    labelled preference of a label item (``labels``: (question, answer_a, answer_b) -> label), else the answer
    that is not about cheese (tie when neither or both are). Items are named by question + slot-1 answer."""
    labels = labels or {}

    def responder(system, user):
        assert system == RUBRIC
        if slot1:
            return _verdict("first")
        q, one, two = _between(user, "question"), _between(user, "answer_1"), _between(user, "answer_2")
        if (q, one, two) in labels:
            return _verdict({"a": "first", "b": "second", "tie": "tie"}[labels[(q, one, two)]])
        if (q, two, one) in labels:
            return _verdict({"a": "second", "b": "first", "tie": "tie"}[labels[(q, two, one)]])
        bad1, bad2 = CHEESE in one, CHEESE in two
        return _verdict("tie" if bad1 == bad2 else ("second" if bad1 else "first"))

    server.responder = responder
    server.item_of = lambda user: _between(user, "question") + "|" + _between(user, "answer_1")


# ---------------------------------------------------------------------------------------------- two runs
# per query: (A's answer, B's answer); "ref" = the golden reference answer, None = abstained, "-" = no trace
PLAN = {"lex-001": ("ref", CHEESE), "lex-002": (CHEESE, "ref"), "lex-003": ("ref", "short"),
        "lex-004": ("ref", None), "lex-005": ("ref", "-"), "neg-001": (None, None)}


def write_run(path, inputs, side, tag, trials=(0,)):
    corpus, golden = inputs
    traces = []
    for qid, answers in PLAN.items():
        q = golden[qid]
        plan = answers[side]
        if plan == "-":
            continue
        for trial in trials:
            answer = {"ref": q.reference_answer, "short": f"In short: {q.reference_answer}"}.get(plan, plan)
            traces.append(Trace(trace_id=f"{tag}-{qid}-{trial}", query_id=qid, trial=trial, question=q.question,
                                answer=answer, outcome="abstained" if plan is None else "answered"))
    header = RunHeader(run_name=tag, corpus_digest=corpus.digest, dataset_version=golden.dataset_version)
    write_traces(path, header, traces)
    return path


def two_runs(tmp_path, capsys, inputs, trials=(0,)):
    db = tmp_path / "r.duckdb"
    paths = {}
    for side, name in enumerate(("a", "b")):
        paths[name] = write_run(tmp_path / f"{name}.jsonl", inputs, side, name, trials)
        code, _, err = cli(["score", paths[name], "--golden", bundled_golden_source(), "--store", db, "--name", name,
                            "--json"], capsys)
        assert code == 0, err
    return db, paths


def test_slot1_judge_is_all_position_bias_and_the_rerun_pays_nothing(tmp_path, capsys, monkeypatch, inputs,
                                                                    fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider, slot1=True)
    db, _ = two_runs(tmp_path, capsys, inputs)
    cfg = judge_yaml(tmp_path, fake_provider, "slot1")
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--json",
                          "--resamples", "500"], capsys)
    assert code == 0, err
    res = json.loads(out)
    # lex-001..003 are judged; by hand: every verdict is "first", so A-first says a and B-first says b
    assert res["n"] == 3 and res["n_keys"] == 6
    assert res["left_out"] == {"a_abstained+b_abstained": 1, "b_abstained": 1, "b_missing": 1}
    assert res["counts"] == {"b_win": 0, "a_win": 0, "tie": 0, "inconsistent": 3}
    assert res["rates"]["inconsistent"] == 1.0
    assert res["preference"]["value"] == pytest.approx(0.5)
    assert res["preference"]["ci_low"] == pytest.approx(0.5) and res["preference"]["ci_high"] == pytest.approx(0.5)
    first, dis = res["position_bias"]["first_slot_rate"], res["position_bias"]["disagreement"]
    assert first["value"] == 1.0 and first["non_tie_verdicts"] == 6 and first["tie_verdicts"] == 0
    assert dis["value"] == 1.0 and dis["ci_low"] == 1.0
    assert [(p["query_id"], p["a_first"], p["b_first"], p["preference"]) for p in res["pairs"]] == [
        ("lex-001", "a", "b", "inconsistent"), ("lex-002", "a", "b", "inconsistent"),
        ("lex-003", "a", "b", "inconsistent")]
    # two paid calls per judged pair, none for a pair left out; nothing in results
    assert fake_provider.paid == 6 and res["cost"]["paid_calls"] == 6 and res["cost"]["calls"] == 6
    assert res["validation"]["status"] == "unvalidated"
    with Store.open(db, read_only=True) as st:
        calls = st.judge_calls(res["calls_run_id"])
        assert sorted((c["query_id"], c["item"]) for c in calls) == [
            (q, i) for q in ("lex-001", "lex-002", "lex-003") for i in ("pairwise:ab", "pairwise:ba")]
        assert st.get_run(res["calls_run_id"]).source == "judge:pairwise"
        assert not st.results(res["calls_run_id"]).num_rows
        assert {r["metric"] for r in st.results("a").to_pylist()}.isdisjoint({"preference", "pairwise"})
    fake_provider.reset_counts()
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--resamples", "500"],
                         capsys)
    assert code == 0, err
    assert fake_provider.paid == 0
    text = " ".join(out.split())
    assert "preference for B: 0.500 [0.500, 0.500]" in text and "[unvalidated judge]" in text
    assert "slot 1 took 100.0% [100.0%, 100.0%] of 6 non-tie verdicts" in text
    assert "orders disagree on 100.0%" in text and "left out, not judged: a_abstained+b_abstained 1" in text
    assert "cost: 6 calls (0 paid" in text and "cache hits 100%" in text


def test_content_judge_agrees_with_itself_across_orders(tmp_path, capsys, monkeypatch, inputs,
                                                       fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider)
    db, _ = two_runs(tmp_path, capsys, inputs)
    cfg = judge_yaml(tmp_path, fake_provider, "content")
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--json",
                          "--resamples", "500"], capsys)
    assert code == 0, err
    res = json.loads(out)
    # lex-001: A better (a, a); lex-002: B better (b, b); lex-003: same content (tie, tie)
    assert res["counts"] == {"b_win": 1, "a_win": 1, "tie": 1, "inconsistent": 0}
    assert res["preference"]["value"] == pytest.approx((0 + 1 + 0.5) / 3)
    assert res["position_bias"]["disagreement"]["value"] == 0.0
    # non-tie verdicts: lex-001 first, second; lex-002 second, first
    assert res["position_bias"]["first_slot_rate"]["value"] == 0.5
    assert res["position_bias"]["first_slot_rate"]["non_tie_verdicts"] == 4
    assert fake_provider.paid == 6 and res["undefined"] == {}
    # an order without a verdict leaves its pair without a preference, counted by reason
    _, golden = inputs
    q = golden["lex-003"]
    fake_provider.plan[f"{q.question}|In short: {q.reference_answer}"] = ["refusal"]
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", judge_yaml(tmp_path, fake_provider, "other"),
                          "--store", db, "--json", "--resamples", "500"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["undefined"] == {"judge_refused": 1} and res["n"] == 2
    assert res["counts"] == {"b_win": 1, "a_win": 1, "tie": 0, "inconsistent": 0}


def test_trials_of_one_query_are_one_cluster(tmp_path, capsys, monkeypatch, inputs, fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider)
    db, _ = two_runs(tmp_path, capsys, inputs, trials=(0, 1))
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", judge_yaml(tmp_path, fake_provider, "content"),
                          "--store", db, "--json", "--resamples", "500"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["n"] == 6 and res["preference"]["n_clusters"] == 3 and res["preference"]["n"] == 6
    # the trials repeat the answers, so both trials' requests are one request each: paid once
    assert fake_provider.paid == 6 and res["cost"]["cache_hits"] == 6


def test_a_cluster_bootstrap_counts_repeated_trials_once():
    rng = np.random.default_rng(3)
    prefs = rng.choice(["first", "second", "tie"], size=(40, 2))
    once = [PairJudgement(f"q{k}", 0, a, b) for k, (a, b) in enumerate(prefs)]
    twice = [PairJudgement(f"q{k}", t, a, b) for k, (a, b) in enumerate(prefs) for t in (0, 1)]
    opts = {"n_resamples": 1000, "seed": 4}
    f1 = preference_figures(once, [p.key for p in once], **opts)
    f2 = preference_figures(twice, [p.key for p in twice], **opts)
    assert f2["n"] == 80 and f2["preference"]["n_clusters"] == 40
    for a, b in ((f1["preference"], f2["preference"]), (f1["position_bias"]["disagreement"],
                                                         f2["position_bias"]["disagreement"])):
        # a duplicated trial adds no evidence: the interval is the one of the queries alone
        assert b["value"] == pytest.approx(a["value"])
        assert (b["ci_low"], b["ci_high"]) == pytest.approx((a["ci_low"], a["ci_high"]))
    # scores by hand: B 1, tie or inconsistent 0.5, A 0
    back = {("first", "second"): 0.0, ("second", "first"): 1.0, ("tie", "tie"): 0.5}
    assert f1["preference"]["value"] == pytest.approx(np.mean([back.get((a, b), 0.5) for a, b in prefs]))
    slots = [s for row in prefs for s in row if s != "tie"]
    assert f1["position_bias"]["first_slot_rate"]["value"] == pytest.approx(slots.count("first") / len(slots))


def test_pairwise_refuses_other_golden_versions_wrong_traces_and_local_judges(tmp_path, capsys, monkeypatch,
                                                                             inputs, fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider)
    db, paths = two_runs(tmp_path, capsys, inputs)
    cfg = judge_yaml(tmp_path, fake_provider, "content")
    with Store.open(db) as st:
        make_run(st, "v1", {"m": np.zeros(3)}, dataset_version="ds@1")
        make_run(st, "v2", {"m": np.zeros(3)}, dataset_version="ds@2")
    code, _, err = cli(["judge", "pairwise", "v1", "v2", "--judge", cfg, "--store", db], capsys)
    assert code == 2 and "dataset_version: ds@1 (A) vs ds@2 (B)" in err and "--rebaseline" not in err
    code, _, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--traces-b", paths["a"]],
                       capsys)
    assert code == 2 and "given for run B are not run b's" in err and "trace_id differs" in err
    code, _, err = cli(["judge", "pairwise", "a", "a", "--judge", cfg, "--store", db], capsys)
    assert code == 2 and "the same run" in err
    local = tmp_path / "local.yaml"
    local.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    code, _, err = cli(["judge", "pairwise", "a", "b", "--judge", local, "--store", db], capsys)
    assert code == 2 and "a pairwise judge is an LLM judge" in err
    assert fake_provider.paid == 0


# ---------------------------------------------------------------------------------------------- validation
def bundled_lookup():
    ls = load_pairwise_labels(bundled_pairwise_labels())
    return ls, {(it.question, it.answer_a, it.answer_b): it.label for it in ls.items}


def test_bundled_example_file_is_generated_and_meets_the_minimums():
    import make_pairwise_examples

    path = bundled_pairwise_labels()
    assert path.read_text(encoding="utf-8") == make_pairwise_examples.render(make_pairwise_examples.examples())
    ls = load_pairwise_labels(path)
    counts = preference_counts(ls.items)
    assert len(ls) >= 120 and min(counts.values()) >= 15 and ls.labelled_by() == "automated"
    assert counts == {"a": 48, "tie": 47, "b": 44}  # as docs/judge-validation.md and the folder's README say
    assert all(json.loads(line)["labelled_by"] == "automated" for line in path.read_text().splitlines())


def test_validate_pairwise_kappa_matches_scikit_learn_and_the_floor_marks_the_cli(tmp_path, capsys, monkeypatch,
                                                                               inputs, fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    ls, _ = bundled_lookup()
    # the judge errs on purpose: every 5th pair it calls a tie, every 7th it answers slot 1 in both orders
    items = sorted(ls.items, key=lambda it: it.item_id)
    noisy = {}
    expected = {}
    for k, it in enumerate(items):
        key = (it.question, it.answer_a, it.answer_b)
        if k % 7 == 0 and it.answer_a != it.answer_b:
            expected[it.item_id] = "tie"  # inconsistent counts as tie
            noisy[key] = "slot1"
        elif k % 5 == 0:
            expected[it.item_id] = noisy[key] = "tie"
        else:
            expected[it.item_id] = noisy[key] = it.label
    script(fake_provider, {k: v for k, v in noisy.items() if v != "slot1"})
    inner = fake_provider.responder

    def responder(system, user):
        q, one, two = _between(user, "question"), _between(user, "answer_1"), _between(user, "answer_2")
        if noisy.get((q, one, two)) == "slot1" or noisy.get((q, two, one)) == "slot1":
            return _verdict("first")
        return inner(system, user)

    fake_provider.responder = responder
    cfg_path = judge_yaml(tmp_path, fake_provider, "content")
    from ragassay.judges.config import load_judge_config

    cfg = load_judge_config(cfg_path)
    db = tmp_path / "v.duckdb"
    with Store.open(db) as st:
        figures, calls, label_set = validate_pairwise(cfg, bundled_pairwise_labels(), st, n_resamples=500, seed=0,
                                                      confidence=0.95)
    n_identical = sum(it.answer_a == it.answer_b for it in items)
    assert calls["paid_calls"] == 2 * len(items) - n_identical and calls["stopped"] is None
    human = [it.label for it in items]
    judge = [expected[it.item_id] for it in items]
    assert figures["scale"] == "preference" and figures["classes"] == ["a", "tie", "b"]
    assert figures["n"] == figures["n_used"] == len(items) and figures["excluded"] == {}
    assert figures["kappa"]["value"] == pytest.approx(cohen_kappa_score(human, judge, weights="linear",
                                                                        labels=["a", "tie", "b"]))
    assert figures["agreement"]["value"] == pytest.approx(np.mean([h == j for h, j in zip(human, judge, strict=True)]))
    assert figures["judge_dist"] == {c: judge.count(c) for c in ("a", "tie", "b")}
    slot1 = sum(v == "slot1" for v in noisy.values())
    assert figures["judge_preferences"]["inconsistent"] == slot1
    assert figures["position_bias"]["disagreement"]["value"] == pytest.approx(slot1 / len(items))
    assert label_set.version == ls.version and len(label_set) == len(items) and label_set.passes_kappa() is None
    # the common record: the default floor reads it like any other kind
    pins = pairwise_pins(cfg)
    record = validation_record(pins, label_set, figures, calls=calls, kind="pairwise")
    ok, why = Floor().check(record)
    assert record["kind"] == "pairwise" and record["scale"] == "preference" and record["labelled_by"] == "automated"
    section = validation_report_section(record)
    assert section["kappa"] == record["figures"]["kappa"] and section["classes"] == ["a", "tie", "b"]
    assert all("undefined" in figures[k] for k in ("verbosity", "self_preference", "calibration"))
    # automated labels never earn the default floor; allowed by the policy, the intervals decide
    assert ok is False and "the labels are automated (a model or a script), not people's" in why
    assert Floor(allow_automated=True).check(record)[0] is (
        figures["kappa"]["ci_low"] >= 0.6 and all(c["recall"]["ci_low"] >= 0.5 for c in figures["per_class"]))
    # a rerun is answered from the store
    fake_provider.reset_counts()
    with Store.open(db) as st:
        _, again, _ = validate_pairwise(cfg, bundled_pairwise_labels(), st, n_resamples=200, seed=0, confidence=0.95)
    assert fake_provider.paid == 0 and again["paid_calls"] == 0


def test_a_validation_meeting_the_floor_marks_the_cli_preference_validated(tmp_path, capsys, monkeypatch, inputs,
                                                                           fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    _, truth = bundled_lookup()
    script(fake_provider, truth)
    cfg_path = judge_yaml(tmp_path, fake_provider, "content")
    from ragassay.judges.config import load_judge_config

    cfg = load_judge_config(cfg_path)
    db, _ = two_runs(tmp_path, capsys, inputs)
    # the bundled pairs as if people had labelled them: automated labels cannot earn the floor
    human = tmp_path / "human.jsonl"
    human.write_text("".join(json.dumps({**json.loads(line), "labelled_by": "human"}) + "\n"
                             for line in bundled_pairwise_labels().read_text().splitlines()))
    with Store.open(db) as st:
        figures, calls, label_set = validate_pairwise(cfg, human, st, n_resamples=500, seed=0, confidence=0.95)
        assert figures["kappa"]["value"] == 1.0 and figures["position_bias"]["disagreement"]["value"] == 0.0
        st.record_judge_validation(validation_record(pairwise_pins(cfg), label_set, figures, calls=calls,
                                                     kind="pairwise"))
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg_path, "--store", db, "--resamples", "300"],
                         capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "judge validated for pairwise preferences" in text and "[unvalidated judge]" not in text
    # a judge under other settings has no record: unvalidated
    other = json.loads(cfg_path.read_text())
    other["max_tokens"] = 300
    cfg_path.write_text(json.dumps(other))
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg_path, "--store", db, "--json",
                          "--resamples", "300"], capsys)
    assert code == 0, err
    assert json.loads(out)["validation"]["status"] == "unvalidated"


def write_pairs(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(counts):
    rows = []
    for label, n in counts.items():
        rows += [{"item_id": f"{label}-{k}", "question": "q?", "answer_a": f"a {label} {k}",
                  "answer_b": f"b {label} {k}", "label": label} for k in range(n)]
    return rows


@pytest.mark.parametrize(("counts", "fragment"), [
    ({"a": 60, "b": 60, "tie": 5}, "class tie has 5 labelled item(s), below the minimum of 10"),
    ({"a": 30, "b": 30, "tie": 30}, "90 labelled items can be compared, below the minimum of 100"),
    ({"a": 120}, "every compared label is 'a': a single-class label set"),
    ({"a": 50, "b": 45, "tie": 20, "cannot_tell": 10}, None),
])
def test_a_label_set_that_cannot_earn_the_floor_is_refused_before_any_call(tmp_path, monkeypatch, fake_provider,  # noqa: F811
                                                                           counts, fragment):
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider)
    from ragassay.judges.config import load_judge_config

    cfg = load_judge_config(judge_yaml(tmp_path, fake_provider, "content"))
    path = write_pairs(tmp_path / "pairs.jsonl", _rows(counts))
    with Store.open(tmp_path / "s.duckdb") as st:
        if fragment is None:
            figures, _, _ = validate_pairwise(cfg, path, st, n_resamples=200, seed=0, confidence=0.95)
            # neither answer is about cheese: the content judge calls every pair a tie
            assert figures["excluded"] == {"human_cannot_tell": 10} and figures["n"] == 115
            assert figures["judge_dist"] == {"a": 0, "tie": 115, "b": 0}
            assert fake_provider.paid == 2 * 125
            return
        with pytest.raises(InputError) as e:
            validate_pairwise(cfg, path, st, n_resamples=200, seed=0, confidence=0.95)
    assert fragment in str(e.value) and "nothing was judged" in str(e.value)
    assert fake_provider.seen == []


@pytest.mark.parametrize(("line", "fragment"), [
    ({"item_id": "x", "question": "q", "answer_a": "a", "answer_b": "b", "label": "maybe"}, ":2: item x: label"),
    ({"item_id": "x", "question": "q", "answer_a": "a", "label": "a"}, ":2: item x: answer_b must be non-empty"),
    ({"item_id": "x", "question": "q", "answer_a": "a", "answer_b": "b", "label": "a", "claim": "c"},
     ":2: unknown field(s) ['claim']"),
    ({"item_id": "x", "question": "q", "answer_a": "a", "answer_b": "b", "label": "a", "kind": "support"},
     ":2: item x: kind 'support' does not match --kind pairwise"),
    ({"item_id": "x", "question": "q", "answer_a": "a", "answer_b": "b", "label": "a", "labelled_by": "robot"},
     ":2: item x: labelled_by 'robot'"),
    ({"item_id": "ok", "question": "q", "answer_a": "a", "answer_b": "b", "label": "a"},
     ":2: item_id 'ok' repeats line 1"),
    ({"item_id": "x", "question": "q", "answer_a": "a", "answer_b": "b", "label": "a", "context": " "},
     ":2: item x: context (when given) must be non-empty"),
    ("not json", ":2: not JSON"),
])
def test_bad_pairwise_label_files_are_file_line_errors_and_nothing_is_read(tmp_path, line, fragment):
    good = {"item_id": "ok", "question": "q", "answer_a": "a", "answer_b": "b", "label": "A",
            "labelled_by": "human", "kind": "pairwise"}
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(good) + "\n" + (line if isinstance(line, str) else json.dumps(line)) + "\n")
    with pytest.raises(InputError) as e:
        load_pairwise_labels(path)
    assert fragment in str(e.value) and str(path) in str(e.value) and "nothing was validated" in str(e.value)
    path.write_text(json.dumps(good) + "\n")
    ls = load_pairwise_labels(path)
    assert ls.items[0].label == "a" and ls.labelled_by() == "human" and ls.items[0].context is None


def test_the_label_set_version_is_over_the_sorted_items_and_moves_with_any_edit(tmp_path):
    rows = _rows({"a": 2, "b": 2, "tie": 1})
    v1 = load_pairwise_labels(write_pairs(tmp_path / "x.jsonl", rows)).version
    assert load_pairwise_labels(write_pairs(tmp_path / "y.jsonl", rows[::-1])).version == v1
    rows[0]["answer_a"] += "!"
    assert load_pairwise_labels(write_pairs(tmp_path / "z.jsonl", rows)).version != v1


def test_pairwise_pins_are_the_pairwise_rubric_with_the_config_settings():
    cfg = JudgeConfig(provider="openai", model="m", prices={"m": {"input": 1.0, "output": 1.0}}, max_tokens=300)
    pins = pairwise_pins(cfg)
    from ragassay.judges.pairwise import PROMPT_SHA, RUBRIC_SHA

    assert pins["rubric_sha"] == RUBRIC_SHA != cfg.pins()["rubric_sha"] and pins["prompt_sha"] == PROMPT_SHA
    assert pins["judge_model"] == "openai:m" and "max_tokens=300" in pins["settings"]
    assert pins["settings"] == cfg.pins()["settings"]


def test_a_spend_cap_stop_exits_2_and_the_rerun_pays_only_for_the_rest(tmp_path, capsys, monkeypatch, inputs,
                                                                       fake_provider):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    script(fake_provider)
    db, _ = two_runs(tmp_path, capsys, inputs)
    cfg = judge_yaml(tmp_path, fake_provider, "content")
    capped = json.loads(cfg.read_text())
    capped["spend_cap"] = 0.003  # room for about two calls' worst case
    cfg.write_text(json.dumps(capped))
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--json"], capsys)
    assert code == 2 and "judge run stopped" in err and out == ""
    first = fake_provider.paid
    assert 0 < first < 6
    del capped["spend_cap"]
    cfg.write_text(json.dumps(capped))
    fake_provider.reset_counts()
    code, out, err = cli(["judge", "pairwise", "a", "b", "--judge", cfg, "--store", db, "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert fake_provider.paid == 6 - first and res["cost"]["cache_hits"] == first and res["n"] == 3
