"""Benchmark: `ragassay report` for two runs at scale, whole process, side by side at each size.

For each size (default 10,000 and 100,000 queries) it builds a synthetic but complete input: a corpus of
plain-text documents, a golden set built from verbatim quotes (``ragassay.golden.build_golden``), two runs
of result rows written straight into a Store (15 metrics per query, strata, latency) and a trace file per
run (10 fused units, 5 reranked, 3 packed, an answer). No pipeline runs. It then runs ``ragassay report``
as a subprocess and records wall time, peak RSS of that process (``resource.getrusage(RUSAGE_CHILDREN)``
after it alone has run), the bytes of ``index.html`` and of ``queries.parquet``. When headless Chromium is
installed it also opens the page and measures load time (navigation start to the table being ready) and
the time one column sort takes, with the probe the browser test uses.

Targets (issue 18): at 100,000 queries <= 30 MB HTML, <= 15 s, <= 1.5 GB peak; load <= 3 s, sort <= 300 ms.

Usage: python benchmarks/report_scale.py [N_QUERIES ...] [--resamples R] [--repeat K] [--keep DIR]

``--repeat K`` runs the report K times on the same inputs (the machine is shared: one figure is noise); each
row shows the 1-minute load average before and after its run. ``--keep DIR`` is created when missing.

``--tiny`` reports 200 queries with 200 resamples, once: a smoke run for CI (tests/test_benchmarks_run.py),
whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STRATA = ("lexical", "paraphrase", "multi_hop", "long_tail", "tabular", "negative")
METRICS = ("recall@bm25_depth", "recall@dense_depth", "recall@fusion_depth", "recall@final_k", "ndcg@final_k",
           "rr@final_k", "recall@context", "context_tokens", "answer_f1", "answer_em", "refused", "error",
           "citation_validity", "abstention_recall", "over_refusal")
WORDS = ("license", "notice", "copyright", "warranty", "software", "permission", "granted", "holder",
         "distribution", "source", "binary", "modification", "condition", "liability", "damages", "contract",
         "party", "agreement", "term", "clause", "patent", "trademark", "derivative", "work", "attribution")
N_DOCS = 400
DOC_CHARS = 3_000
CHUNK = 500


def _doc_text(rng, i: int) -> str:
    words = rng.choice(WORDS, size=DOC_CHARS // 6)
    # a per-document token makes every 60-character quote unique across the corpus
    text = " ".join(f"{w}{i}x{j}" if j % 7 == 0 else w for j, w in enumerate(words))
    return text[:DOC_CHARS]


def build_inputs(root: Path, n_queries: int, seed: int = 0) -> dict:
    """Corpus, built golden set, store with two finished runs, and their traces under ``root``."""
    from ragassay.corpus import load_corpus
    from ragassay.golden.builder import build_golden
    from ragassay.store import RunRecord, Store
    from ragassay.trace.schema import RunHeader, config_sha

    rng = np.random.default_rng(seed)
    corpus_dir = root / "corpus"
    corpus_dir.mkdir(parents=True)
    texts = [_doc_text(rng, i) for i in range(N_DOCS)]
    for i, t in enumerate(texts):
        (corpus_dir / f"doc{i:04d}.txt").write_text(t, encoding="utf-8")
    corpus = load_corpus(corpus_dir)
    texts = [corpus[f"doc{i:04d}"].text for i in range(N_DOCS)]

    qdocs = rng.integers(0, N_DOCS, n_queries)
    qstarts = rng.integers(0, DOC_CHARS - 200, n_queries)
    strata = np.asarray(STRATA)[np.arange(n_queries) % len(STRATA)]
    src = root / "golden.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "meta", "dataset": "scale"}) + "\n")
        for q in range(n_queries):
            item = {"query_id": f"q{q:06d}", "stratum": str(strata[q]),
                    "question": f"What does document {qdocs[q]} say about {WORDS[q % len(WORDS)]} (query {q})?"}
            if strata[q] == "negative":
                item["answerable"] = False
            else:
                d, s = int(qdocs[q]), int(qstarts[q])
                # quote whole words: start and end on a space so the quote is verbatim and unambiguous
                s = texts[d].index(" ", s) + 1
                e = texts[d].index(" ", s + 60)
                item["evidence"] = [{"doc_id": f"doc{d:04d}", "quote": texts[d][s:e], "grade": 2 + q % 2}]
            fh.write(json.dumps(item) + "\n")
    golden_dir = root / "golden"
    golden = build_golden(src, corpus, golden_dir)

    traces_dir = root / "traces"
    traces_dir.mkdir()
    store_path = root / "store.duckdb"
    names = []
    with Store.open(store_path) as st:
        for r, name in enumerate(("baseline", "candidate")):
            config = {"name": name, "retrieval": {"mode": "hybrid"}, "reranker": {"final_k": 5}}
            rid = st.create_run(RunRecord(
                name=name, dataset_version=golden.dataset_version, corpus_digest=corpus.digest,
                metric_version="bench", config=config, hit_rule="any_overlap", relevance_threshold=2,
                gain="exponential", ties="trec", trials=1, extra={"traces_dir": str(traces_dir)}))
            values = rng.random((n_queries, len(METRICS))) + 0.02 * r
            values[strata == "negative", :8] = np.nan
            lat = rng.gamma(2.0, 40.0 + 10 * r, n_queries)
            qids = np.asarray([f"q{q:06d}" for q in range(n_queries)], dtype=object)
            st.write_batch(rid, {
                "query_id": np.repeat(qids, len(METRICS)),
                "trial": np.zeros(n_queries * len(METRICS), dtype=np.int32),
                "metric": np.tile(np.asarray(METRICS, dtype=object), n_queries),
                "value": np.clip(values, 0, 1).ravel(),
                "stratum": np.repeat(strata.astype(object), len(METRICS)),
                "latency_ms": np.repeat(lat, len(METRICS)),
            })
            st.finish_run(rid)
            _write_traces(traces_dir / f"{rid}.jsonl", RunHeader(run_name=name, config=config,
                                                                 config_sha=config_sha(config)),
                          rng, n_queries, qdocs, strata)
            names.append(name)
    return {"store": store_path, "corpus": corpus_dir, "golden": golden_dir, "runs": names}


def _write_traces(path: Path, header, rng, n_queries: int, qdocs, strata) -> None:
    n_chunks = DOC_CHARS // CHUNK
    with path.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "header", **header.model_dump(mode="json")}) + "\n")
        for q in range(n_queries):
            docs = np.where(rng.random(10) < 0.3, qdocs[q], rng.integers(0, N_DOCS, 10))
            chunks = rng.integers(0, n_chunks, 10)
            seen, units = set(), []
            for d, c in zip(docs.tolist(), chunks.tolist(), strict=True):
                if (d, c) in seen:
                    continue
                seen.add((d, c))
                units.append({"unit_id": f"doc{d:04d}#{c}", "doc_id": f"doc{d:04d}", "start": c * CHUNK,
                              "end": (c + 1) * CHUNK, "score": round(float(rng.random()), 4), "rank": len(units) + 1})
            negative = strata[q] == "negative"
            fh.write(json.dumps({
                "type": "trace", "trace_id": f"t{q}", "query_id": f"q{q:06d}", "trial": 0,
                "fused": units, "reranked": units[:5], "packed": units[:3],
                "answer": None if negative else f"The answer drawn from {units[0]['doc_id']} for query {q}.",
                "outcome": "abstained" if negative else "answered",
                "durations_ms": {"retrieve": 12.5, "generate": 80.0},
            }, separators=(",", ":")) + "\n")


def ragassay_cmd() -> list[str]:
    script = shutil.which("ragassay", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-c", "from ragassay.cli.app import main; main()"]


def run_report(inputs: dict, out: Path, resamples: int) -> dict:
    """``ragassay report`` in a fresh child process: wall time, its peak RSS, output sizes."""
    cmd = [*ragassay_cmd(), "report", *inputs["runs"], "-o", str(out), "--store", str(inputs["store"]),
           "--corpus", str(inputs["corpus"]), "--golden", str(inputs["golden"]), "--resamples", str(resamples),
           "--json"]
    # RUSAGE_CHILDREN's ru_maxrss is the largest child so far: measure the report in a child of its own
    # so earlier children (none here, but a caller's) cannot inflate it.
    probe = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); w = time.perf_counter() - t; "
             "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(json.dumps({'rc': p.returncode, 'wall_s': w, 'out': p.stdout, 'err': p.stderr, "
             "'cpu_s': u.ru_utime + u.ru_stime, 'peak_mb': u.ru_maxrss / 1024}))")
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    res = json.loads(subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                                    env=env, check=True).stdout)
    if res["rc"] != 0:
        raise SystemExit(f"ragassay report failed ({res['rc']}):\n{res['err']}")
    summary = json.loads(res["out"])
    return {"wall_s": res["wall_s"], "cpu_s": res["cpu_s"], "peak_mb": res["peak_mb"],
            "html_bytes": Path(summary["report"]).stat().st_size,
            "parquet_bytes": Path(summary["parquet"]).stat().st_size, "report": summary["report"]}


def _has_chromium() -> bool:
    probe_dir = str(HERE.parent / "tests" / "report")
    if probe_dir not in sys.path:
        sys.path.insert(0, probe_dir)
    from browser_probe import chromium_path

    return chromium_path() is not None


def browser_timings(page: Path, tmp: Path) -> dict | None:
    """Load and sort times in headless Chromium, or None when it is not installed."""
    if not _has_chromium():
        return None
    from browser_probe import time_page

    return time_page(page, tmp)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="report runs per size on the same inputs")
    ap.add_argument("--keep", type=Path, default=None, help="build inputs and reports here and keep them")
    ap.add_argument("--tiny", action="store_true", help="200 queries, 200 resamples, one run (CI)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.sizes, args.resamples, args.repeat = [200], 200, 1
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    results = []
    if not _has_chromium():
        print("peer chromium not installed: no page load or sort times (the load ms and sort ms columns are nan)")
    for n in args.sizes:
        root = Path(tempfile.mkdtemp(prefix=f"ragassay-report-{n}-", dir=args.keep))
        t = time.perf_counter()
        inputs = build_inputs(root, n)
        setup = time.perf_counter() - t
        for k in range(args.repeat):
            load_before = os.getloadavg()[0]
            r = run_report(inputs, root / f"report-{k}", args.resamples)
            r.update(n_queries=n, setup_s=setup, load_before=load_before, load_after=os.getloadavg()[0])
            b = browser_timings(Path(r["report"]), root)
            if b:
                r.update(b)
            results.append(r)
        if args.keep is None:
            shutil.rmtree(root)
    print(f"{'queries':>9} {'build s':>8} {'CPU s':>6} {'peak MB':>8} {'HTML MB':>8} {'parquet MB':>10} "
          f"{'load ms':>8} {'sort ms':>8} {'loadavg':>9}")
    for r in results:
        print(f"{r['n_queries']:>9,} {r['wall_s']:>8.1f} {r['cpu_s']:>6.1f} {r['peak_mb']:>8.0f} "
              f"{r['html_bytes'] / 1e6:>8.1f} "
              f"{r['parquet_bytes'] / 1e6:>10.1f} {r.get('load_ms', float('nan')):>8.0f} "
              f"{r.get('sort_ms', float('nan')):>8.0f} {r['load_before']:>4.1f}-{r['load_after']:<4.1f}")
    print("targets at 100,000 queries: <= 15 s, <= 1,536 MB, <= 30 MB HTML; load <= 3,000 ms, sort <= 300 ms")
    return results


if __name__ == "__main__":
    main()
