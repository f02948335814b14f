# Medusa: federated stream processing on Kafka and Spark.
# `make help` lists the targets. Every target installs what it needs first.

PYTHON      ?= python3.11
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup go-tools-early browser-early up down status demo test test-scenarios test-unit test-integration test-compose compose-images compose-up compose-down bench chaos lint docs clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-17s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@MEDUSA_VENV=$(VENV) MEDUSA_PYTHON_BIN=$(PYTHON) MEDUSA_EXTRAS=dev bash infra/install_python.sh
	@touch $(STAMP)

setup: go-tools-early $(STAMP) ## Install everything: Python deps, Kafka, registry, Spark connectors, Jaeger, toxiproxy
	@MEDUSA_PYTHON=$(BIN)/python bash infra/install.sh

# Jaeger and toxiproxy compile for minutes on a fresh machine and the browser's packages
# download for one or two: both start in the background before the other steps, and the
# steps that need them wait on their lock (a second run finds them cached).
go-tools-early:
	@mkdir -p .cache && (bash infra/install_go_tools.sh >.cache/go-tools-early.log 2>&1 &)

browser-early:
	@mkdir -p .cache && (bash infra/install_browser.sh >.cache/browser-early.log 2>&1 &)

up: setup ## Start the local federation (a Kafka cluster per participant, registry, Jaeger, catalog, detector, BPM agents)
	@$(BIN)/medusa up --skip-install

down: ## Stop what `make up` started
	@test -x $(BIN)/medusa && $(BIN)/medusa down || true

status: ## Show what runs and where
	@$(BIN)/medusa status

demo: setup ## The main job: the local federation with the Linear Road example
	@$(BIN)/medusa demo

test: browser-early setup ## Run every test (unit, integration, e2e) against the real local stack
	@bash infra/install_browser.sh
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

test-scenarios: setup ## Run the long end-to-end scenarios that `make test` leaves out
	@$(BIN)/python -m pytest -m scenario $(PYTEST_ARGS)

compose-up: $(STAMP) ## The compose deployment on this machine: the Docker engine and compose if missing (root), the images, `docker compose up`
	@bash infra/compose.sh up

compose-images: $(STAMP) ## The engine and compose if missing (root), the base images and the project's images
	@bash infra/compose.sh images

compose-down: ## Stop the compose deployment (COMPOSE_ARGS=-v drops its volumes)
	@bash infra/compose.sh down $(COMPOSE_ARGS)

test-compose: compose-images ## The compose deployment's end-to-end test (builds what it needs first)
	@$(BIN)/python -m pytest -m compose $(PYTEST_ARGS)

test-unit: $(STAMP) ## Run the in-memory unit tests only
	@$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

bench: setup ## Benchmarks, side by side in one run (JSON and plots in bench-results/)
	@$(BIN)/medusa up --skip-install --participants 3
	@$(BIN)/medusa bench $(BENCH_ARGS)

chaos: setup ## Kill -9 brokers, the controller, the registry, the catalog and the detector under load; a table of what each cost
	@$(BIN)/medusa chaos $(CHAOS_ARGS)

lint: $(STAMP) ## ruff and mypy
	@$(BIN)/ruff check services spark_apps tests
	@$(BIN)/mypy

docs: $(STAMP) ## Generate docs/reference/ from the code (the CLI, network YAML, catalog API, settings)
	@PYTHONPATH=services:spark_apps $(BIN)/python -m medusa_apps.reference_docs

clean: down ## Remove the run folder (data, logs); the cache of installed components stays
	@rm -rf .run bench-results
