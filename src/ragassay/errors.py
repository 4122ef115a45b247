"""Typed errors. Each message says where the problem is and what to do about it."""

from __future__ import annotations


class RagassayError(Exception):
    """Base class: every error ragassay raises on bad input or bad state."""


class InputError(RagassayError):
    """Bad input at a boundary (a file, a flag, a record). The message names the place and a fix."""


class CorpusError(InputError):
    """A corpus file or directory could not be loaded."""


class GoldenBuildError(InputError):
    """A golden set failed to build; `problems` lists every failure, one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = f"golden set build failed with {len(self.problems)} problem(s); nothing was written"
        super().__init__(head + "\n" + "\n".join(self.problems))


class SchemaError(InputError):
    """A record does not match its schema (trace, config, qrels, run)."""


class PinMismatchError(RagassayError):
    """Two runs cannot be compared because a pin (dataset, corpus, metric version) differs."""
