"""Golden-set build at scale: 10,000 queries over a 10 MB corpus (time and peak memory).

The corpus is synthetic (random words from the bundled licenses' vocabulary, wrapped at 72 columns),
and each query quotes a 12-word window of a random document, typed on one line, so most quotes
resolve by the whitespace-tolerant tier, as real quotes of wrapped text do.

    python benchmarks/golden_build.py [N_QUERIES] [--corpus-mb 10] [--docs 500]

``--tiny`` builds 200 queries over a 1 MB, 50-document corpus: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from ragassay.corpus import bundled_corpus_dir, load_corpus
from ragassay.golden import build_golden


def main(n_queries: int = 10_000, corpus_mb: float = 10.0, n_docs: int = 500) -> dict:
    rng = np.random.default_rng(0)
    vocab = sorted({w for p in Path(bundled_corpus_dir()).glob("*.txt") for w in p.read_text().split()})
    vocab = np.array(vocab or ["alpha", "beta", "gamma"])
    with tempfile.TemporaryDirectory(prefix="ragassay-bench-") as tmp:
        return _measure(Path(tmp), vocab, rng, n_queries, corpus_mb, n_docs)


def _measure(tmp: Path, vocab, rng, n_queries: int, corpus_mb: float, n_docs: int) -> dict:
    root = tmp / "corpus"
    root.mkdir()
    per_doc = int(corpus_mb * 1e6 / n_docs)
    words_per_doc = per_doc // 7
    docs = {}
    for i in range(n_docs):
        words = vocab[rng.integers(0, len(vocab), words_per_doc)].tolist()
        docs[f"doc{i:04d}"] = words
        (root / f"doc{i:04d}.txt").write_text(textwrap.fill(" ".join(words), 72) + "\n")
    size = sum(p.stat().st_size for p in root.iterdir())
    with (tmp / "golden.jsonl").open("w") as f:
        for q in range(n_queries):
            d = f"doc{rng.integers(0, n_docs):04d}"
            s = int(rng.integers(0, words_per_doc - 12))
            quote = " ".join(docs[d][s:s + 12])
            f.write(json.dumps({"query_id": f"q{q:05d}", "question": f"question {q}", "stratum": "lexical",
                                "evidence": [{"doc_id": d, "quote": quote, "grade": 3}]}) + "\n")
    t0 = time.perf_counter()
    corpus = load_corpus(root)
    t1 = time.perf_counter()
    gs = build_golden(tmp / "golden.jsonl", corpus, tmp / "out")
    t2 = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "queries": n_queries, "corpus_bytes": size, "docs": n_docs,
        "load_corpus_s": round(t1 - t0, 2), "build_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
        "peak_rss_mb": round(peak_mb), "match_kinds": gs.manifest["match_kinds"],
    }
    print(f"golden build: {n_queries:,} queries over {size / 1e6:.1f} MB in {n_docs} docs: corpus load "
          f"{out['load_corpus_s']} s, build {out['build_s']} s (total {out['total_s']} s), peak RSS "
          f"{out['peak_rss_mb']} MB; matches {out['match_kinds']}")
    return out


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("queries", nargs="?", type=int, default=10_000)
    ap.add_argument("--corpus-mb", type=float, default=10.0)
    ap.add_argument("--docs", type=int, default=500)
    ap.add_argument("--tiny", action="store_true", help="200 queries, 1 MB in 50 documents (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.queries, args.corpus_mb, args.docs = 200, 1.0, 50
    main(args.queries, args.corpus_mb, args.docs)


if __name__ == "__main__":
    cli()
