"""The cluster an executor would join is resolved as ``ray.init`` resolves it and checked within seconds: a
closed port, a silent listener and a server that is not Ray are each refused with one line (Ray itself
retries such an address for minutes)."""

import socket
import threading
import time

import pytest

from ragassay.errors import InputError
from ragassay.executors import check_executor
from ragassay.executors.ray import _handshake, cluster_address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A listener that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        yield s.getsockname()[1]


def _refused(address: str | None, timeout: float = 5.0) -> tuple[str, float]:
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        cluster_address(address, timeout=timeout)
    return str(err.value), time.perf_counter() - t0


def test_a_closed_port_is_refused_at_once(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = _closed_port()
    msg, seconds = _refused(f"127.0.0.1:{port}")
    assert seconds < 3
    assert msg.startswith(f"--executor ray:127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port}")
    assert "Connection refused" in msg and "ray start --head" in msg and "\n" not in msg


def test_an_http_server_is_not_a_ray_cluster(monkeypatch, http_port):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    msg, seconds = _refused(f"127.0.0.1:{http_port}")
    assert seconds < 3
    assert "something listens there, but it is not a Ray cluster" in msg


def test_a_silent_listener_is_refused_when_the_wait_runs_out(monkeypatch, silent_port):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    msg, seconds = _refused(f"127.0.0.1:{silent_port}", timeout=1.5)
    assert 1.4 < seconds < 4
    assert "nothing answered within 1.5 s" in msg


@pytest.fixture
def no_token(monkeypatch):
    """Token auth off for this process: the checks of an address found implicitly would otherwise switch it on
    for the rest of the session when this machine has a token, as ray.init does."""
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")


def test_ray_address_is_what_ray_and_ray_auto_join(monkeypatch, http_port, no_token):
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{http_port}")
    for address, spec in ((None, "ray"), ("auto", "ray:auto")):
        msg, _ = _refused(address)
        assert msg.startswith(f"--executor {spec}: no Ray cluster answers at 127.0.0.1:{http_port} (RAY_ADDRESS")
        assert "unset RAY_ADDRESS" in msg


def test_an_explicit_address_wins_over_ray_address(monkeypatch, http_port):
    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{http_port}")
    msg, _ = _refused(f"127.0.0.1:{port}")
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in msg and "Connection refused" in msg


def test_no_address_and_no_cluster_means_a_new_local_one(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` record here
    assert cluster_address(None) is None
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert cluster_address(None) is None


def test_a_stale_ray_start_record_is_named_with_the_way_out(monkeypatch, tmp_path, no_token):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    port = _closed_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.2:{port}\n")
    msg, _ = _refused(None, timeout=1.0)
    assert f"no Ray cluster answers at 127.0.0.2:{port} (recorded by `ray start` in {tmp_path}" in msg
    assert "`ray stop`" in msg


def test_other_forms_are_refused_or_left_to_ray(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    msg, _ = _refused("head-without-port")
    assert "Invalid address format" in msg
    assert cluster_address("ray://head:10001") == "ray://head:10001"  # Ray Client: left to Ray
    with pytest.raises(InputError, match="use local, ray"):
        check_executor("spark")


def test_the_handshake_reads_a_grpc_servers_settings_frame():
    # what a gRPC (HTTP/2) server sends first: a SETTINGS frame (type 4 in the frame header's 4th byte)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()

        def answer():
            conn, _ = srv.accept()
            with conn:
                conn.recv(64)
                conn.sendall(bytes([0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]))

        threading.Thread(target=answer, daemon=True).start()
        assert _handshake(f"127.0.0.1:{srv.getsockname()[1]}", 2.0) is None
