"""A real driver killed by SIGKILL mid-run, as a Ray user's shell would kill it: `ragassay run --executor ray`
is a subprocess, killed once its traces file holds rows, then `--resume` finishes the run on Ray.

Two clusters: the one the driver starts for itself (``RAY_TMPDIR`` a fresh folder, so it joins nothing else on
this machine) must go with it; a `ray start --head` cluster it joined (``RAY_ADDRESS``) must outlive it, drop
the dead driver's actors and serve the resume.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from tests.scale import test_ray_user
from tests.scale.conftest import rows
from tests.scale.test_ray_user import CLI, _cluster_pids, _env, _local_run, _procs, _workdir

from ragassay.analysis.runner import load_inputs
from ragassay.store import Store

pytestmark = pytest.mark.slow

# the `ray start --head` cluster of one CPU with token auth, its own folder and ports: one for this module
head = test_ray_user.head

TRIALS = 3
KILL_AFTER = 150  # trace lines written before the driver is killed: well into the run, far from its end
# Ray's two per-node agents notice their raylet's death at once, then wait up to 60 s on the dead GCS to
# report it before they exit (docs/scale.md): the lines that show they are on their way out.
AGENT_EXIT_LOGS = {b"ray::DashboardAgent": ("dashboard_agent.log", "The parent is dead"),
                   b"ray::RuntimeEnvAgent": ("runtime_env_agent.log", "Raylet is dead! Exiting")}


@pytest.fixture(scope="module")
def inputs():
    return load_inputs(None, None)


def _title(cmd: bytes) -> bytes:
    return cmd.split(b"\x00", 1)[0]


def _tree(root: int) -> dict[int, bytes]:
    """``root``'s descendants now running: pid -> the first word of its command line (a Ray process's title)."""
    procs = _procs()
    pids, grew = {root}, True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in pids} - pids
        pids |= more
        grew = bool(more)
    return {p: _title(procs[p][1]) for p in pids - {root} if p in procs}


def _running(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie is not)."""
    alive = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.add(p)
    return alive


def _kill(pids: set[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def _start_and_kill(work: Path, env: dict[str, str], executor: str) -> tuple[int, dict[int, bytes]]:
    """Start the run, SIGKILL its driver once ``KILL_AFTER`` traces are written; the driver's pid and the
    processes it had started, as they were just before the kill."""
    cmd = [*CLI, "run", "bm25.yaml", "--executor", executor, "--store", "s.duckdb", "--trials", str(TRIALS),
           "--traces-dir", "tr", "--name", "killed", "--json"]
    # stderr to a file, not a pipe nobody reads while the run goes on: Ray's log lines could fill a pipe and
    # stall the driver before it writes the traces this waits for
    err = work / "driver.stderr"
    with err.open("wb") as fh:
        driver = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=fh)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            files = list((work / "tr").glob("*.jsonl"))
            if files and _lines(files[0]) > KILL_AFTER:
                break
            if driver.poll() is not None:
                pytest.fail(f"the run ended before it could be killed: {err.read_text()[-2000:]}")
            time.sleep(0.05)
        else:
            pytest.fail(f"the run wrote no traces within 60 s: {err.read_text()[-2000:]}")
        started = _tree(driver.pid)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
    assert driver.returncode == -signal.SIGKILL
    return driver.pid, started


def _resume_and_check(work: Path, env: dict[str, str], executor: str, golden, want: list[dict]) -> str:
    """``--resume killed`` on Ray: it completes with ``--json`` on stdout, and the store holds every (query,
    trial, metric) exactly once — the local run's rows — and the traces file every (query, trial)."""
    with Store.open(work / "s.duckdb", read_only=True) as st:
        (rec,) = st.list_runs()
        assert rec.status == "running"
        assert 0 < len(st.done_keys(rec.run_id)) < TRIALS * len(golden)
    done = subprocess.run([*CLI, "run", "bm25.yaml", "--executor", executor, "--store", "s.duckdb", "--traces-dir",
                           "tr", "--resume", "killed", "--json"], env=env, cwd=work, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)["run"]
    assert run["run_id"] == rec.run_id and run["status"] == "complete"
    with Store.open(work / "s.duckdb", read_only=True) as st:
        (rec,) = st.list_runs()
        assert rec.status == "complete"
        res = st.results(rec.run_id).to_pydict()
        keys = list(zip(res["query_id"], res["trial"], res["metric"], strict=True))
        assert len(keys) == len(set(keys)) == TRIALS * len(golden) * len(st.metrics(rec.run_id))
        assert len(st.done_keys(rec.run_id)) == TRIALS * len(golden)
        assert rows(st, rec.run_id) == want
    with (work / "tr" / f"{rec.run_id}.jsonl").open() as fh:
        traced = {(t["query_id"], t["trial"]) for t in map(json.loads, fh) if t["type"] == "trace"}
    assert traced == {(q.query_id, k) for q in golden.queries for k in range(TRIALS)}
    return done.stderr


def test_a_driver_killed_by_sigkill_takes_its_local_cluster_with_it_and_resume_finishes_the_run(tmp_path, inputs):
    _, golden = inputs
    want = _local_run(tmp_path, inputs, TRIALS)
    work = _workdir(tmp_path / "work")
    # a short folder (Ray's socket paths under it stay below 107 bytes), where no `ray start` cluster is recorded
    ray_tmp = tempfile.mkdtemp(prefix="rgk", dir="/tmp")
    env = _env(RAY_TMPDIR=ray_tmp)
    started: dict[int, bytes] = {}
    try:
        _, started = _start_and_kill(work, env, "ray")
        titles = set(started.values())
        assert {b"ray::_PipelineActor", b"ray::_PipelineActor.run"} & titles, titles
        assert any(t.endswith(b"/raylet") for t in titles) and any(t.endswith(b"/gcs_server") for t in titles)
        # the GCS, raylet, monitors and workers die with the driver; Ray's agents log that they are leaving
        deadline = time.monotonic() + 15
        while True:
            left = _running(set(started) | _cluster_pids(ray_tmp))
            lingering = {p for p in left if started.get(p) not in AGENT_EXIT_LOGS}
            if not lingering or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not lingering, {p: started.get(p) for p in lingering}
        logs = Path(ray_tmp) / "ray" / "session_latest" / "logs"
        for p in left:
            log, line = AGENT_EXIT_LOGS[started[p]]
            assert line in (logs / log).read_text(), f"{started[p]} ({p}) is running and has not seen its raylet die"
        _kill(left)  # they would exit on their own within a minute: not this test's to wait for

        stderr = _resume_and_check(work, env, "ray", golden, want)
        assert "Started a local Ray instance" in stderr
    finally:
        _kill(_running(set(started) | _cluster_pids(ray_tmp)))
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_cluster_the_killed_driver_joined_outlives_it_drops_its_actors_and_serves_the_resume(tmp_path, inputs, head):
    _, golden = inputs
    want = _local_run(tmp_path, inputs, TRIALS)
    work = _workdir(tmp_path / "work")
    env = head.env(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token)
    cluster = _running(_cluster_pids(head.tmpdir))
    gcs = {p for p, (_, cmd) in _procs().items() if p in cluster and _title(cmd).endswith(b"/gcs_server")}
    assert len(gcs) == 1 and head.raylet in cluster

    _, started = _start_and_kill(work, env, "ray")
    assert not started  # the driver starts no Ray process of its own: its workers are the head raylet's children

    def actors() -> set[int]:
        return {p for p, (pp, cmd) in _procs().items()
                if pp == head.raylet and _title(cmd).startswith(b"ray::_PipelineActor")}

    deadline = time.monotonic() + 20
    while actors() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not actors(), "the dead driver's actors still run on the cluster"
    assert _running(gcs | {head.raylet}) == gcs | {head.raylet}

    stderr = _resume_and_check(work, env, "ray", golden, want)
    assert "Connected to Ray cluster" in stderr and "Started a local Ray instance" not in stderr
    assert _running(gcs | {head.raylet}) == gcs | {head.raylet}


def test_rays_agents_wait_60_s_on_the_gcs_to_report_their_raylets_death():
    # what keeps the two agents of a dead local cluster alive for a minute (docs/scale.md): the report of the
    # raylet's death goes through this call, its GCS timeout fixed at 60 s whatever the cluster's config
    from ray._private import process_watcher, utils

    calls = []

    class Gcs:
        def publish_error(self, *args):
            calls.append(args)

    utils.publish_error_to_driver("RAYLET_DIED", "gone", gcs_client=Gcs())
    assert len(calls) == 1 and calls[0][-1] == 60
    assert "publish_error_to_driver" in process_watcher.report_raylet_error_logs.__code__.co_names
