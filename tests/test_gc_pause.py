"""gc_paused is counted across threads: overlapping pauses keep the collector off until the last ends, and
only then is the state before the first restored (the collector's switch is one per process)."""

from __future__ import annotations

import gc
import threading

import pytest

from ragassay._gc import gc_paused


@pytest.mark.parametrize("enabled_before", [True, False])
def test_overlapping_pauses_on_two_threads_restore_the_state_once_the_last_ends(enabled_before):
    was = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        inside, release, states = threading.Event(), threading.Event(), []

        def other():
            with gc_paused():
                inside.set()
                release.wait(10)
                states.append(("other ends", gc.isenabled()))

        with gc_paused():
            t = threading.Thread(target=other)
            t.start()
            assert inside.wait(10)
        states.append(("main ended first", gc.isenabled()))  # the other thread still pauses
        release.set()
        t.join()
        assert states == [("main ended first", False), ("other ends", False)]
        assert gc.isenabled() is enabled_before
    finally:
        (gc.enable if was else gc.disable)()


def test_a_nested_pause_and_an_exception_restore_the_state():
    was = gc.isenabled()
    gc.enable()
    try:
        with pytest.raises(ValueError), gc_paused():
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
            raise ValueError("stop")
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
