"""Benchmark: `ragassay score` at scale, whole process, side by side with a pure-Python orjson script.

For each size (default 10,000 and 100,000 traces) it builds a synthetic corpus of 2,000 plain-text
documents, a golden set of that many queries built from verbatim quotes (``build_golden``) and a trace
file with one trace per query: 50 fused units (a chunk of 500 characters each, about a third from the
query's evidence document), the first 3 packed with token counts, an answer, citations and timings.

Two processes run on the same files, one after the other, each measured on its own (wall time and peak
RSS from ``os.wait4``):

- ``ragassay score``: reads, validates every record and unit, computes every stage metric, stores rows
  (the next batch is read and the last one written on helper threads while one is scored);
- ``SPAN_RECALL``: the 40-line pure-Python script below, which reads the golden set and the traces with
  orjson and computes span recall@10 (the least a scorer must do).

Targets (issue 18): at 100,000 traces peak memory <= 1 GB and wall <= 3x the script; 100,000 traces cost
<= 11x 10,000.

Usage: python benchmarks/score_scale.py [N ...] [--repeat R] [--docs D] [--keep DIR]

``--tiny`` runs sizes 200 and 400 over 200 documents, once each: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
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

N_DOCS = 2_000
DOC_CHARS = 3_000
CHUNK = 500
UNITS = 50
WORDS = ("license", "notice", "copyright", "warranty", "software", "permission", "granted", "holder",
         "distribution", "source", "binary", "modification", "condition", "liability", "damages", "contract")

SPAN_RECALL = r'''
import sys
import orjson

golden_path, traces_path = sys.argv[1], sys.argv[2]
evidence = {}
with open(golden_path, "rb") as fh:
    for line in fh:
        q = orjson.loads(line)
        if "query_id" not in q:
            continue
        spans = {}
        for e in q.get("evidence", []):
            if e["grade"] >= 2:
                spans.setdefault(e["doc_id"], []).append((e["start"], e["end"]))
        evidence[q["query_id"]] = spans

total, n = 0.0, 0
with open(traces_path, "rb") as fh:
    for line in fh:
        rec = orjson.loads(line)
        if rec.get("type") != "trace":
            continue
        spans = evidence.get(rec["query_id"], {})
        n_rel = sum(len(v) for v in spans.values())
        if not n_rel:
            continue
        hit = set()
        for u in rec.get("fused", [])[:10]:
            for j, (s, e) in enumerate(spans.get(u["doc_id"], ())):
                if min(e, u["end"]) > max(s, u["start"]):
                    hit.add((u["doc_id"], j))
        total += len(hit) / n_rel
        n += 1
print(f"mean recall@10 {total / max(n, 1):.4f} over {n} traces")
'''


def _doc_text(rng, i: int) -> str:
    words = rng.choice(WORDS, size=DOC_CHARS // 6)
    text = " ".join(f"{w}{i}x{j}" if j % 7 == 0 else w for j, w in enumerate(words))
    return text[:DOC_CHARS]


def build(root: Path, n: int, seed: int = 0, n_docs: int | None = None) -> dict:
    """Corpus of ``n_docs`` documents (default ``N_DOCS``), golden set and trace file of ``n`` queries under
    ``root``. A corpus already in ``root/corpus`` is reused, with its own number of documents."""
    from ragassay.corpus import load_corpus
    from ragassay.golden.builder import build_golden

    rng = np.random.default_rng(seed)
    corpus_dir = root / "corpus"
    if not corpus_dir.exists():
        corpus_dir.mkdir(parents=True)
        for i in range(n_docs or N_DOCS):
            (corpus_dir / f"doc{i:04d}.txt").write_text(_doc_text(rng, i), encoding="utf-8")
    corpus = load_corpus(corpus_dir)
    n_docs = len(corpus)
    texts = [corpus[f"doc{i:04d}"].text for i in range(n_docs)]
    qdocs = rng.integers(0, n_docs, n)
    src = root / f"golden{n}.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "meta", "dataset": f"scale{n}"}) + "\n")
        for q in range(n):
            d = int(qdocs[q])
            s = texts[d].index(" ", int(rng.integers(0, DOC_CHARS - 200))) + 1
            e = texts[d].index(" ", s + 60)
            # the question shares words (and the document's own tokens) with its evidence, so BM25 has work
            words = texts[d][s:e].split()
            question = f"What does the licence say about {' '.join(words[1:5])}?"
            fh.write(json.dumps({"query_id": f"q{q:06d}", "stratum": "lexical", "question": question,
                                 "evidence": [{"doc_id": f"doc{d:04d}", "quote": texts[d][s:e], "grade": 2 + q % 2}],
                                 "reference_answer": f"answer {q}"}) + "\n")
    golden_dir = root / f"golden{n}"
    build_golden(src, corpus, golden_dir)
    traces = root / f"traces{n}.jsonl"
    n_chunks = DOC_CHARS // CHUNK
    with traces.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "header", "run_name": f"scale{n}", "config": {"reranker": {"final_k": 10}}})
                 + "\n")
        for q in range(n):
            docs = np.where(rng.random(UNITS) < 0.3, qdocs[q], rng.integers(0, n_docs, UNITS)).tolist()
            chunks = rng.integers(0, n_chunks, UNITS).tolist()
            seen, units = set(), []
            for d, c in zip(docs, chunks, strict=True):
                while (d, c) in seen:
                    d = (d + 1) % n_docs
                seen.add((d, c))
                units.append({"unit_id": f"doc{d:04d}#{c}", "doc_id": f"doc{d:04d}", "start": c * CHUNK,
                              "end": min((c + 1) * CHUNK, len(texts[d])), "score": round(float(rng.random()), 4),
                              "rank": len(units) + 1})
            packed = [dict(u, tokens=100) for u in units[:3]]
            fh.write(json.dumps({
                "type": "trace", "trace_id": f"t{q}", "query_id": f"q{q:06d}", "trial": 0, "fused": units,
                "packed": packed, "packed_tokens": 300, "answer": f"The answer from {units[0]['doc_id']}.",
                "citations": [units[0]["unit_id"]], "outcome": "answered",
                "durations_ms": {"retrieve": 12.5, "generate": 80.0, "total": 95.0},
            }, separators=(",", ":")) + "\n")
    return _paths(root, n)


def _paths(root: Path, n: int) -> dict:
    return {"corpus": root / "corpus", "golden": root / f"golden{n}", "traces": root / f"traces{n}.jsonl"}


def _run(cmd: list[str]) -> tuple[float, float, str, float]:
    """Wall seconds, peak RSS (MB), stdout and CPU seconds (user + system) of one process, from os.wait4 (this
    child alone). CPU time is the steadier figure on a shared machine, where other jobs stretch wall time."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{err.decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out.decode(), usage.ru_utime + usage.ru_stime


def _load() -> str:
    """The 1-minute load average: on a shared machine wall times (ours uses a second core for reading and
    writing; the script one) mean little without it."""
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the table shows the fastest")
    ap.add_argument("--docs", type=int, default=N_DOCS, help="documents in the synthetic corpus")
    ap.add_argument("--keep", type=Path, help="build the inputs here and keep them")
    ap.add_argument("--tiny", action="store_true", help="sizes 200 and 400, 200 documents, one run each (CI)")
    ap.add_argument("--build-only", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:
        args.sizes, args.docs, args.repeat = [200, 400], 200, 1
    root = args.keep or Path(tempfile.mkdtemp(prefix="ragassay-score-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.build_only:
        build(root, args.build_only, n_docs=args.docs)
        return
    script = root / "span_recall.py"
    script.write_text(SPAN_RECALL, encoding="utf-8")
    ragassay = str(Path(sys.executable).with_name("ragassay"))
    results = {}
    try:
        for n in args.sizes:
            # built in a child process: a fork of this process would carry its memory into the measured
            # children's peak RSS
            _run([sys.executable, __file__, "--build-only", str(n), "--docs", str(args.docs), "--keep", str(root)])
            paths = _paths(root, n)
            mb = paths["traces"].stat().st_size / 1e6
            rows = []
            for r in range(args.repeat):
                store = root / f"store{n}_{r}.duckdb"
                ours = _run([ragassay, "score", str(paths["traces"]), "--golden", str(paths["golden"]),
                             "--corpus", str(paths["corpus"]), "--store", str(store), "--json"])
                store.unlink()
                peer = _run([sys.executable, str(script), str(paths["golden"] / "golden.jsonl"),
                             str(paths["traces"])])
                rows.append((ours[0], ours[1], peer[0], peer[1], ours[3], peer[3]))
                print(f"{n:>7} traces ({mb:.0f} MB) run {r + 1}: ragassay {ours[0]:.2f} s (cpu {ours[3]:.2f}) "
                      f"{ours[1]:.0f} MB | orjson script {peer[0]:.2f} s (cpu {peer[3]:.2f}) {peer[1]:.0f} MB | "
                      f"ratio {ours[0] / peer[0]:.2f} (cpu {ours[3] / peer[3]:.2f}) | load {_load()}", flush=True)
            results[n] = rows
        print("\n| traces | JSONL MB | ragassay s (min/median) | peak MB | orjson script s | ratio (medians) "
              "| cpu ratio (medians) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n, rows in results.items():
            ours = sorted(r[0] for r in rows)
            peer = sorted(r[2] for r in rows)
            med = len(rows) // 2
            cpu = sorted(r[4] / r[5] for r in rows)[med]
            print(f"| {n:,} | {(root / f'traces{n}.jsonl').stat().st_size / 1e6:.0f} | {ours[0]:.2f} / {ours[med]:.2f} | "
                  f"{max(r[1] for r in rows):.0f} | {peer[med]:.2f} | {ours[med] / peer[med]:.2f} | {cpu:.2f} |")
        if len(results) >= 2:
            a, b = sorted(results)[:2]
            ma = sorted(r[0] for r in results[a])[len(results[a]) // 2]
            mb_ = sorted(r[0] for r in results[b])[len(results[b]) // 2]
            print(f"\n{b:,} traces cost {mb_ / ma:.2f}x {a:,} (median wall, whole process)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
