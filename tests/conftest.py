"""Shared fixtures: fresh TLS certificates per test, QUIC backends on each side, a connected pair.

A picoquic server listens on every interface (aiopquic cannot bind one
address), so the tests that need one run only where loopback is the only
interface: ``make test`` runs them in a second pass inside a network
namespace of their own (``python -m interop.netns -- pytest -m
picoquic_server``); elsewhere they are skipped, saying so.

``make test`` spreads the tests over two pytest-xdist workers
(``--dist loadgroup``): the tests that share a session-scoped Spark
fixture form one group each, so every group runs on one worker that
starts its session once, and everything else is spread one test at a
time. The longest units start first: the groups, then the tests marked
``slow`` or ``spark`` (each starts processes, most a Spark JVM), then the
rest, so no long test starts last and keeps one worker busy alone at
the end.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shlex
import sys

import pytest
from _pytest.nodes import Node

import aqueduct
from aqueduct.runtime.certs import CertPaths, generate_certs
from interop.netns import isolated_loopback
from tests.jvm_options import TEST_JVM_OPTIONS

PICOQUIC_SERVER_OUTSIDE_NAMESPACE = (
    "a picoquic server listens on every interface: run where loopback is the only one "
    "(python -m interop.netns -- python -m pytest -m picoquic_server; make test does)"
)


@pytest.fixture
def certs(tmp_path) -> CertPaths:
    """A new CA plus server (localhost, 127.0.0.1) and client certificates in tmp_path."""
    return generate_certs(tmp_path / "certs")


def picoquic_missing() -> str | None:
    """Why the picoquic backend cannot be tested here, or None."""
    if importlib.util.find_spec("aiopquic") is None:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"aiopquic is not installed (it needs Python >= 3.12; this is {version}): picoquic not tested"
    return None


#: session-scoped fixtures worth sharing (tests/spark/conftest.py): the tests using one run together
SHARED_SESSIONS = ("spark", "cluster")


def shared_session(item: pytest.Item) -> str | None:
    """The expensive session fixture this test uses, if any: its xdist group."""
    return next((name for name in SHARED_SESSIONS if name in getattr(item, "fixturenames", ())), None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test run with a picoquic server, for ``-m picoquic_server``; group the shared sessions' tests."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("server_backend") == "picoquic":
            item.add_marker(pytest.mark.picoquic_server)
        if group := shared_session(item):
            item.add_marker(pytest.mark.xdist_group(group))
    # stable: within a group, and among the rest, the files keep their order
    items.sort(key=lambda item: ((SHARED_SESSIONS + (None,)).index(shared_session(item)), not long_running(item)))


def long_running(item: pytest.Item) -> bool:
    """Marked ``slow`` or ``spark``: seconds to minutes each, so scheduled before the many quick tests."""
    return item.get_closest_marker("slow") is not None or item.get_closest_marker("spark") is not None


def pytest_configure(config: pytest.Config) -> None:
    """Give Spark's JVMs :data:`TEST_JVM_OPTIONS`; refuse ``--dist loadgroup`` where it cannot group.

    ``PYSPARK_SUBMIT_ARGS`` reaches every JVM pyspark launches, here and in
    the ``serve`` processes and user jobs the tests start (unless the
    caller set its own); the standalone cluster's daemons take
    ``SPARK_DAEMON_JAVA_OPTS`` (:func:`tests.spark.standalone.cluster_env`).

    Refusing ``--dist loadgroup`` where it cannot group: each Spark test would then start its own session.

    pytest-xdist (3.8) puts a test's group into its node id by setting
    ``item._nodeid``; from pytest 9.2 on, ``nodeid`` is built from another
    attribute, the scheduler sees no groups and runs every test alone (two
    Spark sessions and two standalone clusters on two cores).
    """
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS",
        f"--driver-java-options {shlex.quote(TEST_JVM_OPTIONS)} "
        f"--conf {shlex.quote('spark.executor.extraJavaOptions=' + TEST_JVM_OPTIONS)} pyspark-shell",
    )
    if config.getoption("dist", "no") == "loadgroup" and "_nodeid" not in Node.nodeid.fget.__code__.co_names:
        raise pytest.UsageError("--dist loadgroup cannot group tests with this pytest (item.nodeid does not read "
                                "item._nodeid, which pytest-xdist sets): install pytest<9.2 (pyproject.toml)")


@pytest.fixture(params=["aioquic", "picoquic"])
def client_backend(request) -> str:
    """Each QUIC client backend in turn."""
    if request.param == "picoquic" and (why := picoquic_missing()):
        pytest.skip(why)
    return request.param


@pytest.fixture(params=["aioquic", "picoquic"])
def server_backend(request) -> str:
    """Each QUIC server backend in turn (picoquic only in a loopback-only network namespace)."""
    if request.param == "picoquic":
        if why := picoquic_missing():
            pytest.skip(why)
        if not isolated_loopback():
            pytest.skip(PICOQUIC_SERVER_OUTSIDE_NAMESPACE)
    return request.param


@pytest.fixture
def server_host(server_backend) -> str:
    """Where a test server listens: 127.0.0.1, or every interface (all loopback here) for picoquic."""
    return "::" if server_backend == "picoquic" else "127.0.0.1"


@pytest.fixture
async def linked(certs, server_backend, server_host, client_backend):
    """A server (free port) and one client over 127.0.0.1: (client entrypoint Sender, ServerConnection)."""
    server = await aqueduct.serve(
        server_host, 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=server_backend
    )
    tx = await aqueduct.connect(
        "127.0.0.1", server.port, cafile=certs.ca, timeout=20, backend=client_backend
    )
    conn = await asyncio.wait_for(server.accept(), 20)
    yield tx, conn
    await tx.connection.close()
    await server.close()
