"""``python -m ragassay`` is the same command line as the ``ragassay`` script."""

from __future__ import annotations

import subprocess
import sys

from ragassay import __version__


def test_python_dash_m_runs_the_cli_and_its_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "ragassay", "--version"], capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout.strip()) == (0, __version__)
    bad = subprocess.run([sys.executable, "-m", "ragassay", "trec", "/nonexistent/qrels", "/nonexistent/run"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: /nonexistent/qrels")
