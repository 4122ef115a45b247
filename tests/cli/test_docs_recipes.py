"""The recipes the docs hand to users work as written: the GitHub Actions workflow of docs/ci.md fetches the
base commit a pull request's first run needs and keys its cache by it; the example gate policy of docs/runs.md
passes the demo's baseline against itself; and what the terminal prints cites docs pages, never sections of
a spec that does not ship."""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import click
import pytest
import typer
import yaml
from click.testing import CliRunner

from ragassay.cli.app import app, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BASE_SHA = "${{ github.event.pull_request.base.sha }}"


def _block(doc: str, heading: str) -> str:
    """The first ```yaml block after ``heading`` in docs/``doc``."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    return re.search(re.escape(heading) + r".*?```yaml\n(.*?)```", text, re.S).group(1)


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _ragassay(args) -> None:
    main(list(args))


class Res(NamedTuple):
    code: int
    out: str
    err: str


def cli(*args) -> Res:
    """``ragassay ARGS`` through the real entry point, output captured."""
    res = CliRunner().invoke(_ragassay, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Res(res.exit_code, res.stdout, res.stderr)


# ------------------------------------------------------------------------------------------------ docs/ci.md
def _workflow() -> dict:
    return yaml.safe_load(_block("ci.md", "## GitHub Actions"))


def _steps() -> list[dict]:
    return _workflow()["jobs"]["gate"]["steps"]


def test_ci_recipe_fetches_the_base_commit_on_a_first_run():
    steps = _steps()
    checkout = [i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkout) == 1
    fetched_all = (steps[checkout[0]].get("with") or {}).get("fetch-depth") == 0
    fetched_base = any("git fetch origin" in s.get("run", "") for s in steps[checkout[0] + 1:])
    assert fetched_all or fetched_base, steps[checkout[0]]
    # the baseline is built from that commit, the one the cache key names
    baseline = next(s for s in steps if s.get("name", "").startswith("baseline"))
    assert f'git worktree add /tmp/base "{BASE_SHA}"' in baseline["run"]
    assert _workflow()[True] == "pull_request"  # YAML 1.1 reads the key `on` as true


def test_ci_recipe_cache_key_includes_the_base_commit_sha():
    cache = [s for s in _steps() if s.get("uses", "").startswith("actions/cache@")]
    assert len(cache) == 1
    key = cache[0]["with"]["key"]
    assert BASE_SHA in key
    assert "hashFiles('golden/manifest.json', 'docs/**')" in key  # and still the golden set and corpus
    assert cache[0]["with"]["path"] == ".ragassay"


def _ragassay_calls(script: str) -> list[list[str]]:
    """Every `ragassay ...` command line of a step's script, continuation lines joined, as argv."""
    joined = re.sub(r"\\\n\s*", " ", script)
    calls = []
    for line in joined.splitlines():
        for part in re.split(r"\|\||\||&&|[{};]|>", re.sub(r"\$\{\{.*?\}\}", "X", line)):
            words = shlex.split(part)
            if words and words[0] == "ragassay":
                calls.append(words[1:])
    return calls


def test_ci_recipe_calls_only_commands_and_options_ragassay_has():
    group = typer.main.get_command(app)
    calls = [c for s in _steps() for c in _ragassay_calls(s.get("run", ""))]
    assert [c[0] for c in calls] == ["runs", "run", "run", "gate", "compare"]
    for argv in calls:
        known = {o for p in group.load(argv[0]).params for o in p.opts}
        used = {w for w in argv[1:] if w.startswith("--")}
        assert used <= known, (argv[0], used - known)


# ------------------------------------------------------------------------------------------------ the demo
@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`ragassay demo` once for the module: its printed output and its store."""
    out = tmp_path_factory.mktemp("demo") / "out"
    res = cli("demo", "-o", out, "--resamples", 200)
    assert res.code == 0, res.err
    return out, res.out


def _policy(tmp_path: Path, **hard) -> Path:
    text = _block("runs.md", "## `ragassay gate BASE CAND --policy gate.yaml`")
    data = yaml.safe_load(text)
    path = tmp_path / "gate.yaml"
    if hard:
        data["hard"].update(hard)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(text, encoding="utf-8")  # exactly as documented, comments included
    return path


@pytest.mark.slow  # the demo: four pipelines, judge, comparisons, report (about 10 s)
def test_runs_md_example_policy_passes_the_demo_baseline_against_itself(demo, tmp_path):
    out, _ = demo
    policy = _policy(tmp_path)
    store = out / "ragassay.duckdb"
    res = cli("gate", "bm25", "bm25", "--policy", policy, "--store", store)
    assert res.code == 0, res.out
    assert " ".join(res.out.split()).startswith("gate PASS: bm25 → bm25")
    res = cli("gate", "bm25", "bm25", "--policy", policy, "--store", store, "--json")
    verdict = json.loads(res.out)
    assert res.code == 0 and verdict["verdict"] == "PASS"
    checks = {c["name"]: c["verdict"] for c in verdict["checks"]}
    # every metric the example gates is checked, and every check passes
    assert {"recall@fusion_depth", "ndcg@final_k", "answer_f1", "error_rate", "refusal_rate", "compared_pairs",
            "schema_failures", "unit_failures", "citation_validity", "cost_per_query",
            "p95_latency_ms"} == set(checks)
    assert set(checks.values()) == {"PASS"}


@pytest.mark.slow
def test_runs_md_says_why_its_policy_sets_no_judged_fraction_floor(demo, tmp_path):
    # the comment in the example: a 0.8 floor would fail the demo, whose judged fraction is 0.08
    out, _ = demo
    assert "(the demo's judged fraction is 0.08)" in _block("runs.md", "## `ragassay gate BASE CAND")
    res = cli("gate", "bm25", "bm25", "--policy", _policy(tmp_path, min_judged_fraction=0.8), "--store",
              out / "ragassay.duckdb", "--json")
    judged = next(c for c in json.loads(res.out)["checks"] if c["name"] == "judged_fraction")
    assert res.code == 1 and judged["verdict"] == "FAIL" and round(judged["value"], 2) == 0.08


# ------------------------------------------------------------------------------------------------ no "§"
@pytest.mark.slow
def test_demo_output_cites_docs_pages_not_spec_sections(demo):
    _, printed = demo
    assert "§" not in printed and "spec " not in printed
    assert "judge validation (docs/judge-validation.md):" in printed
    assert "oracle ladder (docs/analyses.md#ladder): generation: " in printed
    assert "\n## ladder\n" in (DOCS / "analyses.md").read_text(encoding="utf-8")


def test_compare_help_cites_docs_not_spec_sections():
    res = cli("compare", "--help")
    flat = " ".join(res.out.split())
    assert res.code == 0 and "§" not in flat and "spec" not in flat
    test = next(p for p in typer.main.get_command(app).load("compare").params if "--test" in p.opts)
    assert test.help.endswith("The bootstrap still decides the verdicts: Wilcoxon has poor power on IR "
                              "differences (docs/stats.md).")
    assert "Wilcoxon" in (DOCS / "stats.md").read_text(encoding="utf-8")


def _printed_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings (docstrings and comments are never printed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_message_of_the_package_cites_a_spec_section():
    src = ROOT / "src" / "ragassay"
    found = [f"{p.relative_to(src)}:{line}: {s[:80]!r}" for p in sorted(src.rglob("*.py"))
             for line, s in _printed_strings(p) if "§" in s]
    assert found == []


# ------------------------------------------------------------------------------------------------ docs/analyses.md
@pytest.mark.slow
def test_analyses_md_rerank_cost_recipe_runs_on_the_demo_and_its_json_goes_into_the_report(demo, tmp_path):
    out, _ = demo
    text = (DOCS / "analyses.md").read_text(encoding="utf-8")
    recipe = re.search(r"## rerank-cost\n\n```bash\n(.*?)```", text, re.S).group(1).splitlines()
    args = recipe[1].split()[1:]  # ragassay analyze rerank-cost ... --store demo/ragassay.duckdb -m ndcg@5
    args[args.index("--store") + 1] = str(out / "ragassay.duckdb")
    res = cli(*args, "--json", "--resamples", 500)
    assert res.code == 0, res.err
    rep = json.loads(res.out)
    rows = {r["name"]: r for r in rep["rows"]}
    assert list(rows) == ["hybrid", "hybrid_rerank", "bm25"] and rep["metric"] == "ndcg@5"
    # the reranker adds quality and latency; its delta per 100 ms is its delta over its added p95, per 100 ms
    rr = rows["hybrid_rerank"]
    assert rr["delta"]["value"] > 0 and rr["latency"]["added_p95_ms"] > 0
    assert rr["delta_per_100ms"] == pytest.approx(100 * rr["delta"]["value"] / rr["latency"]["added_p95_ms"])
    # the default metric is refused on these runs (their final_k differ), as the docs say
    default = cli(*[a for a in args if a not in ("-m", "ndcg@5")])
    assert default.code == 2 and "final_k" in default.err
    saved = tmp_path / "rerank_cost.json"
    saved.write_text(res.out, encoding="utf-8")
    page = tmp_path / "report"
    res = cli("report", "bm25", "hybrid", "-o", page, "--store", out / "ragassay.duckdb", "--include", saved)
    assert res.code == 0, res.err
    html = (page / "index.html").read_text(encoding="utf-8")
    assert "Quality per millisecond: ndcg@5 against hybrid" in html


# ------------------------------------------------------------------------------------------------ docs/cost.md
@pytest.mark.slow
def test_cost_projection_on_the_demo_goes_into_the_report_as_projected_never_as_paid(demo, tmp_path):
    out, _ = demo
    store = out / "ragassay.duckdb"
    judge = Path(__file__).resolve().parents[2] / "examples" / "judges" / "claude-sonnet-5.yaml"
    res = cli("cost", "bm25", "--store", store, "--judge", judge, "--project", "--json")
    assert res.code == 0, res.err
    rep = json.loads(res.out)
    (run,) = rep["runs"]
    p = run["projected"]
    assert run["spend"] == 0 and p["label"] == "projected"
    saved = tmp_path / "cost.json"
    saved.write_text(res.out, encoding="utf-8")
    page = tmp_path / "report"
    res = cli("report", "bm25", "-o", page, "--store", store, "--include", saved)
    assert res.code == 0, res.err
    html = (page / "index.html").read_text(encoding="utf-8")
    assert "The eval layer&#39;s own cost" in html
    assert "Projected: the same answers judged by an LLM judge (no call made)" in html
    # the projected figures are the JSON's, as the report prints them (3 decimals)
    det = p["figures_deterministic_first"]["batch_cached"]["usd"]
    assert f"<td>{p['figures']['sync_uncached']['usd']:.3f}</td>" in html.replace(' class="num"', "")
    assert f"{det:.3f}" in html


# ------------------------------------------------------------------------------------------------ docs/ppi.md
@pytest.mark.slow
def test_report_labels_put_the_ppi_corrected_difference_beside_the_raw_judge_means(demo, tmp_path):
    out, _ = demo
    store = out / "ragassay.duckdb"
    import duckdb
    import numpy as np

    con = duckdb.connect(str(store), read_only=True)
    rows = con.sql("SELECT u.name, r.query_id, r.value FROM results r JOIN runs u USING (run_id) WHERE "
                   "r.metric = 'faithfulness' AND r.value IS NOT NULL AND u.name IN ('bm25', 'hybrid') "
                   "ORDER BY 1, 2").fetchall()
    con.close()
    # "human" values of a random 40% of the judged answers: the judge's, with one in six flipped
    rng = np.random.default_rng(0)
    lines = []
    for name, qid, v in rows:
        if rng.random() < 0.4:
            human = 1.0 - round(v) if rng.random() < 1 / 6 else float(round(v))
            lines.append({"run": name, "query_id": qid, "metric": "faithfulness", "value": human,
                          "labelled_by": "human"})
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    res = cli("compare", "bm25", "hybrid", "--store", store, "--labels", labels, "--json")
    assert res.code == 0, res.err
    (entry,) = [e for e in json.loads(res.out)["ppi"] if e["metric"] == "faithfulness"]
    page = tmp_path / "report"
    res = cli("report", "bm25", "hybrid", "-o", page, "--store", store, "--labels", labels)
    assert res.code == 0, res.err
    html = (page / "index.html").read_text(encoding="utf-8")
    assert "<h4>PPI-corrected judge metrics</h4>" in html
    # the corrected difference the page shows is compare's, with the raw judge means beside it
    from ragassay.report import fmt

    assert f"Δ {fmt.signed(entry['difference']['estimate'])}" in html.replace("&#43;", "+")
    raw = entry["raw_judge_mean"]
    assert f"{raw['a']:.3f} → {raw['b']:.3f}" in html
    res = cli("report", "bm25", "-o", tmp_path / "one", "--store", store, "--labels", labels)
    assert res.code == 2 and "give two or more runs" in res.err


# ------------------------------------------------------------------------------------------------ docs/online.md
@pytest.mark.slow
def test_online_gap_and_promote_outputs_go_into_the_report(demo, tmp_path):
    out, _ = demo
    import shutil

    store = tmp_path / "s.duckdb"
    shutil.copy(out / "ragassay.duckdb", store)
    traffic = tmp_path / "t.jsonl"
    assert cli("online", "simulate", "--out", traffic, "--records", 2000, "--days", 5).code == 0
    assert cli("online", "ingest", traffic, "--store", store).code == 0
    res = cli("online", "gap", "--store", store, "--release", "2026.03-b", "--offline", "bm25", "hybrid",
              "--metric", "ndcg@5", "--resamples", 500, "--json")
    assert res.code == 0, res.err
    gap = json.loads(res.out)
    res = cli("online", "promote", "--store", store, "--out", tmp_path / "queue", "--json")
    assert res.code == 0, res.err
    promote = json.loads(res.out)
    (tmp_path / "gap.json").write_text(json.dumps(gap), encoding="utf-8")
    (tmp_path / "promote.json").write_text(json.dumps(promote), encoding="utf-8")
    res = cli("report", "bm25", "hybrid", "-o", tmp_path / "report", "--store", store, "--include",
              tmp_path / "gap.json", "--include", tmp_path / "promote.json")
    assert res.code == 0, res.err
    html = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert f"Offline–online gap: {gap['row']['online_measure']} against ndcg@5" in html
    assert f"Promoted production failures: cohort {promote['cohort']}" in html
    # the offline delta the page shows is the paired delta compare gives for the same runs
    offline = gap["row"]["offline"]
    from ragassay.report import fmt

    assert fmt.num(offline["delta"]) in html.replace("&#43;", "+")
