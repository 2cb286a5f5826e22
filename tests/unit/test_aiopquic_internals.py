"""Every aiopquic internal the picoquic backend relies on exists in the installed aiopquic.

An aiopquic upgrade that renames or removes one fails here, naming it and
what it is for, rather than inside a live connection.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

from tests.conftest import picoquic_missing

pytestmark = pytest.mark.skipif(picoquic_missing() is not None, reason=str(picoquic_missing()))


def _owners() -> dict[str, object]:
    from aiopquic._binding._transport import TransportContext
    from aiopquic.asyncio.protocol import QuicConnectionProtocol
    from aiopquic.quic.configuration import QuicConfiguration
    from aiopquic.quic.connection import QuicConnection, QuicEngine

    quic = QuicConnection(configuration=QuicConfiguration(is_client=True))
    return {
        "QuicConnection": quic,
        "TransportContext": TransportContext,
        "QuicEngine": QuicEngine,
        "QuicConnectionProtocol": QuicConnectionProtocol(quic),
    }


def _internals() -> tuple[tuple[str, str, str], ...]:
    if picoquic_missing():
        return ()
    from aqueduct.runtime.backends.aiopquic import INTERNALS

    return INTERNALS


@pytest.mark.parametrize(("owner", "member", "why"), _internals(), ids=[f"{o}.{m}" for o, m, _ in _internals()])
async def test_every_internal_the_backend_uses_exists(owner: str, member: str, why: str) -> None:
    obj = _owners()[owner]
    assert hasattr(obj, member), (
        f"aiopquic {importlib.metadata.version('aiopquic')} has no {owner}.{member}, which the picoquic "
        f"backend uses to {why}"
    )


def test_aiopquic_is_kept_below_its_next_minor_version() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [spec] = [d for d in pyproject["project"]["optional-dependencies"]["picoquic"] if d.startswith("aiopquic")]
    assert "<0.7" in spec, spec
