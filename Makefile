# Two commands do everything from nothing: `make demo` and `make test`.
# Each creates .venv if needed, installs what it needs, then runs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.installed-core
FULL   := $(VENV)/.installed-full

.PHONY: demo test lint bench browser clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# constraints.txt pins every package to the versions the suite was last run with (see `make lock`).
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt

$(CORE): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e .
	touch $@

# torch is pinned to the CPU build on this machine's disk before anything can pull a CUDA build.
$(FULL): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dense,llm,dev,ray]'
	touch $@ $(CORE)

# Re-pin the toolchain: resolve the extras afresh in a scratch venv, then freeze it into constraints.txt.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
	.venv-lock/bin/pip install --quiet --disable-pip-version-check -e '.[dense,llm,dev,ray]'
	{ echo "# The toolchain the test suite was last run with: make test and make demo install with -c constraints.txt."; \
	  echo "# Regenerate after a dependency change with make lock."; \
	  .venv-lock/bin/pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > constraints.txt
	rm -rf .venv-lock

demo: $(CORE)
	$(BIN)/ragassay demo

test: $(FULL) browser
	$(BIN)/ruff check src tests benchmarks
	TOKENIZERS_PARALLELISM=false $(BIN)/python -m pytest -q

lint: $(FULL)
	$(BIN)/ruff check src tests benchmarks

bench: $(FULL)
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Headless Chromium for the report's browser test (Debian package; needs root, as on CI).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium for the browser tests"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

clean:
	rm -rf $(VENV) ragassay-demo .pytest_cache
