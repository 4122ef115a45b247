"""Input loading at scale: load_golden, load_corpus and the scoring Labels, CPU and wall seconds each.

    python benchmarks/golden_load.py [GOLDEN_DIR CORPUS_DIR] [--queries 100000] [--docs 2000] [--repeat N] [--profile]

Without GOLDEN_DIR and CORPUS_DIR it first builds the inputs of ``score_scale.py`` (``--queries`` queries over
``--docs`` documents) in a temporary directory. Prints one line per step (best of N): CPU seconds (process
time), wall seconds, and the load average when measured, since the machine may be shared.

``--tiny`` builds and loads 200 queries over 200 documents, best of 1: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _timed(fn, repeat: int):
    best = None
    out = None
    for _ in range(repeat):
        out = None
        gc.collect()
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        c, w = time.process_time() - c0, time.perf_counter() - w0
        best = (c, w) if best is None or c < best[0] else best
    return out, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("golden", nargs="?")
    ap.add_argument("corpus", nargs="?")
    ap.add_argument("--queries", type=int, default=100_000, help="queries to build when no inputs are given")
    ap.add_argument("--docs", type=int, default=2_000, help="documents to build when no inputs are given")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="build 200 queries over 200 documents, best of 1 (CI)")
    a = ap.parse_args()
    if (a.golden is None) != (a.corpus is None):
        ap.error("give both GOLDEN_DIR and CORPUS_DIR, or neither (to build synthetic inputs)")
    if a.tiny:
        a.queries, a.docs, a.repeat = 200, 200, 1
    if a.golden is not None:
        measure(a)
        return
    with tempfile.TemporaryDirectory(prefix="ragassay-golden-load-") as tmp:
        # built in a child process, so the builder's objects are not in this process's heap
        subprocess.run([sys.executable, str(HERE / "score_scale.py"), "--build-only", str(a.queries), "--docs",
                        str(a.docs), "--keep", tmp], check=True)
        a.golden, a.corpus = str(Path(tmp) / f"golden{a.queries}"), str(Path(tmp) / "corpus")
        measure(a)


def measure(a: argparse.Namespace) -> None:
    from ragassay.analysis.scoring import Labels, ScoringOptions
    from ragassay.corpus import load_corpus
    from ragassay.golden import load_golden

    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        g = load_golden(a.golden)
        load_corpus(a.corpus)
        Labels(g, ScoringOptions())
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        return
    golden, (gc_, gw) = _timed(lambda: load_golden(a.golden), a.repeat)
    _, (cc, cw) = _timed(lambda: load_corpus(a.corpus), a.repeat)
    _, (lc, lw) = _timed(lambda: Labels(golden, ScoringOptions()), a.repeat)
    print(f"queries {len(golden)}  load average {os.getloadavg()[0]:.2f}")
    for name, c, w in (("load_golden", gc_, gw), ("load_corpus", cc, cw), ("Labels", lc, lw)):
        print(f"{name:12s} cpu {c:6.3f} s  wall {w:6.3f} s")


if __name__ == "__main__":
    main()
