# Every target bootstraps .venv from a fresh clone; nothing needs to be installed by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_DIR := build/demo

.PHONY: demo test lint typecheck unit integration bench clean install validate-deploy

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The main job on an embedded default: synthetic rounds -> Elo-MMR -> top-20 leaderboard.
demo: $(STAMP)
	mkdir -p $(DEMO_DIR)
	$(BIN)/mmr synth --players 2000 --rounds 200 --participation 0.3 --seed 7 --out $(DEMO_DIR)/rounds.jsonl
	$(BIN)/mmr replay $(DEMO_DIR)/rounds.jsonl --system elo-mmr --embedded --out $(DEMO_DIR)/ratings.jsonl --top 20

lint: $(STAMP)
	$(BIN)/ruff check stream tests

typecheck: $(STAMP)
	$(BIN)/mypy stream

## The whole suite; the tests start Tansu and (if needed) Redis themselves.
test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -rs

unit: $(STAMP)
	$(BIN)/python -m pytest -q -rs tests/unit tests/property

integration: $(STAMP)
	$(BIN)/python -m pytest -q -rs tests/integration

## docker-compose.yml, deploy/Dockerfile and deploy/k8s against their schemas, offline (deploy/README.md).
validate-deploy: $(STAMP)
	$(BIN)/ruff check deploy
	$(BIN)/mypy deploy/matchmaker.py
	$(BIN)/python -m pytest -q -rs tests/unit/test_deploy_manifests.py

bench: $(STAMP)
	$(BIN)/mmr bench all

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
