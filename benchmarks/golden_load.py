"""Input loading at scale: load_golden, load_corpus and the scoring Labels, CPU and wall seconds each.

    python benchmarks/golden_load.py GOLDEN_DIR CORPUS_DIR [--repeat N] [--profile]

Prints one line per step (best of N): CPU seconds (process time), wall seconds, and the load average when
measured, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import time


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
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("corpus")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
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
