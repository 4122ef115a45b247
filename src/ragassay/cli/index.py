"""`ragassay embed-check` and `ragassay index-eval`: embedding diagnostics and ANN index evaluation.

Both default to the reference pipeline's dense branch on the bundled corpus and golden set (recursive
128-token chunks, WordLlama static embeddings); ``index-eval --synthetic N`` or ``--vectors FILE.npy``
evaluates other vectors (without the golden retrieval column, which needs labels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ragassay.cli.common import console, esc, print_json
from ragassay.errors import InputError


@dataclass
class DenseBranch:
    """The dense branch of a reference pipeline built on a corpus: its chunks, passage vectors, the
    golden questions' vectors and the embedder that made them."""

    pipeline: Any
    golden: Any
    passages: np.ndarray
    queries: np.ndarray
    query_ids: list[str]

    @property
    def chunks(self):
        return self.pipeline.chunks

    @property
    def embedder(self):
        return self.pipeline._embedder


def dense_branch(corpus_path: Path | None = None, golden_path: Path | None = None, *, embedder: str = "wordllama",
                 chunk_size: int = 128, overlap: int = 0, query_prefix: str = "",
                 passage_prefix: str = "") -> DenseBranch:
    """Build a dense-only reference pipeline (exact search, no BM25, no reranker) and embed the golden
    questions with it, exactly as a run's dense branch would."""
    from ragassay.analysis.runner import load_inputs
    from ragassay.pipeline.run import Pipeline

    corpus, golden = load_inputs(corpus_path, golden_path)
    cfg = {"name": "dense-branch", "chunker": {"kind": "recursive", "size": chunk_size, "overlap": overlap},
           "bm25": {"enabled": False},
           "dense": {"enabled": True, "embedder": embedder, "index": "exact", "depth": 50,
                     "query_prefix": query_prefix, "passage_prefix": passage_prefix},
           "reranker": {"kind": "none", "final_k": 10}}
    pipe = Pipeline.from_config(cfg, corpus)
    qids = golden.query_ids
    emb = pipe._embedder
    queries = emb.embed_queries([query_prefix + golden[q].question for q in qids])
    return DenseBranch(pipe, golden, pipe.dense_index.vectors, np.asarray(queries, dtype=np.float32), list(qids))


def golden_recall_fn(branch: DenseBranch, k: int = 10):
    """``f(index, config) -> mean retrieval recall@k`` of the golden set when the dense branch searches
    through ``index`` (the mean over queries with relevant evidence)."""
    from ragassay.golden.labels import span_recall_at_k

    chunks = branch.chunks
    docs, starts, ends = [c.doc_id for c in chunks], [c.start for c in chunks], [c.end for c in chunks]

    def recall(index, cfg) -> float:
        ids = index.search(branch.queries, k, knob=cfg.knob)
        r = span_recall_at_k(ids, branch.query_ids, docs, starts, ends, branch.golden, k)
        return float(np.nanmean(r))

    return recall


def embed_check(branch: DenseBranch, *, drift_against: str | None = None, probe_size: int = 100,
                dup_threshold: float = 0.99, n_resamples: int = 10_000, seed: int = 0) -> dict:
    """Every embedding diagnostic on a dense branch; the positive of a question is the text of its
    highest-grade relevant evidence span (grade >= 2), embedded as a passage."""
    from ragassay.metrics.embeddings import (
        drift_probe,
        duplicate_collapse,
        similarity_gap,
        top1_similarity,
        truncation_rate,
    )

    emb, pipe = branch.embedder, branch.pipeline
    prefix = pipe.cfg.dense.passage_prefix
    rows, pos_texts = [], []
    for i, qid in enumerate(branch.query_ids):
        q = branch.golden[qid]
        rel = sorted((e for e in q.evidence if e.grade >= 2), key=lambda e: -e.grade)
        if rel:
            e = rel[0]
            rows.append(i)
            pos_texts.append(prefix + branch.pipeline.corpus.docs[e.doc_id].text[e.start : e.end])
    out: dict = {"embedder": emb.name, "n_chunks": len(branch.chunks), "n_queries": len(branch.query_ids)}
    if rows:
        out["gap"] = similarity_gap(branch.queries[rows], emb.embed_passages(pos_texts), branch.passages,
                                    n_resamples=n_resamples, seed=seed)
    out["top1"] = top1_similarity(branch.queries, branch.passages)
    out["duplicates"] = duplicate_collapse(branch.passages, threshold=dup_threshold)
    lens = emb.token_lengths([prefix + c.text for c in branch.chunks])
    out["truncation"] = truncation_rate(lens, int(emb.max_tokens))
    if drift_against:
        from ragassay.pipeline.embedders import make_embedder

        other = make_embedder(drift_against)
        n = len(branch.chunks)
        probe = np.random.default_rng(seed).choice(n, size=min(probe_size, n), replace=False)
        texts = [prefix + branch.chunks[i].text for i in np.sort(probe)]
        out["drift"] = {"before": emb.name, "after": other.name,
                        **drift_probe(emb.embed_passages(texts), other.embed_passages(texts))}
    return out


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated integers like 16,32,64, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{flag}: need positive integers, got {text!r}")
    return vals


def _floats(text: str, flag: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated numbers like 0.001,0.01,0.1, got {text!r}") from None
    if not vals or not all(0 < v <= 1 for v in vals):
        raise InputError(f"{flag}: every selectivity must be in (0, 1], got {text!r}")
    return vals


def _load_npy(path: Path, flag: str) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"{path}: file not found; {flag} takes a .npy file of float vectors (rows x dims)")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a readable .npy array ({e}); save vectors with numpy.save") from None
    from ragassay.metrics.ann import as_vectors

    return as_vectors(arr, str(path))


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "undefined"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def embed_check_command(
    corpus: Annotated[Path | None, typer.Option("--corpus", help="Corpus folder or JSONL (default: bundled).")] = None,
    golden: Annotated[Path | None, typer.Option("--golden", help="Golden set (default: bundled).")] = None,
    embedder: Annotated[str, typer.Option("--embedder", help="wordllama, minilm or a local model folder.")] = "wordllama",
    chunk_size: Annotated[int, typer.Option("--chunk-size", min=1, help="Recursive chunk size in tokens.")] = 128,
    drift_against: Annotated[str | None, typer.Option(
        "--drift-against", help="A second embedder (another version): run the drift probe against it.")] = None,
    probe_size: Annotated[int, typer.Option("--probe-size", min=3, help="Chunks in the drift probe set.")] = 100,
    dup_threshold: Annotated[float, typer.Option("--dup-threshold", help="Cosine above which two chunks are "
                                                                          "near-duplicates.")] = 0.99,
    n_resamples: Annotated[int, typer.Option("--resamples", min=100, help="Bootstrap resamples for the gap CI.")
                           ] = 10_000,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Embedding diagnostics on the dense branch: similarity gap (with CI), top-1 similarity distribution,
    near-duplicate collapse, truncation rate, and optionally a drift probe against a second embedder."""
    if not -1 <= dup_threshold < 1:
        raise InputError(f"--dup-threshold must be in [-1, 1), got {dup_threshold}")
    branch = dense_branch(corpus, golden, embedder=embedder, chunk_size=chunk_size)
    out = embed_check(branch, drift_against=drift_against, probe_size=probe_size, dup_threshold=dup_threshold,
                      n_resamples=n_resamples)
    if as_json:
        print_json(out)
        return
    console.print(f"[bold]{esc(out['embedder'])}[/bold]: {out['n_chunks']} chunks, {out['n_queries']} questions")
    g = out.get("gap")
    if g:
        console.print(f"similarity gap {_fmt(g['gap'])} [{_fmt(g['ci_low'])}, {_fmt(g['ci_high'])}] "
                      f"(positive {_fmt(g['mean_positive'])} vs random {_fmt(g['mean_random'])}, n={g['n']})")
    t = out["top1"]
    console.print(f"top-1 cosine p5/p50/p95 {_fmt(t['p5'])} / {_fmt(t['p50'])} / {_fmt(t['p95'])} "
                  f"(spread {_fmt(t['spread'])})")
    d = out["duplicates"]
    console.print(f"near-duplicates (cos > {d['threshold']}): {_fmt(d['collapse_rate'])} of chunks, "
                  f"{_fmt(d['removable_rate'])} removable, {d['n_groups']} groups")
    tr = out["truncation"]
    console.print(f"truncation at {tr['max_tokens']} tokens: {tr['truncated']} of {tr['n']} chunks "
                  f"({_fmt(tr['rate'])})")
    if "drift" in out:
        dr = out["drift"]
        console.print(f"drift {esc(dr['before'])} -> {esc(dr['after'])} on {dr['n']} probes: Spearman "
                      f"{_fmt(dr['spearman'])}, Kendall {_fmt(dr['kendall'])}, overlap@{dr['k']} "
                      f"{_fmt(dr['overlap_at_k'])}, self-cosine "
                      + ("n/a (different dimensions)" if dr["self_cosine"] is None else _fmt(dr["self_cosine"])))


def index_eval_command(
    synthetic: Annotated[int | None, typer.Option(
        "--synthetic", min=100, help="Evaluate N synthetic clustered vectors instead of the corpus.")] = None,
    dim: Annotated[int, typer.Option("--dim", min=2, help="Dimension of --synthetic vectors.")] = 64,
    vectors: Annotated[Path | None, typer.Option("--vectors", help="A .npy file of base vectors.")] = None,
    queries: Annotated[Path | None, typer.Option(
        "--queries", help="A .npy file of query vectors (with --vectors; default: 500 base rows).")] = None,
    corpus: Annotated[Path | None, typer.Option("--corpus", help="Corpus (default: bundled).")] = None,
    golden: Annotated[Path | None, typer.Option("--golden", help="Golden set (default: bundled).")] = None,
    embedder: Annotated[str, typer.Option("--embedder", help="Embedder of the corpus mode.")] = "wordllama",
    kind: Annotated[str, typer.Option("--kind", help="Index for the curve: hnsw or ivf.")] = "hnsw",
    values: Annotated[str, typer.Option("--values", help="efSearch (hnsw) or nprobe (ivf) values.")
                      ] = "8,16,32,48,64,96,128,256",
    k: Annotated[int, typer.Option("--k", min=1, help="Neighbours per query (ANN recall@k).")] = 10,
    target: Annotated[float, typer.Option("--target", help="ANN recall to tune the knob to.")] = 0.99,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Client threads for latency, e.g. 1,4.")] = "1,4",
    selectivity: Annotated[str, typer.Option("--selectivity", help="Filter selectivities.")] = "0.001,0.01,0.1",
    no_pareto: Annotated[bool, typer.Option("--no-pareto", help="Skip the quantization Pareto table.")] = False,
    n_queries: Annotated[int, typer.Option("--n-queries", min=1, help="Synthetic/held-out queries.")] = 500,
    seed: Annotated[int, typer.Option("--seed", help="Seed for data, filters and churn.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """ANN index report card: recall@k vs efSearch/nprobe, latency p50/p95/p99, build time and memory, bytes
    per vector, filtered recall (pre vs post), recall after churn, and the quantization Pareto table (with
    the golden set's retrieval recall@10 in corpus mode)."""
    from ragassay.metrics import ann

    if kind not in ("hnsw", "ivf"):
        raise InputError(f"--kind must be hnsw or ivf (the indexes with a search knob), got {kind!r}")
    if sum(x is not None for x in (synthetic, vectors)) > 1:
        raise InputError("give at most one of --synthetic N and --vectors FILE")
    if queries is not None and vectors is None:
        raise InputError("--queries needs --vectors (the base the queries search)")
    if not 0 < target <= 1:
        raise InputError(f"--target must be in (0, 1], got {target}")
    knob_values = _ints(values, "--values")
    conc = _ints(concurrency, "--concurrency")
    sels = _floats(selectivity, "--selectivity")
    recall_fn = None
    if synthetic is not None:
        base, qv = ann.clustered_vectors(synthetic, dim, n_queries=n_queries, seed=seed)
        source = f"synthetic clustered vectors (n={synthetic}, dim={dim})"
    elif vectors is not None:
        base = _load_npy(vectors, "--vectors")
        if queries is not None:
            qv = _load_npy(queries, "--queries")
        else:
            rows = np.random.default_rng(seed).choice(len(base), size=min(n_queries, len(base)), replace=False)
            qv = base[np.sort(rows)]
        source = str(vectors)
    else:
        branch = dense_branch(corpus, golden, embedder=embedder)
        base, qv = branch.passages, branch.queries
        recall_fn = golden_recall_fn(branch)
        source = f"dense branch ({branch.embedder.name}) over {len(base)} chunks, {len(qv)} golden questions"
    knob_params = {"m": 32, "ef_construction": 64} if kind == "hnsw" else {}
    truth = ann.exact_topk(base, qv, k)
    index, cost = ann.build_with_cost(kind, base, **knob_params)
    curve = ann.ann_curve(index, base, qv, k, knob_values, truth=truth)
    best = ann.knob_for_target(curve, target)
    op = best if best is not None else max(knob_values)
    out: dict = {"source": source, "n": int(base.shape[0]), "dim": int(base.shape[1]), "k": truth.k,
                 "target": target, "knob_for_target": best, "operating_knob": op, "build": cost.to_dict(),
                 "curve": curve}
    out["latency"] = [ann.latency_percentiles(index, qv, k, knob=op, concurrency=c) for c in conc]
    out["filtered"] = ann.filtered_recall(index, base, qv, k, selectivities=sels, knob=op, seed=seed)
    out["churn"] = ann.churn_recall(kind, base, qv, k, knob=op, seed=seed, **knob_params)
    if not no_pareto:
        configs = [ann.IndexConfig(c.name, c.kind, op if c.kind == kind else c.knob, c.params)
                   for c in ann.DEFAULT_PARETO]
        out["pareto"] = ann.pareto_table(base, qv, k=max(k, 50) if base.shape[0] > 50 else k, configs=configs,
                                         retrieval_recall=recall_fn)
    if as_json:
        print_json(out)
        return
    _print_index(out)


def _print_index(out: dict) -> None:
    from rich.table import Table

    c = out["curve"]
    console.print(f"[bold]{esc(out['source'])}[/bold]: k={out['k']}, build {_fmt(out['build']['build_s'], 2)} s, "
                  f"{_fmt(out['build']['bytes_per_vector'], 1)} bytes/vector")
    console.print("ANN recall@{k} by {knob}: ".format(k=out["k"], knob=c["knob"]) + ", ".join(
        f"{p['value']}: {_fmt(p['recall'])}" for p in c["points"]))
    if out["knob_for_target"] is None:
        console.print(f"no {c['knob']} value reached recall {out['target']}; measured the rest at "
                      f"{out['operating_knob']}")
    else:
        console.print(f"{c['knob']} = {out['knob_for_target']} reaches recall {out['target']}")
    for lat in out["latency"]:
        console.print(f"latency at concurrency {lat['concurrency']}: p50 {_fmt(lat['p50_ms'])} ms, "
                      f"p95 {_fmt(lat['p95_ms'])} ms, p99 {_fmt(lat['p99_ms'])} ms")
    console.print("filtered recall (pre / post): " + ", ".join(
        f"{s:g}: {_fmt(pre['recall'])} / {_fmt(post['recall'])}"
        for s, pre, post in ((f["selectivity"], f, g) for f, g in zip(out["filtered"][::2], out["filtered"][1::2],
                                                                     strict=True))))
    ch = out["churn"]
    console.print(f"after churn ({ch['deleted']} deleted by {ch['delete_mode']}, {ch['inserted']} inserted): "
                  f"recall {_fmt(ch['recall_after_churn'])} vs fresh build {_fmt(ch['recall_fresh_build'])}")
    if "pareto" in out:
        p = out["pareto"]
        t = Table(title="quantization Pareto table (* = Pareto-optimal)")
        for col in ("config", f"ANN recall@{p['k']}", "retrieval recall@10", "bytes/vector", "p95 ms"):
            t.add_column(col)
        for r in p["rows"]:
            t.add_row(("* " if r["pareto"] else "  ") + esc(r["config"]), _fmt(r[f"ann_recall@{p['k']}"]),
                      _fmt(r["retrieval_recall@10"]), _fmt(r["bytes_per_vector"], 1), _fmt(r["p95_ms"]))
        console.print(t)


def register(app: typer.Typer) -> None:
    """Add `embed-check` and `index-eval` to the ragassay application."""
    app.command("embed-check")(embed_check_command)
    app.command("index-eval")(index_eval_command)
