"""Harness for the malformed-input suite: every bad input must end as a clean, one-line-per-problem error
(exit 2) or as a reported, counted problem — never a traceback, never a lost file.

Each ``test_<area>.py`` here parametrizes its cases; the ``cli`` fixture runs the real command line in
process and returns what a user would see.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def assert_clean_error(self, *fragments: str) -> None:
        """Exit 2, no traceback, every stderr line an ``error:`` line, and each fragment in stderr."""
        assert self.code == 2, f"exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"
        assert "Traceback" not in self.out + self.err, self.err
        lines = [x for x in self.err.splitlines() if x.strip()]
        assert lines and lines[0].startswith("error: "), self.err
        for f in fragments:
            assert f in self.err, f"{f!r} not in stderr:\n{self.err}"


@pytest.fixture
def cli(capsys):
    """Run ``ragassay ARGS`` in process; return exit code, stdout and stderr."""
    from ragassay.cli.app import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` (relative path -> digest): compare before/after to prove no loss."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
