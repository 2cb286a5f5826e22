"""py4j's callback server on a descriptor ``select()`` can wait on, however many producers came first.

pyspark starts py4j's callback server for a ``StreamingQueryListener``
(the bridge's commit listener) or a ``foreachBatch``; the JVM calls into
Python through it. It waits for those calls with ``select()``, which
refuses descriptor numbers of ``FD_SETSIZE`` (1024) or more: its thread
then ends, and the next call from the JVM (the query's start) waits
forever. ``serve`` listens for producers before Spark starts, so a fleet
reconnecting during that start can take this process past descriptor 1023
before the server exists.

:class:`SpareDescriptor` keeps one low descriptor number aside from the
bridge's first moment (``/dev/null`` open on it), and
:func:`start_callback_server` moves the server's socket onto it when the
socket got a higher one: ``dup2`` replaces the spare in one step, so no
other thread can take the number in between.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: the first descriptor number ``select()`` refuses (glibc's FD_SETSIZE)
FD_SETSIZE = 1024
MOVE_WAIT = 10.0  # seconds a started server's thread gets to move its socket (it does so first)


class SpareDescriptor:
    """One low descriptor number, held on ``/dev/null`` until the callback server's socket takes it."""

    def __init__(self) -> None:
        self.fd: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    def take_over(self, sock: socket.socket) -> socket.socket:
        """``sock`` on the spare number (``sock`` itself when it is low enough, or the spare is gone)."""
        if sock.fileno() < FD_SETSIZE or self.fd is None:
            return sock
        fd, self.fd = self.fd, None
        os.dup2(sock.fileno(), fd, inheritable=False)
        logger.debug("py4j's callback server moved from descriptor %d to %d", sock.fileno(), fd)
        return socket.socket(fileno=fd)

    def close(self) -> None:
        """Give the number back (the callback server did not need it)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def start_callback_server(gateway: Any, spare: SpareDescriptor) -> None:
    """Start pyspark's callback server on ``gateway`` (unless it runs), its socket below ``FD_SETSIZE``.

    The socket is moved in the server's own thread, before its first
    ``select()``: py4j creates and binds the socket in ``start()`` and
    hands it to the thread right away, so there is no earlier moment.
    The socket it was created on stays open until the start returned
    (pyspark reads the server's address then, from either socket).
    """
    from pyspark.java_gateway import ensure_callback_server_started

    create = gateway._create_callback_server
    replaced: list[socket.socket] = []
    moved = threading.Event()  # the server's thread looked at its socket
    created: list[Any] = []  # the server, if this call started one

    def create_low(parameters: Any) -> Any:
        server = create(parameters)
        created.append(server)
        run = server.run

        def run_low() -> None:
            original = server.server_socket
            server.server_socket = spare.take_over(original)
            if server.server_socket is not original:
                replaced.append(original)
            moved.set()
            run()

        server.run = run_low  # Thread(target=self.run) in py4j's start() finds this one
        return server

    gateway._create_callback_server = create_low
    try:
        ensure_callback_server_started(gateway)
    finally:
        del gateway._create_callback_server  # the class's own again
    if created:
        moved.wait(MOVE_WAIT)
    for sock in replaced:
        sock.close()
