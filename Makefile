# Everything a fresh machine needs: `make test` builds .venv from nothing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint demo interop bench java clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,lint]"
	touch $(STAMP)

# Spark needs a JVM; install one only where it is missing.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "java not found: installing openjdk-17-jre-headless"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

test: $(STAMP) java
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider tests

lint: $(STAMP)
	$(VENV)/bin/ruff check aqueduct demo interop tests bench examples

demo: $(STAMP) java
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m demo

interop: $(STAMP)
	$(PY) -m interop.run

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
