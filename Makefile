# qsa: `make demo` (the main job) and `make test` (the whole suite) do all set-up themselves.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.qsa-installed

.PHONY: setup system-packages demo test lint bench clean

setup: system-packages $(STAMP)

system-packages:
	@scripts/system_packages.sh

$(STAMP): pyproject.toml
	@echo "[make setup] python packages $$(date -u +%H:%M:%S)"
	@mkdir -p $(VENV) && scripts/check_disk.sh $(VENV)
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all,dev]'
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/qsa demo --out demo_out

lint: setup
	$(VENV)/bin/ruff check .

# lint and the suite both run; either failing fails the target. The suite runs in two
# parts: everything but the real-time audio tests on one worker per core (whole files per
# worker, so module fixtures are built once), then the real-time tests alone on an idle CPU.
TEST_WORKERS ?= $(shell nproc)
test: setup
	@echo "[make test] suite starts $$(date -u +%H:%M:%S)"
	@rc=0; $(VENV)/bin/ruff check . || rc=1; \
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile -m "not realtime" || rc=1; \
	$(VENV)/bin/pytest -m realtime -p no:xdist || rc=1; \
	echo "[make test] suite ends $$(date -u +%H:%M:%S)"; exit $$rc

bench: setup
	$(PY) bench/attention_speed.py
	$(PY) bench/se_peers.py --throughput
	$(PY) bench/cli_startup.py --out bench/out

clean:
	rm -rf demo_out build *.egg-info .pytest_cache .ruff_cache
