"""Markdown escaping for user text (run, metric and stratum names, questions, answers), shared by the
Markdown comparison (:mod:`ragassay.report.markdown`) and the case export of the slice analyses: a base
helper, so both layers import it downward."""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def md_escape(text: object) -> str:
    """``text`` with Markdown and HTML punctuation backslash-escaped and newlines folded to spaces."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
