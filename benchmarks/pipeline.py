"""Reference-pipeline timing on the bundled license corpus (cold vs warm cache), and the abstain-floor tuning.

Timing: each measurement runs in a fresh Python process (the way a re-run happens) and times everything
after the shared imports and the corpus / golden-set load: the pipeline build (chunk, analyze, BM25 index,
embed, vector index) plus every golden query. *Cold* starts from an empty cache dir, so the embedding
model is loaded and every chunk and question is embedded. *Warm* re-uses that cache dir: chunks, analyzed
terms, the BM25 index and passage / query vectors come from disk and the embedding model is never loaded;
the queries themselves (retrieval, fusion, rerank, pack, generate, traces) run in full both times. Wall
and process CPU time are both reported (CPU time is steadier on a shared machine). Usage::

    python benchmarks/pipeline.py [--config examples/configs/hybrid.yaml] [--embedder wordllama|minilm]
    python benchmarks/pipeline.py --tune-floor      # the abstain_floor procedure of docs/pipeline.md

``--tiny`` times one cold and one warm process (best of 1): a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing. The work is the bundled corpus either way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from ragassay.corpus import load_corpus, bundled_corpus_dir
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.pipeline import Pipeline, load_config
import bm25s, numpy, rich.progress  # shared imports, outside the timed region

cfg_path, cache_dir, embedder = sys.argv[1], sys.argv[2], sys.argv[3]
corpus = load_corpus(bundled_corpus_dir())
golden = build_golden(bundled_golden_source(), corpus)
cfg = load_config(cfg_path)
# copies, not assignments: the loaded config may be frozen
cfg = cfg.model_copy(update={"cache_dir": cache_dir, "dense": cfg.dense.model_copy(update={"embedder": embedder})})
t0, c0 = time.perf_counter(), time.process_time()
pipe = Pipeline(cfg, corpus)
t1 = time.perf_counter()
header, traces = pipe.run(golden.queries, progress=False)
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t0, "cpu": time.process_time() - c0, "queries": len(traces),
                  "build_ms": header.durations_ms, "n_chunks": header.stats["n_chunks"],
                  "outcomes": header.stats["outcomes"], "query_ms_mean": (t2 - t1) * 1000 / len(traces)}))
"""


def _once(cfg: str, cache: str, embedder: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, cfg, cache, embedder], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timing(config: str, embedder: str, repeats: int) -> None:
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(_once(config, cache, embedder))
            warm.append(_once(config, cache, embedder))
    c = min(cold, key=lambda r: r["seconds"])
    w = min(warm, key=lambda r: r["seconds"])
    c_cpu = min(r["cpu"] for r in cold)
    w_cpu = min(r["cpu"] for r in warm)
    print(f"config {Path(config).name}  embedder {embedder}  queries {c['queries']}  chunks {c['n_chunks']}  "
          f"outcomes {c['outcomes']}  (best of {repeats} fresh processes each)")
    print(f"cold (empty cache: chunk + analyze + BM25 index + load model + embed + index + all queries): "
          f"{c['seconds']:.3f} s wall, {c_cpu:.3f} s CPU   build ms "
          + ", ".join(f"{k}={v:.0f}" for k, v in c["build_ms"].items()))
    print(f"warm (same cache: chunks, terms, BM25 index, vectors from disk; all queries run):         "
          f"{w['seconds']:.3f} s wall, {w_cpu:.3f} s CPU   build ms "
          + ", ".join(f"{k}={v:.0f}" for k, v in w["build_ms"].items()))
    # batched traces carry no per-request total (docs/pipeline.md): the query phase's time over its queries
    print(f"mean per-query ms (query phase / queries, batched): cold {c['query_ms_mean']:.2f}, "
          f"warm {w['query_ms_mean']:.2f}")
    print(f"cold / warm = {c['seconds'] / w['seconds']:.2f}x wall, {c_cpu / w_cpu:.2f}x CPU")


def tune_floor(config: str, max_over_refusal: float) -> None:
    """Choose abstain_floor on the odd-numbered golden queries; report both halves (see docs/pipeline.md)."""
    import re

    import numpy as np

    from ragassay.corpus import bundled_corpus_dir, load_corpus
    from ragassay.golden import build_golden, bundled_golden_source
    from ragassay.pipeline import Pipeline, load_config
    from ragassay.pipeline.generator import abstention_rates, choose_abstain_floor

    corpus = load_corpus(bundled_corpus_dir())
    golden = build_golden(bundled_golden_source(), corpus)
    cfg = load_config(config)
    # floor 0 records every query's best support; the floor is applied below (copies: the config may be frozen)
    cfg = cfg.model_copy(update={"cache_dir": None,
                                 "generator": cfg.generator.model_copy(update={"abstain_floor": 0.0})})
    _, traces = Pipeline(cfg, corpus).run(golden.queries, progress=False)
    answerable = {q.query_id: q.answerable for q in golden.queries}
    rows = [(int(re.search(r"(\d+)$", t.query_id).group(1)) % 2 == 1, t.meta.get("best_support", 0.0),
             bool(t.meta.get("absent_names")), answerable[t.query_id]) for t in traces]
    grid = np.round(np.arange(0.0, 0.801, 0.05), 2)

    def half(odd: bool):
        sel = [r for r in rows if r[0] == odd]
        return [r[1] for r in sel], [r[2] for r in sel], [r[3] for r in sel]

    choice = choose_abstain_floor(*half(True), grid, max_over_refusal)
    print(f"{Path(config).name}: floor chosen on the odd half (max over-refusal {max_over_refusal}): "
          f"{choice.floor:.2f}")
    print("floor | odd: over-refusal  abstention recall | even (held out): over-refusal  abstention recall")
    for f in grid:
        o, e = abstention_rates(*half(True), f), abstention_rates(*half(False), f)
        mark = "  <- chosen" if f == choice.floor else ""
        print(f" {f:.2f} |      {o[0]:.3f}            {o[1]:.3f}       |          {e[0]:.3f}            {e[1]:.3f}{mark}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "examples" / "configs" / "hybrid.yaml"))
    ap.add_argument("--embedder", default="wordllama")
    ap.add_argument("--repeats", type=int, default=3, help="best-of-N for each of cold and warm")
    ap.add_argument("--tune-floor", action="store_true", help="run the abstain_floor tuning procedure instead")
    ap.add_argument("--max-over-refusal", type=float, default=0.25)
    ap.add_argument("--tiny", action="store_true", help="best of 1 (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.repeats = 1
    if args.tune_floor:
        tune_floor(args.config, args.max_over_refusal)
    else:
        timing(args.config, args.embedder, args.repeats)


if __name__ == "__main__":
    main()
