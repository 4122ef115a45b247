"""``ragassay golden pool`` (the unjudged top-k units of several runs, and a labelling page for them) and
``ragassay golden merge-labels`` (the labels back into the authoring file as span evidence).

:func:`register` adds both to the ``golden`` group; the store, numpy and the corpus loader are imported only
when a command runs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer

from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError

MERGE_KIND = "golden merge-labels"
# The key in the authoring meta's `generator` that records each merge; it also marks a file this command wrote.
MERGED_KEY = "merged_labels"


def _fmt(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def pool(
    runs: list[str] = typer.Argument(..., help="Runs to pool (id, unique id prefix or name)."),
    store: Path = typer.Option(Path("ragassay.duckdb"), "--store", help="DuckDB results file."),
    golden: Path = typer.Option(..., "--golden", help="The built golden set the runs were scored on."),
    corpus: Path = typer.Option(..., "--corpus", help="The corpus the set was built on (folder or JSONL)."),
    k: int = typer.Option(10, "--k", help="Depth of each run's final list to pool."),
    out: Path = typer.Option(..., "--out", help="Queue folder to write (new, empty, or an earlier queue)."),
    json_out: bool = typer.Option(False, "--json", help="Print the pool's meta as JSON."),
) -> None:
    """Union of the runs' top-k units per query minus those already judged (a unit overlapping any labelled
    span of its query, grade 0 included); writes queue.jsonl, pool.json and label.html into --out."""
    from ragassay.analysis.pool import pool_runs, write_queue
    from ragassay.cli import checks
    from ragassay.corpus import load_corpus
    from ragassay.fsio import check_output_dir
    from ragassay.golden import load_golden
    from ragassay.golden.pool import OUTPUT_KIND, PAGE_FILE
    from ragassay.store import Store

    checks.refuse(checks.count("--k", k, low=1))
    check_output_dir(out, OUTPUT_KIND)
    if not store.is_file():
        raise InputError(f"{store}: no results store here; pass --store with the runs' DuckDB file")
    gs = load_golden(golden)
    corp = load_corpus(corpus)
    with Store.open(store, read_only=True) as st:
        result, run_info = pool_runs(st, runs, gs, corp, k)
    meta = write_queue(out, result, run_info, gs)
    if json_out:
        print_json({**meta, "out": str(out)})
        return
    c = meta["counts"]
    names = ", ".join(r["name"] for r in run_info)
    console.print(f"pooled {len(run_info)} run(s) ({esc(names)}) at k={k} on {esc(gs.dataset_version)}: "
                  f"{c['slots']} top-{k} units, {c['distinct']} distinct, {c['judged']} already judged, "
                  f"[bold]{c['queued']} to label[/] in {len({it.query_id for it in result.items})} queries",
                  highlight=False)
    left = [f"{c[key]} {what}" for key, what in (
        ("invalid", "failed the corpus check"), ("blank", "blank units"),
        ("negative_lists", "lists of negative queries (not pooled)"),
        ("unknown_lists", "lists of queries not in the set")) if c[key]]
    left += [f"{r['skipped_lines']} malformed trace lines of {esc(r['name'])}" for r in run_info if r["skipped_lines"]]
    if left:
        console.print("left out: " + "; ".join(left), highlight=False)
    console.print(f"open {esc(out / PAGE_FILE)} to label; then `ragassay golden merge-labels AUTHORING "
                  f"labels.jsonl --queue {esc(out)} --corpus {esc(corpus)} --out NEW.jsonl`", highlight=False)


def _is_merge_output(path: Path) -> bool:
    from ragassay.golden.builder import read_authoring

    try:
        meta, _ = read_authoring(path)
    except (InputError, OSError, ValueError):  # a file it cannot read as an authoring file is not one it wrote
        return False
    return MERGED_KEY in (meta.get("generator") or {})


def _dump(out: Path, meta: dict, queries: list[dict]) -> str:
    import json

    import yaml

    if out.suffix == ".jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [{"type": "meta", **meta}, *queries])
    return yaml.safe_dump({**meta, "queries": queries}, sort_keys=False, allow_unicode=True)


def merge_labels(
    authoring: Path = typer.Argument(..., help="The authoring file (.yaml/.yml or .jsonl) the queue's set was "
                                               "built from."),
    labels: Path = typer.Argument(..., help="labels.jsonl saved by the labelling page (or written by hand)."),
    queue: Path = typer.Option(..., "--queue", help="The queue folder `golden pool --out` (or `online promote "
                                                    "--out`) wrote."),
    corpus: Path = typer.Option(..., "--corpus", help="The corpus the set was built on."),
    out: Path = typer.Option(..., "--out", help="New authoring file (.jsonl, .yaml or .yml)."),
    store: Path = typer.Option(None, "--store", help="With it: judged fraction@k of the runs before and after."),
    runs: list[str] = typer.Option(None, "--runs", help="Runs for the judged fraction (default: the pooled runs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the merge as JSON."),
) -> None:
    """Add each label as span evidence (the unit's text as the quote, with its occurrence when the text
    repeats) to its query; write a new authoring file that `golden build` turns into a new dataset version.
    With a promote queue the labelled production questions join the file as new queries (from the queue's
    queries.jsonl stubs); a question whose every graded passage is 0 is left out and counted."""
    from ragassay.corpus import load_corpus
    from ragassay.fsio import atomic_write_text, check_output_file
    from ragassay.golden import build_golden, read_authoring
    from ragassay.golden.pool import merge_into, merge_promoted, new_judgements, read_labels, read_queue
    from ragassay.golden.schema import AuthoredMeta, AuthoredQuery

    if out.suffix not in (".jsonl", ".yaml", ".yml"):
        raise InputError(f"{out}: --out must end in .jsonl, .yaml or .yml (an authoring file golden build reads)")
    if out.exists() and authoring.exists() and os.path.samefile(out, authoring):
        raise InputError(f"{out}: is the authoring file being merged into; write the merge to a new file")
    if runs and store is None:
        raise InputError("--runs needs --store: the judged fraction is read from the runs' traces")
    check_output_file(out, MERGE_KIND, overwrite_ok=_is_merge_output)
    q = read_queue(queue)
    if q.promoted and store is not None:
        raise InputError(f"--store: {queue} is a promote queue; its questions are new, so no stored run's judged "
                         "fraction moves with it; drop --store (measure the new questions with `ragassay analyze "
                         "slices A B --golden G --by tag:cohort:NAME` once runs are scored on the new set)")
    meta, items = read_authoring(authoring)
    ids = {it.data.get("query_id") for it in items if isinstance(it.data, dict)}
    stub_ids = {s.get("query_id") for _, s in q.stubs or [] if isinstance(s, dict)}
    got = read_labels(labels, q, stub_ids if q.promoted else ids, allow_empty=q.promoted)
    corp = load_corpus(corpus)
    if q.promoted and q.meta.get("corpus_digest") not in (None, corp.digest):
        raise InputError(f"the queue {queue} was promoted with the corpus {str(q.meta['corpus_digest'])[:19]}…, not "
                         f"{corpus} ({corp.digest[:19]}…); pass the corpus its unit ids point into")
    before = build_golden(authoring, corp)
    if not q.promoted and before.dataset_version != q.meta.get("dataset_version"):
        raise InputError(f"{authoring} builds golden version {before.dataset_version}, but the queue {queue} was "
                         f"pooled on {q.meta.get('dataset_version')}; merge into the authoring file that set was "
                         "built from, or pool again")
    queries = [AuthoredQuery.model_validate(it.data).model_dump(mode="json", exclude_defaults=True) for it in items]
    texts = {d: corp[d].text for d in {lab.doc_id for lab in got}}
    promoted = None
    if q.promoted:
        promoted = merge_promoted(q, got, texts, ids, labels)
        if not promoted.queries:
            raise InputError(
                f"no promoted question of {queue} has evidence graded 1 or more, so nothing would be added "
                f"({len(promoted.all_zero)} with every graded passage 0, {len(promoted.not_graded)} not graded, "
                f"{len(promoted.question_only)} question-only, {len(promoted.already_in_set)} already in "
                f"{authoring}); grade passages on the page, or quote evidence by hand in the queue's queries.jsonl")
        merged, got = queries + promoted.queries, promoted.labels
        record = {"labels": labels.name, "n": len(got), "promoted": q.meta.get("cohort"),
                  "added": len(promoted.queries), "queue_sha256": q.meta.get("queue_sha256")}
    else:
        merged = merge_into(queries, got, texts)
        record = {"labels": labels.name, "n": len(got), "pooled_on": q.meta.get("dataset_version"),
                  "k": q.meta.get("k"), "runs": [r.get("name") for r in q.meta.get("runs", [])]}
    new_meta = AuthoredMeta.model_validate(meta).model_dump(mode="json", exclude_defaults=True)
    # the name is kept: without it the manifest would name the set after the new file
    new_meta["dataset"] = before.manifest["dataset"]
    generator = dict(new_meta.get("generator") or {"kind": "human"})
    generator[MERGED_KEY] = [*generator.get(MERGED_KEY, []), record]
    new_meta["generator"] = generator
    text = _dump(out, new_meta, merged)
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.is_dir() else None) as tmp:
        # built before it is written: a merge that would not build leaves no file behind
        trial = Path(tmp) / out.name
        trial.write_text(text, encoding="utf-8")
        after = build_golden(trial, corp)
    atomic_write_text(out, text)
    strata = {x.query_id: x.stratum for x in after.queries}
    report = {"out": str(out), "old_version": before.dataset_version, "new_version": after.dataset_version,
              "judgements": new_judgements(got, strata)}
    if promoted is not None:
        report["promoted"] = {
            "cohort": q.meta.get("cohort"), "stubs": len(q.stubs or []), "added": promoted.added,
            "all_zero": promoted.all_zero, "not_graded": promoted.not_graded,
            "question_only": promoted.question_only, "already_in_set": promoted.already_in_set,
            "left_out_labels": promoted.left_out_labels}
    if store is not None:
        from ragassay.analysis.pool import runs_judged_fraction
        from ragassay.store import Store

        if not store.is_file():
            raise InputError(f"{store}: no results store here; pass --store with the runs' DuckDB file")
        refs = runs or [r["run_id"] for r in q.meta.get("runs", [])]
        with Store.open(store, read_only=True) as st:
            report["judged_fraction"] = {"k": q.meta["k"], "runs": runs_judged_fraction(
                st, refs, before, after, corp, q.meta["k"])}
    if json_out:
        print_json(report)
        return
    j = report["judgements"]
    console.print(f"merged {j['n']} label(s) into {esc(out)}: {esc(before.dataset_version)} -> "
                  f"[bold]{esc(after.dataset_version)}[/] (build it with `ragassay golden build {esc(out)} "
                  f"--corpus {esc(corpus)} --out DIR`)", highlight=False)
    console.print("per grade: " + ", ".join(f"{g}: {n}" for g, n in j["per_grade"].items()), highlight=False)
    console.print("per stratum: " + ", ".join(f"{esc(s)} {n}" for s, n in j["per_stratum"].items()),
                  highlight=False)
    console.print(f"{len(j['per_query'])} queries gained labels: " + ", ".join(
        f"{esc(qid)} {n}" for qid, n in list(j["per_query"].items())[:10])
        + (", ..." if len(j["per_query"]) > 10 else ""), highlight=False)
    if promoted is not None:
        _print_promoted(report["promoted"], queue)
    for r in report.get("judged_fraction", {}).get("runs", []):
        undef = f" ({r['n_undefined']} empty lists undefined)" if r["n_undefined"] else ""
        console.print(f"judged fraction@{report['judged_fraction']['k']} {esc(r['name'])}: {_fmt(r['before'])} -> "
                      f"{_fmt(r['after'])}{undef}", highlight=False)


def _ids(ids: list[str], most: int = 10) -> str:
    return ", ".join(esc(i) for i in ids[:most]) + (", ..." if len(ids) > most else "")


def _print_promoted(p: dict, queue: Path) -> None:
    """The fate of every promoted question: added, or left out with the reason and what to do."""
    from ragassay.golden.pool import STUBS_FILE

    cohort = esc(p["cohort"])
    console.print(f"promoted questions (cohort {cohort}): {len(p['added'])} of {p['stubs']} added as new queries"
                  + (f" ({_ids(p['added'])})" if p["added"] else ""), highlight=False)
    stubs = esc(queue / STUBS_FILE)
    if p["all_zero"]:
        console.print(f"left out, every graded passage 0 ({p['left_out_labels']} label(s) not merged): "
                      f"{len(p['all_zero'])} ({_ids(p['all_zero'])}); quote their evidence by hand in {stubs}, or "
                      "set answerable: false there if the corpus holds no answer, and merge again into the same "
                      "authoring file", highlight=False)
    if p["not_graded"]:
        console.print(f"left out, no passage graded: {len(p['not_graded'])} ({_ids(p['not_graded'])})",
                      highlight=False)
    if p["question_only"]:
        console.print(f"left out, question-only (no passage to grade, no evidence quoted in {stubs}): "
                      f"{len(p['question_only'])} ({_ids(p['question_only'])})", highlight=False)
    if p["already_in_set"]:
        console.print(f"left out, already in the authoring file: {len(p['already_in_set'])} "
                      f"({_ids(p['already_in_set'])})", highlight=False)
    if p["added"]:
        console.print(f"the new queries carry the tags source:production and cohort:{cohort}: measure them apart "
                      f"with `ragassay analyze slices A B --golden G --by tag:cohort:{cohort}` (or --by source)",
                      highlight=False)


def register(golden_app: typer.Typer) -> None:
    """Add ``pool`` and ``merge-labels`` to the ``golden`` group (once, however often it is called)."""
    have = {c.name for c in golden_app.registered_commands}
    if "pool" not in have:
        golden_app.command("pool")(pool)
    if "merge-labels" not in have:
        golden_app.command("merge-labels")(merge_labels)
