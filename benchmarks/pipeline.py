"""Reference-pipeline timing on the bundled license corpus: cold vs warm embedding cache.

Each measurement runs in a fresh Python process (the way a re-run happens) and times everything after the
shared imports: build (chunk, analyze, embed, index) plus every golden query. Cold starts from an empty
cache dir; warm re-uses it, so chunks, analyzed terms and passage/query vectors come from disk and the
embedding model is never loaded. Usage::

    python benchmarks/pipeline.py [--config examples/configs/hybrid.yaml] [--embedder wordllama|minilm]
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
import json, sys, time, tempfile
from ragassay.corpus import load_corpus, bundled_corpus_dir
from ragassay.golden import build_golden, bundled_golden_source
from ragassay.pipeline import Pipeline, load_config
import bm25s, numpy, rich.progress  # shared imports, outside the timed region

cfg_path, cache_dir, embedder = sys.argv[1], sys.argv[2], sys.argv[3]
corpus = load_corpus(bundled_corpus_dir())
golden = build_golden(bundled_golden_source(), corpus)
cfg = load_config(cfg_path).model_copy(update={"cache_dir": cache_dir})
cfg.dense.embedder = embedder
t0 = time.perf_counter()
pipe = Pipeline(cfg, corpus)
header, traces = pipe.run(golden.queries, progress=False)
total = time.perf_counter() - t0
print(json.dumps({"seconds": total, "queries": len(traces), "build_ms": header.durations_ms,
                  "n_chunks": header.stats["n_chunks"], "outcomes": header.stats["outcomes"],
                  "query_ms_mean": sum(t.durations_ms["total"] for t in traces) / len(traces)}))
"""


def _once(cfg: str, cache: str, embedder: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, cfg, cache, embedder], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "examples" / "configs" / "hybrid.yaml"))
    ap.add_argument("--embedder", default="wordllama")
    ap.add_argument("--repeats", type=int, default=3, help="best-of-N for each of cold and warm")
    args = ap.parse_args()
    cold, warm = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(_once(args.config, cache, args.embedder))
            warm.append(_once(args.config, cache, args.embedder))
    c = min(cold, key=lambda r: r["seconds"])
    w = min(warm, key=lambda r: r["seconds"])
    print(f"config {Path(args.config).name}  embedder {args.embedder}  queries {c['queries']}  "
          f"chunks {c['n_chunks']}  outcomes {c['outcomes']}")
    print(f"cold (chunk + embed + index + queries): {c['seconds']:.3f} s   build ms "
          + ", ".join(f"{k}={v:.0f}" for k, v in c["build_ms"].items()))
    print(f"warm (embeddings from cache):           {w['seconds']:.3f} s   build ms "
          + ", ".join(f"{k}={v:.0f}" for k, v in w["build_ms"].items()))
    print(f"mean per-query ms: cold {c['query_ms_mean']:.2f}, warm {w['query_ms_mean']:.2f}")
    print(f"cold / warm = {c['seconds'] / w['seconds']:.2f}x")


if __name__ == "__main__":
    main()
