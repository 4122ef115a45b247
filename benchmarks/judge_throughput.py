"""Judge client throughput against the local fake provider server (not a timed test).

The server (tests/judges/fake_provider.py, run in its own process so it does not share our GIL) adds 200 ms
of latency to every call; the client runs 2,000 calls at a concurrency limit of 32 through the real SDK.
The ideal is 32 / 0.2 s = 160 calls/s; the script prints calls/s and the share of that ideal, with and
without the DuckDB store recording every call, and the CPU milliseconds each call costs the client (this
process, user + sys) and the fake server: on a shared machine those are what bound the rate. The SDK is
imported and its client class loaded before the clock starts; that one-time cost is printed on its own line.

    .venv/bin/python benchmarks/judge_throughput.py [--provider openai|anthropic] [--calls 2000]

``--tiny`` runs 64 calls: a smoke run for CI
(tests/test_benchmarks_run.py), whose figures mean nothing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragassay.judges.protocol import ItemKey, JudgeRequest, Sampling, SupportVerdict
from ragassay.judges.providers import AnthropicJudge, OpenAIJudge, Price, RetryPolicy
from ragassay.store import RunRecord, Store

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_of(pid: int) -> float:
    """User + sys seconds of another process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tiny", action="store_true", help="64 calls (CI)")
    args = parser.parse_args()
    if args.tiny:
        args.calls = 64
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "judges" / "fake_provider.py"), "--latency", str(LATENCY),
         "--lifetime", "600"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        base_url = server.stdout.readline().strip()
        if not base_url.startswith("http://127.0.0.1:"):
            raise SystemExit(f"fake provider did not start (printed {base_url!r})")
        ideal = args.concurrency / LATENCY
        cls = OpenAIJudge if args.provider == "openai" else AnthropicJudge
        start = time.perf_counter()
        importlib.import_module(args.provider)
        print(f"{args.provider} SDK import (once per process, not in the rates below): "
              f"{time.perf_counter() - start:.2f} s; load average {os.getloadavg()[0]:.2f}")
        with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "bench.duckdb") as store:
            for label, use_store in (("no store", False), ("store", True)):
                run_id = store.create_run(RunRecord(name=f"bench-{label}"))
                requests = [
                    JudgeRequest(ItemKey(run_id, f"q{i}", 0, "support:0"), "support", SupportVerdict,
                                 "RUBRIC: does the context support the claim?",
                                 f"claim {i} [[item:{label}-{i}]]")
                    for i in range(args.calls)
                ]
                judge = cls(Sampling("bench-model", max_tokens=64), {"bench-model": Price(0.0, 0.0)},
                            api_key="sk-local", base_url=base_url, concurrency=args.concurrency,
                            retry=RetryPolicy(timeout_s=10.0), store=store if use_store else None)
                cpu, server_cpu = _cpu_self(), _cpu_of(server.pid)
                start = time.perf_counter()
                run = judge.run(requests)
                elapsed = time.perf_counter() - start
                cpu, server_cpu = _cpu_self() - cpu, _cpu_of(server.pid) - server_cpu
                rate = args.calls / elapsed
                print(f"{args.provider:9s} {label:8s}: {args.calls} calls in {elapsed:.2f} s = {rate:.1f} calls/s, "
                      f"{rate / ideal:.1%} of the ideal {ideal:.0f} calls/s; CPU per call: client "
                      f"{cpu / args.calls * 1e3:.2f} ms, server {server_cpu / args.calls * 1e3:.2f} ms; "
                      f"outcomes {dict(run.counts)}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
