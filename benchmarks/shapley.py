"""Exact Shapley attribution over the bundled golden set: n = 10 context items per query, extractive generator.

Builds the BM25 reference pipeline on the bundled license corpus, takes each query's top 10 final-list
units (texts from the canonical corpus) as the players, and computes exact Shapley values and leave-one-out
deltas for all 171 queries with the utility ``answer_f1_or_abstention``. The subset cache generates each of
the 2^10 subsets once per query, so the call counter may not exceed 171 x 2^10 = 175,104. Target: <= 60 s.

For scale, it also times Monte Carlo permutation sampling (200 permutations per query) on the same
queries and prints how many generator calls the subset cache saved there (without the cache every
permutation costs n + 1 calls). Usage::

    python benchmarks/shapley.py [--n 10] [--queries 171] [--permutations 200]

``--tiny`` runs 4 items, 10 queries, 10 permutations: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from ragassay.analysis.attribution import attribute, contexts_from_traces
from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.runner import load_inputs
from ragassay.pipeline import Pipeline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10, help="context items per query (players)")
    ap.add_argument("--queries", type=int, default=171, help="how many bundled queries")
    ap.add_argument("--permutations", type=int, default=200, help="Monte Carlo permutations per query")
    ap.add_argument("--tiny", action="store_true", help="4 items, 10 queries, 10 permutations (CI)")
    args = ap.parse_args()
    if args.tiny:
        args.n, args.queries, args.permutations = 4, 10, 10
    with tempfile.TemporaryDirectory() as tmp:
        corpus, golden = load_inputs(None, None, tmp)
    pipe = Pipeline.from_config(demo_config_dir() / "bm25.yaml", corpus)
    queries = golden.queries[: args.queries]
    _, traces = pipe.run(queries, progress=False)
    contexts, _ = contexts_from_traces(traces, corpus, stage="final", k=args.n)
    sizes = [len(c) for c in contexts.values()]
    bound = len(queries) * 2**args.n

    t0 = time.perf_counter()
    res = attribute(queries, contexts, pipe._generator, metric="answer_f1_or_abstention", shapley="exact",
                    max_exact=args.n, n_resamples=1000)
    exact_s = time.perf_counter() - t0
    players = sorted({q.n_items for q in res.queries})
    print(f"exact Shapley: {len(queries)} queries, {min(sizes)}-{max(sizes)} items each, players after merging "
          f"duplicate texts {players[0]}-{players[-1]}, {res.n_undefined} undefined")
    print(f"  wall {exact_s:.1f} s (target <= 60 s): {'OK' if exact_s <= 60 else 'OVER'}")
    print(f"  generator calls {res.calls:,} (bound {len(queries)} x 2^{args.n} = {bound:,}; "
          f"ratio {res.calls / bound:.3f}): {'OK' if res.calls <= bound else 'OVER'}; cache hits {res.cache_hits:,}")
    print(f"  {res.calls / exact_s:,.0f} generations per second")

    t0 = time.perf_counter()
    mc = attribute(queries, contexts, pipe._generator, metric="answer_f1_or_abstention", shapley="monte_carlo",
                   permutations=args.permutations, n_resamples=1000)
    mc_s = time.perf_counter() - t0
    uncached = sum(args.permutations * (len(c) + 1) + len(c) + 1 for c in contexts.values())
    print(f"Monte Carlo Shapley ({args.permutations} permutations): wall {mc_s:.1f} s, calls {mc.calls:,} vs "
          f"{uncached:,} without the subset cache (ratio {uncached / max(mc.calls, 1):.1f}x)")
    err = max(abs(a.shapley - b.shapley) for qa, qb in zip(res.queries, mc.queries, strict=True)
              for a, b in zip(qa.items, qb.items, strict=True))
    worst_se = max((i.shapley_se for q in mc.queries for i in q.items), default=0.0)
    print(f"  largest |exact - Monte Carlo| share {err:.4f}; largest standard error {worst_se:.4f}")


if __name__ == "__main__":
    main()
