"""Every pointwise judge kind validates through `judge validate --kind K`: citation, relevance, criterion and
nuggets with their bundled example labels against a scripted LLM judge (the fake provider), figures checked
against scikit-learn, records that make exactly the matching metric `validated` in `compare`, the metrics' own
requests (the judge cache is shared with judged runs), and `file:line` errors for bad labels of each kind."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, recall_score
from tests.analysis.conftest import make_run
from tests.judges.conftest import fake_provider  # noqa: F401  (the shared fixture, imported not copied)

from ragassay.cli.app import main as _main
from ragassay.judges.config import build_judge, load_judge_config
from ragassay.judges.labels import bundled_example, load_labels
from ragassay.judges.metrics import RUBRICS, JudgeItem, judge_items
from ragassay.judges.validate import Floor
from ragassay.store import Store

ROOT = Path(__file__).resolve().parents[2]
# Each kind's levels, lowest first (the ordinal scale); binary is the top level vs the rest.
LEVELS = {"citation": ("unsupported", "supported"), "relevance": ("irrelevant", "partially_relevant", "relevant"),
          "criterion": ("fail", "partial", "pass"), "nuggets": ("not_support", "partial_support", "support")}
METRICS = ["faithfulness", "answer_relevance", "correctness", "citations", "nuggets"]


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main([str(a) for a in args])
    out = capsys.readouterr()
    return (e.value.code or 0), out.out, out.err


def api_yaml(tmp_path, base_url, metrics=METRICS, name="judge"):
    cfg = {"provider": "openai", "model": "judge-m", "base_url": base_url, "max_tokens": 256,
           "api_key_env": "JUDGE_TEST_KEY", "concurrency": 16, "metrics": metrics,
           "retry": {"max_attempts": 2, "timeout_s": 5, "backoff_base_s": 0.001},
           "prices": {"judge-m": {"input": 1.0, "output": 2.0}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps(cfg))
    return path


def judge_label(kind: str, k: int, human: str) -> str:
    """The scripted judge: the human label, except every 8th item is one level off (and a human cannot_tell
    gets the top level); so kappa is high but not 1 and every class has an error to count."""
    levels = LEVELS[kind]
    if human == "cannot_tell":
        return levels[-1]
    if k % 8:
        return human
    i = levels.index(human)
    return levels[i - 1] if i == len(levels) - 1 else levels[i + 1]


def _tag(user: str, name: str) -> str:
    return re.search(rf"<{name}[^>]*>(.*?)</{name}>", user, re.S).group(1)


class ScriptedJudge:
    """The fake provider's responder: reads the request the way a judge would (the metric templates' tags)
    and answers the scripted label of the labelled item it asks about."""

    def __init__(self):
        self.labels: dict[tuple, str] = {}

    def learn(self, kind: str):
        for k, it in enumerate(load_labels(bundled_example(kind), kind).items):
            label = judge_label(kind, k, it.label)
            if kind == "citation":
                self.labels[("support", it.claim, it.passage)] = label
            elif kind == "relevance":
                self.labels[("relevance", it.question, it.answer)] = label
            elif kind == "criterion":
                self.labels[("criterion", it.criterion, it.question, it.reference, it.answer)] = label
            else:
                self.labels[("nuggets", it.question, it.answer, it.nugget_id)] = label

    def __call__(self, system: str, user: str) -> dict:
        base = {"justification": "scripted", "cannot_judge": False}
        if system == RUBRICS["support"]:
            claim, passage = _tag(user, "claim"), _tag(user, "unit")
            label = self.labels.get(("support", claim, passage), "supported")
            return {**base, "label": label, "quote": passage if label == "supported" else None}
        if system == RUBRICS["relevance"]:
            return {**base, "label": self.labels[("relevance", _tag(user, "question"), _tag(user, "answer"))]}
        if system == RUBRICS["criterion"]:
            name = re.search(r'<criterion name="([^"]+)">', user).group(1)
            key = ("criterion", name, _tag(user, "question"), _tag(user, "reference"), _tag(user, "answer"))
            return {**base, "criterion": name, "label": self.labels.get(key, "pass")}
        if system == RUBRICS["nuggets"]:
            q, a = _tag(user, "question"), _tag(user, "answer")
            ids = re.findall(r'<nugget id="([^"]+)">', user)
            return {**base, "assignments": [{"nugget_id": i, "label": self.labels[("nuggets", q, a, i)]}
                                            for i in ids]}
        raise AssertionError(f"unexpected request: {system[:60]}")


@pytest.fixture
def scripted(fake_provider, monkeypatch):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    judge = ScriptedJudge()
    for kind in LEVELS:
        judge.learn(kind)
    fake_provider.responder = judge
    return fake_provider


def expected_pairs(kind: str, scale: str) -> tuple[list[str], list[str], list[str]]:
    """(human, judge, criterion) classes of the compared items, mapped onto ``scale`` here, independently."""
    top = LEVELS[kind][-1]
    h, j, crit = [], [], []
    for k, it in enumerate(load_labels(bundled_example(kind), kind).items):
        if it.label == "cannot_tell":
            continue
        pair = (it.label, judge_label(kind, k, it.label))
        if scale == "binary":
            pair = tuple("top" if x == top else "rest" for x in pair)
        h.append(pair[0])
        j.append(pair[1])
        crit.append(getattr(it, "criterion", None))
    return h, j, crit


def sk_class(kind: str, scale: str, name: str) -> str:
    """The record's class name as the independent labels above name it."""
    if scale == "binary":
        return "top" if name == LEVELS[kind][-1] else "rest"
    return name


KIND_SCALES = [("citation", "binary"), ("relevance", "binary"), ("relevance", "ordinal"), ("criterion", "binary"),
               ("criterion", "ordinal"), ("nuggets", "binary"), ("nuggets", "ordinal")]


@pytest.mark.parametrize(("kind", "scale"), KIND_SCALES)
def test_each_kind_validates_with_its_bundled_example_and_matches_scikit_learn(tmp_path, capsys, scripted, kind,
                                                                               scale):
    db, cfg = tmp_path / "s.duckdb", api_yaml(tmp_path, scripted.base_url)
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", kind, "--scale", scale, "--store", db,
                          "--resamples", "300"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert f"kind {kind}, scale {scale}" in text and f"judge_examples/{kind}.jsonl" in text
    assert "labelled by: automated" in text and "kappa" in text
    # the rerun is answered from the store (the judge cache) and prints the whole record
    paid = scripted.paid
    scripted.reset_counts()
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", kind, "--scale", scale, "--store", db,
                          "--resamples", "300", "--json"], capsys)
    assert code == 0, err
    assert scripted.paid == 0
    rec = json.loads(out)
    assert rec["calls"]["cache_hits"] == paid > 0
    assert rec["kind"] == kind and rec["scale"] == scale and rec["labelled_by"] == "automated"
    h, j, crit = expected_pairs(kind, scale)
    weights = "linear" if scale == "ordinal" else None
    f = rec["figures"]
    assert rec["n"] == len(h) and f["n_items"] == len(load_labels(bundled_example(kind), kind))
    assert rec["kappa"] == pytest.approx(cohen_kappa_score(h, j, weights=weights), abs=1e-12)
    classes = [sk_class(kind, scale, c["label"]) for c in f["per_class"]]
    recalls = recall_score(h, j, labels=classes, average=None)
    for c, r in zip(f["per_class"], recalls, strict=True):
        assert c["recall"]["value"] == pytest.approx(r)
    assert rec["min_class_recall"] == pytest.approx(min(recalls))
    # the bundled examples are automated labels: they exercise the machinery but never earn the default floor
    assert rec["meets_default_floor"] is False
    assert "the labels are automated (a model or a script), not people's" in rec["floor_detail"]
    assert Floor(allow_automated=True).check(rec)[0] is True
    if kind == "criterion":
        for name, fig in f["per_criterion"].items():
            hh = [x for x, c in zip(h, crit, strict=True) if c == name]
            jj = [x for x, c in zip(j, crit, strict=True) if c == name]
            assert fig["n"] == len(hh)
            if len(set(hh) | set(jj)) > 1:
                assert fig["kappa"]["value"] == pytest.approx(cohen_kappa_score(hh, jj, weights=weights), abs=1e-12)
        assert set(f["per_criterion"]) == {"central_fact", "no_contradiction", "complete"}
        assert sum(fig["n"] for fig in f["per_criterion"].values()) == rec["n"]
    if kind == "nuggets":
        items = [it for it in load_labels(bundled_example(kind), kind).items if it.label != "cannot_tell"]
        agree = [x == y for x, y in zip(h, j, strict=True)]
        for name, want in (("vital", True), ("okay", False)):
            mine = [a for a, it in zip(agree, items, strict=True) if it.vital is want]
            assert f["by_vital"][name] == {"n": len(mine), "agreement": pytest.approx(np.mean(mine))}
    with Store.open(db, read_only=True) as st:
        stored = st.judge_validations(kind=kind)
    assert len(stored) == 2 and {r["scale"] for r in stored} == {scale}
    assert stored[-1]["kappa"] == pytest.approx(rec["kappa"])


def support_labels_from_citation(path: Path) -> Path:
    """The citation example as support labels (the passage as context): the same judge requests."""
    rows = []
    for it in load_labels(bundled_example("citation"), "citation").items:
        rows.append({"item_id": it.item_id, "question": "Is the claim supported?", "context": it.passage,
                     "claim": it.claim, "label": it.label, "labelled_by": "human"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def as_human(kind: str, path: Path) -> Path:
    """The bundled example of ``kind`` as if people had labelled it (automated labels cannot earn the floor)."""
    path.write_text("".join(json.dumps({**json.loads(line), "labelled_by": "human"}) + "\n"
                            for line in bundled_example(kind).read_text().splitlines()))
    return path


# (kind, scale, the metric its record speaks for, a record of another kind or scale that meets the floor too)
SPEAKS = [
    ("citation", "binary", "citation_precision", ("support", "binary")),
    ("relevance", "ordinal", "answer_relevance", ("relevance", "binary")),
    ("criterion", "ordinal", "correctness", ("relevance", "ordinal")),
    ("nuggets", "ordinal", "nugget_v", ("nuggets", "binary")),
    ("nuggets", "binary", "nugget_a_strict", ("nuggets", "ordinal")),
]


@pytest.mark.parametrize(("kind", "scale", "metric", "other"), SPEAKS)
def test_a_record_validates_its_metric_in_compare_and_another_kind_or_scale_does_not(tmp_path, capsys, scripted,
                                                                                    kind, scale, metric, other):
    db, cfg = tmp_path / "s.duckdb", api_yaml(tmp_path, scripted.base_url)
    pins = load_judge_config(cfg).pins()
    rng = np.random.default_rng(1)
    base = rng.random(60)
    with Store.open(db) as st:
        for name, shift in (("a", 0.0), ("b", 0.05)):
            run_id = make_run(st, name, {metric: np.clip(base - shift, 0, 1)})
            st.set_judge_pins(run_id, pins)

    def status() -> tuple[str, list[str]]:
        code, out, err = cli(["compare", "a", "b", "--store", db, "--json", "--resamples", "200"], capsys)
        assert code == 0, err
        (row,) = [r for r in json.loads(out)["judge_validation"] if r["metric"] == metric]
        return row["status"], row["reasons"]

    assert status()[0] == "unvalidated"
    o_kind, o_scale = other
    labels = ["--labels", support_labels_from_citation(tmp_path / "support.jsonl") if o_kind == "support"
              else as_human(o_kind, tmp_path / f"{o_kind}-human.jsonl")]
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", o_kind, "--scale", o_scale, *labels,
                          "--store", db, "--json", "--resamples", "500"], capsys)
    assert code == 0, err
    assert json.loads(out)["meets_default_floor"] is True  # a good record, but not of this metric's kind/scale
    st_, why = status()
    assert st_ == "unvalidated" and f"on the {scale} scale of the {kind} judgement" in why[0]
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", kind, "--scale", scale, "--store", db,
                          "--labels", as_human(kind, tmp_path / f"{kind}-own.jsonl"), "--json", "--resamples",
                          "500"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    assert rec["meets_default_floor"] is True and metric in rec["metrics"]
    st_, why = status()
    assert st_ == "validated" and rec["validation_id"] in why[0]


def _items_for_metric(kind: str) -> list[JudgeItem]:
    """Judge items of a judged run that asks about the same texts as the bundled example: relevance per
    (question, answer); correctness per (question, reference, answer) with all three criteria labelled;
    nuggets per (question, answer) with the golden query's nuggets."""
    from ragassay.analysis.runner import load_inputs

    items = load_labels(bundled_example(kind), kind).items
    if kind == "relevance":
        return [JudgeItem(f"q{k}", 0, it.question, it.answer, "answered") for k, it in enumerate(items)]
    if kind == "criterion":
        by_text: dict[tuple, set] = {}
        for it in items:
            by_text.setdefault((it.question, it.reference, it.answer), set()).add(it.criterion)
        return [JudgeItem(f"q{k}", 0, q, a, "answered", reference=r)
                for k, ((q, r, a), names) in enumerate(by_text.items()) if len(names) == 3]
    _, golden = load_inputs(None, None)
    by_question = {golden[q].question: golden[q] for q in golden.query_ids}
    answers = dict.fromkeys((it.question, it.answer) for it in items)
    return [JudgeItem(f"q{k}", 0, q, a, "answered", nuggets=tuple((n.id, n.text, n.vital)
                                                                   for n in by_question[q].nuggets))
            for k, (q, a) in enumerate(answers)]


@pytest.mark.parametrize(("kind", "metric"), [("relevance", "answer_relevance"), ("criterion", "correctness"),
                                              ("nuggets", "nuggets")])
def test_a_validation_asks_the_metrics_own_request_so_a_judged_run_pays_nothing_again(tmp_path, capsys, scripted,
                                                                                      kind, metric):
    db, cfg_path = tmp_path / "s.duckdb", api_yaml(tmp_path, scripted.base_url)
    code, _, err = cli(["judge", "validate", "--judge", cfg_path, "--kind", kind, "--store", db,
                        "--resamples", "200"], capsys)
    assert code == 0, err
    scripted.reset_counts()
    items = _items_for_metric(kind)
    assert len(items) >= 20
    cfg = load_judge_config(cfg_path)
    from ragassay.store import RunRecord

    with Store.open(db) as st:
        run_id = st.create_run(RunRecord(name="judged"))
        judged = judge_items(build_judge(cfg, st), run_id, items, metrics=[metric],
                             criteria=cfg.rubric_criteria())
    assert scripted.paid == 0  # every request of the judged run was already asked by the validation
    assert judged.calls == {"ok": len(items) * (3 if kind == "criterion" else 1)}


def test_bundled_examples_are_current_and_big_enough():
    spec = importlib.util.spec_from_file_location("make_judge_examples", ROOT / "benchmarks" /
                                                  "make_judge_examples.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for kind, rows in gen.examples().items():
        path = bundled_example(kind)
        assert path.read_text(encoding="utf-8") == gen.render(rows), "rerun benchmarks/make_judge_examples.py"
        labels = [r["label"] for r in rows]
        assert len(rows) >= 120 and {r["labelled_by"] for r in rows} == {"automated"}
        top = LEVELS[kind][-1]
        assert min(labels.count(top), sum(x not in (top, "cannot_tell") for x in labels)) >= 15
        if len(LEVELS[kind]) == 3:
            assert min(labels.count(x) for x in LEVELS[kind]) >= 15
    readme = (bundled_example("citation").parent / "README.md").read_text(encoding="utf-8")
    assert "make_judge_examples.py" in readme and "not human labels" in readme


LLM = {"criterion": {"question": "q", "reference": "r", "answer": "a", "criterion": "central_fact"},
       "relevance": {"question": "q", "answer": "a"},
       "nuggets": {"question": "q", "answer": "a", "nugget_id": "n1", "nugget_text": "t"},
       "citation": {"claim": "c", "passage": "p"}}


def _line(of, **change):
    row = {"item_id": "x1", **LLM[of], "label": LEVELS[of][-1], **change}
    return json.dumps({k: v for k, v in row.items() if v is not None})


@pytest.mark.parametrize(("kind", "line", "fragment"), [
    ("relevance", _line("relevance", answer=None), ":1: item x1: answer must be non-empty text"),
    ("citation", _line("citation", passage=None), ":1: item x1: passage must be non-empty text"),
    ("nuggets", _line("nuggets", nugget_text=None), ":1: item x1: nugget_text must be non-empty text"),
    ("criterion", _line("criterion", label="maybe"), ":1: item x1: label 'maybe' is not one of ['pass'"),
    ("citation", _line("citation", label="partially_supported"), ":1: item x1: label 'partially_supported'"),
    ("nuggets", _line("nuggets", label="supported"), ":1: item x1: label 'supported' is not one of"),
    ("criterion", _line("criterion", criterion="style"), ":1: item x1: criterion 'style' is not in the judge "
                                                           "config's rubric"),
    ("nuggets", _line("nuggets", kind="relevance"), ":1: item x1: kind 'relevance' does not match --kind nuggets"),
    ("relevance", _line("relevance", context="c"), ":1: unknown field(s) ['context']"),
    ("nuggets", _line("nuggets", vital="yes"), ":1: item x1: vital must be true or false"),
    ("relevance", _line("relevance", labelled_by="robot"), ":1: item x1: labelled_by 'robot' is not one of"),
])
def test_bad_labels_of_each_kind_are_file_line_errors(tmp_path, capsys, kind, line, fragment):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(line + "\n")
    code, _, err = cli(["judge", "validate", "--judge", api_yaml(tmp_path, "http://127.0.0.1:9"), "--kind", kind,
                        "--labels", labels, "--store", tmp_path / "s.duckdb"], capsys)
    assert code == 2 and f"{labels}{fragment}" in " ".join(err.split()) and "nothing was validated" in err


def test_a_verdict_for_another_criterion_or_other_nuggets_is_left_out_and_counted(tmp_path, capsys,
                                                                                   fake_provider, monkeypatch):  # noqa: F811
    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")
    crit = [{"item_id": f"c{k}", "question": f"q{k}", "reference": "r", "answer": "a", "criterion": "complete",
             "label": ("pass", "fail")[k % 2]} for k in range(6)]
    nug = [{"item_id": f"n{g}{i}", "question": f"q{g}", "answer": "a", "nugget_id": f"n{i}", "nugget_text": "t",
            "label": ("support", "not_support")[(g + i) % 2]} for g in range(4) for i in range(2)]

    def responder(system, user):
        base = {"justification": "scripted", "cannot_judge": False}
        q = _tag(user, "question")
        if system == RUBRICS["criterion"]:  # q0 is answered for another criterion
            return {**base, "criterion": "central_fact" if q == "q0" else "complete", "label": "pass"}
        ids = re.findall(r'<nugget id="([^"]+)">', user)  # q0's answer gets one assignment too few
        return {**base, "assignments": [{"nugget_id": i, "label": "support"} for i in ids[: 1 if q == "q0" else 2]]}

    fake_provider.responder = responder
    cfg = api_yaml(tmp_path, fake_provider.base_url)
    for kind, rows, reason, left_out in (("criterion", crit, "judge_criterion_mismatch", 1),
                                         ("nuggets", nug, "judge_nugget_mismatch", 2)):
        labels = tmp_path / f"{kind}.jsonl"
        labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", kind, "--labels", labels, "--store",
                              tmp_path / "s.duckdb", "--json", "--resamples", "200", "--min-items", "1",
                              "--min-per-class", "1"], capsys)
        assert code == 0, err
        rec = json.loads(out)
        assert rec["figures"]["excluded"] == {reason: left_out} and rec["n"] == len(rows) - left_out
        assert rec["calls"]["calls"] == {"ok": len(rows) - left_out, reason.removeprefix("judge_"): left_out}
    # the four answers' nuggets were asked in four calls, not eight
    assert sum(1 for x in fake_provider.seen if x.status == 200) == len(crit) + 4


def test_every_problem_is_listed_and_a_nugget_repeated_for_one_answer_is_refused(tmp_path, capsys):
    labels = tmp_path / "labels.jsonl"
    rows = [_line("nuggets"), _line("nuggets", item_id="x2"), _line("nuggets", item_id="x3", label="maybe")]
    labels.write_text("\n".join(rows) + "\n")
    code, _, err = cli(["judge", "validate", "--judge", api_yaml(tmp_path, "http://127.0.0.1:9"), "--kind",
                        "nuggets", "--labels", labels, "--store", tmp_path / "s.duckdb"], capsys)
    text = " ".join(err.split())
    assert code == 2 and "3 problem(s)" in text
    assert f"{labels}:2: item x2: nugget 'n1' is already listed for this question and answer (line 1)" in text
    assert f"{labels}:2: item x2 repeats the content of item x1 (line 1): a copy counts the same judgement" in text
    assert f"{labels}:3: item x3: label 'maybe'" in text


def test_a_criterion_line_must_name_a_criterion_of_the_configs_own_rubric(tmp_path, capsys):
    cfg = api_yaml(tmp_path, "http://127.0.0.1:9")
    data = json.loads(cfg.read_text())
    data["criteria"] = [{"name": "cites_section", "description": "Names the section.", "weight": 1}]
    cfg.write_text(json.dumps(data))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(_line("criterion") + "\n")
    code, _, err = cli(["judge", "validate", "--judge", cfg, "--kind", "criterion", "--labels", labels, "--store",
                        tmp_path / "s.duckdb"], capsys)
    assert code == 2 and "criterion 'central_fact' is not in the judge config's rubric ['cites_section']" in \
        " ".join(err.split())


@pytest.mark.parametrize(("args", "fragment"), [
    (["--kind", "relevance"], "a local judge (lexical) judges support and citation only; --kind relevance needs "
                              "an LLM judge"),
    (["--kind", "nuggets"], "a local judge (lexical) judges support and citation only"),
    (["--kind", "citation", "--scale", "ordinal"], "--scale must be one of binary for --kind citation"),
    (["--kind", "relevance", "--tier1", "t1.yaml"], "--tier1 validates a cascade over support judgements"),
    (["--kind", "pairwise", "--scale", "binary"], "--scale and --judge-family do not apply to --kind pairwise"),
    (["--kind", "rubric"], "--kind must be one of support, citation, relevance, criterion, nuggets, pairwise"),
])
def test_a_kind_the_judge_cannot_validate_is_refused_before_anything_is_judged(tmp_path, capsys, args, fragment):
    local = tmp_path / "local.yaml"
    local.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    code, _, err = cli(["judge", "validate", "--judge", local, *args, "--store", tmp_path / "s.duckdb"], capsys)
    assert code == 2 and fragment in " ".join(err.split())
    assert not (tmp_path / "s.duckdb").exists()


def test_an_llm_config_that_does_not_score_the_kinds_metric_is_refused(tmp_path, capsys):
    cfg = api_yaml(tmp_path, "http://127.0.0.1:9", metrics=["faithfulness", "answer_relevance"])
    code, _, err = cli(["judge", "validate", "--judge", cfg, "--kind", "citation", "--store", tmp_path / "s.duckdb"],
                       capsys)
    assert code == 2 and "--kind citation validates the judgement behind citations, which this judge config does " \
        "not score (metrics ['faithfulness', 'answer_relevance'])" in " ".join(err.split())
    assert not (tmp_path / "s.duckdb").exists()


def test_a_local_judge_validates_citations_with_the_bundled_example(tmp_path, capsys):
    # a local judge scores the citation metrics whatever its `metrics` say, so it can validate them
    local = tmp_path / "local.yaml"
    local.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    code, out, err = cli(["judge", "validate", "--judge", local, "--kind", "citation", "--store",
                          tmp_path / "s.duckdb", "--json", "--resamples", "200"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    assert rec["kind"] == "citation" and rec["metrics"] == ["citation_precision", "citation_recall"]
    assert rec["figures"]["excluded"] == {"human_cannot_tell": 8} and "raw" in rec["figures"]["calibration"]


def test_pairwise_validates_through_the_same_command_and_record(tmp_path, capsys, fake_provider, monkeypatch):  # noqa: F811
    from ragassay.judges.pairwise import RUBRIC, bundled_pairwise_labels, load_pairwise_labels, pairwise_pins

    monkeypatch.setenv("JUDGE_TEST_KEY", "sk-test")

    def prefer(system, user):
        assert system == RUBRIC
        return {"justification": "scripted", "cannot_judge": False, "preferred": "tie"}

    fake_provider.responder = prefer
    db, cfg = tmp_path / "s.duckdb", api_yaml(tmp_path, fake_provider.base_url)
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", "pairwise", "--store", db, "--json",
                          "--resamples", "200"], capsys)
    assert code == 0, err
    rec = json.loads(out)
    labels = load_pairwise_labels(bundled_pairwise_labels())
    pins = pairwise_pins(load_judge_config(cfg))
    assert rec["kind"] == "pairwise" and rec["label_set_version"] == labels.version
    assert (rec["rubric_sha"], rec["prompt_sha"]) == (pins["rubric_sha"], pins["prompt_sha"])
    # a judge that calls every pair a tie agrees with the labels only on the ties: kappa 0
    assert rec["figures"]["judge_dist"] == {"a": 0, "tie": rec["n"], "b": 0} and rec["kappa"] == pytest.approx(0)
    assert rec["meets_default_floor"] is False
    code, out, err = cli(["judge", "validate", "--judge", cfg, "--kind", "pairwise", "--store", db,
                          "--resamples", "200"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "kind pairwise, scale preference" in text and "verbosity slope: not measured" in text
    with Store.open(db, read_only=True) as st:
        assert [r["kind"] for r in st.judge_validations()] == ["pairwise", "pairwise"]
