"""ragassay: an evaluation instrument for RAG pipelines.

``ragassay.evaluate`` and ``ragassay.Run`` load :mod:`ragassay.api` on first use (PEP 562), so
``import ragassay`` (and ``ragassay --help``) stays free of numpy, DuckDB and the rest.
"""

from ragassay._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(("Comparison", "Run", "evaluate", "load_run"), "api"))
