"""`ragassay.stats` exports every name on first use, and importing the bootstrap alone does not load scipy.stats."""

import subprocess
import sys

import ragassay.stats as stats


def test_every_exported_name_resolves_to_its_submodules_object():
    import importlib

    for name, module in stats._EXPORTS.items():
        assert getattr(stats, name) is getattr(importlib.import_module(f"ragassay.stats.{module}"), name)
    assert sorted(stats.__all__) == sorted(stats._EXPORTS)


def test_the_bootstrap_alone_does_not_load_scipy_stats():
    code = ("import sys, ragassay.stats.bootstrap; print('scipy.stats' in sys.modules); "
            "from ragassay.stats import cohen_kappa; print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
