"""Every script under benchmarks/ runs to completion at its tiny size and prints its figures as numbers.

Parametrized over the listing of ``benchmarks/*.py``: a script needs an entry in ``RUNS`` (its tiny
invocations and the lines that carry its figures), so a new script without a tiny mode fails here. Each runs as
its own process, as a user runs it; at this size the figures mean nothing, so the test asks only that each
figure line is printed and that every figure on it parses as a finite number (plus the agreement checks some
scripts print, which must hold at any size). The two generators of bundled label files write to a temporary
folder, and what they write must equal the bundled files.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.report.browser_probe import chromium_path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
BUNDLED_EXAMPLES = ROOT / "src" / "ragassay" / "data" / "judge_examples"
NUM = r"(-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)"
TMP = "{tmp}"  # an argument replaced by the test's temporary folder

# More than a few seconds: a Ray cluster, several whole `ragassay` processes, or ranx compiling its numba
# kernels on first use (retrieval_metrics.py).
SLOW = {"ray_scale.py", "ray_score_scale.py", "report_scale.py", "retrieval_metrics.py", "run_scale.py",
        "score_scale.py"}

STORE_WRITE = ["rows written {n} in {n} batches of {n} rows",
               "write (open..close) {n} s wall, {n} s CPU {n} rows/s file {n} MB",
               "results_wide {n} s wall, {n} s CPU shape ({n}, {n}), {n} undefined (NaN)",
               "memory duckdb_memory() up to {n} MB; RSS {n} MB before the writes, {n} MB after the last batch; "
               "peak RSS {n} MB"]
if chromium_path() is not None:
    REPORT_ROW = "{n} {n} {n} {n} {n} {n} {n} {n} {n}-{n}"
else:
    REPORT_ROW = "peer chromium not installed"

# script -> [(arguments, figure lines)]; in a line, {n} is a number, {any} any text, spaces any whitespace.
RUNS: dict[str, list[tuple[list[str], list[str]]]] = {
    "ann_curve.py": [(["--tiny"], [
        "TOTAL {n} s (target <= 60 s)",
        "ground truth + recall on {n} queries: ragassay {n} ms, per-query loop {n} ms, ratio {n}x; recall {n} vs {n}",
    ])],
    "bootstrap.py": [(["--tiny"], [
        "ragassay bootstrap_deltas (all metrics at once): {n} s",
        "scipy.stats.bootstrap (per metric, paired): {n} s",
        "speed ratio scipy / ragassay: {n}x",
        "max |CI endpoint difference| over {n} endpoints: {n} = {n} x the Monte-Carlo SE",
    ])],
    "chunk_metrics.py": [(["--tiny"], [
        "values equal on every query",
        "per-query interval loop (Chroma) {n} {n}",
        "ragassay token_metrics {n} {n}x",
        "mean recall {n} precision {n} IoU {n}",
    ])],
    "cli_startup.py": [(["--tiny"], [
        "ragassay --help {n} s | {n} s",
        "ragassay --version {n} s | {n} s",
        "ragassay trec ({n} queries x {n} docs) {n} s | {n} s",
        "pytrec_eval script (same files) {n} s | {n} s",
        "ratio pytrec_eval / ragassay trec: {n}x wall, {n}x CPU (largest |mean difference| {n};",
    ])],
    "convert_scale.py": [(["--tiny", "--out", TMP], [
        "convert {n} {n} {n}",
        "score jsonl {n} {n} {n}",
        "score parquet {n} {n} {n}",
        "JSONL {n} MB -> Parquet {n} MB ({n} files)",
        "stored runs equal: True",
    ])],
    "golden_build.py": [(["--tiny"], [
        "golden build: {n} queries over {n} MB in {n} docs: corpus load {n} s, build {n} s (total {n} s), "
        "peak RSS {n} MB",
    ])],
    "golden_load.py": [(["--tiny"], [
        "queries {n} load average {n}",
        "load_golden cpu {n} s wall {n} s",
        "load_corpus cpu {n} s wall {n} s",
        "Labels cpu {n} s wall {n} s",
    ])],
    "judge_throughput.py": [(["--tiny"], [
        "openai SDK import (once per process, not in the rates below): {n} s; load average {n}",
        "openai no store: {n} calls in {n} s = {n} calls/s, {n}% of the ideal {n} calls/s; CPU per call: "
        "client {n} ms, server {n} ms; outcomes {'ok': {n}}",
        "openai store : {n} calls in {n} s = {n} calls/s, {n}% of the ideal {n} calls/s; CPU per call: "
        "client {n} ms, server {n} ms; outcomes {'ok': {n}}",
    ])],
    "judge_validation.py": [(["--tiny"], [
        "lexical {n} items: judge {n} s, figures {n} s, total {n} s (target 5 s); kappa {n}",
        "embedding {n} items: judge {n} s, figures {n} s, total {n} s (target 5 s); kappa {n}",
    ])],
    "make_judge_examples.py": [(["--out", TMP], [
        "wrote {n} citation items to", "wrote {n} relevance items to", "wrote {n} criterion items to",
        "wrote {n} nuggets items to",
    ])],
    "make_pairwise_examples.py": [(["--out", TMP], ["wrote {n} pairs to"])],
    "online_ingest.py": [(["--tiny"], [
        "simulate {n} records over {n} days: {n} s wall, {n} MB JSONL",
        "ingest {n} records: {n} s wall, {n} s CPU, {n} records/s, peak RSS {n} MB, {n} MB Parquet in {n} files",
        "ingest {n} records: {n} s wall, peak RSS {n} MB (memory at a quarter of the records)",
        "re-ingest of the same file (skipped by sha256): {n} s wall",
        "signals over {n} days: {n} s wall, peak RSS {n} MB",
        "rephrase rule vs simulated truth: precision {n} recall {n} ({n} true rephrases)",
        "judge (local lexical) on a {n}% sample, failures x{n}, over {n} days: {n} s wall, {n} s CPU, peak RSS {n} "
        "MB, {n} requests judged ({n} with a failure signal) of {n}",
        "faithfulness: weighted {n} [{n}, {n}] (n={n}), unweighted {n}, simulator's truth {n}",
    ])],
    "pipeline.py": [
        (["--tiny"], [
            "queries {n} chunks {n}",
            "cold (empty cache{any}: {n} s wall, {n} s CPU",
            "warm (same cache{any}: {n} s wall, {n} s CPU",
            "mean per-query ms (query phase / queries, batched): cold {n}, warm {n}",
            "cold / warm = {n}x wall, {n}x CPU",
        ]),
        (["--tiny", "--tune-floor"], [
            "floor chosen on the odd half (max over-refusal {n}): {n}",
            "{n} | {n} {n} | {n} {n} <- chosen",
        ]),
    ],
    "ray_scale.py": [(["--tiny"], [
        *(f"{config}: {{n}} queries local {{n}} q/s ({{n}} s wall, {{n}} s CPU) ray(2) {{n}} q/s ({{n}} s wall, "
          "driver {n} s + workers {n} s CPU) ratio {n}x rows equal: True" for config in ("bm25", "hybrid_rerank")),
        "task overhead (empty batch round trip on a warm actor, {n} reps): {n} ms",
    ])],
    "ray_score_scale.py": [(["--tiny"], [
        "scored {n} traces ({n} problems, {n} missing) on 2 Ray workers in {n} s wall",
        "driver: peak RSS {n} MB, CPU {n} s",
        "workers (the two largest): peak RSS {n}, {n} MB",
    ])],
    "report_scale.py": [(["--tiny"], [REPORT_ROW])],
    "retrieval_metrics.py": [(["--tiny"], [
        "per-query values identical to pytrec_eval (bit for bit): {n} of {n}",
        "max |ragassay - pytrec_eval| over means: {n}; files vs memory: {n}",
        "ranx ndcg@10 {n} vs ragassay {n}; ir_measures Judged@10 {n} vs ragassay {n}",
        *(f"{src} {tool} {{n}} {{n}}" for src, tool in (
            ("files", "ragassay"), ("files", "pytrec_eval"), ("files", "ir_measures"), ("files", "ranx (cold)"),
            ("files", "ranx (warm)"), ("memory", "ragassay"), ("memory", "pytrec_eval"),
            ("memory", "ranx (warm)"), ("memory", "ir_measures"), ("memory", "ragassay 1thr"),
            ("memory", "ragassay numpy"), ("memory", "ragassay 1st"), ("memory", "ragassay 2nd"),
            ("memory", "ragassay -dup"))),
    ])],
    "run_scale.py": [(["--tiny"], [
        "{n} queries batched run 1: {n} s wall {n} s CPU {n} MB",
        "{n} queries per query run 1: {n} s wall {n} s CPU {n} MB",
        "{n} queries bm25s run 1: {n} s wall {n} s CPU {n} MB",
        "| {n} | {n} | {n} | {n} | {n} | {n} | {n} | {n} | {n} | {n} | {n}, {n} |",
    ])],
    "score_scale.py": [(["--tiny"], [
        "{n} traces ({n} MB) run 1: ragassay {n} s (cpu {n}) {n} MB | orjson script {n} s (cpu {n}) {n} MB | "
        "ratio {n} (cpu {n}) | load {n}",
        "| {n} | {n} | {n} / {n} | {n} | {n} | {n} | {n} |",
        "{n} traces cost {n}x {n} (median wall, whole process)",
    ])],
    "shapley.py": [(["--tiny"], [
        "exact Shapley: {n} queries, {n}-{n} items each, players after merging duplicate texts {n}-{n}, "
        "{n} undefined",
        "wall {n} s (target <= 60 s)",
        "generator calls {n} (bound {n} x 2^{n} = {n}; ratio {n}): OK; cache hits {n}",
        "{n} generations per second",
        "Monte Carlo Shapley ({n} permutations): wall {n} s, calls {n} vs {n} without the subset cache "
        "(ratio {n}x)",
        "largest |exact - Monte Carlo| share {n}; largest standard error {n}",
    ])],
    "store.py": [(["--tiny"], [
        "store + compare: wrote {n} rows (2 runs x {n} queries x {n} metrics) in {n} s; compare over {n} metric x "
        "stratum rows with {n} resamples in {n} s; total {n} s (target <= 10 s); peak RSS {n} MB",
    ])],
    "store_write.py": [
        (["--tiny"], STORE_WRITE),
        (["--tiny", "--keyed"], ["== unkeyed results table (schema version 2)",
                                 "== keyed results table (schema version 1)", *STORE_WRITE]),
    ],
}


def _regex(line: str) -> re.Pattern:
    """A figure line as a regex: ``{n}`` a number (captured), ``{any}`` any text, each space any whitespace."""
    words = []
    for word in line.split():
        parts = [re.escape(p).replace(re.escape("{any}"), ".*?") for p in word.split("{n}")]
        words.append(NUM.join(parts))
    return re.compile(r"\s+".join(words))


def test_regex_reads_numbers_and_only_numbers():
    rx = _regex("ratio {n}x wall, {n}x CPU (load {n})")
    assert rx.search("  ratio 2.16x wall,   1,530.5x CPU (load 1e-03)").groups() == ("2.16", "1,530.5", "1e-03")
    assert rx.search("ratio nanx wall, 1.0x CPU (load 2)") is None
    assert _regex("cold (empty{any}: {n} s").search("cold (empty cache: chunk): 0.6 s").groups() == ("0.6",)


def _script_params() -> list:
    return [pytest.param(path.name, id=path.name, marks=[pytest.mark.slow] if path.name in SLOW else [])
            for path in sorted(BENCH.glob("*.py"))]


def _run_script(script: str, folder: Path) -> list[tuple[list[str], subprocess.CompletedProcess]]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    done = []
    for k, (args, _) in enumerate(RUNS[script]):
        argv = [str(folder / f"out{k}") if a == TMP else a for a in args]
        done.append((argv, _bounded([sys.executable, str(BENCH / script), *argv], env, 300)))
    return done


def _bounded(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` run in a session of its own; past ``timeout`` seconds the whole session is killed (a script's
    Ray cluster or fake server with it, not only the script), and the result says so in its stderr."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process outside the session holds the pipes: give up on them
            proc.kill()
            out, err = "", ""
        err += f"\n(killed after {timeout} s, with every process of its session)"
    return subprocess.CompletedProcess(cmd, proc.wait(), out, err)


@pytest.fixture(scope="module")
def started(request, tmp_path_factory):
    """Every selected script's runs, started on first use two at a time, slow ones first: most of a tiny run
    is interpreter start-up, imports and waiting on a child or a cluster, so two overlap well on two cores."""
    selected = [item.callspec.params["script"] for item in request.session.items
                if item.path == Path(__file__) and hasattr(item, "callspec") and "script" in item.callspec.params]
    order = sorted((s for s in selected if s in RUNS), key=lambda s: s not in SLOW)
    pool = ThreadPoolExecutor(max_workers=2)
    futures = {s: pool.submit(_run_script, s, tmp_path_factory.mktemp(s.removesuffix(".py"))) for s in order}
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("script", _script_params())
def test_benchmark_runs_at_tiny_size_and_prints_numbers(script, started):
    assert script in RUNS, (f"benchmarks/{script} has no tiny run here: give it a --tiny size (documented at the "
                            f"top of the script and in docs/performance.md) and add it to RUNS")
    runs = started[script].result()
    for (argv, proc), (_, lines) in zip(runs, RUNS[script], strict=True):
        assert proc.returncode == 0, f"{script} {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        # no task of a Ray script is left running when it closes its executor (Ray would report it on stdout)
        assert "(raylet)" not in proc.stdout, proc.stdout
        for line in lines:
            found = _regex(line).search(proc.stdout)
            assert found, f"{script} {' '.join(argv)} did not print {line!r}; it printed:\n{proc.stdout}"
            for value in found.groups():
                assert math.isfinite(float(value.replace(",", ""))), (script, line, value)
    if script.startswith("make_"):
        out = Path(runs[0][0][-1])
        written = sorted(p.name for p in out.iterdir())
        assert written, f"{script} wrote nothing"
        for name in written:
            assert (out / name).read_bytes() == (BUNDLED_EXAMPLES / name).read_bytes(), \
                f"{name}: the bundled file is not what benchmarks/{script} makes; rerun it without --out"


def test_ray_score_scale_samples_only_the_workers_of_its_own_cluster():
    # every Ray worker on the machine used to count: on a shared machine (or beside ray_scale.py in this very
    # file) another cluster's workers could be reported as this run's
    mod = _bench_module("ray_score_scale.py")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "default_worker.py"]
    spawn = "import subprocess, sys; p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); p.wait()"
    outside = subprocess.Popen(sleeper)
    helper = subprocess.Popen([sys.executable, "-c", spawn, *sleeper], stdout=subprocess.PIPE, text=True)
    inside = int(helper.stdout.readline())
    try:
        peaks = mod._worker_peaks(helper.pid)
        assert set(peaks) == {inside} and peaks[inside] > 0
        assert outside.pid in mod._worker_peaks(os.getpid())  # the same scan finds a worker of another tree
    finally:
        for pid in (inside, outside.pid, helper.pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        outside.wait(timeout=10)
        helper.wait(timeout=10)
        helper.stdout.close()


def _bench_module(script: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{script.removesuffix('.py')}", BENCH / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_retrieval_metrics_synthesizes_a_run_shallower_than_its_judged_docs():
    # a query judges up to 21 docs; at depth 10 the retrieved ranks are capped at 10 and the coin flips per
    # retrieved doc must follow (they used not to: a shape error at any depth below 21)
    mod = _bench_module("retrieval_metrics.py")
    (run_q, run_d, _), (qrel_q, qrel_d, grades) = mod.synthesize(50, 10)
    assert len(run_q) == len(run_d) == 500 and len(qrel_q) == len(qrel_d) == len(grades) > 0
    judged = {(q, d) for q, d in zip(qrel_q.tolist(), qrel_d.tolist(), strict=True)}
    assert len(judged) == len(qrel_q)  # each (query, doc) judged once


def test_a_script_past_its_time_is_killed_with_its_whole_session():
    # a script that started a helper (as ray_scale.py starts a cluster) and then hangs: both go
    hang = ("import subprocess, sys, time; h = subprocess.Popen([sys.executable, '-c', 'import time; "
            "time.sleep(120)']); print(h.pid, flush=True); time.sleep(120)")
    t0 = time.monotonic()
    res = _bounded([sys.executable, "-c", hang], dict(os.environ), 2)
    assert time.monotonic() - t0 < 30 and res.returncode == -signal.SIGKILL
    assert res.stderr.endswith("(killed after 2 s, with every process of its session)")
    helper = int(res.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{helper}").exists() and "Z" not in _state(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{helper}").exists() or _state(helper) == "Z"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
