"""The core install must work without the optional extras: every module imports with them absent."""

import subprocess
import sys

EXTRAS_ONLY = ("sklearn", "statsmodels", "krippendorff", "torch", "sentence_transformers", "pytrec_eval", "ranx",
               "ir_measures", "anthropic", "openai", "ray", "hypothesis", "pytest", "playwright")

# Modules that only their host loads: the pytest plugin is imported by pytest itself (entry point pytest11),
# so pytest is there whenever it is; its own tests run it through pytester.
HOSTED = ("ragassay.pytest_plugin",)

PROBE = f"""
import importlib, importlib.abc, pkgutil, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS_ONLY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent in a core install)")
        return None

sys.meta_path.insert(0, Absent())
import ragassay
failed = []
for m in pkgutil.walk_packages(ragassay.__path__, "ragassay."):
    if m.name in {HOSTED!r}:
        continue
    try:
        importlib.import_module(m.name)
    except Exception as e:
        failed.append(f"{{m.name}}: {{e!r}}")
print("\\n".join(failed))
"""


def test_every_module_imports_without_the_optional_extras():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
