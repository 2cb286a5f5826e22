"""The session ticket stores stay bounded, hand each ticket out once and never offer early data."""

from __future__ import annotations

import datetime

from aioquic.tls import CipherSuite, SessionTicket

from aqueduct.runtime.backends.session_tickets import ClientTickets, ServerTickets


def ticket(n: int, *, valid_for: float = 3600.0, early_data: int | None = None) -> SessionTicket:
    now = datetime.datetime.now(datetime.UTC)
    return SessionTicket(
        age_add=0,
        cipher_suite=CipherSuite.AES_128_GCM_SHA256,
        not_valid_after=now + datetime.timedelta(seconds=valid_for),
        not_valid_before=now - datetime.timedelta(seconds=1),
        resumption_secret=b"s" * 32,
        server_name="bridge",
        ticket=n.to_bytes(64, "big"),
        max_early_data_size=early_data,
    )


def test_a_server_forgets_its_oldest_tickets_beyond_its_capacity() -> None:
    tickets = ServerTickets(capacity=100)
    for n in range(5000):
        tickets.add(ticket(n))
    assert len(tickets) == 100
    assert tickets.take(ticket(0).ticket) is None  # forgotten: that client runs a full handshake
    assert tickets.take(ticket(4999).ticket) is not None


def test_a_server_ticket_resumes_once_and_not_after_it_expired() -> None:
    tickets = ServerTickets()
    tickets.add(ticket(1))
    tickets.add(ticket(2, valid_for=-1.0))
    assert tickets.take(ticket(1).ticket) is not None
    assert tickets.take(ticket(1).ticket) is None
    assert tickets.take(ticket(2).ticket) is None
    assert len(tickets) == 0


def test_a_client_keeps_a_bounded_number_of_tickets_over_every_server() -> None:
    tickets = ClientTickets(capacity=64)
    for n in range(10_000):
        tickets.put(("10.0.0.1", n, "bridge"), ticket(n))
    tickets.put(("10.0.0.1", 9999, "bridge"), ticket(123))
    assert len(tickets) == 64
    assert tickets.take(("10.0.0.1", 0, "bridge")) is None  # forgotten: a full handshake
    newest, older = (tickets.take(("10.0.0.1", 9999, "bridge")) for _ in range(2))
    assert newest is not None and newest.ticket == ticket(123).ticket
    assert older is not None and older.ticket == ticket(9999).ticket
    assert tickets.take(("10.0.0.1", 9999, "bridge")) is None  # each presented once
    assert len(tickets) == 62


def test_a_client_keeps_a_ticket_per_connection_to_one_server_within_the_bound() -> None:
    tickets = ClientTickets(capacity=100)
    for n in range(5000):  # a fleet of producers in one process, one bridge
        tickets.put("bridge", ticket(n))
    tickets.put("bridge", ticket(5000, valid_for=-1.0))
    assert len(tickets) == 100
    taken = [tickets.take("bridge") for _ in range(101)]
    assert [t.ticket for t in taken[:100] if t is not None] == [ticket(n).ticket for n in range(4999, 4900, -1)]
    assert taken[100] is None and len(tickets) == 0  # the expired one was skipped, not presented


def test_a_client_never_offers_early_data() -> None:
    tickets = ClientTickets()
    tickets.put("bridge", ticket(1, early_data=0xFFFFFFFF))  # a picoquic server offers 0-RTT
    kept = tickets.take("bridge")
    assert kept is not None and kept.max_early_data_size is None
