"""TLS 1.3 session tickets on aioquic: a reconnect resumes instead of redoing the certificate work.

A full TLS 1.3 handshake costs the server a certificate signature (and the
client a chain verification); a resumed one (a pre-shared key from an
earlier session's ticket, RFC 8446 section 2.2, still with a fresh key
exchange) skips both. On aioquic that is a small share of a connection's
CPU (``bench/handshake_cost.py``: the server's QUIC and Aqueduct work in
Python dominates), more of the client's (its chain verification).

aioquic's server tickets are *stateful*: a ticket is 64 random bytes naming
a resumption secret the server keeps in memory (there is no ticket
encryption key). :class:`ServerTickets` is that memory, bounded (the oldest
go first) and single-use (a ticket is taken out when presented; the resumed
connection is issued a fresh one). So tickets never outlive the server
process: a reconnect after a network blip, or to a listener that stayed up,
resumes; after a bridge restart (SIGKILL or not) every ticket is unknown and
the full handshake runs, without an error. Persisting them would mean
writing every live session's resumption secret to disk, which buys a
cheaper storm after a restart at the price of a file whose theft lets anyone
impersonate a producer's past sessions to the bridge; not done.

Why resuming is safe for this protocol: a ticket only stands in for the
TLS certificate exchange of a session the same server completed, with the
same peer. Everything above TLS still runs on every connection: the
Aqueduct handshake (VERSION, CONNECTION_HEADERS, HELLO) and the bridge's
cookie or token check, so a resumed connection is admitted exactly as a
full one is. Two things are deliberately not done:

- No 0-RTT (early data). Tickets are issued without ``max_early_data``
  and the client drops it from any ticket it keeps (a picoquic server
  offers it): early data can be replayed by anyone who captured it, and an
  Aqueduct client's first words (HELLO with its credential, then
  messages) are neither idempotent nor harmless to replay. The client
  speaks only after the QUIC handshake completes anyway.
- No resumption under mutual TLS: a resumed handshake carries no client
  certificate, so the server's per-connection check (a CA-signed, unexpired
  certificate) would be skipped and a revoked or expired certificate would
  keep connecting for the ticket's life. A server that requires client
  certificates issues no tickets (see :func:`~aqueduct.runtime.backends.aioquic.listen`).

:class:`ClientTickets` keeps the tickets per server (host, port, SNI),
process-wide and bounded, so every ``connect`` of a process (a producer's
reconnects included) presents one without its caller doing anything.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from collections.abc import Hashable

from aioquic.tls import SessionTicket

MAX_SERVER_TICKETS = 65536
"""Tickets a server keeps (about 0.6 KB each, 40 MB in all); past it the oldest are forgotten
(their clients then run a full handshake). One per connection since the last
restart, so the bound is a fleet's size."""
MAX_CLIENT_TICKETS = 16384
"""Tickets a process keeps, over every server (about 10 MB at most)."""


class ServerTickets:
    """A server's issued tickets, single-use, bounded, each valid until aioquic's expiry (a day).

    :meth:`add` is aioquic's ``session_ticket_handler``, :meth:`take` its
    ``session_ticket_fetcher``.
    """

    def __init__(self, capacity: int = MAX_SERVER_TICKETS) -> None:
        self.capacity = capacity
        self._tickets: OrderedDict[bytes, SessionTicket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tickets)

    def add(self, ticket: SessionTicket) -> None:
        self._tickets[ticket.ticket] = ticket
        while len(self._tickets) > self.capacity:
            self._tickets.popitem(last=False)

    def take(self, label: bytes) -> SessionTicket | None:
        """The ticket named ``label``, removed (a ticket resumes one connection), or None."""
        ticket = self._tickets.pop(label, None)
        return ticket if ticket is not None and ticket.is_valid else None


class ClientTickets:
    """Tickets per server, the newest first, bounded in all (the least recently stored server's forgotten first).

    A server's connection presents a ticket once and is issued a new one,
    so a process with many connections to one server (a load generator, a
    fleet of producers in one process) keeps one ticket per connection it
    made, up to ``capacity`` tickets in all.
    """

    def __init__(self, capacity: int = MAX_CLIENT_TICKETS) -> None:
        self.capacity = capacity
        self._tickets: OrderedDict[Hashable, deque[SessionTicket]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def put(self, server: Hashable, ticket: SessionTicket) -> None:
        """Keep ``ticket`` for ``server``, without early data (no 0-RTT, see the module's docstring)."""
        if ticket.max_early_data_size is not None:
            ticket = dataclasses.replace(ticket, max_early_data_size=None)
        kept = self._tickets.pop(server, None) or deque()
        kept.append(ticket)
        self._tickets[server] = kept
        self._count += 1
        while self._count > self.capacity:
            oldest = next(iter(self._tickets.values()))
            oldest.popleft()
            self._count -= 1
            if not oldest:
                self._tickets.popitem(last=False)

    def take(self, server: Hashable) -> SessionTicket | None:
        """The newest valid ticket to present to ``server``, removed (the server accepts it once), or None."""
        kept = self._tickets.get(server)
        while kept:
            ticket = kept.pop()
            self._count -= 1
            if ticket.is_valid:
                break
        else:
            ticket = None
        if kept is not None and not kept:
            del self._tickets[server]
        return ticket


CLIENT_TICKETS = ClientTickets()
"""The process's client tickets, shared by every aioquic ``connect``."""
