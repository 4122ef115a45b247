"""Benchmark: `run` on the local executor vs. a 2-worker local Ray cluster, on the bundled demo.

For each config, the same run (``--trials T`` of the 171 demo queries) is timed end to end in this process
on the local executor and on Ray (the cluster started beforehand, its start-up not counted), and the rows
are checked equal. Printed: queries/s of each, the ratio (issue 17's target: >= 1.6x with a CPU-bound
stage on 2 workers) and the per-task overhead, measured as the time of a Ray round trip for an empty
batch on a warm actor.

Usage: python benchmarks/ray_scale.py [--trials T] [--config NAME_OR_PATH ...]

A NAME is a bundled demo config (bm25, hybrid_rerank, ...); a path is any config file, e.g.
``benchmarks/configs/hybrid_minilm.yaml``, whose MiniLM question embedding is the CPU-bound stage the target
names.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    import ray

    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
    from ragassay.executors import get_executor
    from ragassay.store import Store

    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--config", action="append", default=None)
    args = ap.parse_args()
    corpus, golden = load_inputs(None, None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024 * 1024)
    ex = get_executor("ray")
    out = Path(tempfile.mkdtemp())
    for name in args.config or ["bm25", "hybrid_rerank"]:
        cfg = Path(name) if name.endswith(".yaml") else demo_config_dir() / f"{name}.yaml"
        name = cfg.stem
        n = args.trials * len(golden)
        timings, results = {}, {}
        for label, executor in (("local", None), ("ray", ex)):
            with Store.open(out / f"{name}-{label}.duckdb") as st:
                t0 = time.perf_counter()
                run_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, trials=args.trials, executor=executor)
                timings[label] = time.perf_counter() - t0
                results[label] = st.results(run_id).drop_columns(["run_id", "latency_ms"]).to_pylist()
        same = results["local"] == results["ray"]
        print(f"{name}: {n} queries  local {n / timings['local']:.0f} q/s  ray(2) {n / timings['ray']:.0f} q/s  "
              f"ratio {timings['local'] / timings['ray']:.2f}x  rows equal: {same}")
    workers = ex.pipeline_workers(_Empty, golden)
    ray.get(workers.actors[0].run.remote([], False))
    t0 = time.perf_counter()
    reps = 200
    for _ in range(reps):
        ray.get(workers.actors[0].run.remote([], False))
    print(f"task overhead (empty batch round trip on a warm actor): {(time.perf_counter() - t0) / reps * 1000:.2f} ms")
    workers.close()
    ray.shutdown()


class _Empty:
    """A pipeline that does nothing: what is left of a task's time is Ray's."""

    config: dict = {}
    config_sha = ""

    def header(self, *a):
        return None

    def run_query(self, q, tr):
        return None

    def run_batch(self, items):
        return []


if __name__ == "__main__":
    main()
