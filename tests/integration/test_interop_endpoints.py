"""Interop test cases pass end to end through the lossy proxy, in one process.

Both halves of each case talk real QUIC over 127.0.0.1 through
:class:`interop.proxy.LossyProxy`, exactly as the runner's subprocesses do,
so a protocol regression shows up here before anyone runs the full matrix.
"""

from __future__ import annotations

import asyncio

import pytest

import aqueduct
from aqueduct.runtime.certs import CertPaths, generate_certs
from interop import connector_resume
from interop.endpoint import connect_and_run, serve_one
from interop.network import scenario
from interop.proxy import LossyProxy
from interop.run import free_udp_port
from interop.testcases import TESTCASES, CaseFailed

HOST = "127.0.0.1"
BOUND = 60.0  # only to turn a hang into a failure; never a speed requirement


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertPaths:
    return generate_certs(tmp_path_factory.mktemp("interop-certs"))


async def _run_case(name: str, scenario_name: str, certs: CertPaths, seed: int = 3) -> tuple[str, str]:
    case = TESTCASES[name]
    server = await aqueduct.serve(
        HOST, 0, certfile=certs.server_cert, keyfile=certs.server_key, **case.server_options
    )
    server_task = asyncio.create_task(serve_one(case, server))
    try:
        async with LossyProxy((HOST, 0), (HOST, server.port), scenario(scenario_name, seed)) as proxy:
            client_summary = await asyncio.wait_for(
                connect_and_run(case, HOST, proxy.address[1], certs.ca), BOUND
            )
            server_summary = await asyncio.wait_for(server_task, BOUND)
    finally:
        server_task.cancel()
        await server.close()
    return client_summary, server_summary


@pytest.mark.parametrize(
    ("name", "scenario_name"),
    [
        ("handshake", "clean"),
        ("ordered", "loss"),
        ("unreliable", "duplicate"),
        ("cancel", "blackhole"),
        ("finish-race", "reorder"),
        ("lost-in-transit", "clean"),
        ("attachments", "reorder"),
        ("multiplexing", "duplicate"),
        ("flow-control", "clean"),
    ],
)
async def test_case_passes_through_the_proxy(name: str, scenario_name: str, certs: CertPaths) -> None:
    client_summary, server_summary = await _run_case(name, scenario_name, certs)
    assert client_summary and server_summary


async def test_mismatched_test_case_fails_on_both_sides(certs: CertPaths) -> None:
    """A client running another test case is refused by the server, and told why."""
    server = await aqueduct.serve(HOST, 0, certfile=certs.server_cert, keyfile=certs.server_key)
    server_task = asyncio.create_task(serve_one(TESTCASES["ordered"], server))
    mismatch = "client runs test case 'unordered', server 'ordered'"
    try:
        with pytest.raises(CaseFailed, match=f"unordered: server says: ordered: {mismatch}"):
            await asyncio.wait_for(
                connect_and_run(TESTCASES["unordered"], HOST, server.port, certs.ca), BOUND
            )
        with pytest.raises(CaseFailed, match=mismatch):
            await asyncio.wait_for(server_task, BOUND)
    finally:
        server_task.cancel()
        await server.close()


async def test_connector_resumes_after_restart_through_a_lossy_network(certs: CertPaths) -> None:
    port = free_udp_port()
    server = asyncio.create_task(
        connector_resume.run_server(HOST, port, certs.server_cert, certs.server_key)
    )
    try:
        async with LossyProxy((HOST, 0), (HOST, port), scenario("loss", 5)) as proxy:
            client_summary = await asyncio.wait_for(
                connector_resume.run_client(HOST, proxy.address[1], certs.ca), BOUND
            )
            server_summary = await asyncio.wait_for(server, BOUND)
    finally:
        server.cancel()
    assert "2 handshakes" in client_summary
    assert "300 messages exactly once over 2 sessions" in server_summary
