"""Importing the streaming scorer loads neither pandas (pyarrow's pandas shim, 0.2-0.3 s, pulled in by any
``pa.array`` call at import time) nor the golden-set builder (0.16 s), which scoring never uses."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import ragassay.analysis.stream
import ragassay.golden as golden
loaded = [m for m in ("pandas", "ragassay.golden.builder") if m in sys.modules]
golden.build_golden  # the lazy export still resolves, and only then loads the builder
print(loaded, "ragassay.golden.builder" in sys.modules)
"""


def test_stream_import_loads_neither_pandas_nor_the_golden_builder():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "True"]
