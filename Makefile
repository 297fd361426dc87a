# mixed-cpus-hook developer entry points. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv deps demo test test-unit lint bench clean

$(VENV)/.stamp: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . pytest pyfakefs ruff
	touch $@

venv: $(VENV)/.stamp

deps:
	sh scripts/install-deps.sh

demo: venv
	$(PY) examples/quickstart.py

lint: venv
	$(VENV)/bin/ruff check hook tests benchmarks examples

test-unit: venv
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

# Everything: lint, unit tests, and the integration tests on real runc, podman, systemd and a cgroup v2 VM.
test: deps venv lint
	$(PY) -m pytest tests -ra $(PYTEST_ARGS)

bench: venv
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info hook/*.egg-info
