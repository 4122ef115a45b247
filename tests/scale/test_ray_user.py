"""Ray as a Ray user runs it: relative paths, RAY_ADDRESS, `ray start` clusters found with ray:auto, token
auth, addresses that are not Ray, a worker process killed by SIGKILL, and ``--json`` on stdout throughout.

Two clusters serve the module: the package's in-process one (``ray_cluster``, its workers in the folder
pytest started in) and ``head``, a `ray start --head` cluster of one CPU with token auth, started in its own
folder with its own RAY_TMPDIR and free ports, so nothing it does reaches another cluster on this machine;
its processes are found by that folder and killed by pid at the end. The CLI runs against ``head`` are
subprocesses, so their stdout is a real process's stdout.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tests.scale.conftest import rows

from ragassay.analysis.demo import demo_config_dir
from ragassay.analysis.partitions import score_dataset_into_store, score_files_into_store
from ragassay.analysis.runner import load_inputs, run_pipeline_into_store
from ragassay.analysis.stream import stream_score_into_store
from ragassay.errors import InputError, RagassayError
from ragassay.executors import get_executor
from ragassay.executors.shared import PipelineRecipe, absolute_config
from ragassay.golden import bundled_golden_source
from ragassay.pipeline import load_config
from ragassay.pipeline.embedders import WordLlamaEmbedder
from ragassay.store import Store
from ragassay.trace.io import read_traces
from ragassay.trace.parquet import write_parquet_traces
from ragassay.trace.schema import config_sha, make_trace_id

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-c", "from ragassay.cli.app import console_main; console_main()"]
RAY_ENV = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_TMPDIR")


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _procs() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process now running."""
    out = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out[int(p)] = (ppid, cmd)
    return out


def _cluster_pids(root: str) -> set[int]:
    """The processes of the cluster whose files live under ``root`` (the GCS, raylet, monitors, which name
    it on their command line) and their descendants (workers and agents, which rename themselves)."""
    procs = _procs()
    pids = {p for p, (_, cmd) in procs.items() if root.encode() in cmd and p != os.getpid()}
    grew = True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in pids} - pids
        pids |= more
        grew = bool(more)
    return pids


def _env(**extra: str) -> dict[str, str]:
    """A CLI's environment: this machine's, less any Ray address, token or temp folder, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in RAY_ENV}
    env.update(RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", RAY_USAGE_STATS_ENABLED="0")
    env.update(extra)
    return env


def _ray_log(line: str) -> bool:
    """A line Ray's own loggers print on stderr (Python: "2026-... WARNING ..."; C++: "[2026-... W ...]")."""
    return line[:4].isdigit() or line.startswith("[")


class Head:
    """A `ray start --head` cluster with token auth: its address, token, temp folder and raylet pid."""

    def __init__(self, address: str, token: str, tmpdir: str, raylet: int) -> None:
        self.address, self.token, self.tmpdir, self.raylet = address, token, tmpdir, raylet

    def env(self, **extra: str) -> dict[str, str]:
        """:func:`_env` with RAY_TMPDIR the head's folder, where `ray start` recorded it."""
        return _env(RAY_TMPDIR=self.tmpdir, **extra)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    # a short folder: Ray's socket paths under it must stay below the 107-byte limit of a Unix socket
    tmpdir = tempfile.mkdtemp(prefix="rg", dir="/tmp")
    cwd = tmp_path_factory.mktemp("head-cwd")  # the workers' folder: not the one the tests pass paths from
    token = secrets.token_hex(16)
    port, dash, agent, agent_grpc, env_agent, metrics = _free_ports(6)
    env = _env(RAY_TMPDIR=tmpdir, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    ray_bin = str(Path(sys.executable).with_name("ray"))
    try:
        started = subprocess.run([ray_bin, "start", "--head", f"--port={port}", "--num-cpus=1",
                                  "--include-dashboard=false", "--disable-usage-stats",
                                  f"--object-store-memory={200 * 1024 * 1024}", f"--dashboard-port={dash}",
                                  f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
                                  f"--runtime-env-agent-port={env_agent}", f"--metrics-export-port={metrics}"],
                                 env=env, cwd=cwd, capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stderr[-3000:]
        address = (Path(tmpdir) / "ray" / "ray_current_cluster").read_text().strip()
        raylet = next(p for p, (_, cmd) in _procs().items() if b"raylet/raylet" in cmd and tmpdir.encode() in cmd)
        yield Head(address, token, tmpdir, raylet)
    finally:
        pids = _cluster_pids(tmpdir)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmpdir, ignore_errors=True)


def _cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _workdir(base: Path) -> Path:
    """A folder holding a run's inputs under relative names: the bm25 demo config with a relative
    cache_dir, and the bundled golden set's authoring file."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "bm25.yaml").write_text((demo_config_dir() / "bm25.yaml").read_text() + "\ncache_dir: cache\n")
    shutil.copy(bundled_golden_source(), base / "golden.yaml")
    return base


def _local_run(tmp_path: Path, inputs, trials: int) -> list[dict]:
    corpus, golden = inputs
    with Store.open(tmp_path / f"local-{trials}.duckdb") as st:
        run_id, _ = run_pipeline_into_store(st, demo_config_dir() / "bm25.yaml", corpus, golden, trials=trials)
        return rows(st, run_id)


# ---- the package's in-process cluster: its workers run in the folder pytest started in -----------------


@pytest.fixture(scope="module")
def ray_ex(ray_cluster):
    ex = get_executor("ray")
    yield ex
    ex.close()


def test_run_and_score_with_relative_paths_store_the_local_rows(tmp_path, monkeypatch, inputs, ray_ex, ray_cluster):
    corpus, golden = inputs
    def cwd() -> str:  # nested: pickled by value, the workers cannot import this test module
        return os.getcwd()

    worker_cwd = Path(ray_cluster.get(ray_cluster.remote(cwd).remote()))
    assert worker_cwd != tmp_path  # else relative paths would work by accident
    monkeypatch.chdir(tmp_path)
    cache = "cache-test-ray-user"
    hybrid = (demo_config_dir() / "hybrid.yaml").read_text()
    Path("ray.yaml").write_text(f"{hybrid}\ncache_dir: {cache}\n")
    Path("local.yaml").write_text(f"{hybrid}\ncache_dir: local-cache\n")  # cache_dir is not part of the config sha
    with Store.open("ray.duckdb") as st:
        run_id, _ = run_pipeline_into_store(st, "ray.yaml", corpus, golden, traces_dir="tr", executor=ray_ex)
        got = rows(st, run_id)
    with Store.open("local.duckdb") as st:
        want = rows(st, run_pipeline_into_store(st, "local.yaml", corpus, golden)[0])
    assert len(got) >= 171 * 9 and got == want
    # the workers built their chunks, BM25 index and passage vectors into the folder the config names
    assert {"chunks", "bm25", "embeddings"} <= {p.name for p in (tmp_path / cache).iterdir()}
    assert not (worker_cwd / cache).exists()

    (trace_file,) = Path("tr").glob("*.jsonl")
    files = [str(trace_file), "copy.jsonl"]  # relative, as Path("tr").glob gives them
    shutil.copy(trace_file, "copy.jsonl")
    header, records, _ = read_traces(trace_file)
    Path("ds").mkdir()
    write_parquet_traces(Path("ds/part-0.parquet"), header, records[:100])
    write_parquet_traces(Path("ds/part-1.parquet"), header, records[100:])
    scored = {}
    for label, executor in (("local", None), ("ray", ray_ex)):
        with Store.open(f"score-{label}.duckdb") as st:
            runs = score_files_into_store(st, files, corpus, golden, executor=executor)
            if executor is None:
                run_id, _ = stream_score_into_store(st, "ds", corpus, golden)
            else:
                run_id, _ = score_dataset_into_store(st, "ds", corpus, golden, executor=executor)
            scored[label] = [rows(st, r) for r, _ in runs] + [rows(st, run_id)]
            if executor is not None:  # a Ray run records where its traces are, wherever it is resumed from
                assert [st.get_run(r).source for r, _ in runs] == [f"traces:{tmp_path / f}" for f in files]
    assert [len(r) for r in scored["ray"]] == [len(want)] * 3
    assert scored["ray"] == scored["local"]

    # a bad input met on a worker is raised here as itself, as locally: its lines, not the worker's traceback
    lines = Path("copy.jsonl").read_text().splitlines()
    Path("other.jsonl").write_text("\n".join([json.dumps({**json.loads(lines[0]), "corpus_digest": "sha256:0"}),
                                              *lines[1:]]) + "\n")
    with Store.open("bad.duckdb") as st, pytest.raises(InputError) as err:
        score_files_into_store(st, ["other.jsonl"], corpus, golden, executor=ray_ex)
    assert type(err.value) is InputError
    assert str(err.value).startswith(f"{tmp_path / 'other.jsonl'}:1: the trace header's corpus_digest 'sha256:0'")
    assert "Traceback" not in str(err.value) and "ray::" not in str(err.value)


def test_a_configs_paths_reach_the_workers_absolute_and_the_run_keeps_them_as_written(tmp_path, monkeypatch, inputs):
    corpus, golden = inputs
    monkeypatch.chdir(tmp_path)
    folder = tmp_path.resolve() / "models" / "st"
    folder.mkdir(parents=True)
    Path("rel.yaml").write_text("name: rel\ncache_dir: c\ndense: {enabled: true, embedder: models/st}\n")
    cfg = load_config("rel.yaml")
    recipe = PipelineRecipe(cfg, corpus)
    assert recipe.worker_cfg.cache_dir == str(tmp_path.resolve() / "c")
    assert recipe.worker_cfg.dense.embedder == str(folder)
    assert recipe.config == cfg.hashed() and recipe.config["dense"]["embedder"] == "models/st"
    # built from the absolute paths (a table of vectors stands in for the model folder), hashed as written
    pipe = recipe(WordLlamaEmbedder())
    assert pipe.cfg.dense.embedder == str(folder)
    assert pipe.config_sha == recipe.config_sha == config_sha(cfg.hashed())
    assert pipe.header(golden.dataset_version, "rel").config["dense"]["embedder"] == "models/st"
    trace = pipe.run_query(golden.queries[0], 0)
    assert trace.trace_id == make_trace_id(config_sha(cfg.hashed()), golden.queries[0].query_id, 0)
    assert (tmp_path / "c" / "embeddings").is_dir()
    # the reranker's model folder likewise; model names, absolute paths and missing folders stay as written
    for model, want in (("models/st", str(folder)), ("minilm", "minilm"), ("models/none", "models/none"),
                        (str(folder), str(folder))):
        rk = cfg.reranker.model_copy(update={"kind": "cross-encoder", "model": model})
        assert absolute_config(cfg.model_copy(update={"reranker": rk})).reranker.model == want


def test_a_worker_ray_gives_up_on_stops_the_run_with_one_line_and_resume_finishes_it(tmp_path, inputs, ray_ex,
                                                                                    ray_cluster):
    corpus, golden = inputs
    config = demo_config_dir() / "bm25.yaml"
    want = _local_run(tmp_path, inputs, 2)

    def kill_for_good(done, total):
        if done == 64:  # both actors hold batches in flight: one of them is lost with its actor
            ray_cluster.kill(ray_ex.last_workers.actors[1], no_restart=True)

    with Store.open(tmp_path / "ray.duckdb") as st:
        with pytest.raises(RagassayError) as err:
            run_pipeline_into_store(st, config, corpus, golden, trials=2, executor=ray_ex, progress=kill_for_good)
        assert str(err.value).startswith("a Ray worker of this run is gone")
        assert "\n" not in str(err.value) and "--resume" in str(err.value)
        (rec,) = st.list_runs()
        assert rec.status == "running" and 0 < len(st.done_keys(rec.run_id)) < 2 * 171
        run_id, _ = run_pipeline_into_store(st, config, corpus, golden, resume=rec.run_id, executor=ray_ex)
        assert rows(st, run_id) == want


def test_what_ray_relays_from_the_cluster_is_printed_on_stderr(ray_ex, capsys):
    import ray._private.worker as worker

    # what Ray's error listener prints when a worker dies ("(raylet) A worker died ..."): stdout by default
    worker.print_to_stdstream({"lines": ["A worker died or was killed"], "pid": "raylet", "is_err": False},
                              ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and "A worker died or was killed" in err


# ---- addresses that are not a Ray cluster: refused at once, before anything is created -----------------


def test_a_server_that_is_not_ray_is_one_error_line_in_seconds_and_leaves_no_store(tmp_path, http_port):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    work = _workdir(tmp_path / "work")
    env = _env(RAY_TMPDIR=str(tmp_path))  # no `ray start` record there
    cases = [(["run", "bm25.yaml", "--executor", f"ray:127.0.0.1:{http_port}"], env,
              f"ray:127.0.0.1:{http_port}: no Ray cluster answers at 127.0.0.1:{http_port}", "not a Ray cluster"),
             (["run", "bm25.yaml", "--executor", f"ray:127.0.0.1:{closed}"], env,
              f"ray:127.0.0.1:{closed}: no Ray cluster answers at 127.0.0.1:{closed}", "Connection refused"),
             (["score", "a.jsonl", "--golden", "golden.yaml", "--executor", f"ray:127.0.0.1:{http_port}"], env,
              f"ray:127.0.0.1:{http_port}: no Ray cluster answers", "not a Ray cluster"),
             (["run", "bm25.yaml", "--executor", "ray"], {**env, "RAY_ADDRESS": f"127.0.0.1:{http_port}"},
              f"ray: no Ray cluster answers at 127.0.0.1:{http_port} (RAY_ADDRESS", "not a Ray cluster")]
    for args, case_env, where, reason in cases:
        t0 = time.perf_counter()
        done = _cli([*args, "--store", "s.duckdb", "--json"], case_env, work, timeout=60)
        assert time.perf_counter() - t0 < 10
        assert done.returncode == 2 and done.stdout == ""
        (line,) = [line for line in done.stderr.splitlines() if not _ray_log(line)]
        assert line.startswith(f"error: --executor {where}") and reason in line
        assert not (work / "s.duckdb").exists()


# ---- a `ray start` cluster: RAY_ADDRESS, ray:auto, tokens, a killed worker -------------------------------


def test_ray_address_points_ray_at_a_started_cluster_and_relative_paths_reach_it(tmp_path, inputs, head):
    want = _local_run(tmp_path, inputs, 1)
    work = _workdir(tmp_path / "work")
    done = _cli(["run", "bm25.yaml", "--store", "s.duckdb", "--executor", "ray", "--json"],
                head.env(RAY_ADDRESS=head.address, RAY_AUTH_TOKEN=head.token), work)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["run"]
    assert "Connected to Ray cluster" in done.stderr and "Started a local Ray instance" not in done.stderr
    with Store.open(work / "s.duckdb", read_only=True) as st:
        assert rows(st, run["run_id"]) == want
    assert {"chunks", "bm25"} <= {p.name for p in (work / "cache").iterdir()}


def test_ray_auto_finds_the_started_cluster_for_score(tmp_path, inputs, head):
    corpus, golden = inputs
    made = tmp_path / "made"
    with Store.open(tmp_path / "made.duckdb") as st:
        run_pipeline_into_store(st, demo_config_dir() / "bm25.yaml", corpus, golden, traces_dir=made)
    (trace_file,) = made.glob("*.jsonl")
    work = _workdir(tmp_path / "work")
    shutil.copy(trace_file, work / "a.jsonl")
    shutil.copy(trace_file, work / "b.jsonl")
    with Store.open(tmp_path / "local.duckdb") as st:
        want = [rows(st, r) for r, _ in score_files_into_store(st, [work / "a.jsonl", work / "b.jsonl"], corpus,
                                                                golden)]
    done = _cli(["score", "a.jsonl", "b.jsonl", "--golden", "golden.yaml", "--store", "s.duckdb", "--executor",
                 "ray:auto", "--json"], head.env(RAY_AUTH_TOKEN=head.token), work)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert "Connected to Ray cluster" in done.stderr
    with Store.open(work / "s.duckdb", read_only=True) as st:
        assert [rows(st, r["run"]["run_id"]) for r in runs] == want


def test_a_token_cluster_refuses_a_driver_without_its_token_in_one_line(tmp_path, head):
    work = _workdir(tmp_path / "work")
    args = ["run", "bm25.yaml", "--store", "s.duckdb", "--executor", f"ray:{head.address}", "--json"]
    cases = [(head.env(RAY_AUTH_TOKEN=head.token), "asks for an auth token and this driver sends none: set "
                                                   "RAY_AUTH_MODE=token"),
             (head.env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 32), "refused this driver's auth token")]
    for env, reason in cases:
        t0 = time.perf_counter()
        done = _cli(args, env, work, timeout=60)
        assert time.perf_counter() - t0 < 10
        assert done.returncode == 2 and done.stdout == ""
        (line,) = [line for line in done.stderr.splitlines() if not _ray_log(line)]
        assert line.startswith(f"error: --executor ray:{head.address}: the Ray cluster at {head.address} ")
        assert reason in line
        assert not (work / "s.duckdb").exists()


def test_a_worker_killed_by_sigkill_mid_run_leaves_the_rows_and_json_stdout_intact(tmp_path, inputs, head):
    trials = 6
    want = _local_run(tmp_path, inputs, trials)
    work = _workdir(tmp_path / "work")
    env = head.env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token)
    cli = subprocess.Popen([*CLI, "run", "bm25.yaml", "--trials", str(trials), "--store", "s.duckdb", "--executor",
                            f"ray:{head.address}", "--json"], env=env, cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    killed, deadline = None, time.monotonic() + 240
    try:
        # the actor's process, while it runs a batch: a worker of the head's raylet titled by its method
        while killed is None and cli.poll() is None and time.monotonic() < deadline:
            for pid, (ppid, cmd) in _procs().items():
                if ppid == head.raylet and cmd.startswith(b"ray::_PipelineActor.run"):
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            time.sleep(0.02)
        out, err = cli.communicate(timeout=300)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert killed is not None, "the run ended before a worker could be killed"
    assert cli.returncode == 0, err
    run = json.loads(out)["run"]  # Ray's "(raylet) A worker died ..." went to stderr, not into the JSON
    assert run["status"] == "complete"
    with Store.open(work / "s.duckdb", read_only=True) as st:
        assert rows(st, run["run_id"]) == want
