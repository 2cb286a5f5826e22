"""Choosing the QUIC stack: what each backend does, and what it refuses at start, by name.

The channel, topology and connector tests run on every server and client
backend through the ``server_backend`` and ``client_backend`` fixtures;
this module checks the choice itself and what only the picoquic backend has
to get right (picoquic's rings push back where aioquic queues without
bound; its server listens on every interface).
"""

from __future__ import annotations

import asyncio

import pytest

import aqueduct
from aqueduct.connector.producer.client import Connector
from aqueduct.runtime.endpoints import check_backend
from tests.conftest import picoquic_missing

TIMEOUT = 30


async def test_an_unknown_backend_is_refused_naming_the_known_ones(certs) -> None:
    with pytest.raises(ValueError, match=r"unknown QUIC backend 'quiche'; choose one of aioquic, picoquic"):
        await aqueduct.connect("127.0.0.1", 9, cafile=certs.ca, backend="quiche")
    with pytest.raises(ValueError, match=r"unknown QUIC backend 'quiche'"):
        await aqueduct.serve("127.0.0.1", 0, certfile=certs.server_cert, keyfile=certs.server_key, backend="quiche")
    with pytest.raises(ValueError, match=r"unknown QUIC backend 'quiche'"):
        Connector("aqueduct://127.0.0.1:9", quic_backend="quiche")


@pytest.mark.skipif(picoquic_missing() is None, reason="aiopquic is installed here")
async def test_picoquic_without_aiopquic_says_what_to_install(certs) -> None:
    with pytest.raises(ValueError, match=r"needs the aiopquic package \(Python >= 3.12\).*\[picoquic\]"):
        await aqueduct.connect("127.0.0.1", 9, cafile=certs.ca, backend="picoquic")


needs_picoquic = pytest.mark.skipif(picoquic_missing() is not None, reason=str(picoquic_missing()))


@needs_picoquic
async def test_a_picoquic_server_refuses_what_aiopquic_cannot_do_by_name(certs) -> None:
    """One chosen address, client-certificate checks, a handshake bound: each refused, nothing bound."""
    cert = {"certfile": certs.server_cert, "keyfile": certs.server_key}
    with pytest.raises(ValueError, match=(
        r"^the picoquic backend cannot serve on '127.0.0.1' alone: aiopquic's server listens on every "
        r"interface; serve on '::' or '0.0.0.0' to accept that, or use backend 'aioquic'$"
    )):
        await aqueduct.serve("127.0.0.1", 0, **cert, backend="picoquic")
    with pytest.raises(ValueError, match=r"^the picoquic backend cannot verify client certificates \(mutual TLS\)"):
        await aqueduct.serve("::", 0, **cert, cafile=certs.ca, backend="picoquic")
    with pytest.raises(ValueError, match=r"^max_handshakes does not apply to the picoquic backend"):
        await aqueduct.serve("::", 0, **cert, max_handshakes=8, backend="picoquic")
    with pytest.raises(ValueError, match=r"cannot serve on 'localhost' alone"):
        check_backend("picoquic", serve_on="localhost")
    check_backend("picoquic", serve_on="0.0.0.0")  # the wildcard hosts are taken
    check_backend("aioquic", serve_on="127.0.0.1")


@needs_picoquic
def test_the_bridge_refuses_a_picoquic_listener_on_one_address(tmp_path, capsys) -> None:
    from aqueduct.bridge.app.cli import main

    code = main(["serve", "--log", str(tmp_path / "log"), "--quic", "127.0.0.1:0", "--quic-backend", "picoquic"])
    assert code == 2
    err = capsys.readouterr().err
    assert "aqueduct-bridge serve: --quic-backend: the picoquic backend cannot serve on '127.0.0.1' alone" in err
    assert not (tmp_path / "log").exists()  # refused before anything was made


@needs_picoquic
async def test_a_picoquic_client_refuses_to_present_a_client_certificate(certs) -> None:
    with pytest.raises(ValueError, match="cannot present a client certificate"):
        await aqueduct.connect(
            "127.0.0.1", 9, cafile=certs.ca, certfile=certs.client_cert, keyfile=certs.client_key,
            backend="picoquic",
        )


async def test_bulk_past_picoquics_rings_arrives_whole_and_in_order(linked) -> None:
    """24 MiB, several times picoquic's 4 MiB stream ring: its BufferError waits inside the backend."""
    tx, conn = linked
    chunk = bytes(range(256)) * 64  # 16 KiB
    count = 1500

    async def receive() -> int:
        n = 0
        async for value in conn.entrypoint:
            assert value == chunk[n % 256:] + chunk[: n % 256], f"message {n} changed"
            n += 1
        return n

    received = asyncio.ensure_future(receive())
    for n in range(count):
        await tx.send(chunk[n % 256:] + chunk[: n % 256])
    stats = tx.connection.stats()["quic"]  # the stack's own view, while the connection is up
    assert stats["smoothed_rtt"] is not None and stats["packets_sent"] > count
    await tx.finish()
    assert await asyncio.wait_for(received, TIMEOUT * 2) == count


async def test_a_window_larger_than_picoquics_ring_arrives_whole(
    certs, server_backend, server_host, client_backend
) -> None:
    """A 16 MiB window lets the driver write more at once than picoquic's 4 MiB stream ring takes.

    aiopquic refuses such a write outright (ValueError, the connection died);
    the backend hands it over in pieces the ring can take.
    """
    server = await aqueduct.serve(
        server_host, 0, certfile=certs.server_cert, keyfile=certs.server_key, backend=server_backend,
        window=16 << 20,
    )  # fmt: skip
    tx = await aqueduct.connect("127.0.0.1", server.port, cafile=certs.ca, timeout=20, backend=client_backend)
    try:
        conn = await asyncio.wait_for(server.accept(), TIMEOUT)
        received = asyncio.ensure_future(_count(conn.entrypoint))
        bodies = [bytes([n]) * 100 for n in range(64)]
        for _ in range(3000):  # 19 MB, as fast as the window allows
            await tx.send_many(bodies)
        await tx.finish()
        assert await asyncio.wait_for(received, TIMEOUT * 2) == (3000 * 64, True)
    finally:
        await tx.connection.close()
        await server.close()


async def _count(rx: aqueduct.Receiver) -> tuple[int, bool]:
    """Values received until the end, and whether each batch came whole and in order."""
    n, in_order = 0, True
    while True:
        try:
            values = await rx.recv_many()
        except aqueduct.Finished:
            return n, in_order
        in_order = in_order and values == [bytes([(n + i) % 64]) * 100 for i in range(len(values))]
        n += len(values)


async def test_unreliable_datagrams_arrive_in_order_or_not_at_all(linked) -> None:
    tx, conn = linked
    udp_tx, udp_rx = aqueduct.channel()
    await tx.send({"datagrams": udp_rx})
    remote_rx = (await asyncio.wait_for(conn.entrypoint.recv(), TIMEOUT))["datagrams"]
    udp_tx.unreliable()
    for n in range(2000):
        await udp_tx.send(n)
    await udp_tx.finish()
    got = [n async for n in remote_rx]
    assert got == sorted(got) and len(set(got)) == len(got)  # never late: no reordering, no copies
    assert len(got) > 1000  # loopback loses few; the count is not the point, the order is


def test_a_network_namespace_has_loopback_only_and_up() -> None:
    """Where the picoquic-server tests run: every interface there is loopback (or the machine says why not)."""
    import subprocess
    import sys

    from interop.netns import namespace_refusal

    if why := namespace_refusal():
        pytest.skip(f"no network namespace here: {why}")
    probe = "from interop.netns import isolated_loopback; print(isolated_loopback())"
    inside = subprocess.run(
        [sys.executable, "-m", "interop.netns", "--", sys.executable, "-c", probe],
        capture_output=True, text=True, timeout=60,
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.strip() == "True"
