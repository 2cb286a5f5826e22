"""Every aioquic internal the runtime relies on exists in the installed aioquic.

An aioquic upgrade that renames or removes one fails here, naming it and
what it is for, rather than inside a live connection.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from aioquic import tls
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.recovery import QuicPacketRecovery, QuicPacketSpace

from aqueduct.runtime.backends import aioquic_internals
from aqueduct.runtime.backends.aioquic_internals import INTERNALS


def instances() -> dict[str, object]:
    quic = QuicConnection(configuration=QuicConfiguration(is_client=True, max_datagram_frame_size=65536))
    return {
        "QuicConnection": quic,
        "QuicPacketRecovery": quic._loss,
        "QuicPacketSpace": QuicPacketSpace(),
        "QuicConnectionProtocol": QuicConnectionProtocol(quic),
        "QuicServer": QuicServer(configuration=QuicConfiguration(is_client=False)),
        "Context": tls.Context(is_client=False),
    }


@pytest.mark.parametrize(("owner", "member", "why"), INTERNALS, ids=[f"{o}.{m}" for o, m, _ in INTERNALS])
async def test_every_internal_the_runtime_uses_exists(owner: str, member: str, why: str) -> None:
    obj = instances()[owner]
    assert hasattr(obj, member), (
        f"aioquic {importlib.metadata.version('aioquic')} has no {owner}.{member}, which the runtime "
        f"needs to {why}: adapt aqueduct/runtime/aioquic_internals.py"
    )


async def test_the_accessors_read_a_fresh_connection() -> None:
    quic = instances()["QuicConnection"]
    assert isinstance(quic._loss, QuicPacketRecovery)
    assert aioquic_internals.smoothed_rtt(quic) is None  # no sample yet
    assert aioquic_internals.pending_datagrams(quic) == 0
    assert aioquic_internals.packets_sent(quic) == 0
    assert aioquic_internals.idle_timeout(quic) > 0
    assert aioquic_internals.max_datagram_size(quic) > 1000
    assert aioquic_internals.remote_max_datagram_frame_size(quic) is None  # no peer yet
    assert aioquic_internals.connection_ids(quic)


def test_aioquic_is_bounded_below_its_next_minor_version() -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    requirement = next(r for r in project["project"]["dependencies"] if r.startswith("aioquic"))
    assert "<" in requirement, f"pin aioquic below its next minor version: {requirement}"
    installed = tuple(int(x) for x in importlib.metadata.version("aioquic").split(".")[:2])
    bound = tuple(int(x) for x in requirement.split("<")[1].split(".")[:2])
    assert installed < bound
