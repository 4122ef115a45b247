"""An unreachable Ray address is a clean error within seconds (Ray itself retries for minutes)."""

import socket
import time

import pytest

from ragassay.errors import InputError
from ragassay.executors.ray import _check_reachable


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_refused_quickly_with_the_fix():
    port = _closed_port()
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        _check_reachable(f"127.0.0.1:{port}")
    assert time.perf_counter() - t0 < 5
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in str(err.value)
    assert "ray start --head" in str(err.value)


def test_a_listening_port_and_non_host_port_forms_pass():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        _check_reachable(f"127.0.0.1:{s.getsockname()[1]}")
    for address in ("auto", "ray://head:10001", "localhost"):
        _check_reachable(address)  # left to Ray
