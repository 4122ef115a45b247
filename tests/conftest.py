"""Test-wide settings: single-threaded numerics so timings and results do not wobble on 2 cores."""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:  # torch is in the optional `dense` extra
    import torch

    torch.set_num_threads(1)
except ImportError:
    pass


import pytest  # noqa: E402


@pytest.fixture(params=["compiled", "numpy"])
def join_path(request, monkeypatch):
    """Run a test once with the compiled (numba) run-qrels join and once with the numpy reference path."""
    from ragassay.metrics import trec

    monkeypatch.setenv("RAGASSAY_JIT", "1" if request.param == "compiled" else "0")
    assert (trec._compiled(0) is not None) == (request.param == "compiled")
    return request.param
