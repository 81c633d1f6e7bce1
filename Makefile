# Two commands for a newcomer: `make run` and `make test`. Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
FEDCGD := $(VENV)/bin/fedcgd
STAMP := $(VENV)/.installed

# Never let a SuperLink install the app's dependencies per run (several GB, another torch).
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION := 1

.PHONY: run test test-slow test-compose lint typecheck channel-report clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# Stopped with Ctrl-C (exit 130), the run's last line is the command that continues it: make
# then stops by the same signal without a line of its own (make prints one for a failed recipe).
run: $(STAMP)
	@$(FEDCGD) run $(if $(RUN_CONFIG),--run-config "$(RUN_CONFIG)",) \
		|| { rc=$$?; [ $$rc -eq 130 ] || exit $$rc; kill -INT $$PPID; }

channel-report: $(STAMP)
	$(FEDCGD) channel-report --out results/channel-report

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy channel fedcgd_strategy server_app client_app fedcgd_task fedcgd_config experiments benchmarks

# Two test processes (pytest-xdist): most tests wait on child processes, so two share two cores
# well (the README gives the measured time); PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 2

test: lint typecheck
	$(PY) -m pytest -q -n $(PYTEST_WORKERS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) -m slow

# The docker-compose deployment for real (root; installs docker.io, debootstrap and
# docker-compose with apt when missing): see scripts/test_compose.sh. Not part of `make test`.
test-compose: $(STAMP)
	PY=$(PY) scripts/test_compose.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
