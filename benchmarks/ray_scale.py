"""Benchmark: `run` on the local executor vs. a 2-worker local Ray cluster, on the bundled demo.

For each config, the same run (``--trials T`` of the 171 demo queries) is timed end to end in this process
on the local executor and on Ray (the cluster started beforehand, its start-up not counted), and the rows
are checked equal. Printed: queries/s of each, the ratio (issue 17's target: >= 1.6x with a CPU-bound
stage on 2 workers), the CPU seconds spent (this process, plus the Ray processes it started, sampled from
/proc every 0.2 s), the load average, and the per-task overhead: the round trip of an empty batch on a
warm actor, through the same actor method a run uses (nothing to run, nothing to score).

Usage: python benchmarks/ray_scale.py [--trials T] [--config NAME_OR_PATH ...] [--overhead-reps N]

``--tiny`` runs one trial of each config (the default two unless ``--config`` is given) and 20 empty-batch
round trips: a smoke run for CI (tests/test_benchmarks_run.py), whose figures mean nothing.

A NAME is a bundled demo config (bm25, hybrid_rerank, ...); a path is any config file, e.g.
``benchmarks/configs/hybrid_minilm.yaml``, whose MiniLM embedding is the CPU-bound stage the target names.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TICK = os.sysconf("SC_CLK_TCK")


def _descendant_cpu() -> dict[int, float]:
    """CPU seconds (user + sys) of every live process below this one."""
    parent, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / TICK
    me, out = os.getpid(), {}
    for pid in cpu:
        p = pid
        while p in parent and p != me and p > 1:
            p = parent[p]
        if p == me and pid != me:
            out[pid] = cpu[pid]
    return out


class CpuSampler:
    """The last-seen CPU seconds of each process below this one (processes that exit keep their last value)."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.seen.update(_descendant_cpu())
            self._stop.wait(0.2)

    def __enter__(self) -> CpuSampler:
        self.start = dict(_descendant_cpu())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.update(_descendant_cpu())

    def seconds(self) -> float:
        return sum(v - self.start.get(pid, 0.0) for pid, v in self.seen.items())


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    import ray

    from ragassay.analysis.runner import load_inputs

    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--config", action="append", default=None)
    ap.add_argument("--overhead-reps", type=int, default=200, help="empty-batch round trips timed")
    ap.add_argument("--tiny", action="store_true", help="one trial of each config, 20 round trips (CI)")
    args = ap.parse_args()
    if args.tiny:
        # the same configs as a full run: a crash on one of them must show at this size too
        args.trials, args.overhead_reps = 1, 20
    corpus, golden = load_inputs(None, None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 1024 * 1024)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _compare(ray, args, corpus, golden, Path(tmp))
    finally:
        ray.shutdown()


def _compare(ray, args, corpus, golden, out: Path) -> None:
    from ragassay.analysis.demo import demo_config_dir
    from ragassay.analysis.runner import run_pipeline_into_store
    from ragassay.executors import get_executor
    from ragassay.store import Store

    ex = get_executor("ray")
    try:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for name in args.config or ["bm25", "hybrid_rerank"]:
            cfg = Path(name) if name.endswith(".yaml") else demo_config_dir() / f"{name}.yaml"
            name = cfg.stem
            n = args.trials * len(golden)
            timings, cpus, results = {}, {}, {}
            for label, executor in (("local", None), ("ray", ex)):
                with Store.open(out / f"{name}-{label}.duckdb") as st, CpuSampler() as sampler:
                    c0, t0 = _self_cpu(), time.perf_counter()
                    run_id, _ = run_pipeline_into_store(st, cfg, corpus, golden, trials=args.trials,
                                                        executor=executor)
                    timings[label] = time.perf_counter() - t0
                    driver = _self_cpu() - c0
                    results[label] = st.results(run_id).drop_columns(["run_id", "latency_ms"]).to_pylist()
                cpus[label] = (driver, sampler.seconds())
            same = results["local"] == results["ray"]
            print(f"{name}: {n} queries  local {n / timings['local']:.1f} q/s ({timings['local']:.1f} s wall, "
                  f"{cpus['local'][0]:.1f} s CPU)  ray(2) {n / timings['ray']:.1f} q/s ({timings['ray']:.1f} s wall, "
                  f"driver {cpus['ray'][0]:.1f} s + workers {cpus['ray'][1]:.1f} s CPU)  "
                  f"ratio {timings['local'] / timings['ray']:.2f}x  rows equal: {same}")
        overhead = _overhead(ray, ex, golden, args.overhead_reps)
        print(f"task overhead (empty batch round trip on a warm actor, {args.overhead_reps} reps): "
              f"{overhead * 1000:.2f} ms")
    finally:
        ex.close()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _overhead(ray, ex, golden, reps: int) -> float:
    workers = ex.pipeline_workers(_Empty(), golden)
    workers.header(None, "")
    args = ([], False, workers._shared, [ray.put(_no_score)])
    # warm every actor, not only the timed one: the others' header calls would otherwise still be running when
    # the executor closes, and Ray would print their failure on stdout
    ray.get([actor.run.remote(*args) for actor in workers.actors])
    t0 = time.perf_counter()
    for _ in range(reps):
        ray.get(workers.actors[0].run.remote(*args))
    elapsed = (time.perf_counter() - t0) / reps
    workers.close()
    return elapsed


def _no_score(keys, traces):
    from ragassay.executors.local import BatchResult

    return BatchResult(None, [], {}, 0.0, None)


class _Empty:
    """A recipe for a pipeline that does nothing: what is left of a task's time is Ray's."""

    config: dict = {}
    config_sha = ""

    def embedder(self):
        return None

    def __call__(self, embedder=None):
        return self

    def header(self, *a):
        return None

    def run_query(self, q, tr):
        return None

    def run_batch(self, items):
        return []


if __name__ == "__main__":
    main()
