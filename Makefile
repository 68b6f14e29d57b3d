# Every target bootstraps .venv from a fresh clone; nothing needs to be installed by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_DIR := build/demo

.PHONY: demo test lint typecheck unit integration bench clean install validate-deploy wheel constraints promtool chromium

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The main job on an embedded default: synthetic rounds -> Elo-MMR -> top-20 leaderboard.
demo: $(STAMP)
	mkdir -p $(DEMO_DIR)
	$(BIN)/mmr synth --players 2000 --rounds 200 --participation 0.3 --seed 7 --out $(DEMO_DIR)/rounds.jsonl
	$(BIN)/mmr replay $(DEMO_DIR)/rounds.jsonl --system elo-mmr --embedded --out $(DEMO_DIR)/ratings.jsonl --top 20

lint: $(STAMP)
	$(BIN)/ruff check stream tests examples

typecheck: $(STAMP)
	$(BIN)/mypy stream tests examples

## The whole suite; the tests start Tansu and (if needed) Redis themselves. The kernels are compiled
## first (`mmr warm`), once, so that no worker a test starts spends its deadline compiling them.
## PYTEST_WORKERS processes share the tests (pytest-xdist; each its own broker and Redis DB,
## tests/conftest.py); 0 runs them all in this one process.
PYTEST_WORKERS ?= 2
test: $(STAMP) lint typecheck promtool chromium
	$(BIN)/mmr warm
	$(BIN)/python -m pytest -q -rs -n $(PYTEST_WORKERS) --dist loadgroup

## Debian's Chromium for the console's browser tests (tests/browser), installed where apt-get works
## (root); never fails the build: without it those tests skip and say why.
APT_CHROMIUM := DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1
chromium:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(APT_CHROMIUM) || { apt-get update -q >/dev/null 2>&1 && $(APT_CHROMIUM); }; } && \
	  echo "installed chromium: $$(command -v chromium)"; } || \
	  echo "chromium not installed (no apt-get, or not root): tests/browser skips"

unit: $(STAMP)
	$(BIN)/python -m pytest -q -rs -n $(PYTEST_WORKERS) --dist loadgroup tests/unit tests/property

integration: $(STAMP)
	$(BIN)/python -m pytest -q -rs -n $(PYTEST_WORKERS) --dist loadgroup tests/integration

## docker-compose.yml, deploy/Dockerfile and deploy/k8s against their schemas, offline, and
## deploy/monitoring against the worker's metrics and promtool (deploy/README.md).
validate-deploy: $(STAMP) promtool
	$(BIN)/ruff check deploy
	$(BIN)/mypy deploy/matchmaker.py
	$(BIN)/python -m pytest -q -rs tests/unit/test_deploy_manifests.py tests/unit/test_monitoring.py

## promtool (Debian's `prometheus` package) for tests/unit/test_monitoring.py, installed where
## apt-get works (root); never fails the build: without it those checks skip and say why.
APT_PROMETHEUS := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1
promtool:
	@command -v promtool >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
	  { $(APT_PROMETHEUS) || { apt-get update -q >/dev/null 2>&1 && $(APT_PROMETHEUS); }; } && \
	  echo "installed promtool: $$(command -v promtool)"; } || \
	  echo "promtool not installed (no apt-get, or not root): tests/unit/test_monitoring.py skips its promtool checks"

bench: $(STAMP)
	$(BIN)/mmr bench all

## The wheel (schemas included as package data) in dist/, with numba's cache of the kernels compiled
## here by `mmr warm` (setup.py): a wheel for this Python, platform and CPU (README, Quick start).
wheel: $(STAMP)
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -w dist .

## Pin the versions of the current .venv (after changing dependencies in pyproject.toml).
constraints: $(STAMP)
	{ echo "# Versions the project is tested with (pip constraints: pins only what a requirement asks for)."; \
	  echo "# make install and deploy/Dockerfile install with -c constraints.txt. Regenerate after changing"; \
	  echo "# dependencies: make constraints"; \
	  $(BIN)/python -m pip freeze --exclude-editable; } > constraints.txt

clean:
	rm -rf build dist .pytest_cache .mypy_cache .ruff_cache
