"""The interop test cases: what each role sends and what it checks.

Every case is a pair of coroutines, one per role, talking through the public
Aqueduct API only, so the same scenario runs against any implementation that
speaks the protocol (the peer process may be written in another language; only
the wire and the behaviour described in ``interop/README.md`` matter).

Shape shared by all cases but ``handshake``: the client's first entrypoint
message is the *hello*, a CBOR map ``{"testcase": NAME, "verdict": <oneshot
Sender>, ...case-specific handles...}``. The server runs its side of the case
and sends its verdict ``{"ok": bool, "detail": str}`` on that oneshot; the
client exits 0 only if its own checks passed *and* the server's verdict is ok.
That way both processes agree on the outcome and the client knows its data was
really consumed before it closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aqueduct
from aqueduct.runtime import Finished, Receiver, Sender

# Sizes are modest so a full matrix (cases x scenarios) stays in minutes, yet
# large enough that messages span many QUIC packets and windows fill up.
VERDICT_CONFIRM_WAIT = 10.0  # seconds the server waits for the client to confirm its verdict
ORDERED_COUNT = 300
UNORDERED_COUNT = 300
UNRELIABLE_COUNT = 300
ECHO_COUNT = 50
INNER_AT = 25
INNER_COUNT = 5
CANCEL_BEFORE = 20
CANCEL_AFTER = 30
CLOSE_AFTER = 10
CLOSE_MAX_SENDS = 100_000
RACE_COUNT = 100
LOST_COUNT = 20
MUX_CHANNELS = 16
MUX_BACK_CHANNELS = 4
MUX_COUNT = 40
# The server announces a 64 KiB window (connection header aqueduct-window) and
# the client offers 3072 messages of ~230 bytes (~0.7 MiB): more than twice
# what the window plus our local send queue (1024 messages) hold, so a bounded
# sender must block, yet little enough data to cross a lossy link in seconds.
FLOW_WINDOW = 64 * 1024
FLOW_COUNT = 3072
FLOW_SIZE = 200
FLOW_SLACK = 1024  # message 0 is dequeued before the stall: its cost may be re-sent
FLOW_STALL = 1.5
APPLICATION_CLOSE = 2  # QUIC application error code of a normal close (spec section 6)


class CaseFailed(Exception):
    """A check of a test case failed; the message says which and why."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailed(message)


def pad(n: int) -> bytes:
    """Deterministic filler for message ``n``: corruption or mix-ups are detectable.

    Every 50th message is 100 KiB so ordered delivery spans many packets.
    """
    size = 100 * 1024 if n % 50 == 49 else (n * 37) % 2000
    return bytes((n + k) % 251 for k in range(size))


async def drain(rx: Receiver) -> list[Any]:
    """Every remaining message of ``rx`` until it finishes."""
    return [msg async for msg in rx]


# ---------------------------------------------------------------- roles' contexts


@dataclass
class ClientContext:
    """What a client coroutine gets: the entrypoint and the prepared hello."""

    testcase: str
    entry: Sender
    verdict_tx: Sender | None

    async def hello(self, keep_open: bool = False, **handles: Any) -> None:
        """Send the hello with ``handles``; finish the entrypoint unless the case uses it."""
        await self.entry.send({"testcase": self.testcase, "verdict": self.verdict_tx, **handles})
        if not keep_open:
            await self.entry.finish()


@dataclass
class ServerContext:
    """What a server coroutine gets: the hello and the entrypoint after it."""

    hello: dict[str, Any]
    entry: Receiver


ClientFn = Callable[[ClientContext], Awaitable[str]]
ServerFn = Callable[[ServerContext], Awaitable[str]]


@dataclass(frozen=True)
class TestCase:
    """One row of the matrix: the client's and the server's half."""

    name: str
    client: ClientFn
    server: ServerFn
    uses_verdict: bool = True
    server_options: dict[str, Any] = field(default_factory=dict)
    """Extra ``aqueduct.serve`` options (e.g. the window the server announces)."""


# ---------------------------------------------------------------- ordered / unordered


async def client_ordered(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    await c.hello(data=rx)
    for n in range(ORDERED_COUNT):
        await tx.send({"n": n, "pad": pad(n)})
    await tx.finish()
    return f"sent {ORDERED_COUNT} ordered messages"


async def server_ordered(s: ServerContext) -> str:
    expected = 0
    async for msg in s.hello["data"]:
        check(msg.get("n") == expected, f"ordered: expected message {expected}, got {msg.get('n')}")
        check(msg.get("pad") == pad(expected), f"ordered: payload of message {expected} differs")
        expected += 1
    check(expected == ORDERED_COUNT, f"ordered: finished after {expected}/{ORDERED_COUNT} messages")
    return f"received {expected} messages in order"


async def client_unordered(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    tx.unordered()
    await c.hello(data=rx)
    for n in range(UNORDERED_COUNT):
        await tx.send({"n": n, "pad": pad(n)})
    await tx.finish()
    return f"sent {UNORDERED_COUNT} unordered messages"


async def _collect_exactly_once(rx: Receiver, count: int, label: str) -> int:
    """Read ``rx`` to the end; every number below ``count`` exactly once, intact. Returns reorders."""
    seen: set[int] = set()
    reordered = 0
    last = -1
    async for msg in rx:
        n = msg.get("n")
        check(isinstance(n, int) and 0 <= n < count, f"{label}: unexpected message number {n!r}")
        check(n not in seen, f"{label}: message {n} delivered twice")
        check(msg.get("pad") == pad(n), f"{label}: payload of message {n} differs")
        seen.add(n)
        reordered += n < last
        last = n
    missing = sorted(set(range(count)) - seen)
    check(not missing, f"{label}: finished with {len(missing)} messages missing, first {missing[:5]}")
    return reordered


async def server_unordered(s: ServerContext) -> str:
    reordered = await _collect_exactly_once(s.hello["data"], UNORDERED_COUNT, "unordered")
    return f"received all {UNORDERED_COUNT} exactly once ({reordered} out of order)"


# ---------------------------------------------------------------- unreliable


async def client_unreliable(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    tx.unreliable()
    await c.hello(data=rx)
    for n in range(UNRELIABLE_COUNT):
        await tx.send({"n": n})
        if n % 50 == 49:  # let the datagram queue drain instead of evicting
            await asyncio.sleep(0.005)
    await tx.finish()
    return f"sent {UNRELIABLE_COUNT} unreliable messages"


async def server_unreliable(s: ServerContext) -> str:
    seen: set[int] = set()
    async for msg in s.hello["data"]:
        n = msg.get("n")
        check(isinstance(n, int) and 0 <= n < UNRELIABLE_COUNT, f"unreliable: bad number {n!r}")
        check(n not in seen, f"unreliable: message {n} delivered twice")
        seen.add(n)
    # Finished is only delivered once every announced number was acked or
    # nacked, so reaching here means every number is accounted for.
    return f"delivered {len(seen)}/{UNRELIABLE_COUNT} at most once; finish covered the rest"


# ---------------------------------------------------------------- attachments


def _echo_body(n: int) -> bytes:
    return bytes([n % 256]) * (n * 13)


async def client_attachments(c: ClientContext) -> str:
    reply_tx, reply_rx = aqueduct.channel()
    await c.hello(keep_open=True, reply=reply_tx)
    for n in range(ECHO_COUNT):
        if n == INNER_AT:
            inner_tx, inner_rx = aqueduct.channel()
            await c.entry.send({"n": n, "inner": inner_rx})
            for j in range(INNER_COUNT):
                await inner_tx.send({"inner": j})
            await inner_tx.finish()
        else:
            await c.entry.send({"n": n, "body": _echo_body(n)})
    await c.entry.finish()
    echoes = await drain(reply_rx)
    check(len(echoes) == ECHO_COUNT, f"attachments: got {len(echoes)}/{ECHO_COUNT} echoes")
    for n, echo in enumerate(echoes):
        if n == INNER_AT:
            want: dict[str, Any] = {"n": n, "inner": list(range(INNER_COUNT))}
        else:
            want = {"n": n, "body": _echo_body(n)}
        check(echo == want, f"attachments: echo {n} is {echo!r:.80}, expected {want!r:.80}")
    return f"all {ECHO_COUNT} echoes right, including the nested channel"


async def server_attachments(s: ServerContext) -> str:
    reply = s.hello["reply"]
    count = 0
    async for msg in s.entry:
        if "inner" in msg:
            inner = [m["inner"] async for m in msg["inner"]]
            await reply.send({"n": msg["n"], "inner": inner})
        else:
            await reply.send(msg)
        count += 1
    await reply.finish()
    return f"echoed {count} messages on the attached Sender"


# ---------------------------------------------------------------- cancel / close


async def client_cancel(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    reply_tx, reply_rx = aqueduct.channel()
    await c.hello(data=rx, reply=reply_tx)
    for n in range(CANCEL_BEFORE):
        await tx.send({"n": n})
    progress = await reply_rx.recv()
    check(progress == {"got": CANCEL_BEFORE}, f"cancel: unexpected progress report {progress!r}")
    for n in range(CANCEL_BEFORE, CANCEL_BEFORE + CANCEL_AFTER):
        await tx.send({"n": n})
    tx.cancel()
    rest = await drain(reply_rx)
    check(rest == [], f"cancel: unexpected extra replies {rest!r}")
    return "cancelled after the server confirmed the first messages"


async def server_cancel(s: ServerContext) -> str:
    rx, reply = s.hello["data"], s.hello["reply"]
    expected = 0
    try:
        async for msg in rx:
            check(msg.get("n") == expected, f"cancel: expected {expected}, got {msg.get('n')}")
            expected += 1
            if expected == CANCEL_BEFORE:
                await reply.send({"got": CANCEL_BEFORE})
    except aqueduct.Cancelled:
        await reply.finish()
        check(expected >= CANCEL_BEFORE, f"cancel: cancelled after only {expected} messages")
        return f"saw Cancelled after {expected} messages"
    raise CaseFailed(f"cancel: channel finished after {expected} messages instead of Cancelled")


async def client_close(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    await c.hello(data=rx)
    sent = 0
    try:
        while sent < CLOSE_MAX_SENDS:
            await tx.send({"n": sent})
            sent += 1
            if sent % 10 == 0:
                await asyncio.sleep(0.005)
    except aqueduct.ReceiverClosed:
        check(sent >= CLOSE_AFTER, f"close: ReceiverClosed after only {sent} sends")
        return f"send failed with ReceiverClosed after {sent} messages"
    raise CaseFailed(f"close: {sent} sends and no ReceiverClosed")


async def server_close(s: ServerContext) -> str:
    rx = s.hello["data"]
    for n in range(CLOSE_AFTER):
        msg = await rx.recv()
        check(msg.get("n") == n, f"close: expected {n}, got {msg.get('n')}")
    await rx.close()
    return f"closed the receiver after {CLOSE_AFTER} messages"


# ---------------------------------------------------------------- finish-race


async def client_finish_race(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    tx.unordered()
    await c.hello(data=rx)
    for n in range(RACE_COUNT):
        await tx.send({"n": n, "pad": pad(n)})
    await tx.finish()  # right behind the last message: FINISH races the streams
    return f"sent {RACE_COUNT} unordered messages and FINISH at once"


async def server_finish_race(s: ServerContext) -> str:
    reordered = await _collect_exactly_once(s.hello["data"], RACE_COUNT, "finish-race")
    return f"all {RACE_COUNT} delivered before Finished ({reordered} out of order)"


# ---------------------------------------------------------------- lost-in-transit


async def _outcome(n: int, rx: Receiver) -> str:
    """How the channel attached to unreliable message ``n`` ended, from the client's side."""
    try:
        got = await drain(rx)
    except aqueduct.LostInTransit:
        return "lost"
    except aqueduct.Cancelled:
        return "dropped"
    check(got == [{"n": n}], f"lost-in-transit: channel {n} delivered {got!r}")
    return "echoed"


async def client_lost_in_transit(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    tx.unreliable()
    await c.hello(data=rx)
    backs = []
    try:
        for n in range(LOST_COUNT):
            back_tx, back_rx = aqueduct.channel()
            await tx.send({"n": n, "back": back_tx})
            backs.append(back_rx)  # only once the send was accepted: else it stays local
        await tx.finish()
    except aqueduct.ReceiverClosed:
        pass  # the server closes after the first message: expected
    outcomes = await asyncio.gather(*(_outcome(n, rx) for n, rx in enumerate(backs)))
    tally = {k: outcomes.count(k) for k in ("echoed", "lost", "dropped")}
    check(tally["echoed"] <= 1, f"lost-in-transit: {tally['echoed']} echoes, the server sends one")
    check(tally["lost"] >= 1, f"lost-in-transit: no handle failed with LostInTransit ({tally})")
    return f"every attached channel accounted for: {tally}"


async def server_lost_in_transit(s: ServerContext) -> str:
    rx = s.hello["data"]
    try:
        first = await rx.recv()
    except Finished:
        return "no unreliable message arrived; all attachments must be lost"
    await first["back"].send({"n": first["n"]})
    await first["back"].finish()
    await rx.close()  # nacks every message not acked yet: their attachments are lost
    return f"echoed message {first['n']} and closed the receiver"


# ---------------------------------------------------------------- multiplexing


async def _send_numbered(tx: Sender, channel: int, count: int) -> None:
    for n in range(count):
        await tx.send({"c": channel, "n": n, "pad": pad(n)})
    await tx.finish()


async def _read_numbered(rx: Receiver, channel: int, count: int, ordered: bool) -> None:
    label = f"multiplexing channel {channel}"
    if ordered:
        got = [m["n"] for m in await drain(rx)]
        check(got == list(range(count)), f"{label}: out of order or incomplete ({len(got)} msgs)")
    else:
        await _collect_exactly_once(rx, count, label)


async def client_multiplexing(c: ClientContext) -> str:
    pairs = [aqueduct.channel() for _ in range(MUX_CHANNELS)]
    backs = [aqueduct.channel() for _ in range(MUX_BACK_CHANNELS)]
    for k, (tx, _) in enumerate(pairs):
        if k % 2:
            tx.unordered()
    await c.hello(data=[rx for _, rx in pairs], back=[tx for tx, _ in backs])
    await asyncio.gather(
        *(_send_numbered(tx, k, MUX_COUNT) for k, (tx, _) in enumerate(pairs)),
        *(_read_numbered(rx, k, MUX_COUNT, ordered=True) for k, (_, rx) in enumerate(backs)),
    )
    return f"{MUX_CHANNELS} channels out and {MUX_BACK_CHANNELS} back, concurrently"


async def server_multiplexing(s: ServerContext) -> str:
    data, back = s.hello["data"], s.hello["back"]
    check(len(data) == MUX_CHANNELS and len(back) == MUX_BACK_CHANNELS, "multiplexing: bad hello")
    await asyncio.gather(
        *(_read_numbered(rx, k, MUX_COUNT, ordered=k % 2 == 0) for k, rx in enumerate(data)),
        *(_send_numbered(tx, k, MUX_COUNT) for k, tx in enumerate(back)),
    )
    return f"all {MUX_CHANNELS * MUX_COUNT} messages in, {MUX_BACK_CHANNELS * MUX_COUNT} out"


# ---------------------------------------------------------------- flow-control


def _flow_pad(n: int) -> bytes:
    return n.to_bytes(4, "big") * (FLOW_SIZE // 4)


async def client_flow_control(c: ClientContext) -> str:
    tx, rx = aqueduct.channel()
    reply_tx, reply_rx = aqueduct.channel()
    await c.hello(data=rx, reply=reply_tx)
    sent = 0

    async def send_all() -> None:
        nonlocal sent
        for n in range(FLOW_COUNT):
            await tx.send({"n": n, "pad": _flow_pad(n)})
            sent = n + 1
        await tx.finish()

    sender = asyncio.create_task(send_all())
    try:
        stalled = await reply_rx.recv()
        check(stalled == {"stalled": True}, f"flow-control: unexpected report {stalled!r}")
        await asyncio.sleep(FLOW_STALL / 3)
        during_stall = sent
        check(
            during_stall < FLOW_COUNT,
            f"flow-control: all {FLOW_COUNT} sends returned while the receiver was not "
            "reading: the sender is not bounded",
        )
        await sender
    finally:
        sender.cancel()
    await drain(reply_rx)
    return f"sender blocked at {during_stall}/{FLOW_COUNT} messages while the receiver stalled"


async def server_flow_control(s: ServerContext) -> str:
    rx, reply = s.hello["data"], s.hello["reply"]
    first = await rx.recv()
    check(first.get("n") == 0, "flow-control: first message is not 0")
    await reply.send({"stalled": True})
    await asyncio.sleep(FLOW_STALL)  # a slow application: nothing dequeued meanwhile
    # What arrived but was not read is bounded by the window we announced.
    buffered = rx.stats().get("bytes_received", 0)
    check(
        buffered <= FLOW_WINDOW + FLOW_SLACK,
        f"flow-control: {buffered} bytes arrived while the application read nothing; "
        f"the announced window is {FLOW_WINDOW}",
    )
    expected = 1
    async for msg in rx:
        check(msg.get("n") == expected, f"flow-control: expected {expected}, got {msg.get('n')}")
        check(msg.get("pad") == _flow_pad(expected), f"flow-control: payload {expected} differs")
        expected += 1
    await reply.finish()
    check(expected == FLOW_COUNT, f"flow-control: finished after {expected}/{FLOW_COUNT}")
    return f"{buffered} bytes buffered during the {FLOW_STALL} s stall; then read all {FLOW_COUNT}"


# ---------------------------------------------------------------- handshake


async def client_handshake(c: ClientContext) -> str:
    await c.entry.send({"testcase": "handshake"})
    # No verdict channel here: the server closes the connection once it has
    # seen the message and the finish (an error close would mean it did not),
    # and that close may overtake the confirmation of the finish.
    with contextlib.suppress(aqueduct.ConnectionLost):
        await c.entry.finish()
    conn = c.entry.connection
    await conn.wait_closed()
    reason = conn.close_reason
    check(
        reason is not None and reason.code == APPLICATION_CLOSE,
        f"handshake: connection ended by {reason}, not by the server's application close",
    )
    return "connected, sent one message, finished; server closed the connection"


async def server_handshake(s: ServerContext) -> str:
    rest = await drain(s.entry)
    check(rest == [], f"handshake: unexpected extra messages {rest!r:.80}")
    return "one message, then Finished"


TESTCASES: dict[str, TestCase] = {
    case.name: case
    for case in (
        TestCase("handshake", client_handshake, server_handshake, uses_verdict=False),
        TestCase("ordered", client_ordered, server_ordered),
        TestCase("unordered", client_unordered, server_unordered),
        TestCase("unreliable", client_unreliable, server_unreliable),
        TestCase("attachments", client_attachments, server_attachments),
        TestCase("cancel", client_cancel, server_cancel),
        TestCase("close", client_close, server_close),
        TestCase("finish-race", client_finish_race, server_finish_race),
        TestCase("lost-in-transit", client_lost_in_transit, server_lost_in_transit),
        TestCase("multiplexing", client_multiplexing, server_multiplexing),
        TestCase(
            "flow-control",
            client_flow_control,
            server_flow_control,
            server_options={"window": FLOW_WINDOW},
        ),
    )
}

# connector-resume runs the connector protocol over its own connections
# (interop/connector_resume.py), so it is not a TestCase of this module.
CONNECTOR_RESUME = "connector-resume"
ALL_NAMES = (*TESTCASES, CONNECTOR_RESUME)


# ---------------------------------------------------------------- role drivers


async def run_client(case: TestCase, entry: Sender) -> str:
    """Run the client half; returns a summary, raises :class:`CaseFailed`.

    The verdict is awaited alongside the client's own work: a server that
    fails early (wrong test case, broken check) ends the run at once instead
    of leaving the client waiting for messages that will never come.
    """
    if not case.uses_verdict:
        return await case.client(ClientContext(case.name, entry, None))
    verdict_tx, verdict_rx = aqueduct.oneshot()
    work = asyncio.ensure_future(case.client(ClientContext(case.name, entry, verdict_tx)))
    verdict_task = asyncio.ensure_future(_verdict(case, verdict_rx))
    try:
        await asyncio.wait({work, verdict_task}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done() and verdict_task.exception() is None:
            verdict = verdict_task.result()
            check(verdict["ok"] is True, f"{case.name}: server says: {verdict.get('detail')}")
        summary = await work
        verdict = await verdict_task
        check(verdict["ok"] is True, f"{case.name}: server says: {verdict.get('detail')}")
    finally:
        work.cancel()
        verdict_task.cancel()
    return f"{summary}; server: {verdict.get('detail')}"


async def _verdict(case: TestCase, verdict_rx: Receiver) -> dict[str, Any]:
    try:
        verdict = await verdict_rx.recv()
    except Finished:
        raise CaseFailed(f"{case.name}: the verdict channel finished without a verdict") from None
    check(
        isinstance(verdict, dict) and "ok" in verdict,
        f"{case.name}: malformed verdict {verdict!r:.80}",
    )
    return verdict


async def run_server(case: TestCase, entry: Receiver) -> str:
    """Run the server half on a connection's entrypoint; returns a summary, raises :class:`CaseFailed`.

    A failure (a check, or an error from the library) is also sent as the
    verdict whenever the hello carried a verdict Sender, so the client fails
    fast with the server's reason.
    """
    try:
        hello = await entry.recv()
    except Finished:
        raise CaseFailed(f"{case.name}: entrypoint finished before the hello") from None
    verdict_tx = hello.get("verdict") if isinstance(hello, dict) else None
    if not isinstance(verdict_tx, Sender):
        verdict_tx = None
    try:
        check(isinstance(hello, dict), f"{case.name}: hello is not a map: {hello!r:.80}")
        check(
            hello.get("testcase") == case.name,
            f"{case.name}: client runs test case {hello.get('testcase')!r}, server {case.name!r}",
        )
        check(not case.uses_verdict or verdict_tx is not None, f"{case.name}: hello carries no verdict Sender")
        detail = await case.server(ServerContext(hello, entry))
    except Exception as exc:  # a library error fails the case just like a failed check
        if verdict_tx is not None:
            detail = str(exc) if isinstance(exc, CaseFailed) else f"{case.name}: {exc!r}"
            with contextlib.suppress(aqueduct.AqueductError):  # the connection may be gone
                await _send_verdict(verdict_tx, {"ok": False, "detail": detail})
        raise
    if verdict_tx is not None:
        await _send_verdict(verdict_tx, {"ok": True, "detail": detail})
    return detail


async def _send_verdict(verdict_tx: Sender, verdict: dict[str, Any]) -> None:
    """Send the verdict (a oneshot: it finishes by itself).

    The client closes the connection as soon as it has read the verdict, which
    may beat the confirmation of the oneshot's finish: that close is not a
    failure. Nor is a confirmation that never comes: the client's last packets
    (its ACK, its CONNECTION_CLOSE) can all be lost once it has left, and then
    only the idle timeout would end the wait. The client judges whether the
    verdict arrived.
    """
    with contextlib.suppress(aqueduct.ConnectionLost, TimeoutError):
        await asyncio.wait_for(verdict_tx.send(verdict), VERDICT_CONFIRM_WAIT)
