# Everything a fresh machine needs: `make test` builds .venv from nothing.
#
# The interpreter: the first Python >= 3.12 found (on PATH, then under pyenv),
# because the picoquic backend (aiopquic) needs it; else python3, and the
# picoquic tests are reported as skipped with the reason. PYTHON=... overrides.
PY312_CANDIDATES := python3.12 python3.13 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3) \
                    $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3)
PYTHON ?= $(firstword $(foreach p,$(PY312_CANDIDATES),$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && command -v $(p))) python3)
PYVER  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-py$(PYVER)

.PHONY: test test-fast lint mutate demo interop interop-backends bench java cc clean

# (Re)built when pyproject.toml changes or the interpreter's version does.
$(STAMP): pyproject.toml
	@echo "make: Python $(PYVER) ($(PYTHON))$(if $(filter 3.11 3.10,$(PYVER)), -- no Python >= 3.12 found: the picoquic backend's tests will be skipped,)"
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,lint,picoquic]"
	touch $(STAMP)

# $(call apt_if_missing,COMMAND,PACKAGES): install PACKAGES only where COMMAND is missing.
apt_if_missing = command -v $(1) >/dev/null 2>&1 || { \
	  echo "$(1) not found: installing $(2)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2); }

# Spark needs a JVM.
java:
	@$(call apt_if_missing,java,openjdk-17-jre-headless)

# A C compiler builds the test-only hook that SIGKILLs a JVM at a chosen rename
# (tests/reliability/inject/kill_at_rename.c).
cc:
	@$(call apt_if_missing,cc,gcc libc6-dev)

# Two passes: everything but the picoquic-server tests, then those in a network
# namespace whose only interface is loopback (a picoquic server listens on every
# interface); where the machine refuses a namespace, they run here and skip, saying why.
# The first pass runs on TEST_WORKERS pytest-xdist workers (3: most tests wait on
# processes, sockets and Spark triggers more than they compute): the tests sharing a
# Spark session (or the standalone cluster) as one group on one worker, the rest spread
# (tests/conftest.py). It lists its 15 slowest tests: the suite must stay under
# 15 minutes on 2 cores.
TEST_WORKERS ?= 3
test: $(STAMP) java cc
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider -rs --durations=15 \
	  -n $(TEST_WORKERS) --dist loadgroup -m "not picoquic_server" tests
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m interop.netns --or-run -- \
	  $(PY) -m pytest -q -p no:cacheprovider -rs -n 2 -m picoquic_server tests/integration

# The inner loop, under 3 minutes: unit tests, the mutant list, and the integration
# tests that need no JVM or wheel build (not marked spark or slow). No picoquic server.
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -rs --durations=5 -n 2 --dist loadgroup \
	  -m "not spark and not slow and not picoquic_server" tests/unit tests/mutants tests/integration

lint: $(STAMP)
	$(VENV)/bin/ruff check aqueduct demo interop tests bench examples

# Hand-written mutants of the rule modules (tests/mutants/mutants.toml), each
# applied to a scratch copy and run against its fast tests (about a minute);
# CI runs it after `make test`, so a stale or surviving mutant fails CI
# (docs/testing.md). ARGS="ID ..." runs some only; ARGS=--check only locates them.
mutate: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m tests.mutants.run $(ARGS)

demo: $(STAMP) java
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m demo

interop: $(STAMP)
	$(PY) -m interop.run

# Every server backend against every client backend (picoquic servers need the namespace).
interop-backends: $(STAMP)
	$(PY) -m interop.netns --or-run -- $(PY) -m interop.run --quic-backends aioquic,picoquic --out build/interop-backends

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m interop.netns --or-run -- $(PY) -m bench.run

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
