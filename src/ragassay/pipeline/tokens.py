"""The offline, deterministic token counter used for chunk sizes and the packing budget.

``regex-wordpunct-v1``: a token is a maximal run of word characters or one non-space, non-word character
(regex ``\\w+|[^\\w\\s]``, Unicode-aware). It is not any model's tokenizer; it is stable across machines and
versions so budgets are comparable between runs. Its name is recorded in every run header.
"""

from __future__ import annotations

import re

import numpy as np

TOKEN_COUNTER_NAME = "regex-wordpunct-v1"
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Number of regex-wordpunct-v1 tokens in ``text`` (0 for empty or whitespace-only text)."""
    return len(_TOKEN.findall(text))


def token_spans(text: str) -> np.ndarray:
    """(n, 2) int64 array of [start, end) character offsets of the tokens of ``text``."""
    spans = [m.span() for m in _TOKEN.finditer(text)]
    return np.array(spans, dtype=np.int64).reshape(-1, 2)
