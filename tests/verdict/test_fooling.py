"""Attempts to fool ragassay's verdict (issue 26, "Done when"), made as an adversarial user would make them, each
through the CLI and each checked on both the exit code / verdict and the line the user reads.

Every attempt must end as FAIL, as WARN [unvalidated], or as a clean refusal (exit 2 with an `error:` line) —
never a PASS and never a silent number. The only PASSes below follow an explicit opt-out written in the policy
or a `--rebaseline`, and those tests check the opt-out was needed. An attempt that still fools ragassay is a
strict xfail whose reason states what happens instead.

Six families: lost answers (errors, refusals, abstentions, missing traces), tiny or skewed label sets and the
validation records the gate reads, judge pin drift (settings), traces that are not the run's own, runs of other
golden-set versions and fake oracles, and judge metrics without a validation that counts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import click
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from tests.analyses._runs import make_run
from tests.judge_validation.labelgen import make_items, write_labels
from tests.judges.fake_provider import FakeProvider
from tests.judges.test_metrics import scripted_judge

from ragassay.analysis.runner import load_inputs
from ragassay.cli.app import main
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.judges.config import load_judge_config
from ragassay.judges.metrics import RUBRICS
from ragassay.store import Store
from ragassay.trace.io import write_traces
from ragassay.trace.schema import RunHeader, Trace, Unit, make_trace_id

ROOT = Path(__file__).resolve().parents[2]
README_POLICY = re.search(r"## The gate in CI\n\n```yaml\n(.*?)```", (ROOT / "README.md").read_text("utf-8"),
                          re.S).group(1)


# ------------------------------------------------------------------------------------------------ plumbing
@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _ragassay(args) -> None:
    main(list(args))


class Res(NamedTuple):
    code: int
    out: str   # stdout with whitespace folded: rich wraps long lines at the console width
    err: str   # stderr as written (one `error:` line per problem)

    @property
    def error(self) -> str:
        return " ".join(self.err.split())


def cli(*args) -> Res:
    """``ragassay ARGS`` through the real entry point (``ragassay.cli.app:main``)."""
    res = CliRunner().invoke(_ragassay, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Res(res.exit_code, " ".join(res.stdout.split()), res.stderr)


def ok(res: Res) -> Res:
    assert res.code == 0, res.err
    return res


def refused(res: Res, *fragments: str) -> None:
    """A clean refusal: exit 2, nothing on stdout, every stderr line an `error:` line, each fragment named."""
    assert res.code == 2, (res.code, res.out[:300], res.err)
    assert res.out == "" and res.err, (res.out[:300], res.err)
    assert all(line.startswith("error: ") for line in res.err.splitlines()), res.err
    for f in fragments:
        assert f in res.error, (f, res.err)


def policy(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def validations(db: Path) -> list[dict]:
    with Store.open(db, read_only=True) as st:
        return st.judge_validations()


# ------------------------------------------------------------------------------------ traces over the golden set
def units_of(q) -> list[Unit]:
    return [Unit(unit_id=f"{ev.doc_id}#{j}", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=j + 1)
            for j, ev in enumerate(q.evidence)]


def trace_for(i: int, q, fate: str | None, trace_id: str) -> Trace | None:
    """The golden evidence retrieved and packed and the reference answer given (an abstention when the query is
    unanswerable), unless ``fate`` says the pipeline errored, was refused, abstained, emitted no outcome at all,
    or left the query out of the file (None)."""
    units = units_of(q)
    common = {"trace_id": trace_id, "query_id": q.query_id, "question": q.question, "fused": units,
              "packed": units}
    if fate == "missing":
        return None
    if fate == "error":
        return Trace(**common, outcome="error", error="upstream timeout")
    if fate == "refused":
        return Trace(**common, outcome="refused")
    if fate == "no_outcome":
        return Trace(**common)
    if fate == "abstained" or not q.answerable:
        return Trace(**common, outcome="abstained")
    return Trace(**common, answer=q.reference_answer, outcome="answered")


# Which (query index, query) a candidate loses, and how.
FATES = {
    "base": lambda i, q: None,
    "err50": lambda i, q: "error" if i % 2 else None,
    "err94": lambda i, q: None if i % 17 == 0 else "error",
    "ref60": lambda i, q: "refused" if i % 5 < 3 else None,
    "abstain": lambda i, q: "abstained" if q.answerable and i % 3 == 0 else None,
    "omit50": lambda i, q: "missing" if i % 2 else None,
    "no_outcome": lambda i, q: "no_outcome",
}


def write_fate(path: Path, corpus, golden, fate, *, dataset_version=None) -> Path:
    header = RunHeader(run_name=path.stem, corpus_digest=corpus.digest,
                       dataset_version=dataset_version or golden.dataset_version)
    traces = [trace_for(i, q, fate(i, q), f"{path.stem}-{i}") for i, q in enumerate(golden.queries)]
    write_traces(path, header, [t for t in traces if t is not None])
    return path


def tally(golden, fate) -> dict:
    """What the candidate of ``fate`` did, counted from the construction (the test's own oracle)."""
    fates = [(q, fate(i, q)) for i, q in enumerate(golden.queries)]
    scored = [q for q in golden.queries if q.answerable]
    return {"n": len(golden),
            "error": sum(f in ("error", "missing", "no_outcome") for _, f in fates),
            "refused": sum(f == "refused" for _, f in fates),
            "scored": len(scored),
            "kept": sum(q.answerable and f is None for q, f in fates),
            "abstained_answerable": sum(q.answerable and f == "abstained" for q, f in fates)}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    corpus, golden = load_inputs(None, None, root / "golden")
    assert all(q.reference_answer for q in golden.queries if q.answerable)
    return corpus, golden, root / "golden"


@pytest.fixture(scope="module")
def lost(tmp_path_factory, inputs):
    """A store of runs scored with `ragassay score` from trace files: the baseline answers every answerable query
    with its reference answer from the golden evidence; each candidate loses answers as FATES says. `v2` holds
    the baseline's traces scored against a second version of the golden set (one reference answer edited)."""
    corpus, golden, gdir = inputs
    root = tmp_path_factory.mktemp("lost")
    db = root / "lost.duckdb"
    for name, fate in FATES.items():
        path = write_fate(root / f"{name}.jsonl", corpus, golden, fate)
        ok(cli("score", path, "--golden", gdir, "--store", db, "--name", name))
    authoring = yaml.safe_load(bundled_golden_source().read_text(encoding="utf-8"))
    first = next(q for q in authoring["queries"] if q.get("reference_answer"))
    first["reference_answer"] += " (reworded in v2)"
    (root / "v2.yaml").write_text(yaml.safe_dump(authoring, sort_keys=False), encoding="utf-8")
    golden2 = build_golden(root / "v2.yaml", corpus, root / "golden2")
    assert golden2.dataset_version != golden.dataset_version
    path = write_fate(root / "v2.jsonl", corpus, golden, FATES["base"], dataset_version=golden2.dataset_version)
    ok(cli("score", path, "--golden", root / "golden2", "--store", db, "--name", "v2"))
    policies = {
        "readme": policy(root / "readme.yaml", "n_resamples: 2000\n" + README_POLICY),
        "f1": policy(root / "f1.yaml", "n_resamples: 2000\nmetrics: {answer_f1: {min_effect: 0.03}}\n"),
        "recall": policy(root / "recall.yaml", "n_resamples: 2000\nmetrics: {recall@fusion_depth: {min_effect: 0.03}}\n"),
    }
    return {"db": db, "root": root, "policy": policies, "v1": golden.dataset_version, "v2": golden2.dataset_version,
            "golden": golden}


# ======================================================================================== 1. lost answers
@pytest.mark.parametrize("cand", ["err50", "err94"])
def test_a_candidate_that_errors_on_most_questions_fails_on_its_error_rate_and_lost_pairs(lost, cand):
    t = tally(lost["golden"], FATES[cand])
    res = cli("gate", "base", cand, "--policy", lost["policy"]["readme"], "--store", lost["db"])
    assert res.code == 1 and res.out.startswith(f"gate FAIL: base → {cand}")
    assert (f"FAIL hard error_rate: credible rise in the error rate 0.0% → {t['error'] / t['n']:.1%}"
            in res.out)
    assert f"the candidate errored on {t['error']} of {t['n']} questions, the baseline on 0 of {t['n']}" in res.out
    assert (f"FAIL hard compared_pairs: the comparison lost pairs: answer_f1: {t['kept']} of the {t['scored']} "
            f"pairs the baseline scored") in res.out
    # the answers it still gives are perfect: the paired table alone would have passed it
    assert "PASS statistical answer_f1" in res.out


def test_a_callable_that_raises_on_94_percent_of_questions_fails_the_gate(tmp_path, inputs):
    """Through `ragassay.evaluate`, as the README's gate example: the callable raises, so nothing is dropped."""
    import ragassay

    corpus, golden, _ = inputs
    by_question = {q.question: (i, q) for i, q in enumerate(golden.queries)}
    assert len(by_question) == len(golden)

    def oracle(question: str) -> dict:
        _, q = by_question[question]
        units = [u.model_dump(exclude_none=True) for u in units_of(q)]
        if not q.answerable:
            return {"fused": units, "packed": units, "outcome": "abstained"}
        return {"fused": units, "packed": units, "answer": q.reference_answer, "outcome": "answered"}

    def flaky(question: str) -> dict:
        if by_question[question][0] % 17:
            raise RuntimeError("upstream timeout")
        return oracle(question)

    db = tmp_path / "s.duckdb"
    ragassay.evaluate(oracle, golden=golden, corpus=corpus, store=db, name="top")
    ragassay.evaluate(flaky, golden=golden, corpus=corpus, store=db, name="flaky")
    t = tally(golden, FATES["err94"])
    res = cli("gate", "top", "flaky", "--policy", policy(tmp_path / "g.yaml", "n_resamples: 2000\n" + README_POLICY),
              "--store", db)
    assert res.code == 1 and res.out.startswith("gate FAIL: top → flaky")
    assert f"the candidate errored on {t['error']} of {t['n']} questions, the baseline on 0" in res.out
    assert f"answer_f1: {t['kept']} of the {t['scored']} pairs the baseline scored" in res.out


def test_a_candidate_that_is_refused_on_most_questions_fails_on_its_refusal_rate(lost):
    t = tally(lost["golden"], FATES["ref60"])
    res = cli("gate", "base", "ref60", "--policy", lost["policy"]["readme"], "--store", lost["db"])
    assert res.code == 1 and res.out.startswith("gate FAIL: base → ref60")
    assert (f"FAIL hard refusal_rate: credible rise in the refusal rate 0.0% → {t['refused'] / t['n']:.1%}"
            in res.out)
    assert f"the candidate was refused on {t['refused']} of {t['n']} questions" in res.out
    assert "PASS hard error_rate" in res.out  # a refusal is not an error, and is not hidden as one either


def test_a_candidate_that_abstains_on_answerable_questions_fails_on_answer_f1(lost):
    t = tally(lost["golden"], FATES["abstain"])
    res = cli("gate", "base", "abstain", "--policy", lost["policy"]["readme"], "--store", lost["db"])
    drop = -t["abstained_answerable"] / t["scored"]  # an abstention on an answerable query scores 0
    assert res.code == 1 and res.out.startswith("gate FAIL: base → abstain")
    assert f"FAIL statistical answer_f1: credible regression ≥ minimum effect (Δ {drop:+.3f}" in res.out
    res = ok(cli("compare", "base", "abstain", "-m", "answer_f1", "-m", "over_refusal", "--overall-only",
                 "--resamples", "1000", "--store", lost["db"]))
    unanswerable = t["n"] - t["scored"]
    assert (f"outcomes A: answered {t['scored']}, abstained {unanswerable}, refused 0, error 0 | B: answered "
            f"{t['scored'] - t['abstained_answerable']}, abstained {unanswerable + t['abstained_answerable']}, "
            "refused 0, error 0") in res.out
    assert re.search(r"over_refusal went from 0\.00 to 0\.\d\d [^—]*— regressed\.", res.out), res.out


def test_a_trace_file_that_omits_half_the_golden_queries_counts_them_as_errors(lost):
    t = tally(lost["golden"], FATES["omit50"])
    res = cli("gate", "base", "omit50", "--policy", lost["policy"]["readme"], "--store", lost["db"])
    assert res.code == 1 and res.out.startswith("gate FAIL: base → omit50")
    assert f"the candidate errored on {t['error']} of {t['n']} questions" in res.out
    # a missing trace retrieves nothing: recall drops too
    assert "FAIL statistical recall@fusion_depth: credible regression ≥ minimum effect" in res.out


@pytest.mark.parametrize(("cand", "rate_line"), [
    ("err50", "FAIL hard error_rate: credible rise"),
    ("err94", "FAIL hard error_rate: credible rise"),
    ("ref60", "FAIL hard refusal_rate: credible rise"),
    ("omit50", "FAIL hard error_rate: credible rise"),
])
def test_a_policy_on_answer_f1_only_still_sees_the_lost_answers(lost, cand, rate_line):
    t = tally(lost["golden"], FATES[cand])
    res = cli("gate", "base", cand, "--policy", lost["policy"]["f1"], "--store", lost["db"])
    assert res.code == 1 and res.out.startswith(f"gate FAIL: base → {cand}")
    assert rate_line in res.out
    assert (f"FAIL hard compared_pairs: the comparison lost pairs: answer_f1: {t['kept']} of the {t['scored']} "
            "pairs") in res.out


def test_missing_worst_in_the_policy_makes_the_lost_answers_a_regression(lost, tmp_path):
    t = tally(lost["golden"], FATES["err50"])
    lost_pairs = t["scored"] - t["kept"]
    pol = policy(tmp_path / "worst.yaml", "n_resamples: 2000\nmetrics:\n  answer_f1: {min_effect: 0.03, "
                 "missing: worst}\n")
    res = cli("gate", "base", "err50", "--policy", pol, "--store", lost["db"])
    assert res.code == 1 and res.out.startswith("gate FAIL: base → err50")
    assert (f"FAIL statistical answer_f1: credible regression ≥ minimum effect (Δ {-lost_pairs / t['scored']:+.3f}"
            in res.out)
    assert (f"PASS hard compared_pairs: answer_f1: {t['scored']} of the {t['scored']} pairs the baseline scored"
            in res.out and f"{lost_pairs} scored as worst" in res.out)
    assert "FAIL hard error_rate: credible rise" in res.out


@pytest.mark.parametrize(("flag", "verdict", "fragment"), [
    (True, "regressed", "{lost} pair(s) undefined on one side scored as the worst value"),
    (False, "equivalent within ±0.02", "{lost} of the {scored} pairs A scored lost (undefined for B) and left out"),
])
def test_compare_missing_as_worst_shows_the_regression_the_paired_table_hides(lost, flag, verdict, fragment):
    t = tally(lost["golden"], FATES["err50"])
    args = ["compare", "base", "err50", "-m", "answer_f1", "--overall-only", "--resamples", "2000", "--store",
            lost["db"]] + (["--missing-as-worst", "answer_f1"] if flag else [])
    res = ok(cli(*args))
    claim = re.search(r"answer_f1 went from [^—]*— ", res.out)
    assert claim and res.out[claim.end():].startswith(verdict + "."), res.out
    assert fragment.format(lost=t["scored"] - t["kept"], scored=t["scored"]) in claim.group(0)
    # with or without the flag, the lost answers are said out loud
    assert f"error rate went from 0.0% to {t['error'] / t['n']:.1%}" in res.out and "— regressed;" in res.out


def test_missing_as_worst_is_refused_for_a_metric_without_a_worst_value(lost):
    refused(cli("compare", "base", "err50", "-m", "context_tokens", "--missing-as-worst", "context_tokens",
                "--store", lost["db"]), "context_tokens: missing-as-worst needs a bounded metric")


@pytest.mark.parametrize(("nulls", "verdict"), [
    (["min_compared_share"], "FAIL"),
    (["max_error_rise"], "FAIL"),
    (["min_compared_share", "max_error_rise"], "PASS"),
])
def test_the_gate_passes_lost_answers_only_when_the_policy_opts_out_of_both_checks(lost, tmp_path, nulls, verdict):
    hard = "hard: {" + ", ".join(f"{k}: null" for k in nulls) + "}\n"
    pol = policy(tmp_path / "optout.yaml", "n_resamples: 2000\n" + README_POLICY + hard)
    res = cli("gate", "base", "err50", "--policy", pol, "--store", lost["db"])
    assert res.code == (1 if verdict == "FAIL" else 0) and res.out.startswith(f"gate {verdict}: base → err50")
    kept = {"min_compared_share": "compared_pairs", "max_error_rise": "error_rate"}
    for key, check in kept.items():
        if key in nulls:
            assert f" {check}:" not in res.out  # switched off by the policy, by name
        else:
            assert f"FAIL hard {check}:" in res.out


def test_a_candidate_that_drops_its_outcomes_entirely_does_not_pass(lost):
    """A candidate whose traces carry no outcome at all (its answer stage lost on every question) against a
    baseline that answered: not "not applicable", a FAIL of its own."""
    t = tally(lost["golden"], FATES["no_outcome"])
    res = cli("gate", "base", "no_outcome", "--policy", lost["policy"]["recall"], "--store", lost["db"])
    assert res.code == 1 and res.out.startswith("gate FAIL: base → no_outcome")
    assert ("FAIL hard error_rate: the candidate records no generation outcome (no answer, abstention, refusal "
            f"or error) on any question, where the baseline gave one on {t['n']} of {t['n']}: its answer stage "
            "is gone") in res.out


# ============================================================================= 2. tiny or skewed label sets
LOCAL_JUDGE = "provider: local\nmodel: lexical\nmetrics: [faithfulness]\n"
FAITH_POLICY = "n_resamples: 1000\nmetrics: {faithfulness: {min_effect: 0.05}}\nhard: {min_citation_validity: null}\n"


def relabel(rows: list[dict], label, first: int | None = None, only: str | None = None) -> list[dict]:
    """``rows`` with the label of the first ``first`` rows (of label ``only`` when given) set to ``label``
    (a callable maps the old label)."""
    out, done = [], 0
    for r in rows:
        hit = (only is None or r["label"] == only) and (first is None or done < first)
        if hit:
            done += 1
            r = {**r, "label": label(r["label"]) if callable(label) else label}
        out.append(r)
    return out


def flip(label: str) -> str:
    return {"supported": "unsupported", "unsupported": "supported"}.get(label, label)


def judged_pair(db: Path, pins_a: dict, pins_b: dict | None = None, *, drop: float = 0.4, n: int = 200) -> None:
    """Runs `base` and `cand` (faithfulness per query, `cand` lower by ``drop``) carrying judge pins, as
    `ragassay judge` leaves them."""
    rng = np.random.default_rng(5)
    v = rng.uniform(0.5, 1.0, n)
    with Store.open(db) as st:
        for name, values, pins in (("base", v, pins_a), ("cand", np.clip(v - drop, 0, 1), pins_b or pins_a)):
            run = make_run(st, name, {"faithfulness": values}, extra={"unit_failures": 0})
            st.set_judge_pins(run, pins)


def validate(db: Path, judge: Path, rows: list[dict], name: str, *extra) -> dict:
    labels = write_labels(db.parent / f"{name}.jsonl", rows)
    res = ok(cli("judge", "validate", "--judge", judge, "--labels", labels, "--store", db, "--json", *extra))
    return json.loads(res.out)


def gate_faith(db: Path, *extra) -> Res:
    return cli("gate", "base", "cand", "--policy", policy(db.parent / "faith.yaml", FAITH_POLICY), "--store", db,
               *extra)


@pytest.fixture
def local(tmp_path) -> tuple[Path, Path, dict]:
    """A store with a judged pair under the local lexical judge, the judge config, and its pins."""
    judge = tmp_path / "local.yaml"
    judge.write_text(LOCAL_JUDGE)
    db = tmp_path / "v.duckdb"
    pins = load_judge_config(judge).pins()
    judged_pair(db, pins)
    return db, judge, pins


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A store holding one passing validation of the local judge (240 generated items), for the refusals."""
    root = tmp_path_factory.mktemp("recorded")
    judge = root / "local.yaml"
    judge.write_text(LOCAL_JUDGE)
    rec = validate(root / "v.duckdb", judge, make_items(240), "good")
    assert rec["meets_default_floor"] is True
    return root / "v.duckdb", judge, rec


LABEL_SETS = {
    "2 items": (lambda: make_items(2), "2 labelled items can be compared, below the minimum of 100"),
    "4 items": (lambda: make_items(4), "4 labelled items can be compared, below the minimum of 100"),
    "99 items": (lambda: make_items(99), "99 labelled items can be compared, below the minimum of 100"),
    "single class": (lambda: relabel(make_items(150), "supported"),
                     "every compared label is 'supported': a single-class label set gives no kappa"),
    "2 fails in 249": (lambda: relabel(relabel(make_items(249), "supported"), "unsupported", first=2),
                       "class not_supported has 2 labelled item(s), below the minimum of 10 per class"),
    "2 passes in 249": (lambda: relabel(relabel(make_items(249), "unsupported"), "supported", first=2),
                        "class supported has 2 labelled item(s), below the minimum of 10 per class"),
    "all cannot_tell": (lambda: relabel(make_items(150), "cannot_tell"),
                        "no item has a label that can be compared"),
}


@pytest.mark.parametrize("case", list(LABEL_SETS))
def test_a_label_set_that_cannot_earn_the_floor_is_refused_before_any_call(recorded, case):
    db, judge, _ = recorded
    rows, problem = LABEL_SETS[case]
    labels = write_labels(db.parent / f"refused-{case.replace(' ', '_')}.jsonl", rows())
    res = cli("judge", "validate", "--judge", judge, "--labels", labels, "--store", db)
    refused(res, f"{labels}: {problem}", "nothing was judged or recorded")
    assert len(validations(db)) == 1  # still only the passing record made before


def test_an_unknown_scale_is_refused_and_records_nothing(recorded):
    db, judge, _ = recorded
    labels = write_labels(db.parent / "scale.jsonl", make_items(120))
    refused(cli("judge", "validate", "--judge", judge, "--labels", labels, "--store", db, "--scale", "ternary"),
            "--scale must be one of binary, ordinal", "'ternary'")
    assert len(validations(db)) == 1


def test_lowering_the_minimums_on_validate_does_not_lower_the_gates_floor(local):
    db, judge, _ = local
    rec = validate(db, judge, make_items(24), "small", "--min-items", "20", "--min-per-class", "10")
    assert rec["meets_default_floor"] is False and "below the minimum of 100" in rec["floor_detail"]
    res = gate_faith(db)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert "WARN [unvalidated] statistical faithfulness: unvalidated judge, cannot pass or fail:" in res.out
    assert f"only {rec['figures']['n']} items compared, below the minimum of 100" in res.out
    assert "(would have been FAIL: credible regression" in res.out


def test_a_judge_that_agrees_only_at_the_point_stays_unvalidated(local):
    """Spec Case 3's lesson: a point kappa above the floor whose interval's lower end is below it."""
    db, judge, _ = local
    rows = relabel(make_items(120), "unsupported", first=24, only="supported")
    rec = validate(db, judge, rows, "point")
    kappa = rec["figures"]["kappa"]
    assert kappa["value"] >= 0.6 > kappa["ci_low"], kappa  # the construction: above at the point only
    res = gate_faith(db)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert "WARN [unvalidated] statistical faithfulness" in res.out
    # the floor reads the figures that count any item the judge left unanswered as wrong
    floor_kappa = (rec["figures"].get("worst_case") or rec["figures"])["kappa"]
    assert f"lower bound {floor_kappa['ci_low']:.3f} < 0.6 (validation {rec['validation_id']}" in res.out


def test_an_ordinal_validation_after_a_passing_binary_one_does_not_unvalidate(local):
    db, judge, _ = local
    rows = make_items(240)
    binary = validate(db, judge, rows, "binary")
    ordinal = validate(db, judge, rows, "ordinal", "--scale", "ordinal")
    assert binary["meets_default_floor"] is True and ordinal["scale"] == "ordinal"
    res = gate_faith(db)
    assert res.code == 1 and res.out.startswith("gate FAIL: base → cand")
    assert "FAIL [validated] statistical faithfulness: credible regression ≥ minimum effect" in res.out
    assert f"validation {binary['validation_id']}, binary scale" in res.out
    assert ordinal["validation_id"] not in res.out


def test_a_smaller_later_validation_does_not_replace_a_larger_one(local):
    db, judge, _ = local
    big = validate(db, judge, make_items(240), "big")
    small = validate(db, judge, relabel(make_items(120, seed=2), flip), "small")
    assert big["meets_default_floor"] is True and small["meets_default_floor"] is False
    assert small["n"] < big["n"]
    res = gate_faith(db)
    assert res.code == 1 and "FAIL [validated] statistical faithfulness" in res.out
    assert f"validation {big['validation_id']}" in res.out and "the largest of 2 matching records" in res.out


def test_records_on_automated_labels_do_not_outrank_human_ones(local):
    db, judge, _ = local
    human = validate(db, judge, [{**r, "labelled_by": "human"} for r in relabel(make_items(120), flip)], "human")
    auto = validate(db, judge, [{**r, "labelled_by": "automated"} for r in make_items(240, seed=1)], "auto")
    assert human["meets_default_floor"] is False and auto["figures"]["kappa"]["ci_low"] >= 0.6
    assert (human["labelled_by"], auto["labelled_by"]) == ("human", "automated")
    assert auto["n"] > human["n"]  # larger, later and agreeing: it still does not speak over the human labels
    res = gate_faith(db)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert "WARN [unvalidated] statistical faithfulness" in res.out
    assert f"validation {human['validation_id']}" in res.out and auto["validation_id"] not in res.out


def test_a_judge_validated_only_on_automated_labels_stays_unvalidated(local):
    """Labels a model made (perhaps the judge itself) measure agreement with that model, not with people."""
    db, judge, _ = local
    auto = validate(db, judge, [{**r, "labelled_by": "automated"} for r in make_items(240, seed=1)], "auto")
    assert auto["figures"]["kappa"]["ci_low"] >= 0.6 and auto["meets_default_floor"] is False
    res = gate_faith(db)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert "WARN [unvalidated] statistical faithfulness" in res.out
    assert "automated labels" in res.out and f"validation {auto['validation_id']}" in res.out


def test_a_label_set_padded_with_copies_of_two_items_is_refused(local):
    """2 distinct items, each copied 60 times under new item ids, would pass every minimum (120 items, 60 per
    class); a copy counts one judgement twice, so it is refused like the 2 items alone."""
    db, judge, _ = local
    two = make_items(2)
    rows = [{**two[k % 2], "item_id": f"copy-{k:03d}"} for k in range(120)]
    labels = write_labels(db.parent / "copies.jsonl", rows)
    refused(cli("judge", "validate", "--judge", judge, "--labels", labels, "--store", db),
            "item copy-002 repeats the content of item copy-000", "a copy counts the same judgement twice")
    assert validations(db) == []


# ============================================================================================ 3. pin drift
SETTINGS = {"effort": {"effort": "high"}, "temperature": {"temperature": 0.0}, "top_p": {"top_p": 0.5},
            "max_tokens": {"max_tokens": 512}}
SETTING_TEXT = {"effort": "effort=high", "temperature": "temperature=0.0", "top_p": "top_p=0.5",
                "max_tokens": "max_tokens=512"}
VALIDATION_CONTEXT = "The licence is GPL-3."
ABSTAIN_CONTEXT = "The licence is MPL-2.0."
N_BAD = 30            # validation items 0..29 are unsupported, the rest supported
SELECTIVE = (200, 60)  # the selective-abstention set: 200 items, 0..59 unsupported


def _respond(system: str, user: str):
    """The fake model: agrees with the labels of the validation set ("Claim number k."); on the selective
    set ("Statement number k.") it is wrong on every fourth item (where the plan makes it abstain); says
    cannot_judge on a claim "Perhaps so"; otherwise the scripted judge, with claims split at ' || '."""
    m = re.search(r"(Claim|Statement) number (\d+)\.", user)
    if m and system == RUBRICS["support"]:
        k = int(m.group(2))
        good = k >= (N_BAD if m.group(1) == "Claim" else SELECTIVE[1])
        if m.group(1) == "Statement" and k % 4 == 0:
            good = not good
        ctx = VALIDATION_CONTEXT if m.group(1) == "Claim" else ABSTAIN_CONTEXT
        return {"justification": "scripted", "cannot_judge": False, "label": "supported" if good else "unsupported",
                "quote": ctx if good else None}
    if system == RUBRICS["claims"]:
        answer = user.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
        return {"justification": "scripted", "cannot_judge": False, "claims": answer.split(" || ")}
    if system == RUBRICS["support"] and "Perhaps so" in user:
        return {"justification": "cannot say", "cannot_judge": True, "label": "unsupported", "quote": None}
    return scripted_judge(system, user)


def _item_of(user: str) -> str | None:
    m = re.search(r"Statement number (\d+)\.", user)
    return f"st-{m.group(1)}" if m else None


@pytest.fixture(scope="module")
def provider():
    server = FakeProvider(lifetime_s=600.0)
    server.start()
    server.responder = _respond
    server.item_of = _item_of
    server.plan.update({f"st-{k}": ["cannot_judge"] for k in range(0, SELECTIVE[0], 4)})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUDGE_TEST_KEY", "sk-verdict-test")
        try:
            yield server
        finally:
            server.stop()


def judge_yaml(root: Path, server, name: str, model: str = "judge-m", **extra) -> Path:
    cfg = {"provider": "openai", "model": model, "base_url": server.base_url, "max_tokens": 256,
           "api_key_env": "JUDGE_TEST_KEY", "concurrency": 8, "metrics": ["faithfulness"],
           "retry": {"max_attempts": 2, "timeout_s": 5, "backoff_base_s": 0.001},
           "prices": {model: {"input": 1.0, "output": 2.0}}, **extra}
    path = root / f"judge-{name}.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def write_answers(path: Path, corpus, golden, *, ids=None, config=None, cheese: bool = True,
                  dataset_version: str | None = None) -> Path:
    """Twelve answered queries ("<evidence quote> || The moon is made of cheese": one supported claim, one not),
    one answer the judge cannot judge ("... || Perhaps so") and one abstention on an answerable query."""
    qs = [q for q in golden.queries if q.answerable][:14]
    header = RunHeader(run_name=path.stem, config=config or {}, corpus_digest=corpus.digest,
                       dataset_version=dataset_version or golden.dataset_version)
    traces = []
    for i, q in enumerate(qs):
        tid = ids(header, q) if ids else f"{path.stem}-{q.query_id}"
        ev = q.evidence[0]
        unit = Unit(unit_id=f"{ev.doc_id}#0", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=1)
        if i == 13:
            traces.append(Trace(trace_id=tid, query_id=q.query_id, question=q.question, fused=[unit], packed=[unit],
                                outcome="abstained"))
            continue
        tail = " || Perhaps so" if i == 12 else (" || The moon is made of cheese" if cheese else "")
        traces.append(Trace(trace_id=tid, query_id=q.query_id, question=q.question, fused=[unit], packed=[unit],
                            answer=ev.quote + tail, outcome="answered"))
    write_traces(path, header, traces)
    return path


@pytest.fixture(scope="module")
def judged(tmp_path_factory, inputs, provider):
    """Runs scored from one trace file and judged by the fake LLM judge under each setting (`p-default`,
    `p-effort`, ...), an unjudged run `p-fresh`, and the judge configs."""
    corpus, golden, gdir = inputs
    root = tmp_path_factory.mktemp("judged")
    db = root / "j.duckdb"
    traces = write_answers(root / "a.jsonl", corpus, golden)
    cfgs = {"default": judge_yaml(root, provider, "default")}
    cfgs.update({name: judge_yaml(root, provider, name, **extra) for name, extra in SETTINGS.items()})
    for name, cfg in cfgs.items():
        ok(cli("score", traces, "--golden", gdir, "--store", db, "--name", f"p-{name}"))
        ok(cli("judge", f"p-{name}", "--judge", cfg, "--store", db))
    ok(cli("score", traces, "--golden", gdir, "--store", db, "--name", "p-fresh"))
    local = root / "local.yaml"
    local.write_text(LOCAL_JUDGE)
    return {"db": db, "root": root, "cfg": cfgs, "traces": traces, "local": local, "gdir": gdir,
            "policy": policy(root / "faith.yaml", FAITH_POLICY)}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_compare_refuses_runs_judged_under_other_settings(judged, setting):
    res = cli("compare", "p-default", f"p-{setting}", "--resamples", "200", "--store", judged["db"])
    refused(res, "runs p-default (A) and p-" + setting + " (B) are not comparable; differing pins:",
            "judge_settings:", SETTING_TEXT[setting], "--rebaseline")
    assert "judge_model" not in res.err  # the model is the same: the settings alone are the difference


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_gate_refuses_runs_judged_under_other_settings(judged, setting):
    res = cli("gate", "p-default", f"p-{setting}", "--policy", judged["policy"], "--store", judged["db"])
    refused(res, "are not comparable; differing pins:", "judge_settings:", SETTING_TEXT[setting])


def test_a_rebaselined_comparison_names_the_settings_it_crossed(judged):
    res = ok(cli("compare", "p-default", "p-effort", "-m", "faithfulness", "--rebaseline", "--resamples", "200",
                 "--store", judged["db"]))
    assert "rebaselined across differing pins: judge_settings" in res.out and "effort=high" in res.out
    assert "all else pinned" not in res.out and "configs identical" not in res.out


def test_resume_under_another_effort_is_refused(judged):
    res = cli("judge", "p-default", "--judge", judged["cfg"]["effort"], "--store", judged["db"], "--resume")
    refused(res, "run p-default was judged under other pins (settings", "-> effort=high",
            "--resume continues the same judge only")


def test_a_record_validated_under_other_settings_does_not_validate_the_run(judged, provider):
    db, cfg = judged["root"] / "settings.duckdb", judged["cfg"]
    rows = [{"item_id": f"c-{k:03d}", "question": "Which licence?", "context": VALIDATION_CONTEXT,
             "claim": f"Claim number {k}.", "label": "unsupported" if k < N_BAD else "supported"} for k in range(120)]
    rec = validate(db, cfg["default"], rows, "claims")
    assert rec["meets_default_floor"] is True and rec["figures"]["kappa"]["value"] == 1.0
    judged_pair(db, load_judge_config(cfg["default"]).pins())
    res = gate_faith(db)
    assert res.code == 1 and "FAIL [validated] statistical faithfulness" in res.out
    # the same validation (answered from the cache) beside a pair judged at effort high
    other = judged["root"] / "settings-effort.duckdb"
    assert validate(other, cfg["default"], rows, "claims-again")["label_set_version"] == rec["label_set_version"]
    judged_pair(other, load_judge_config(cfg["effort"]).pins())
    res = gate_faith(other)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert ("WARN [unvalidated] statistical faithfulness: unvalidated judge, cannot pass or fail: judge "
            "openai:judge-m on run base: no validation record for its pins") in res.out


@pytest.mark.parametrize(("setting", "value"), [("temperature", 0.2), ("top_p", 0.5)])
def test_an_anthropic_config_with_a_setting_the_sdk_takes_not_is_refused_at_load(tmp_path, setting, value):
    cfg = tmp_path / "anthropic.yaml"
    cfg.write_text(f"provider: anthropic\nmodel: claude-x\n{setting}: {value}\n"
                   "prices: {claude-x: {input: 1, output: 2}}\n")
    res = cli("judge", "some-run", "--judge", cfg, "--store", tmp_path / "none.duckdb")
    refused(res, f"{cfg}:3: {setting}: the installed anthropic SDK does not accept '{setting}'")


def test_a_rejudge_never_replaces_a_paid_call_record(judged):
    db = judged["db"]
    sql = "SELECT count(*), sum(cost) FROM judge_calls WHERE NOT cache_hit AND outcome <> 'error'"

    def paid(run=None):
        with Store.open(db, read_only=True) as st:
            if run is None:
                return st.connection.execute(sql).fetchone()
            return sorted((r["item"], r["query_id"], r["cost"]) for r in st.judge_calls(run) if r["cost"])

    before, mine = paid(), paid("p-default")
    assert before[0] > 0 and before[1] > 0 and mine
    res = ok(cli("judge", "p-default", "--judge", judged["cfg"]["default"], "--store", db, "--resume"))
    assert "cache hits 100%" in res.out and "spend $0.0000" in res.out
    ok(cli("score", judged["traces"], "--golden", judged["gdir"], "--store", db, "--name", "p-again"))
    res = ok(cli("judge", "p-again", "--judge", judged["cfg"]["default"], "--store", db))
    assert "cache hits 100%" in res.out and "spend $0.0000" in res.out
    after = paid()  # the paid originals stand: no paid row is replaced, the stored cost never drops
    assert after[0] == before[0] and after[1] == pytest.approx(before[1], rel=1e-12)
    assert paid("p-default") == mine


def test_a_judge_that_abstains_on_the_items_it_would_get_wrong_is_not_validated(judged):
    db = judged["root"] / "abstain.duckdb"
    n, bad = SELECTIVE
    rows = [{"item_id": f"s-{k:03d}", "question": "Which licence?", "context": ABSTAIN_CONTEXT,
             "claim": f"Statement number {k}.", "label": "unsupported" if k < bad else "supported"} for k in range(n)]
    labels = write_labels(judged["root"] / "selective.jsonl", rows)
    res = ok(cli("judge", "validate", "--judge", judged["cfg"]["default"], "--labels", labels, "--store", db,
                 "--json"))
    rec = json.loads(res.out)
    # on the 150 items it kept it agrees perfectly; the floor counts the 50 it left unanswered as wrong
    assert rec["figures"]["kappa"]["value"] == 1.0 and rec["figures"]["worst_case"]["judge_unanswered"] == 50
    assert rec["meets_default_floor"] is False
    assert "counting the judge's 50 unanswered item(s) as wrong" in rec["floor_detail"]


# ======================================================================================== 4. wrong traces
def test_judging_a_run_with_another_runs_traces_is_refused(judged, inputs):
    corpus, golden, _ = inputs
    other = write_answers(judged["root"] / "b.jsonl", corpus, golden, cheese=False)
    res = cli("judge", "p-fresh", "--judge", judged["local"], "--traces", other, "--store", judged["db"])
    refused(res, f"{other} are not run p-fresh's", "trace(s) whose trace_id differs from the run's")


def test_judging_a_run_on_a_cherry_picked_subset_of_its_traces_fails_the_gate(inputs, tmp_path):
    """`judge --traces` with 3 of the run's own 14 traces is accepted (they are its own) and says it judged 3
    answers; the gate then finds the candidate's judge metric compared on 3 of the baseline's 13 pairs."""
    from ragassay.trace.io import read_traces

    corpus, golden, gdir = inputs
    db, judge = tmp_path / "s.duckdb", tmp_path / "local.yaml"
    judge.write_text(LOCAL_JUDGE)
    full = write_answers(tmp_path / "a.jsonl", corpus, golden)
    header, traces, _ = read_traces(full)
    write_traces(tmp_path / "picked.jsonl", header, traces[:3])
    for name in ("base", "cand"):
        ok(cli("score", full, "--golden", gdir, "--store", db, "--name", name))
    ok(cli("judge", "base", "--judge", judge, "--store", db))
    res = ok(cli("judge", "cand", "--judge", judge, "--traces", tmp_path / "picked.jsonl", "--store", db))
    assert re.match(r"judged run cand \(\w+\) with local:lexical: 3 answers", res.out)
    res = cli("gate", "base", "cand", "--policy", policy(tmp_path / "faith.yaml", FAITH_POLICY), "--store", db)
    assert res.code == 1 and res.out.startswith("gate FAIL: base → cand")
    assert ("FAIL hard compared_pairs: the comparison lost pairs: faithfulness: 3 of the 13 pairs the baseline "
            "scored") in res.out
    assert "WARN [unvalidated] statistical faithfulness" in res.out


@pytest.mark.parametrize(("header", "fragment"), [
    ({"config": {"name": "another-config"}}, "config sha"),
    ({"dataset_version": "licenses-demo@000000000000"},
     "golden-set version licenses-demo@000000000000 in the trace header"),
])
def test_traces_with_another_config_or_golden_version_in_the_header_are_refused(judged, inputs, header, fragment):
    corpus, golden, _ = inputs
    # the same trace ids as the run's own file: only the header tells them apart
    path = write_answers(judged["root"] / "h.jsonl", corpus, golden, ids=lambda h, q: f"a-{q.query_id}", **header)
    res = cli("judge", "p-fresh", "--judge", judged["local"], "--traces", path, "--store", judged["db"])
    refused(res, "are not run p-fresh's", fragment)


def test_judging_a_run_with_the_traces_of_another_run_of_the_same_config_is_refused(judged, inputs):
    """Two runs of one config (an LLM generator run on Monday and again on Tuesday) share their trace ids and
    header: only the answers tell them apart, checked against the scores the run stored."""
    corpus, golden, gdir = inputs
    config = {"name": "rag", "generator": {"kind": "llm", "model": "gpt-x"}}
    ids = lambda h, q: make_trace_id(h.config_sha, q.query_id, 0)  # noqa: E731  (as the pipeline names them)
    mon = write_answers(judged["root"] / "mon.jsonl", corpus, golden, ids=ids, config=config)
    tue = write_answers(judged["root"] / "tue.jsonl", corpus, golden, ids=ids, config=config, cheese=False)
    ok(cli("score", mon, "--golden", gdir, "--store", judged["db"], "--name", "mon"))
    res = cli("judge", "mon", "--judge", judged["local"], "--traces", tue, "--store", judged["db"])
    refused(res, "are not run mon's", "whose answer or outcome does not give the scores the run stored",
            "traces of another run of the same config share its trace ids")


@pytest.mark.parametrize(("old", "fragment"), [
    ("effort", "settings max_tokens=256; structured_output=json_schema on the run, effort=high;"),
    ("model", "judge_model openai:judge-m on the run, openai:judge-other in OLD"),
])
def test_rebaseline_from_a_judge_the_run_was_not_judged_with_is_refused(judged, provider, old, fragment):
    cfg = (judged["cfg"]["effort"] if old == "effort"
           else judge_yaml(judged["root"], provider, "other", model="judge-other"))
    res = cli("judge", "rebaseline", cfg, judged["local"], "--runs", "p-default", "--store", judged["db"])
    refused(res, "run p-default was not judged by OLD:", fragment,
            "Pass as OLD the judge config the run was judged with")


def test_rebaseline_counts_the_undefined_values_of_each_side(judged):
    """OLD (the LLM judge) cannot judge "Perhaps so"; NEW (the local judge) can; neither judges the abstention."""
    res = ok(cli("judge", "rebaseline", judged["cfg"]["default"], judged["local"], "--runs", "p-default",
                 "--store", judged["db"], "--resamples", "500", "--json"))
    faith = json.loads(res.out)["metrics"]["faithfulness"]
    assert (faith["undefined_old"], faith["undefined_new"], faith["undefined_both"]) == (2, 1, 1)
    assert faith["n"] == 12  # the 14 answers less the two OLD left undefined
    res = ok(cli("judge", "rebaseline", judged["cfg"]["default"], judged["local"], "--runs", "p-default",
                 "--store", judged["db"], "--resamples", "500"))
    assert re.search(r"│ faithfulness │ 12 │ [^│]+│[^│]+│[^│]+│ 2/1 \(1\) │", res.out), res.out


# ================================================================= 5. mixed golden versions and fake oracles
ANALYSES = {
    "compare": ("compare", "base", "v2", "--resamples", "200"),
    "gate": ("gate", "base", "v2", "--policy", "{recall}"),
    "decomposition": ("analyze", "decomposition", "base", "v2", "--resamples", "200"),
    "slices": ("analyze", "slices", "base", "v2", "--resamples", "200"),
    "ladder": ("analyze", "ladder", "base", "v2", "--resamples", "200"),
    "hygiene": ("analyze", "hygiene", "base", "v2", "--resamples", "200"),
}


def _analysis(lost, name, *extra) -> Res:
    args = [a.format(recall=lost["policy"]["recall"]) for a in ANALYSES[name]]
    return cli(*args, "--store", lost["db"], *extra)


@pytest.mark.parametrize("name", list(ANALYSES))
def test_runs_of_other_golden_set_versions_are_refused(lost, name):
    res = _analysis(lost, name)
    refused(res, "are not comparable; differing pins:", f"dataset_version: {lost['v1']}", lost["v2"],
            "--rebaseline")


@pytest.mark.parametrize("name", list(ANALYSES))
def test_runs_of_other_golden_set_versions_are_compared_only_when_rebaselined_and_say_so(lost, name):
    res = _analysis(lost, name, "--rebaseline")
    assert res.code == 0, res.err
    if name == "compare":
        assert f"rebaselined: dataset_version: {lost['v1']} → {lost['v2']}" in res.out
        assert f"rebaselined across differing pins: dataset_version {lost['v1']} → {lost['v2']}" in res.out
    elif name == "gate":
        assert res.out.startswith("gate PASS: base → v2")
        assert f"note: rebaselined: dataset_version {lost['v1']} (A) vs {lost['v2']} (B)" in res.out
    else:
        assert f"rebaselined: dataset_version: {lost['v1']} (base) → {lost['v2']} (v2)" in res.out


def test_an_oracle_rung_that_is_not_an_oracle_run_is_refused(lost):
    res = cli("analyze", "ladder", "err50", "abstain", "--oracle", "base", "--resamples", "200", "--store",
              lost["db"])
    refused(res, "--oracle base: run 'base' is not an oracle-context run (its config does not say oracle: true)")


def test_a_slice_key_no_query_has_is_refused(lost, inputs):
    res = cli("analyze", "slices", "base", "abstain", "--by", "tag:nonexistent", "--golden", inputs[2],
              "--resamples", "200", "--store", lost["db"])
    refused(res, "slice key 'tag:nonexistent': no paired query has the tag 'nonexistent', so it would be one "
                 "slice holding every query; tags present: tag:")


def test_a_slices_file_declared_between_the_runs_is_exploratory(tmp_path):
    import datetime as dt

    db = tmp_path / "s.duckdb"
    with Store.open(db) as st:
        make_run(st, "early", {"answer_f1": np.zeros(40)}, created_at=dt.datetime(2026, 1, 1))
        make_run(st, "late", {"answer_f1": np.r_[np.ones(20), np.zeros(20)]}, created_at=dt.datetime(2026, 3, 1))
    declared = tmp_path / "slices.yaml"
    declared.write_text("declared_at: 2026-02-01T09:00:00\nslices: [stratum]\n")
    res = ok(cli("analyze", "slices", "early", "late", "--declared", declared, "--resamples", "200", "--store", db))
    assert "(exploratory)" in res.out and "(declared)" not in res.out
    res = ok(cli("analyze", "slices", "early", "late", "--declared", declared, "--resamples", "200", "--store", db,
                 "--json"))
    assert [k["exploratory"] for k in json.loads(res.out)["keys"]] == [True]


# ==================================================================================== 6. unvalidated judges
@pytest.mark.parametrize(("drop", "would_be"), [(0.4, "FAIL"), (0.0, "PASS")])
def test_a_judge_metric_with_no_validation_record_can_neither_pass_nor_fail(local, drop, would_be):
    db, _, pins = local
    if drop == 0.0:
        db = db.parent / "flat.duckdb"
        judged_pair(db, pins, drop=0.0)
    res = gate_faith(db)
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert ("WARN [unvalidated] statistical faithfulness: unvalidated judge, cannot pass or fail: judge "
            "local:lexical on run base: no validation record for its pins (model, rubric, prompt, settings) on the "
            "binary scale of the support judgement") in res.out
    assert f"(would have been {would_be}:" in res.out


@pytest.mark.parametrize(("change", "status"), [
    ({}, "validated"),
    ({"kind": "relevance"}, "unvalidated"),
    ({"scale": "ordinal"}, "unvalidated"),
    ({"judge_settings": "temperature=0.0"}, "unvalidated"),
])
def test_a_passing_record_counts_only_on_the_same_kind_scale_and_settings(local, recorded, change, status):
    db, _, _ = local
    _, _, rec = recorded
    with Store.open(recorded[0], read_only=True) as st:
        record = st.judge_validations()[0]
    with Store.open(db) as st:
        st.record_judge_validation({**record, **change, "validation_id": None, "created_at": None})
    res = gate_faith(db)
    if status == "validated":  # the control: the very same record, unchanged, lets the regression fail
        assert res.code == 1 and "FAIL [validated] statistical faithfulness" in res.out
    else:
        assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
        assert "WARN [unvalidated] statistical faithfulness" in res.out
        assert "no validation record for its pins" in res.out


def test_a_record_for_another_threshold_does_not_validate_the_judge(local, tmp_path):
    db, judge, _ = local
    assert validate(db, judge, make_items(240), "good")["meets_default_floor"] is True
    loose = tmp_path / "loose.yaml"
    loose.write_text(LOCAL_JUDGE + "threshold: 0.5\n")
    other = tmp_path / "loose.duckdb"
    with Store.open(db, read_only=True) as st:
        record = st.judge_validations()[0]
    with Store.open(other) as st:
        st.record_judge_validation({**record, "validation_id": None, "created_at": None})
    judged_pair(other, load_judge_config(loose).pins())
    res = gate_faith(other)
    assert res.code == 0 and "WARN [unvalidated] statistical faithfulness" in res.out
    assert "no validation record for its pins" in res.out


def test_rebaselining_onto_an_unvalidated_judge_leaves_the_metric_unvalidated(tmp_path, recorded):
    """The baseline's judge is validated, the candidate's (another threshold) is not: --rebaseline lets the
    comparison through but not the verdict."""
    db = tmp_path / "mixed.duckdb"
    judge = recorded[1]
    loose = tmp_path / "loose.yaml"
    loose.write_text(LOCAL_JUDGE + "threshold: 0.5\n")
    judged_pair(db, load_judge_config(judge).pins(), load_judge_config(loose).pins())
    with Store.open(recorded[0], read_only=True) as st:
        record = st.judge_validations()[0]
    with Store.open(db) as st:
        st.record_judge_validation({**record, "validation_id": None, "created_at": None})
    refused(gate_faith(db), "differing pins:", "rubric_sha:")
    res = gate_faith(db, "--rebaseline")
    assert res.code == 0 and res.out.startswith("gate WARN: base → cand")
    assert "note: rebaselined: rubric_sha" in res.out
    assert ("WARN [unvalidated] statistical faithfulness: unvalidated judge, cannot pass or fail: judge "
            "local:lexical on run cand: no validation record for its pins") in res.out


def test_a_claim_resting_on_an_unvalidated_judge_says_so(local):
    db, _, _ = local
    res = ok(cli("compare", "base", "cand", "-m", "faithfulness", "--overall-only", "--resamples", "500",
                 "--store", db))
    assert re.search(r"faithfulness went from [^—]*— regressed\. \[rests on an unvalidated judge: judge local:lexical "
                     r"on run base: no validation record for its pins", res.out), res.out
