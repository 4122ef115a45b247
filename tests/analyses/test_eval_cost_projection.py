"""`ragassay cost RUN --judge J --project`: what judging a run's answers with an LLM judge config would cost,
from the prompts the judge would render. Checked against prompts rendered and counted here by hand, prices
worked out by hand, the tier-1 judge's decisions counted directly, and the demo store."""

import json
import re
import sys

import pytest
import typer
from tests.analyses._runs import make_run

from ragassay.analysis import eval_cost
from ragassay.analysis.eval_cost import PROJECTED, SCENARIOS, project_judging
from ragassay.analysis.runner import load_inputs
from ragassay.cli import cost as cost_cli
from ragassay.cli.app import _failure
from ragassay.cli.app import main as app_main
from ragassay.golden import bundled_golden_source
from ragassay.judges.config import JudgeConfig
from ragassay.judges.local import LexicalSupport, split_claims
from ragassay.judges.metrics import RUBRICS, ContextUnit
from ragassay.store import Store
from ragassay.trace.io import write_traces
from ragassay.trace.schema import Citation, RunHeader, Trace, Unit

PRICES = {"input": 2.0, "output": 10.0, "cached_input": 0.2, "cache_write": 2.5, "batch_input": 1.0,
          "batch_output": 5.0}
JUDGE = {"provider": "anthropic", "model": "m", "max_tokens": 512, "metrics": ["faithfulness", "answer_relevance"],
         "prices": {"m": PRICES}, "cascade": {"tier1": {"model": "lexical", "threshold": 0.7},
                                              "band": {"lo": 0.2, "hi": 0.8}}}
TIERS_YAML = """dataset_version: {version}
tiers:
  regression: {{n: 4, expected_ms: 40.0, n_latency_unknown: 0, query_ids: [a, b, c, d]}}
"""
CHEESE = "The moon is made of green cheese."
FOREIGN = "bananas grow tall trees"


def tokens(text):
    """The regex-wordpunct-v1 count, written out as a character walk: a run of word characters is one token,
    every other non-space character is one."""
    n, in_word = 0, False
    for ch in text:
        word = ch.isalnum() or ch == "_"
        if word and not in_word:
            n += 1
        elif not word and not ch.isspace():
            n += 1
        in_word = word
    return n


def cli(args, capsys):
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    cost_cli.register(app)
    try:
        typer.main.get_command(app)(args, standalone_mode=False, prog_name="ragassay")
        code = 0
    except Exception as e:  # the error contract of ragassay.cli.app.main
        lines, code = _failure(e)
        sys.stderr.write("".join(f"error: {line}\n" for line in lines))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


@pytest.fixture(scope="module")
def two(tmp_path_factory, inputs):
    """A scored 2-item run ``two``: lex-002 answers the first sentence of its evidence and a sentence foreign
    to it; lex-007 answers one sentence with half its content words from the evidence."""
    corpus, golden = inputs
    tmp = tmp_path_factory.mktemp("projection")
    made, traces = {}, []
    for qid in ("lex-002", "lex-007"):
        ev = golden[qid].evidence[0]
        text = corpus[ev.doc_id].text[ev.start:ev.end]
        first = split_claims(text)[0]
        if qid == "lex-002":
            claims = [first, CHEESE]
        else:
            words = list(dict.fromkeys(w for w in re.findall(r"\w+", first.lower()) if len(w) > 3))
            claims = [" ".join(words[:4]).capitalize() + f" {FOREIGN}."]
        answer = " ".join(claims)
        assert split_claims(answer) == claims
        unit = Unit(unit_id=f"{ev.doc_id}#0", doc_id=ev.doc_id, start=ev.start, end=ev.end, rank=1, text=text)
        traces.append(Trace(trace_id=f"t-{qid}", query_id=qid, question=golden[qid].question, fused=[unit],
                            packed=[unit], answer=answer, citations=[Citation(unit_id=unit.unit_id)],
                            outcome="answered"))
        made[qid] = (golden[qid].question, answer, text, claims)
    path = tmp / "two.jsonl"
    write_traces(path, RunHeader(run_name="two", corpus_digest=corpus.digest, dataset_version=golden.dataset_version),
                 traces)
    db = tmp / "r.duckdb"
    with pytest.raises(SystemExit) as e:
        app_main(["score", str(path), "--golden", str(bundled_golden_source()), "--store", str(db), "--name", "two",
                  "--json"])
    assert not e.value.code
    judge = tmp / "judge.yaml"
    judge.write_text(json.dumps(JUDGE))
    (tmp / "tiers.yaml").write_text(TIERS_YAML.format(version=golden.dataset_version))
    return tmp, db, judge, made


def expected_calls(made):
    """(query_id, item, kind, prefix tokens, rest tokens) of every request, the prompts rendered by hand."""
    out = []
    for qid, (question, answer, _, _) in made.items():
        user = f"<question>{question}</question>\n<answer>{answer}</answer>"
        out.append((qid, "claims", "claims", tokens(RUBRICS["claims"]), tokens(user)))
        out.append((qid, "relevance", "relevance", tokens(RUBRICS["relevance"]), tokens(user)))
    for qid, (_, _, context, claims) in made.items():
        for i, claim in enumerate(claims):
            user = f"<context>\n<unit id=\"1\">{context}</unit>\n</context>\n<claim>{claim}</claim>"
            out.append((qid, f"support:{i}", "support", tokens(RUBRICS["support"]), tokens(user)))
    return sorted(out)


def project(two, inputs, **kw):
    tmp, db, judge, _ = two
    corpus, golden = inputs
    with Store.open(db, read_only=True) as st:
        return project_judging(st, "two", JudgeConfig.model_validate(JUDGE), str(judge), golden, corpus, **kw)


def test_token_counts_are_the_counter_on_the_prompts_the_judge_would_render(two, inputs):
    p = project(two, inputs)
    got = sorted((c.query_id, c.item, c.kind, c.prefix_tokens, c.rest_tokens) for c in p.calls)
    assert got == expected_calls(two[3])
    assert (p.answers, p.answered, len(p.calls)) == (2, 2, 7)
    d = p.to_dict()
    assert d["tokens"]["input"] == sum(a + b for *_, a, b in got)
    assert d["tokens"]["cacheable_prefix"] == sum(a for *_, a, _ in got)
    assert d["calls"]["by_kind"] == {"claims": 2, "relevance": 2, "support": 3}


def test_the_four_prices_by_hand_for_a_two_item_run(two, inputs):
    calls = expected_calls(two[3])
    total_in = sum(a + b for *_, a, b in calls)
    pre = {k: a for _, _, k, a, _ in calls}
    writes = pre["claims"] + pre["relevance"] + pre["support"]  # one cache write per rubric
    reads = 2 * pre["claims"] + 2 * pre["relevance"] + 3 * pre["support"] - writes
    plain = total_in - reads - writes
    usd = {k: s.usd for k, s in project(two, inputs, output_tokens=100, min_cached_prefix=0).figures.items()}
    assert usd["sync_uncached"] == pytest.approx((total_in * 2.0 + 700 * 10.0) / 1e6)
    assert usd["sync_cached"] == pytest.approx((plain * 2.0 + reads * 0.2 + writes * 2.5 + 700 * 10.0) / 1e6)
    assert usd["batch_uncached"] == pytest.approx((total_in * 1.0 + 700 * 5.0) / 1e6)
    assert usd["batch_cached"] == pytest.approx((plain * 1.0 + reads * 0.1 + writes * 1.25 + 700 * 5.0) / 1e6)
    # the rubrics here are ~100 tokens: under the default 1,024-token minimum nothing is cached
    default = project(two, inputs, output_tokens=100)
    assert default.figures["sync_cached"].usd == pytest.approx(usd["sync_uncached"])
    assert default.figures["batch_cached"].usd == pytest.approx(usd["batch_uncached"])
    assert any("below --min-cached-prefix 1024" in n for n in default.notes)
    # without --output-tokens every call writes the spec's 150 tokens
    assert project(two, inputs).figures["sync_uncached"].usd == pytest.approx((total_in * 2.0 + 7 * 150 * 10) / 1e6)


def test_the_cascade_share_is_the_tier1_judges_decisions_counted_directly(two, inputs):
    made = two[3]
    tier1 = LexicalSupport(0.7)
    routes = {}
    for qid, (_, _, context, claims) in made.items():
        ctx = (ContextUnit("u", "d", 0, context),)
        for i, claim in enumerate(claims):
            v = tier1.judge_many([claim], ctx)[0]
            p_bad = 1 - v.score
            label = v.verdict.label
            routes[(qid, f"support:{i}")] = ("auto_pass" if p_bad < 0.2 and label == "supported" else
                                             "auto_fail" if p_bad > 0.8 and label != "supported" else "escalated")
    # by construction: the evidence sentence passes, the foreign one fails, the half-shared one escalates
    assert routes == {("lex-002", "support:0"): "auto_pass", ("lex-002", "support:1"): "auto_fail",
                      ("lex-007", "support:0"): "escalated"}
    p = project(two, inputs, output_tokens=100, min_cached_prefix=0)
    assert {(c.query_id, c.item): c.route for c in p.calls if c.kind == "support"} == routes
    d = p.deterministic_first
    assert (d["decided"], d["judgements"], d["share"]) == (2, 3, pytest.approx(2 / 3))
    assert d["routes"] == {"auto_pass": 1, "auto_fail": 1, "escalated": 1}
    # the two decided support calls removed, by hand
    kept = [c for c in expected_calls(made) if c[2] != "support" or routes[(c[0], c[1])] == "escalated"]
    total_in = sum(a + b for *_, a, b in kept)
    assert p.figures_deterministic_first["sync_uncached"].usd == pytest.approx((total_in * 2.0 + 5 * 100 * 10) / 1e6)
    pre = {k: a for _, _, k, a, _ in kept}
    writes = sum(pre.values())
    reads = sum(a for *_, a, _ in kept) - writes
    assert p.figures_deterministic_first["batch_cached"].usd == pytest.approx(
        ((total_in - reads - writes) * 1.0 + reads * 0.1 + writes * 1.25 + 500 * 5.0) / 1e6)
    ratio = p.ratios["sync_uncached_over_batch_cached_deterministic_first"]["value"]
    assert ratio == pytest.approx(p.figures["sync_uncached"].usd / p.figures_deterministic_first["batch_cached"].usd)


def test_without_a_cascade_deterministic_first_is_undefined_and_says_how(two, inputs):
    tmp, db, _, _ = two
    corpus, golden = inputs
    cfg = JudgeConfig.model_validate({k: v for k, v in JUDGE.items() if k != "cascade"})
    with Store.open(db, read_only=True) as st:
        p = project_judging(st, "two", cfg, "plain.yaml", golden, corpus)
    assert p.deterministic_first["share"] is None
    assert "plain.yaml names no cascade" in p.deterministic_first["undefined"]
    assert all(s.usd is None for s in p.figures_deterministic_first.values())
    assert p.ratios["sync_uncached_over_batch_cached_deterministic_first"]["value"] is None
    assert p.ratios["sync_uncached_over_batch_cached"]["value"] == pytest.approx(2.0)  # batch is half price
    no_batch = JudgeConfig.model_validate({**JUDGE, "prices": {"m": {"input": 2.0, "output": 10.0}}})
    with Store.open(db, read_only=True) as st:
        p = project_judging(st, "two", no_batch, "nb.yaml", golden, corpus)
    assert p.figures["batch_cached"].usd is None
    assert p.figures["batch_cached"].undefined == "nb.yaml has no batch_input/batch_output for model m"
    assert any("no cached_input price" in n for n in p.notes)


def test_cli_json_labels_every_projected_figure_and_keeps_spend_apart(two, capsys):
    tmp, db, judge, _ = two
    code, out, err = cli(["cost", "two", "--store", str(db), "--judge", str(judge), "--project", "--tiers",
                          str(tmp / "tiers.yaml"), "--runs-per-month", "10", "--output-tokens", "100",
                          "--min-cached-prefix", "0", "--json"], capsys)
    assert code == 0, err
    r = json.loads(out)["runs"][0]
    assert r["spend"] is None and r["calls"]["total"] == 0  # scored, never judged: nothing was paid
    p = r["projected"]
    assert set(p) == {"label", "judge_model", "judge_config", "basis", "answers", "answered", "calls", "tokens",
                      "kinds", "min_cached_prefix", "figures", "deterministic_first", "figures_deterministic_first",
                      "saving_deterministic_first", "ratios", "monthly", "trace_problems", "notes"}
    assert p["label"] == PROJECTED and p["judge_model"] == "anthropic:m" and p["judge_config"] == str(judge)
    assert set(p["figures"]) == set(SCENARIOS) == set(p["figures_deterministic_first"])
    assert p["tokens"]["counter"] == "regex-wordpunct-v1" and "not the provider's tokenizer" in p["tokens"]["estimate"]
    assert p["tokens"]["output"] == 7 * 100 and p["kinds"]["support"]["calls"] == 3
    per_answer = p["figures"]["batch_cached"]["usd"] / 2
    assert p["monthly"]["all_calls"]["batch_cached"]["usd"] == pytest.approx(per_answer * 4 * 10)
    assert p["saving_deterministic_first"]["sync_uncached"] == pytest.approx(
        p["figures"]["sync_uncached"]["usd"] - p["figures_deterministic_first"]["sync_uncached"]["usd"])
    assert r["monthly_total"] is None  # the projected figures never enter the as-paid total


def test_cli_text_says_projected_on_every_projected_line(two, capsys):
    tmp, db, judge, _ = two
    code, out, err = cli(["cost", "two", "--store", str(db), "--judge", str(judge), "--project"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  projected judging with anthropic:m"))
    block = [line for line in lines[start:] if line.startswith("    ")]
    assert block and all(line.lstrip().startswith("projected") for line in block)
    assert "projected deterministic-first: 67% (2 of 3 support judgements decided by tier 1 local:lexical" in out
    assert "projected ratio sync uncached / batch with the cached prefix: 2.00x" in out
    assert "not the provider's tokenizer" in out and "§" not in out


@pytest.mark.parametrize("args, message", [
    (["--project"], "--project needs --judge JUDGE.yaml"),
    (["--output-tokens", "10"], "--output-tokens shapes the projection: add --project"),
    (["--min-cached-prefix", "0", "--judge", "J"], "--min-cached-prefix shapes the projection: add --project"),
    (["--project", "--judge", "J", "--output-tokens", "0"], "--output-tokens 0: give a whole number >= 1"),
    (["--project", "--judge", "J", "--output-tokens", "600"], "is above the config's max_tokens (512)"),
    (["--project", "--judge", "LOCAL"], "a local judge makes no call, so there is nothing to project"),
])
def test_cli_refuses_a_projection_it_cannot_make(two, capsys, args, message):
    tmp, db, judge, _ = two
    (tmp / "local.yaml").write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    args = [str(judge) if a == "J" else str(tmp / "local.yaml") if a == "LOCAL" else a for a in args]
    code, out, err = cli(["cost", "two", "--store", str(db), *args], capsys)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_a_run_without_traces_is_refused_with_the_fix(tmp_path, inputs, capsys):
    corpus, golden = inputs
    with Store.open(tmp_path / "r.duckdb") as st:
        make_run(st, "bare", {"recall@10": [1.0, 0.0]}, dataset_version=golden.dataset_version)
    (tmp_path / "j.yaml").write_text(json.dumps(JUDGE))
    code, out, err = cli(["cost", "bare", "--store", str(tmp_path / "r.duckdb"), "--judge", str(tmp_path / "j.yaml"),
                          "--project"], capsys)
    assert code == 2 and out == ""
    assert "recorded no traces; run it again with --keep-traces (or --traces-dir DIR)" in err


def test_the_cli_defaults_are_the_analysis_defaults():
    assert cost_cli.DEFAULT_OUTPUT_TOKENS == eval_cost.DEFAULT_OUTPUT_TOKENS == 150
    assert cost_cli.DEFAULT_MIN_CACHED_PREFIX == eval_cost.DEFAULT_MIN_CACHED_PREFIX == 1024


@pytest.mark.slow  # one demo (four pipelines, judge, comparisons): ~8 s
def test_demo_projection_saves_and_its_printed_figures_agree(tmp_path, capsys):
    from pathlib import Path

    from ragassay.analysis.demo import run_demo

    example = Path(__file__).resolve().parents[2] / "examples" / "judges" / "claude-sonnet-5.yaml"
    demo = run_demo(tmp_path / "demo", n_resamples=100, report=None)
    db = str(demo.out / "ragassay.duckdb")
    code, out, err = cli(["cost", *demo.run_ids, "--store", db, "--judge", str(example), "--project", "--json"],
                         capsys)
    assert code == 0, err
    for r in json.loads(out)["runs"]:
        assert r["spend"] == 0  # judged locally: nothing paid, and the projection does not change that
        p = r["projected"]
        f = {k: v["usd"] for k, v in p["figures"].items()}
        g = {k: v["usd"] for k, v in p["figures_deterministic_first"].items()}
        assert f["sync_uncached"] == pytest.approx(2 * f["batch_uncached"])  # batch is half price
        assert f["batch_cached"] <= f["batch_uncached"] and g["batch_cached"] < f["batch_cached"]
        d = p["deterministic_first"]
        assert 0 < d["decided"] <= d["judgements"] and d["share"] == pytest.approx(d["decided"] / d["judgements"])
        assert p["calls"]["total"] == sum(p["calls"]["by_kind"].values()) == sum(
            k["calls"] for k in p["kinds"].values())
        assert p["tokens"]["input"] == p["tokens"]["cacheable_prefix"] + p["tokens"]["per_item"]
        ratio = p["ratios"]["sync_uncached_over_batch_cached_deterministic_first"]["value"]
        assert ratio > 2 and ratio == pytest.approx(f["sync_uncached"] / g["batch_cached"])
    code, text, _ = cli(["cost", "bm25", "--store", db, "--judge", str(example), "--project"], capsys)
    code, js, _ = cli(["cost", "bm25", "--store", db, "--judge", str(example), "--project", "--json"], capsys)
    p = json.loads(js)["runs"][0]["projected"]
    ratio = p["ratios"]["sync_uncached_over_batch_cached_deterministic_first"]["value"]
    assert f"batch with the cached prefix and deterministic-first: {ratio:.2f}x" in text
    assert f"projected cost: sync ${p['figures']['sync_uncached']['usd']:.4f} uncached" in text
    assert f"{p['calls']['total']} (" in text and f"{p['tokens']['input']:,} in" in text
