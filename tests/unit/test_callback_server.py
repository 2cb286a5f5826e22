"""The spare descriptor takes a listening socket numbered past ``select()``'s reach, and leaves a low one be.

py4j's callback server waits on its socket with ``select()``; the spare
must give it a number below ``FD_SETSIZE`` that is still the same
listening socket (same port, connections accepted).
"""

from __future__ import annotations

import os
import resource
import select
import socket

import pytest

from aqueduct.bridge.app.callback_server import FD_SETSIZE, SpareDescriptor


def listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_socket_past_fd_setsize_moves_onto_the_spare_and_still_accepts() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= FD_SETSIZE + 8:
        pytest.skip(f"needs descriptors past {FD_SETSIZE}, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FD_SETSIZE + 16), hard))
    spare = SpareDescriptor()
    with listening_socket() as low:  # the same socket on a number past FD_SETSIZE, as if a fleet held the rest
        high = socket.socket(fileno=os.dup2(low.fileno(), FD_SETSIZE + 4, inheritable=False))
    try:
        with pytest.raises(ValueError):
            select.select([high], [], [], 0)  # what ended py4j's server thread
        moved = spare.take_over(high)
        assert moved.fileno() < FD_SETSIZE and spare.fd is None
        with socket.create_connection(moved.getsockname(), timeout=5):
            assert select.select([moved], [], [], 5)[0] == [moved]  # the same listening socket
            moved.accept()[0].close()
        moved.close()
    finally:
        high.close()
        spare.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_low_socket_stays_as_it_is() -> None:
    spare = SpareDescriptor()
    try:
        with listening_socket() as sock:
            assert spare.take_over(sock) is sock
        assert spare.fd is not None  # kept for a later socket, or given back by close()
    finally:
        spare.close()
