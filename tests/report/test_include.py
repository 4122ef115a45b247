"""`ragassay report --include FILE.json`: the real commands' saved --json outputs become sections of the page."""

from __future__ import annotations

import contextlib
import html as htmllib
import io
import json
import re

import pytest
from report_fixtures import PWN_IMG, PWN_SCRIPT, make_data, start_tags

from ragassay.analysis.demo import demo_config_dir
from ragassay.cli.app import main as _main
from ragassay.errors import InputError
from ragassay.report import render_report
from ragassay.report.include import load_include


def cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        _main(args)
    captured = capsys.readouterr()
    return (e.value.code or 0), captured.out, captured.err


def section(page: str, anchor: str) -> str:
    m = re.search(rf'<section id="{anchor}".*?</section>', page, re.S)
    assert m, anchor
    return m.group(0)


def cells(sec: str) -> list[str]:
    return [htmllib.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", sec, re.S)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One real run in a store, and the real --json outputs of index-eval and corpus check."""
    root = tmp_path_factory.mktemp("include")
    files = {}

    # capsys is function-scoped: a module fixture captures by redirecting stdout
    def run(args):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
            _main(args)
        assert (e.value.code or 0) == 0, buf.getvalue()
        return buf.getvalue()

    db = str(root / "r.duckdb")
    run(["run", str(demo_config_dir() / "bm25.yaml"), "--store", db, "--traces-dir", str(root / "traces"), "--json"])
    files["index-eval"] = root / "ie.json"
    files["index-eval"].write_text(run(["index-eval", "--synthetic", "300", "--dim", "16", "--values", "8,16",
                                        "--n-queries", "20", "--concurrency", "1", "--selectivity", "0.1",
                                        "--no-pareto", "--json"]))
    files["corpus check"] = root / "cc.json"
    files["corpus check"].write_text(run(["corpus", "check", "--spans", "5", "--json"]))
    return root, db, files


def test_included_sections_show_the_commands_numbers(saved, capsys):
    root, db, files = saved
    code, out, _ = cli(["report", "bm25", "--store", db, "-o", str(root / "rep"), "--no-analyses",
                        "--include", str(files["index-eval"]), "--include", str(files["corpus check"]),
                        "--json"], capsys)
    assert code == 0, out
    page = (root / "rep" / "index.html").read_text(encoding="utf-8")
    ie = json.loads(files["index-eval"].read_text())
    cc = json.loads(files["corpus check"].read_text())

    s1 = section(page, "include-1")
    assert 'data-kind="index-eval"' in s1 and "ANN recall@10 vs efSearch (hnsw)" in s1
    got = cells(s1)
    # each curve point's recall, with three decimals, as the command measured it
    for p in ie["curve"]["points"]:
        assert str(p["value"]) in got and f"{p['recall']:.3f}" in got
    assert f"{ie['build']['bytes_per_vector']:.3f}" in got and str(ie["build"]["index_bytes"]) in got
    assert f"{ie['churn']['recall_after_churn']:.3f}" in got

    s2 = section(page, "include-2")
    assert 'data-kind="corpus check"' in s2
    got = cells(s2)
    assert [str(cc["n_docs"]), str(cc["n_spans_checked"])] == got[1:3] and got[0] == "yes"
    assert cc["n_spans_checked"] == 5 * cc["n_docs"]
    for cls, r in cc["token_drift_by_class"].items():
        i = got.index(cls)
        assert got[i + 1:i + 3] == [str(r["n_docs"]), f"{r['median']:.3f}"]
    # both reach the navigation, in page order before the run tables
    nav = re.search(r"<nav.*?</nav>", page, re.S).group(0)
    assert nav.index("#include-1") < nav.index("#include-2") < nav.index("#runs")


def test_undefined_renders_as_undefined_and_hostile_text_stays_inert(saved, tmp_path):
    _, _, files = saved
    ie = json.loads(files["index-eval"].read_text())
    ie["source"] = PWN_SCRIPT
    ie["curve"]["points"][0]["recall"] = None  # no defined recall: "undefined", never 0
    ie["curve"]["kind"] = PWN_IMG
    f = tmp_path / "hostile.json"
    f.write_text(json.dumps(ie))
    data = make_data()
    data["includes"] = [load_include(f)]
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    sec = section(page, "include-1")
    assert PWN_SCRIPT not in page and PWN_IMG not in page
    # shown as text: the heading reads the payload back once unescaped
    assert htmllib.unescape(re.search(r"<h2>(.*?)</h2>", sec).group(1)) == f"Index evaluation: {PWN_SCRIPT}"
    assert not [t for t, a in start_tags(page) if t == "img" or any(k.startswith("on") for k in a)]
    assert '<td class="num undefined">undefined</td>' in sec


@pytest.mark.parametrize("text, says", [
    ("{not json", "not JSON"),
    ("[1, 2]", "the top level is a list"),
    ('{"hello": 1}', "not a recognized --json output"),
    ('{"curve": 3, "operating_knob": 8}', "looks like index-eval output but is malformed"),
])
def test_bad_include_file_is_a_clean_error(tmp_path, capsys, text, says):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(InputError, match=re.escape(says)) as e:
        load_include(f)
    assert str(e.value).startswith(f"{f}: ")
    # through the CLI: `error: FILE: ...`, exit 2, before any store is opened
    code, _, err = cli(["report", "x", "--store", str(tmp_path / "none.duckdb"), "-o", str(tmp_path / "o"),
                        "--include", str(f)], capsys)
    assert code == 2 and err.startswith("error: ") and says in err.replace("\n", " ")
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def stage_outputs(tmp_path_factory):
    """The real --json outputs of parse, chunks, a 2-config sweep, analyze attacks/hygiene, judge validate and
    analyze ablation."""
    root = tmp_path_factory.mktemp("include-more")

    def save(name, args):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as e:
            _main([*args, "--json"])
        assert (e.value.code or 0) == 0, buf.getvalue()
        (root / f"{name}.json").write_text(buf.getvalue())
        return root / f"{name}.json"

    sweep_yaml = root / "mini.yaml"
    sweep_yaml.write_text("name: mini\nbase: bm25\nbaseline: recursive-256\nbudget_tokens: 1024\nfixed_k: 5\n"
                          "configs:\n  - {name: fixed-256, chunker: {kind: fixed, size: 256}}\n"
                          "  - {name: recursive-256, chunker: {kind: recursive, size: 256}}\n")
    judge_yaml = root / "judge.yaml"
    judge_yaml.write_text("provider: local\nmodel: lexical\nmetrics: [faithfulness]\n")
    # an ablation whose strata give each verdict shape: an interval (all, lexical), TOST (paraphrase), and none
    # at all (negative queries have no ndcg@5); the placebo re-runs the baseline, so its differences are all 0
    ablation_yaml = root / "rerank.yaml"
    ablation_yaml.write_text(f"name: rerank-on\nbaseline: {demo_config_dir() / 'bm25.yaml'}\n"
                             "intervention: {reranker: {kind: lexical, final_k: 5}}\nplacebo: {}\nmetric: ndcg@5\n"
                             "margin: 0.02\nexpectations:\n  - {stratum: all, expect: help}\n"
                             "  - {stratum: lexical, expect: hurt}\n  - {stratum: paraphrase, expect: none}\n"
                             "  - {stratum: negative, expect: none}\n")
    db = str(root / "s.duckdb")
    return root, db, {
        "parse": save("parse", ["parse"]),
        "chunks": save("chunks", ["chunks", "--kind", "fixed", "--size", "64", "--size", "128"]),
        "sweep": save("sweep", ["sweep", str(sweep_yaml), "--store", db, "--workdir", str(root / "sw"),
                                "--resamples", "100"]),
        "analyze attacks": save("attacks", ["analyze", "attacks", "--limit", "1"]),
        "analyze hygiene": save("hygiene", ["analyze", "hygiene", "--store", db]),
        "judge validate": save("jv", ["judge", "validate", "--judge", str(judge_yaml), "--store", db,
                                      "--resamples", "200"]),
        "analyze ablation": save("ablation", ["analyze", "ablation", str(ablation_yaml), "--store", db,
                                              "--resamples", "200"]),
    }


def _f3(v):
    return f"{v:.3f}"


def _expected(kind, d):
    """Numbers each command printed that its section must show, as the page formats them."""
    if kind == "parse":
        return [str(sum(r["n_lost"] for r in p["by_stratum"] if r["group"] != "all")) for p in d["parsers"]] + [
            _f3(r["exact_or_fuzzy"]) for p in d["parsers"] for r in p["by_stratum"] + p["by_format"]]
    if kind == "chunks":
        return [str(c["n_chunks"]) for c in d["cards"]] + [_f3(c["precision_omega_mean"]) for c in d["cards"]]
    if kind == "sweep":
        return ([_f3(r["token_recall@budget"]["mean"]) for r in d["cost_quality"]]
                + [_f3(c["delta"]) for c in d["comparison"]] + [c["sweep_verdict"] for c in d["comparison"]])
    if kind == "analyze attacks":
        return ([_f3(r["rate"]) for r in d["rates"]] + [_f3(r["ci_high"]) for r in d["rates"]]
                + [a["query_id"] for a in d["attempts"] if a["success"]])
    if kind == "analyze hygiene":
        return ([str(v["n_flagged"]) for v in d["overlap"].values()]
                + [str(d["exclusions"]["retained"]), str(d["exclusions"]["n_items"])])
    if kind == "analyze ablation":
        rows = [*d["expectations"], d["placebo"]]
        return ([r["verdict"] for r in rows] + [str(r["n"]) for r in rows]
                + [_f3(r[c]) for r in rows if r["n"] for c in ("delta", "ci_low", "ci_high")]
                + [_f3(r["tost"]["p_value"]) for r in rows if (r.get("tost") or {}).get("p_value") is not None]
                + [run["run_id"] for run in d["runs"].values()])
    f = d["figures"]
    return ([_f3(d["kappa"]), _f3(d["agreement"]), _f3(d["kappa_low"]), _f3(d["kappa_high"])]
            + [str(x) for row in f["confusion"] for x in row]
            + [_f3(c["recall"]["value"]) for c in f["per_class"]])


KINDS_RUN = ["parse", "chunks", "sweep", "analyze attacks", "analyze hygiene", "judge validate", "analyze ablation"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS_RUN)
def test_each_command_output_is_detected_and_its_numbers_reach_the_page(stage_outputs, kind, tmp_path):
    _, _, files = stage_outputs
    d = json.loads(files[kind].read_text())
    sec = load_include(files[kind])
    assert sec["kind"] == kind
    data = make_data()
    data["includes"] = [sec]
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    s = section(page, "include-1")
    assert f'data-kind="{kind}"' in s
    got = cells(s)
    missing = [v for v in _expected(kind, d) if v not in got]
    assert not missing, missing


@pytest.mark.slow
def test_the_judge_validation_confusion_matrix_keeps_its_layout(stage_outputs, tmp_path):
    _, _, files = stage_outputs
    d = json.loads(files["judge validate"].read_text())
    sec = load_include(files["judge validate"])
    conf = next(t for t in sec["tables"] if t["title"].startswith("Confusion matrix"))
    # rows are the labels, columns the judge's, as the command counted them; the bundled set's labels are
    # automated, and the heading says so (never "human")
    assert d["labelled_by"] == "automated"
    assert conf["columns"] == ["automated", *d["figures"]["classes"]]
    notes = " ".join(sec["notes"])
    assert f"meets the gate's default floor: no ({d['floor_detail']})" in notes and "labelled by: automated" in notes
    assert conf["rows"] == [[c, *r] for c, r in zip(d["figures"]["classes"], d["figures"]["confusion"], strict=True)]
    assert sum(sum(r) for r in d["figures"]["confusion"]) == d["n"]


@pytest.mark.slow
def test_all_kinds_through_the_report_command(stage_outputs, capsys):
    root, db, files = stage_outputs
    args = ["report", "mini/recursive-256", "--store", db, "-o", str(root / "rep"), "--no-analyses", "--json"]
    for k in KINDS_RUN:
        args += ["--include", str(files[k])]
    code, out, _ = cli(args, capsys)
    assert code == 0, out
    page = (root / "rep" / "index.html").read_text(encoding="utf-8")
    for i, k in enumerate(KINDS_RUN):
        assert f'data-kind="{k}"' in section(page, f"include-{i + 1}")


@pytest.mark.slow
def test_the_ablation_section_keeps_each_verdict_and_shows_undefined_and_hostile_text_as_such(stage_outputs, tmp_path):
    _, _, files = stage_outputs
    d = json.loads(files["analyze ablation"].read_text())
    sec = load_include(files["analyze ablation"])
    exp, plac, runs = sec["tables"]
    # one row per declared expectation, in the file's order, with the command's own verdicts
    assert [(r[0], r[2], r[-2]) for r in exp["rows"]] == [(e["stratum"], e["expect"], e["verdict"])
                                                          for e in d["expectations"]]
    by_stratum = {r[0]: dict(zip(exp["columns"], r, strict=True)) for r in exp["rows"]}
    # no negative query has an ndcg@5: no interval, said so, never a 0
    neg = by_stratum["negative"]
    assert neg["n"] == 0 and neg["delta"] is None and neg["ci_low"] is None and neg["verdict"] == "inconclusive"
    assert neg["note"] == "no paired query with a value in both runs"
    # the equivalence control carries statsmodels-checked TOST p (analysis tests); here it must reach the table
    para = next(e for e in d["expectations"] if e["stratum"] == "paraphrase")
    assert para["tost"]["p_value"] is not None and by_stratum["paraphrase"]["TOST p"] == para["tost"]["p_value"]
    # a deterministic placebo: all-zero differences, equivalent by the degenerate rule, TOST undefined
    assert dict(zip(plac["columns"], plac["rows"][0], strict=True)) == {
        "n": d["placebo"]["n"], "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "wins": 0, "losses": 0,
        "ties": d["placebo"]["n"], "TOST p": None, "verdict": "confirmed", "passed": True,
        "note": "TOST undefined: zero variance of differences"}
    assert [r[0] for r in runs["rows"]] == ["baseline", "intervention", "placebo"]

    d["name"], d["expectations"][0]["stratum"] = PWN_SCRIPT, PWN_IMG
    f = tmp_path / "hostile.json"
    f.write_text(json.dumps(d))
    data = make_data()
    data["includes"] = [load_include(f)]
    page = render_report(data, tmp_path / "out").read_text(encoding="utf-8")
    s = section(page, "include-1")
    assert PWN_SCRIPT not in page and PWN_IMG not in page
    assert htmllib.unescape(re.search(r"<h2>(.*?)</h2>", s).group(1)) == f"Ablation: {PWN_SCRIPT}"
    assert PWN_IMG in cells(s)
    assert '<td class="num undefined">undefined</td>' in s
