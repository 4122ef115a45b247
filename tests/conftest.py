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
