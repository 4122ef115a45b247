"""``ragassay golden synth``: synthetic questions with verified excerpts, written as an authoring file."""

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
        per_stratum: list[str] = typer.Option(["lexical=150"], "--per-stratum",
                                              help="STRATUM=COUNT, repeatable: lexical and negative."),
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
        remove near-duplicates and flag questions that give their answer away; print every filter's count.
        Build the result with `ragassay golden build OUT --corpus ...`."""
        from ragassay.corpus import bundled_corpus_dir, load_corpus
        from ragassay.errors import InputError
        from ragassay.fsio import check_output_file
        from ragassay.golden.synth import authoring_lines, parse_targets, synthesize, write_authoring
        from ragassay.pipeline.embedders import make_embedder

        problems = [p for p in (
            checks.count("--show-pairs", show_pairs, low=0, high=100),
            checks.count("--seed", seed, low=0),
            None if dedupe_threshold is None else checks.number(
                "--dedupe-threshold", dedupe_threshold, 0, 1, low_open=True, why="a cosine similarity, e.g. 0.9"),
        ) if p]
        try:
            targets = parse_targets(per_stratum)
        except InputError as e:
            problems.append(str(e))
            targets = {}
        if out.suffix != ".jsonl":
            problems.append(f"{out}: --out must end in .jsonl (an authoring file golden build reads)")
        if targets.get("negative") and negatives_from is None:
            problems.append("--per-stratum negative=N needs --negatives-from DIR: documents outside the corpus, "
                            "so that a negative question is verified to have no answer in it")
        checks.refuse(*problems)
        check_output_file(out, "golden synth", overwrite_ok=_is_synth_output)
        t0 = time.perf_counter()
        corp = load_corpus(corpus or bundled_corpus_dir())
        negs = load_corpus(negatives_from) if negatives_from is not None else None
        emb = make_embedder(embedder)
        res = synthesize(corp, n=targets.get("lexical", 0), embed=emb.embed_queries, seed=seed, negatives_from=negs,
                         n_negative=targets.get("negative", 0), threshold=dedupe_threshold, show_pairs=show_pairs)
        if not res.items:
            raise InputError(f"no question survived the filters ({_counts_text(res.counts)}); nothing was written")
        write_authoring(out, authoring_lines(res, dataset=dataset, seed=seed, embedder=getattr(emb, "name", embedder)))
        seconds = time.perf_counter() - t0
        short = {s: n - sum(1 for it in res.items if it.stratum == s) for s, n in targets.items()}
        short = {s: k for s, k in short.items() if k > 0}
        if json_out:
            print_json({"out": str(out), "n": len(res.items), "counts": res.counts, "targets": targets,
                        "short": short, "dedupe_threshold": res.threshold, "dedupe_rule": res.threshold_rule,
                        "pairs": res.pairs, "seconds": round(seconds, 3)})
            return
        console.print(f"wrote {len(res.items)} synthetic questions to {esc(str(out))} in {seconds:.1f} s", highlight=False)
        console.print(f"  filters: {esc(_counts_text(res.counts))}", highlight=False)
        console.print(f"  duplicate threshold {res.threshold:g} ({esc(res.threshold_rule)})", highlight=False)
        for s, k in short.items():
            console.print(f"  [yellow]short[/]: {k} fewer {esc(s)} questions than asked (the sentences or "
                          "negative documents ran out)", highlight=False)
        for p in res.pairs:
            console.print(f"  {p['side']} {p['similarity']:.3f}{' same answer' if p['same_answer'] else ''}: "
                          f"{esc(p['a'])} | {esc(p['b'])}", highlight=False)
        console.print("  a synthetic set is for deltas between configurations, not absolute scores; build it with "
                      f"`ragassay golden build {esc(str(out))}` (docs/labels.md)", highlight=False)


def _counts_text(c: dict) -> str:
    return (f"{c.get('generated', 0)} generated, {c.get('out_of_corpus', 0)} excerpts not in the corpus, "
            f"{c.get('compound', 0)} compound, {c.get('duplicates', 0)} duplicates, "
            f"{c.get('negatives_in_corpus', 0)} negatives found in the corpus, {c.get('surplus', 0)} surplus, "
            f"{c.get('kept', 0)} kept ({c.get('answer_in_question', 0)} flagged answer-in-question)")


def _is_synth_output(path: Path) -> bool:
    import json

    try:
        with path.open(encoding="utf-8") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return False
    gen = first.get("generator") if isinstance(first, dict) else None
    return isinstance(gen, dict) and str(gen.get("kind", "")).startswith("offline-templates")
