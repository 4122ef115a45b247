"""pytest plugin: gate a pipeline change inside a test suite.

Registered through the ``pytest11`` entry point, so installing ragassay is enough. It adds

- the ``ragassay`` fixture (a :class:`RagassayHelper`): ``ragassay.evaluate(system, ...)`` stores runs in
  the session's store, and ``ragassay.gate(baseline, candidate)`` fails the test on a FAIL verdict with the
  gate's checks and claim sentences as the message (a WARN becomes a pytest warning);
- ``--ragassay-policy PATH`` (or the ini key ``ragassay_policy``): the gate policy YAML every gate uses;
- ``--ragassay-store PATH`` (ini ``ragassay_store``): the DuckDB store, so CI can cache it between jobs;
  by default a store in the session's temporary folder;
- a "ragassay gates" section in the terminal summary, one line per gate.

The module imports nothing heavy at load: pytest loads it in every session of every project that has
ragassay installed.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

_VERDICTS = pytest.StashKey[list]()


class RagassayGateWarning(UserWarning):
    """A gate that could not pass: underpowered, or a figure the run does not record."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ragassay", "ragassay evaluation gates")
    group.addoption("--ragassay-policy", default=None, metavar="PATH",
                    help="gate policy YAML for the ragassay fixture's gates (default: the built-in policy)")
    group.addoption("--ragassay-store", default=None, metavar="PATH",
                    help="DuckDB store for the ragassay fixture's runs (default: a per-session temporary file)")
    parser.addini("ragassay_policy", "gate policy YAML for the ragassay fixture", default=None)
    parser.addini("ragassay_store", "DuckDB store for the ragassay fixture", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_VERDICTS] = []


def _setting(config: pytest.Config, name: str) -> str | None:
    value = config.getoption(f"--ragassay-{name}") or config.getini(f"ragassay_{name}")
    return str(value) if value else None


class RagassayHelper:
    """What the ``ragassay`` fixture returns: evaluate systems into one store, gate pairs of runs."""

    def __init__(self, store: Path, policy: str | None, record: list):
        self.store = store
        self.policy = policy
        self._record = record

    def evaluate(self, system: Any, **kw: Any):
        """:func:`ragassay.evaluate` into this session's store (``store=`` may still be given)."""
        from ragassay.api import evaluate

        kw.setdefault("store", self.store)
        return evaluate(system, **kw)

    def run(self, ref: str):
        """A run already in the store (e.g. a cached baseline), by id, prefix or name."""
        from ragassay.api import load_run

        return load_run(ref, store=self.store)

    def gate(self, baseline: Any, candidate: Any, policy: Any = None):
        """Gate ``candidate`` against ``baseline`` (runs or references) under ``policy`` (default: the
        ``--ragassay-policy`` file). FAIL fails the test; WARN warns; the result is returned either way."""
        from ragassay.api import Run, load_run

        base = baseline if isinstance(baseline, Run) else load_run(str(baseline), store=self.store)
        result = base.gate(candidate, policy if policy is not None else self.policy)
        comp = result.comparison
        self._record.append((result.verdict, comp.run_a.name, comp.run_b.name))
        lines = [f"{c.verdict} {c.name}: {c.detail}" for c in result.checks if c.verdict != "PASS"]
        if result.verdict == "FAIL":
            pytest.fail("\n".join([f"ragassay gate FAIL: {comp.run_a.name} -> {comp.run_b.name}", *lines,
                                   *comp.claims]), pytrace=False)
        if result.verdict == "WARN":
            warnings.warn(RagassayGateWarning("ragassay gate WARN: " + "; ".join(lines)), stacklevel=2)
        return result


@pytest.fixture(scope="session")
def ragassay(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RagassayHelper:
    """Evaluate RAG systems and gate a candidate against a baseline; see :class:`RagassayHelper`."""
    config = request.config
    store = _setting(config, "store")
    policy = _setting(config, "policy")
    if policy is not None and not Path(policy).is_file():
        raise pytest.UsageError(f"--ragassay-policy {policy}: file not found; give the gate policy YAML")
    path = Path(store) if store else tmp_path_factory.mktemp("ragassay") / "ragassay.duckdb"
    return RagassayHelper(path, policy, config.stash[_VERDICTS])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    gates = config.stash.get(_VERDICTS, [])
    if not gates:
        return
    terminalreporter.section("ragassay gates")
    for verdict, base, cand in gates:
        terminalreporter.write_line(f"{verdict} {base} -> {cand}")
