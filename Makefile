# sealift: two commands set up everything on a fresh Debian machine.
#   make demo   start a local registry, make small real images and a model, build, verify, inspect
#   make test   install what the tests need and run every test
# Caches and tools live under ignored folders (.venv, .cache) so warm runs are fast.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE := .cache
APT_PACKAGES := docker-registry skopeo apache2-utils time jq softhsm2 openssl
APT_STAMP := $(CACHE)/apt.stamp
VENV_STAMP := $(CACHE)/venv.stamp

.PHONY: all deps test lint demo bench clean k8s-tools wheelhouse

all: test

$(CACHE):
	mkdir -p $(CACHE)

# Debian packages: the real OCI registry (CNCF Distribution), skopeo for interop, htpasswd.
$(APT_STAMP): | $(CACHE)
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	touch $@

$(VENV_STAMP): pyproject.toml | $(CACHE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

deps: $(APT_STAMP) $(VENV_STAMP)

lint: $(VENV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Wheels for the prefetch image test (linux/amd64, CPython 3.11): network when cold, about 1 s
# when nothing changed. See tools/wheelhouse.sh.
wheelhouse: $(VENV_STAMP)
	tools/wheelhouse.sh linux/amd64 3.11

test: deps lint k8s-tools wheelhouse
	$(BIN)/pytest -q

demo: deps k8s-tools wheelhouse
	$(BIN)/python examples/demo.py

bench: deps
	$(BIN)/python bench/bench_create.py
	$(BIN)/python bench/bench_verify.py
	$(BIN)/python bench/bench_weights.py
	$(BIN)/python bench/bench_install.py
	$(BIN)/python bench/bench_prefetch_image.py
	$(BIN)/python bench/bench_cluster.py

# A real Kubernetes control plane and helm for the cluster-side tests (needs Go on PATH):
# about 11 minutes cold on 2 cores, cached under .cache/k8s per component, a warm run is a
# no-op (~0.05 s). See tools/k8s/README.md.
k8s-tools:
	tools/k8s/build.sh

clean:
	rm -rf $(CACHE) demo-out bench/out .pytest_cache .ruff_cache
