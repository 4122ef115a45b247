"""Ray's relayed cluster events go to stderr for an executor's life only: Ray's own function is back once the
last open executor closes, so the rest of the process (a caller's Ray session, pytest's capture, a later
``ray.init`` binding the function for worker logs) prints as Ray does."""

import pytest

from ragassay.errors import InputError
from ragassay.executors import get_executor
from ragassay.executors.ray import RELAY, RayExecutor

pytestmark = pytest.mark.slow

EVENTS = iter("abcdefghijklmnopqrstuvwxyz")


def _is_rays_own(fn) -> bool:
    return fn.__module__ == "ray._private.worker" and fn.__qualname__ == "print_to_stdstream"


def _printed(capsys) -> tuple[str, str]:
    """What Ray's error listener prints for one event, each a new line: Ray folds repeats of a line (numbers
    aside), so each names its own letter."""
    import ray._private.worker as worker

    line = f"A worker died or was killed (event {next(EVENTS)})"
    worker.print_to_stdstream({"lines": [line], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    return capsys.readouterr()


def test_the_relay_to_stderr_lasts_from_the_first_executor_opened_to_the_last_closed(ray_cluster, capsys):
    import ray._private.worker as worker

    assert _is_rays_own(worker.print_to_stdstream) and RELAY.users == 0
    out, err = _printed(capsys)
    assert "A worker died" in out and "A worker died" not in err  # Ray's own behaviour, outside an executor
    first, second = get_executor("ray"), get_executor("ray")  # this process is connected: both join its session
    assert RELAY.users == 2 and not _is_rays_own(worker.print_to_stdstream)
    out, err = _printed(capsys)
    assert out == "" and "A worker died" in err
    first.close()
    out, err = _printed(capsys)
    assert out == "" and "A worker died" in err  # the second executor is still open
    first.close()  # a second close of the same executor changes nothing
    assert RELAY.users == 1
    second.close()
    assert RELAY.users == 0 and _is_rays_own(worker.print_to_stdstream)
    out, _ = _printed(capsys)
    assert "A worker died" in out
    assert ray_cluster.is_initialized()  # the caller's session outlives the executors that joined it


def test_an_executor_that_fails_to_join_leaves_rays_function_in_place(monkeypatch, ray_cluster):
    import ray._private.worker as worker

    from ragassay.executors import ray as ray_executor

    def refused(address):
        raise InputError(f"--executor ray:{address}: no Ray cluster answers")

    monkeypatch.setattr(ray_executor, "connect", refused)
    with pytest.raises(InputError, match="no Ray cluster answers"):
        RayExecutor("127.0.0.1:1")
    assert RELAY.users == 0 and _is_rays_own(worker.print_to_stdstream)
