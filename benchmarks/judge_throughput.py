"""Judge client throughput against the local fake provider server (not a timed test).

The server (tests/judges/fake_provider.py, run in its own process so it does not share our GIL) adds 200 ms
of latency to every call; the client runs 2,000 calls at a concurrency limit of 32 through the real SDK.
The ideal is 32 / 0.2 s = 160 calls/s; the script prints calls/s and the share of that ideal, with and
without the DuckDB store recording every call.

    .venv/bin/python benchmarks/judge_throughput.py [--provider openai|anthropic] [--calls 2000]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
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
                start = time.perf_counter()
                run = judge.run(requests)
                elapsed = time.perf_counter() - start
                rate = args.calls / elapsed
                print(f"{args.provider:9s} {label:8s}: {args.calls} calls in {elapsed:.2f} s = {rate:.1f} calls/s, "
                      f"{rate / ideal:.1%} of the ideal {ideal:.0f} calls/s; outcomes {dict(run.counts)}")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
