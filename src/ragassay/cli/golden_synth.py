"""``ragassay golden synth``: synthetic questions with verified excerpts, written as an authoring file; from
templates (``--generator offline``, the default, no key) or from an LLM (``--generator llm --judge``)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ragassay.cli import checks
from ragassay.cli.common import console, esc, print_json


def register(golden_app: typer.Typer) -> None:
    @golden_app.command("synth")
    def synth(
        out: Path = typer.Option(..., "--out", help="Authoring file to write (.jsonl); new, or an earlier synth "
                                                    "output."),
        corpus: Path = typer.Option(None, "--corpus", help="Corpus folder or JSONL (default: the bundled corpus)."),
        per_stratum: list[str] = typer.Option(None, "--per-stratum",
                                              help="STRATUM=COUNT, repeatable: lexical (offline) or paraphrase "
                                                   "(llm), and negative (default: 150 of the first)."),
        generator: str = typer.Option("offline", "--generator",
                                      help="offline (templates, no model) or llm (a model asked through "
                                           "--judge's provider)."),
        judge_config: Path = typer.Option(None, "--judge", help="For --generator llm: the judge config naming "
                                                                 "provider, model, prices, spend cap."),
        store: Path = typer.Option(None, "--store", help="For --generator llm: DuckDB file caching the calls "
                                                         "(default ragassay.duckdb)."),
        negatives_from: Path = typer.Option(None, "--negatives-from",
                                            help="Documents outside the corpus (folder or JSONL) to draw negative "
                                                 "questions from; needed for negative=N."),
        dedupe_threshold: float = typer.Option(None, "--dedupe-threshold",
                                               help="Cosine similarity at which two questions are duplicates, "
                                                    "in (0, 1] (default: chosen by binary search)."),
        show_pairs: int = typer.Option(0, "--show-pairs", help="Print N question pairs either side of the "
                                                               "duplicate threshold, to inspect it."),
        embedder: str = typer.Option("wordllama", "--embedder", help="wordllama, minilm or a model folder."),
        seed: int = typer.Option(0, "--seed"),
        dataset: str = typer.Option("synthetic", "--dataset", help="Dataset name in the manifest."),
        json_out: bool = typer.Option(False, "--json"),
    ) -> None:
        """Generate questions whose excerpts are verified substrings of the corpus, refuse compound questions,
        remove near-duplicates and flag questions that give their answer away; print every filter's count
        (and, for --generator llm, every call's outcome and the cost line). Build the result with
        `ragassay golden build OUT --corpus ...`."""
        from ragassay.corpus import bundled_corpus_dir, load_corpus
        from ragassay.errors import InputError
        from ragassay.fsio import check_output_file
        from ragassay.golden.synth import (
            GENERATOR_STRATA,
            authoring_lines,
            parse_targets,
            synthesize,
            write_authoring,
        )
        from ragassay.pipeline.embedders import make_embedder

        problems = _generator_problems(generator, judge_config, store)
        problems += [p for p in (
            checks.count("--show-pairs", show_pairs, low=0, high=100),
            checks.count("--seed", seed, low=0),
            None if dedupe_threshold is None else checks.number(
                "--dedupe-threshold", dedupe_threshold, 0, 1, low_open=True, why="a cosine similarity, e.g. 0.9"),
        ) if p]
        targets: dict[str, int] = {}
        if generator in GENERATOR_STRATA:
            try:
                targets = parse_targets(per_stratum or [f"{GENERATOR_STRATA[generator][0]}=150"], generator)
            except InputError as e:
                problems.append(str(e))
        if out.suffix != ".jsonl":
            problems.append(f"{out}: --out must end in .jsonl (an authoring file golden build reads)")
        if targets.get("negative") and negatives_from is None:
            problems.append("--per-stratum negative=N needs --negatives-from DIR: documents outside the corpus, "
                            "so that a negative question is verified to have no answer in it")
        checks.refuse(*problems)
        cfg = None
        if generator == "llm":
            from ragassay.judges.config import load_judge_config
            from ragassay.judges.question_gen import check_config

            cfg = load_judge_config(judge_config)  # a bad config is refused before anything is read or written
            check_config(cfg, str(judge_config))
        check_output_file(out, "golden synth", overwrite_ok=_is_synth_output)
        t0 = time.perf_counter()
        corp = load_corpus(corpus or bundled_corpus_dir())
        negs = load_corpus(negatives_from) if negatives_from is not None else None
        emb = make_embedder(embedder)
        kwargs = {"n": targets.get(GENERATOR_STRATA[generator][0], 0), "embed": emb.embed_queries, "seed": seed,
                  "negatives_from": negs, "n_negative": targets.get("negative", 0), "threshold": dedupe_threshold,
                  "show_pairs": show_pairs}
        llm = None
        if cfg is None:
            res = synthesize(corp, **kwargs)
        else:
            llm = _synthesize_llm(corp, cfg, store or Path("ragassay.duckdb"), kwargs)
            res = llm.result
        if not res.items:
            calls = "" if llm is None else f"; calls: {_calls_text(llm.calls)}"
            raise InputError(f"no question survived the filters ({_counts_text(res.counts)}{calls}); nothing was "
                             "written")
        write_authoring(out, authoring_lines(res, dataset=dataset, seed=seed, embedder=getattr(emb, "name", embedder),
                                             pins=None if llm is None else llm.pins))
        seconds = time.perf_counter() - t0
        short = {s: n - sum(1 for it in res.items if it.stratum == s) for s, n in targets.items()}
        short = {s: k for s, k in short.items() if k > 0}
        if json_out:
            extra = {} if llm is None else {"generator": llm.pins, "calls": llm.calls, "cost": llm.cost.to_dict()}
            print_json({"out": str(out), "n": len(res.items), "counts": res.counts, "targets": targets,
                        "short": short, "dedupe_threshold": res.threshold, "dedupe_rule": res.threshold_rule,
                        "pairs": res.pairs, "seconds": round(seconds, 3), **extra})
            return
        console.print(f"wrote {len(res.items)} synthetic questions to {esc(str(out))} in {seconds:.1f} s", highlight=False)
        if llm is not None:
            console.print(f"  generator: llm {esc(llm.pins['model'])} (prompt sha {llm.pins['prompt_sha'][:12]}), "
                          f"{llm.result.counts['asked']} passages asked: {esc(_calls_text(llm.calls))}",
                          highlight=False)
            console.print(f"  {esc(llm.cost.text())}", highlight=False)
        console.print(f"  filters: {esc(_counts_text(res.counts))}", highlight=False)
        console.print(f"  duplicate threshold {res.threshold:g} ({esc(res.threshold_rule)})", highlight=False)
        why = "the sentences or negative documents ran out" if llm is None else \
            "the passages, their calls or the negative documents gave too few that pass the filters"
        for s, k in short.items():
            console.print(f"  [yellow]short[/]: {k} fewer {esc(s)} questions than asked ({why})", highlight=False)
        for p in res.pairs:
            console.print(f"  {p['side']} {p['similarity']:.3f}{' same answer' if p['same_answer'] else ''}: "
                          f"{esc(p['a'])} | {esc(p['b'])}", highlight=False)
        console.print("  a synthetic set is for deltas between configurations, not absolute scores; build it with "
                      f"`ragassay golden build {esc(str(out))}` (docs/labels.md)", highlight=False)


def _generator_problems(generator: str, judge_config: Path | None, store: Path | None) -> list[str]:
    if generator not in ("offline", "llm"):
        return [f"--generator {generator!r}: pick offline (templates, no model) or llm (a model named by --judge)"]
    if generator == "llm":
        return [] if judge_config is not None else [
            "--generator llm needs --judge JUDGE.yaml: the provider, model, prices and spend cap to ask with "
            "(docs/labels.md)"]
    return [f"{flag} is for --generator llm; the offline generator makes no calls (drop {flag}, or add "
            "--generator llm)" for flag, given in (("--judge", judge_config), ("--store", store)) if given is not None]


def _synthesize_llm(corp, cfg, store_path: Path, kwargs: dict):
    from ragassay.judges.config import build_judge
    from ragassay.judges.question_gen import synthesize_llm
    from ragassay.store import Store

    client = build_judge(cfg)  # a missing API key is refused before the store is created
    with Store.open(store_path) as st:
        client.store = st
        return synthesize_llm(corp, client, cfg, **kwargs)


def _calls_text(calls: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in calls.items() if v) or "none"


def _counts_text(c: dict) -> str:
    # blank questions from the model never reach `generated`; said so, or the counts would not add up
    blank = f"{c['blank_questions']} blank questions dropped, " if c.get("blank_questions") else ""
    return (f"{blank}{c.get('generated', 0)} generated, {c.get('out_of_corpus', 0)} excerpts not in the corpus, "
            f"{c.get('compound', 0)} compound, {c.get('duplicates', 0)} duplicates, "
            f"{c.get('negatives_in_corpus', 0)} negatives found in the corpus, {c.get('surplus', 0)} surplus, "
            f"{c.get('kept', 0)} kept ({c.get('answer_in_question', 0)} flagged answer-in-question)")


def _is_synth_output(path: Path) -> bool:
    import json

    from ragassay.cli.golden_pool import MERGED_KEY

    try:
        with path.open(encoding="utf-8") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    gen = first.get("generator") if isinstance(first, dict) else None
    if not isinstance(gen, dict) or MERGED_KEY in gen:
        # a merge-labels output keeps synth's generator but holds people's labels: never regenerated over
        return False
    kind = str(gen.get("kind", ""))
    return kind.startswith("offline-templates") or (
        kind == "llm" and str(first.get("description", "")).startswith("Synthetic questions (ragassay golden synth)"))
