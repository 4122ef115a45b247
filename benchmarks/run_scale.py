"""Benchmark: `ragassay run` (bm25) at 10,000 and 40,000 queries, whole process, beside bm25s alone.

Inputs are built as in ``score_scale.py``: a synthetic corpus of 2,000 documents and golden sets of the
given sizes built from verbatim quotes. Each measured command is its own process (wall time; peak RSS
from ``os.wait4``):

- ``ragassay run bm25.yaml --batched``: chunk, index, retrieve 64 queries at a time, fuse, pack, generate,
  score every stage, store every row (latency stored as NULL: no per-request time exists);
- ``ragassay run bm25.yaml`` (default): the same, each query run and timed on its own (honest latency);
- ``bm25s``: the same chunks (ragassay's chunker, computed before the clock starts), bm25s index + top-50
  retrieval of every question with the same tokenizer settings, nothing else.

Targets (issue 18, about ``--batched``): 40,000 queries <= 4.4x the 10,000-query run; the 10,000-query run
<= 3x bm25s alone.

Each figure is printed as wall seconds, CPU seconds (user + system of that child alone, from
``os.wait4``) and the 1-minute load average after it: on a shared machine CPU time is the steadier of the two, and the ratios are given for both.
``--modes`` picks the measured commands (default all three; the targets need ``batched`` and ``bm25s``).

Usage: python benchmarks/run_scale.py [N ...] [--repeat R] [--docs D] [--keep DIR] [--modes batched,bm25s]

``--tiny`` runs 200 queries over 200 documents, once per mode: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from score_scale import N_DOCS, _paths, _run  # noqa: E402  (a sibling script, not a package)

CONFIG = """name: bm25
chunker: {kind: recursive, size: 128}
bm25: {enabled: true, k1: 1.2, b: 0.75, lowercase: true, stemmer: english, stopwords: en, depth: 50}
dense: {enabled: false}
fusion: {method: rrf, k: 60, depth: 50}
reranker: {kind: none, final_k: 10}
packer: {budget_tokens: 1000, policy: stop}
generator: {kind: extractive}
"""

BM25S = r'''
import json, sys, time
import bm25s, Stemmer
chunks = json.load(open(sys.argv[1]))
questions = json.load(open(sys.argv[2]))
t0 = time.perf_counter()
stemmer = Stemmer.Stemmer("english")
corpus_tokens = bm25s.tokenize(chunks, stopwords="en", stemmer=stemmer, show_progress=False)
index = bm25s.BM25(k1=1.2, b=0.75)
index.index(corpus_tokens, show_progress=False)
q_tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, show_progress=False)
docs, scores = index.retrieve(q_tokens, k=50, show_progress=False, n_threads=1)
print(f"{len(questions)} questions, {len(chunks)} chunks, {time.perf_counter() - t0:.2f} s in-process")
'''


def _load() -> str:
    """The 1-minute load average after a measurement: on a shared machine it says how far to trust it."""
    return f"{os.getloadavg()[0]:.1f}"


def _bm25s_inputs(root: Path, paths: dict, n: int) -> None:
    import yaml

    from ragassay.corpus import load_corpus
    from ragassay.golden import load_golden
    from ragassay.pipeline.chunkers import chunk_corpus
    from ragassay.pipeline.config import parse_config

    corpus = load_corpus(paths["corpus"])
    cfg = parse_config(yaml.safe_load(CONFIG))
    ch = cfg.chunker
    chunks = [c.text for c in chunk_corpus({d.doc_id: d.text for d in corpus}, ch.kind, ch.size, ch.overlap)]
    questions = [q.question for q in load_golden(paths["golden"]).queries]
    cp, qp = root / f"chunks{n}.json", root / f"questions{n}.json"
    cp.write_text(json.dumps(chunks), encoding="utf-8")
    qp.write_text(json.dumps(questions), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 40_000])
    ap.add_argument("--repeat", type=int, default=2, help="runs per size; the table shows the median")
    ap.add_argument("--keep", type=Path, help="build the inputs here and keep them")
    ap.add_argument("--modes", default="batched,per query,bm25s",
                    help="comma-separated subset of: batched, per query, bm25s")
    ap.add_argument("--docs", type=int, default=N_DOCS, help="documents in the synthetic corpus")
    ap.add_argument("--tiny", action="store_true", help="200 queries, 200 documents, one run per mode (CI)")
    ap.add_argument("--inputs-only", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:
        args.sizes, args.docs, args.repeat = [200], 200, 1
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"batched", "per query", "bm25s"}
    if unknown:
        ap.error(f"unknown --modes {sorted(unknown)}; use batched, per query, bm25s")
    root = args.keep or Path(tempfile.mkdtemp(prefix="ragassay-run-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.inputs_only:
        _bm25s_inputs(root, _paths(root, args.inputs_only), args.inputs_only)
        return
    (root / "bm25.yaml").write_text(CONFIG, encoding="utf-8")
    (root / "bm25s_alone.py").write_text(BM25S, encoding="utf-8")
    ragassay = str(Path(sys.executable).with_name("ragassay"))
    table = {}
    try:
        for n in args.sizes:
            if not (root / f"golden{n}").exists():  # built in a child: see score_scale.py
                _run([sys.executable, str(HERE / "score_scale.py"), "--build-only", str(n), "--docs", str(args.docs),
                      "--keep", str(root)])
            paths = _paths(root, n)
            chunks, questions = root / f"chunks{n}.json", root / f"questions{n}.json"
            if not chunks.exists():
                _run([sys.executable, __file__, "--inputs-only", str(n), "--keep", str(root)])
            rows: dict[str, list] = {m: [] for m in modes}
            for r in range(args.repeat):
                for mode, extra in (("batched", ["--batched"]), ("per query", [])):
                    if mode not in modes:
                        continue
                    store = root / f"run{n}_{r}.duckdb"
                    res = _run([ragassay, "run", str(root / "bm25.yaml"), "--golden", str(paths["golden"]),
                                "--corpus", str(paths["corpus"]), "--store", str(store), "--profile", "--json",
                                *extra])
                    store.unlink()
                    prof = json.loads(res[2])["profile_s"]
                    rows[mode].append((res[0], res[1], res[3]))
                    print(f"{n:>6} queries {mode:>9} run {r + 1}: {res[0]:.2f} s wall {res[3]:.2f} s CPU "
                          f"{res[1]:.0f} MB  load {_load()}  profile "
                          + " ".join(f"{k}={v:.2f}" for k, v in prof.items()),
                          flush=True)
                if "bm25s" in modes:
                    res = _run([sys.executable, str(root / "bm25s_alone.py"), str(chunks), str(questions)])
                    rows["bm25s"].append((res[0], res[1], res[3]))
                    print(f"{n:>6} queries     bm25s run {r + 1}: {res[0]:.2f} s wall {res[3]:.2f} s CPU "
                          f"{res[1]:.0f} MB  load {_load()}  ({res[2].strip()})", flush=True)
            # the median run of each mode by wall time, its CPU time and peak beside it
            table[n] = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}

        def cell(t: dict, mode: str) -> str:
            return f"{t[mode][0]:.2f} | {t[mode][2]:.2f} | {t[mode][1]:.0f}" if mode in t else "— | — | —"

        print("\n| queries | batched wall s | CPU s | peak MB | per query wall s | CPU s | peak MB "
              "| bm25s wall s | CPU s | peak MB | batched / bm25s (wall, CPU) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for n, t in table.items():
            ratio = (f"{t['batched'][0] / t['bm25s'][0]:.2f}, {t['batched'][2] / t['bm25s'][2]:.2f}"
                     if "batched" in t and "bm25s" in t else "—")
            print(f"| {n:,} | {cell(t, 'batched')} | {cell(t, 'per query')} | {cell(t, 'bm25s')} | {ratio} |")
        if len(table) >= 2:
            a, b = sorted(table)[:2]
            for mode in ("batched", "per query"):
                if mode in modes:
                    print(f"{mode}: {b:,} queries cost {table[b][mode][0] / table[a][mode][0]:.2f}x {a:,} (wall), "
                          f"{table[b][mode][2] / table[a][mode][2]:.2f}x (CPU)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
