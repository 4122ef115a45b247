"""ragassay: an evaluation instrument for RAG pipelines.

``ragassay.evaluate`` and ``ragassay.Run`` load :mod:`ragassay.api` on first use (PEP 562), so
``import ragassay`` (and ``ragassay --help``) stays free of numpy, DuckDB and the rest.
"""

__version__ = "0.1.0"

_API = ("Comparison", "Run", "evaluate", "load_run")


def __getattr__(name: str):
    if name in _API:
        from ragassay import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ragassay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
