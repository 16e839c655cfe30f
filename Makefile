# make lint   — ruff (lint and format check) and mypy with django-stubs over zklocks/
# make test   — the fast tier (at most 8 minutes on 2 cores, installs aside); make test-all: everything (about 36 minutes)
#               make lint, then installs what is missing (Debian: zookeeper, redis-server, chromium, openssl for the TLS test
#               certificates, default-jdk-headless for javac, which compiles the snapshot writer and the Curator
#               contenders of zklocks/testing/java and tests/support/java, libcurator-recipes-java (Apache Curator 5.4 with guava,
#               slf4j and jackson) for the Curator interop tests; a venv with requirements.txt)
#               and runs the suite against servers it starts itself; it builds the site first (make docs).
#               The suite runs the comparison's smoke form, so make test also installs what make compare needs.
# make compare — zklocks against kazoo, python-redis-lock, pottery's Redlock, django-pglock (direct and behind
#               PgBouncer) and an etcd lease lock, on the same faults (docs/comparison.md); installs postgresql,
#               pgbouncer and etcd-server when missing, and requirements-compare.txt.
# make docs   — the documentation site (mkdocs.yml, docs/) built with mkdocs build --strict into site/; requirements-docs.txt
# make bench  — every figure against its floor (docs/benchmarks.md); make bench-view: the demo's reservation view under
#               gunicorn and uvicorn on PostgreSQL, driven by wrk (both install postgresql and wrk when missing).
# make demo   — ZooKeeper, Redis and Chromium when missing (no JDK or Curator), the venv, then the demo site with
#               ZooKeeper, Redis, a Celery worker and a load generator
#               (make demo DEMO_PORT=8001 when port 8000 is taken).
SHELL := /bin/bash
# The venv's interpreter. Empty: the first working Python >= 3.12 (Django 6 needs it) among python3.12 and
# python3.13 on PATH, then pyenv's versions (3.12 first, then newer), then Debian's python3 (installed when none is
# found). 3.12 comes first: the suite runs there on Django 6.1; make test-matrix adds 3.13. make PY=python3.11 builds a
# Django 5.2 venv instead.
PY ?=
FIND_PY := for p in python3.12 python3.13 $$(ls -d $$HOME/.pyenv/versions/3.12*/bin/python3 2>/dev/null | sort -rV) \
	$$(ls -d $$HOME/.pyenv/versions/3.*/bin/python3 2>/dev/null | sort -V) python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' \
	2>/dev/null && { command -v $$p; break; }; done
VENV ?= .venv
BIN := $(VENV)/bin
DEB_PACKAGES := zookeeper redis-server chromium
STAMP := $(VENV)/.requirements-stamp
DOCS_STAMP := $(VENV)/.docs-requirements-stamp
COMPARE_STAMP := $(VENV)/.compare-requirements-stamp

.PHONY: test test-all test-model lint docs chaos test-matrix demo bench bench-view compare system-deps demo-deps bench-deps compare-deps \
	venv compare-venv clean

# What the demo needs: ZooKeeper (with the JRE it depends on) and Redis; Chromium for its screenshot
# (python -m demo_project.screenshot), installed with them as the README says.
demo-deps:
	@missing=""; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

# The tests need more: headless Chromium (the admin), a JDK and Curator (the interop tests), openssl (TLS).
system-deps:
	@missing=""; \
	[ -f /usr/share/java/zookeeper.jar ] || missing="$$missing zookeeper"; \
	[ -f /usr/share/java/curator-recipes.jar ] || missing="$$missing libcurator-recipes-java"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v keytool >/dev/null || missing="$$missing default-jre-headless"; \
	command -v javac >/dev/null || missing="$$missing default-jdk-headless"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

# Only the benchmarks need these: PostgreSQL (the view benchmark starts its own cluster) and the wrk load generator.
bench-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

# Only make compare and its smoke test need these (not make demo): PostgreSQL, PgBouncer and etcd, each started by
# the comparison itself (as root, PostgreSQL and PgBouncer run as nobody).
compare-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || missing="$$missing pgbouncer"; \
	command -v etcd >/dev/null || missing="$$missing etcd-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

# The venv itself, with the interpreter PY names or FIND_PY finds (Debian's python3 installed when none is found).
$(BIN)/python:
	@py="$(PY)"; \
	[ -n "$$py" ] || py=$$($(FIND_PY)); \
	if [ -z "$$py" ]; then \
	  echo "no Python >= 3.12 on PATH or in pyenv: installing Debian's python3"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y python3 python3-venv; \
	  py=$$($(FIND_PY)); \
	fi; \
	if [ -z "$$py" ]; then \
	  echo "no Python >= 3.12 found (python3.13, python3.12, pyenv, Debian's python3): make PY=/path/to/python" >&2; \
	  exit 1; \
	fi; \
	echo "creating $(VENV) with $$py ($$($$py --version))"; \
	$$py -m venv $(VENV)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml | $(BIN)/python
	@if [ -z "$(PY)" ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  echo "note: $(VENV) runs $$($(BIN)/python --version), so Django 5.2: make clean, then make, for Django 6.1" >&2; \
	fi
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install -q -e . --no-deps
	@touch $(STAMP)

venv: $(STAMP)

# The locks the comparison runs against (make test runs its smoke form).
$(COMPARE_STAMP): requirements-compare.txt $(STAMP)
	$(BIN)/pip install -q -r requirements-compare.txt
	@touch $(COMPARE_STAMP)

compare-venv: $(COMPARE_STAMP)

LINTED := zklocks tests benchmarks demo_project manage.py noxfile.py

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	timeout 600 $(BIN)/mypy

# The fast tier (pyproject.toml's addopts, tests/tiers.py): unit tests, the shared server's tests and one smoke test
# of each real component. test-all: everything but the slow figure runs: the full tier and the bounded stateful model.
# The model's rules for findings whose fix is still open are listed in MODEL_SKIP (tests/model/findings.py).
# Two worker processes (pytest-xdist): the fast tier mostly waits on servers, so two share the 2 cores well.
test: system-deps compare-deps venv compare-venv lint docs
	timeout 1500 $(BIN)/python -m pytest -q -p no:randomly -n 2 --durations=25

MODEL_SKIP ?= $(shell $(BIN)/python -c 'from tests.model.findings import OPEN; print(",".join(OPEN))' 2>/dev/null)

# The slow tests (the beat failover figures over repeated runs, the outage matrix's while-waiting cells of paused and
# black-holed servers) print figures for the docs; make test-all SLOW=1 runs them too.
SLOW ?=
TEST_ALL_MARKS := $(if $(SLOW),,not slow)

test-all: system-deps compare-deps venv compare-venv
	ZKLOCKS_MODEL_SKIP="$(MODEL_SKIP)" timeout 4800 $(BIN)/python -m pytest -q -p no:randomly -m "$(TEST_ALL_MARKS)" \
		--durations=25

# The stateful model alone, bounded as in test-all (tests/model; CONTRIBUTING.md, "The stateful model").
test-model: system-deps venv
	ZKLOCKS_MODEL_SKIP="$(MODEL_SKIP)" timeout 1800 $(BIN)/python -m pytest -q -p no:randomly -m model --durations=25

# Only the site needs these (make demo does not).
$(DOCS_STAMP): requirements-docs.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-docs.txt
	@touch $(DOCS_STAMP)

# The API pages read the sources (mkdocstrings), so the site builds without importing zklocks.
# Not --quiet: it hides the warnings that --strict counts. NO_MKDOCS_2_WARNING silences Material's notice about
# MkDocs 2.0, printed on every build; it is not about these pages.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 timeout 300 $(BIN)/mkdocs build --strict

chaos: system-deps venv
	timeout 1800 $(BIN)/python -m pytest -q -m chaos -p no:randomly tests/chaos/test_chaos.py --chaos-long

test-matrix: system-deps venv
	timeout 5400 $(BIN)/nox -s tests kazoo

DEMO_PORT ?= 8000

demo: demo-deps venv
	$(BIN)/python -m demo_project.run --port $(DEMO_PORT)

bench: system-deps bench-deps venv
	timeout 900 $(BIN)/python -m benchmarks
	timeout 600 $(BIN)/python -m benchmarks.async_waiters

bench-view: system-deps bench-deps venv
	timeout 1500 $(BIN)/python -m benchmarks.view_load --seconds 6 --rounds 5
	timeout 600 $(BIN)/python -m benchmarks.view_load --seconds 6 --rounds 3 --servers sync --open

compare: system-deps compare-deps venv compare-venv
	timeout 1500 $(BIN)/python -m benchmarks.compare

clean:
	rm -rf $(VENV) .nox .demo build dist site *.egg-info
