"""The receiver half of one channel (spec section 4): acks, nacks, finish, DEQUEUED.

Lifecycle: open until FINISH_SENDER arrives (``finish_total`` set), then
finishing until every reliable number below SENT_RELIABLE arrived and every
announced unreliable number is covered (``complete``); then the connection
closes it as CLOSE_RECEIVER and drops it. CANCEL_SENDER goes straight to
``close``; so does a local close, unless it must first wait for the sender to
announce datagrams we received (``hold_close``).

* Reliable numbers (stream MESSAGEs) are acked at most ``ack_delay`` after
  arrival, sooner when a DEQUEUED report goes out (one write carries both);
  ACK_RELIABLE values count from the lowest number not yet acked.
* Unreliable numbers (datagrams) are covered by ACK_NACK_UNRELIABLE from a
  cursor, never past the SENT_UNRELIABLE total, once each missing number has
  waited the receipt deadline since its announcement. A nack commits: a
  late datagram below the cursor that was not received is dropped.
* The application's queue lives in the runtime, which dequeues in delivery
  order; this side counts the bytes delivered and dequeued, and remembers
  only the delivered-but-not-dequeued messages that carry attachments (with
  their end offset in that byte count), so a close can tell which
  attachments the application will never see. Plain messages cost nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from aqueduct.proto.errors import RemoteProtocolError
from aqueduct.proto.flow import DequeueReporter
from aqueduct.proto.output import Output
from aqueduct.proto.stats import ChannelStats, ConnectionStats
from aqueduct.wire.frames import (
    AckNackUnreliable,
    AckReliable,
    CloseReceiver,
    Dequeued,
    encode_frame,
)
from aqueduct.wire.rangeset import RangeSet, encode_ack_nack


def _without(rs: RangeSet, nums: set[int]) -> RangeSet:
    """A copy of ``rs`` minus ``nums`` (used once, at close)."""
    out = RangeSet()
    for start, stop in rs:
        pos = start
        for n in sorted(x for x in nums if start <= x < stop):
            out.add_range(pos, n)
            pos = n + 1
        out.add_range(pos, stop)
    return out


class ReceiverChannel:
    """Receiver state of ``chanid``."""

    is_sender = False

    def __init__(
        self,
        chanid: int,
        window: int,
        ack_delay: float,
        dequeued_delay: float,
        receipt_deadline: Callable[[], float],
        out: Output,
        conn_stats: ConnectionStats,
    ) -> None:
        self.chanid = chanid
        self.oneshot = bool(chanid & 4)
        self.attached = False
        self.routed = False
        self.stats = ChannelStats()
        self._cstats = conn_stats
        self._out = out
        self._ack_delay = ack_delay
        self._receipt_deadline = receipt_deadline
        self._control: int | None = None
        # reliable space
        self._received = RangeSet()
        self._acked = RangeSet()
        self._unacked = RangeSet()
        self.ack_due: float | None = None
        self.finish_total: int | None = None
        # unreliable space
        self._u_total = 0
        self._u_batches: deque[tuple[int, float]] = deque()  # (end, deadline) of announcements
        self._u_received = RangeSet()
        self._u_cursor = 0
        # flow control, and undequeued messages with attachments: (end, key, attachments)
        self._reporter = DequeueReporter(window, dequeued_delay)
        self._undequeued: deque[tuple[int, int, tuple[int, ...]]] = deque()
        self._delivered = 0  # bytes (message costs) handed to the application
        self._consumed = 0  # bytes it dequeued
        #: closed by the application, waiting until then for SENT_UNRELIABLE (see hold_close)
        self.closing_deadline: float | None = None

    # ------------------------------------------------------------ streams

    def _control_stream(self) -> int:
        if self._control is None:
            self.routed = True
            self._control = self._out.open(self.chanid)
        return self._control

    def echo(self) -> None:
        """Opening our control stream doubles as the ROUTE_TO echo (spec section 4)."""
        self._control_stream()

    def destroy(self, code: int) -> list[int]:
        """Forgotten or lost: reset our control stream."""
        if self._control is not None:
            self._out.reset(self._control, code)
            self._control = None
        return []

    def undequeued_attachments(self) -> list[int]:
        return [c for _, _, children in self._undequeued for c in children]

    # ------------------------------------------------------------ frames from the sender

    def accept_unreliable(self, num: int, now: float) -> bool:
        """Check and record a datagram's number; False when it is late (already nacked)."""
        c = self.chanid
        if self.oneshot:
            raise RemoteProtocolError(
                f"MESSAGE: oneshot channel {c} got a datagram (its one message goes on a stream)"
            )
        received = self._u_received
        if num < self._u_cursor and num not in received:
            self.stats.late_dropped += 1
            self._cstats.late_dropped += 1
            return False
        if self.closing_deadline is not None and num not in received:
            # The application closed this receiver (the close waits for an announcement):
            # a datagram arriving now is not received. The close nacks it, so a channel
            # it carries is lost for the sender, as for one still in transit, instead
            # of reaching an application that is gone.
            return False
        if not received.insert(num):
            raise RemoteProtocolError(f"MESSAGE: duplicate unreliable message number {num} on channel {c}")
        if self.finish_total is not None and num >= self._u_total:
            raise RemoteProtocolError(
                f"MESSAGE: unreliable message number {num} on channel {c} is at or past "
                f"the SENT_UNRELIABLE total {self._u_total} after FINISH_SENDER"
            )
        if self.ack_due is None:
            self.ack_due = now + self._ack_delay
        return True

    def accept_reliable(self, first: int, count: int, now: float) -> None:
        """Check and record stream MESSAGE numbers ``first .. first + count - 1`` (one message: 1).

        A run of numbers past everything received (the ORDERED case) is
        recorded as one range; otherwise each is checked on its own
        (``_accept_number``, also the cheapest step for one number), so a
        violation raises exactly the error of a single MESSAGE.
        """
        if count == 1:
            self._accept_number(first)
        else:
            stop = first + count
            total = self.finish_total
            if first >= self._received.top and not self.oneshot and (total is None or stop <= total):
                self._received.add_range(first, stop)
                self._unacked.add_range(first, stop)
            else:
                for num in range(first, stop):
                    self._accept_number(num)
        if self.ack_due is None:
            self.ack_due = now + self._ack_delay

    def _accept_number(self, num: int) -> None:
        """The per-number rule of ``accept_reliable``: oneshot, duplicate, SENT_RELIABLE."""
        c = self.chanid
        if self.oneshot and num != 0:
            raise RemoteProtocolError(
                f"MESSAGE: oneshot channel {c} carries only message number 0, got {num}"
            )
        if not self._received.insert(num):
            raise RemoteProtocolError(f"MESSAGE: duplicate message number {num} on channel {c}")
        if self.finish_total is not None and num >= self.finish_total:
            raise RemoteProtocolError(
                f"MESSAGE: message number {num} on channel {c} is at or past "
                f"SENT_RELIABLE {self.finish_total}"
            )
        self._unacked.add(num)

    def delivered(self, count: int, cost: int, children: tuple[int, ...] = (), key: int = 0) -> None:
        """``count`` messages of ``cost`` bytes in all go to the application.

        A message carrying channels (``children``; a run of one, whose
        message key is ``key``) is remembered until it is dequeued, so a
        close can tell which attachments the application will never see.
        """
        self._delivered += cost
        stats = self.stats
        stats.messages_received += count
        stats.bytes_received += cost
        if children:
            self._undequeued.append((self._delivered, key, children))

    def on_sent_unreliable(self, count: int, now: float) -> None:
        if self.finish_total is not None:
            raise RemoteProtocolError(
                f"SENT_UNRELIABLE: after FINISH_SENDER on channel {self.chanid}"
            )
        self._u_total += count
        self._u_batches.append((self._u_total, now + self._receipt_deadline()))
        if self.ack_due is None:
            self.ack_due = now + self._ack_delay

    def on_finish(self, total: int) -> None:
        c = self.chanid
        if self.finish_total is not None:
            raise RemoteProtocolError(f"FINISH_SENDER: a second FINISH_SENDER on channel {c}")
        if self.oneshot and total > 1:
            raise RemoteProtocolError(
                f"FINISH_SENDER: oneshot channel {c} sends at most one message, "
                f"got SENT_RELIABLE {total}"
            )
        top = self._received.top
        if top > total:
            raise RemoteProtocolError(
                f"FINISH_SENDER: SENT_RELIABLE {total} on channel {c}, but message "
                f"{top - 1} was received (numbers must be below SENT_RELIABLE)"
            )
        u_top = self._u_received.top
        if u_top > self._u_total:
            raise RemoteProtocolError(
                f"FINISH_SENDER: unreliable message {u_top - 1} on channel {c} is at or past "
                f"the SENT_UNRELIABLE total {self._u_total}"
            )
        self.finish_total = total

    def on_cancel(self) -> None:
        if self.finish_total is not None:
            raise RemoteProtocolError(
                f"CANCEL_SENDER: after FINISH_SENDER on channel {self.chanid} "
                "(a second FINISH or CANCEL)"
            )

    @property
    def complete(self) -> bool:
        """FINISH_SENDER arrived, every reliable number below it arrived, every announced one covered."""
        total = self.finish_total
        return (
            total is not None
            and (total == 0 or self._received.base >= total)
            and self._u_cursor >= self._u_total
        )

    # ------------------------------------------------------------ acks and reports

    def _frontier(self, now: float) -> int:
        """How far ACK_NACK_UNRELIABLE may cover now (cursor rule, receipt deadline)."""
        f = self._u_cursor
        for end, deadline in self._u_batches:
            if deadline <= now:
                f = end
                continue
            m = self._u_received.min_missing_from(f)
            if m >= end:
                f = end
                continue
            return m
        return f

    def flush(self, now: float, cover_to: int | None = None, received: RangeSet | None = None) -> None:
        """Send ACK_RELIABLE / ACK_NACK_UNRELIABLE for everything coverable now."""
        self.ack_due = None
        self._ack_reliable()
        frontier = self._frontier(now) if cover_to is None else cover_to
        if frontier > self._u_cursor:
            got = self._u_received if received is None else received
            ranges = encode_ack_nack(self._u_cursor, got, frontier)
            frame = AckNackUnreliable(ranges)
            self._out.write_frame(self._control_stream(), frame, encode_frame(frame))
            nacked = sum(stop - start for start, stop in got.gaps(self._u_cursor, frontier))
            self.stats.nacked += nacked
            self._cstats.nacks_sent += nacked
            self.stats.acked += frontier - self._u_cursor - nacked
            self._cstats.acks_sent += frontier - self._u_cursor - nacked
            self._u_cursor = frontier
            batches = self._u_batches
            while batches and batches[0][0] <= frontier:
                batches.popleft()

    def _ack_reliable(self) -> None:
        """ACK_RELIABLE for the reliable numbers received and not acked yet, if any."""
        if not len(self._unacked):
            return
        ranges = self._unacked.to_ack_reliable(self._acked.base)
        frame = AckReliable(ranges)
        self._out.write_frame(self._control_stream(), frame, encode_frame(frame))
        n = 0
        for start, stop in self._unacked:
            self._acked.add_range(start, stop)
            n += stop - start
        self._unacked = RangeSet()
        self.stats.acked += n
        self._cstats.acks_sent += n

    def dequeued(self, nbytes: int, now: float) -> None:
        """The application consumed ``nbytes``: maybe report DEQUEUED now."""
        self._consumed += nbytes
        queue = self._undequeued
        while queue and queue[0][0] <= self._consumed:
            queue.popleft()
        if self._reporter.add(nbytes, now):
            self.send_dequeued()

    def send_dequeued(self) -> None:
        n = self._reporter.take()
        if n:
            frame = Dequeued(n)
            self._out.write_frame(self._control_stream(), frame, encode_frame(frame))

    def next_deadline(self) -> float | None:
        """When ``on_timer`` has work next (ack, coverage, DEQUEUED report)."""
        t = self.ack_due
        d = self._reporter.due
        if d is not None and (t is None or d < t):
            t = d
        if self._u_batches:
            d = self._u_batches[0][1]
            if t is None or d < t:
                t = d
        d = self.closing_deadline
        if d is not None and (t is None or d < t):
            t = d
        return t

    def on_timer(self, now: float) -> None:
        """Send what is due; the reliable acks and DEQUEUED report pending go in the same write.

        Both bounds are upper bounds, so a DEQUEUED report due takes the
        pending ACK_RELIABLE along, and an ack due takes the pending
        DEQUEUED report along: a channel receiving a message now and then (a
        producer sending twice a second) answered each with two packets 50 ms
        apart, each acked again by QUIC, twice the packets of one (a storm's
        CPU). Unreliable numbers keep their own schedule (their coverage
        waits for announcements and receipt deadlines).
        """
        report_due = self._reporter.due is not None and self._reporter.due <= now
        if (self.ack_due is not None and self.ack_due <= now) or (
            self._u_batches and self._u_batches[0][1] <= now
        ):
            self.flush(now)
            report_due = report_due or self._reporter.due is not None
        elif report_due and len(self._unacked):
            self._ack_reliable()
            if not self._u_batches:  # nothing else the ack timer was for
                self.ack_due = None
        if report_due:
            self.send_dequeued()

    # ------------------------------------------------------------ endings

    def _close_frame(self) -> None:
        sid = self._control_stream()
        self._out.write_frame(sid, CloseReceiver(), b"\x0a")
        self._out.finish(sid)
        self._control = None

    def hold_close(self, now: float) -> bool:
        """True while a local close must wait for the sender to announce datagrams we received.

        ACK_NACK_UNRELIABLE never covers numbers past the SENT_UNRELIABLE
        total, and CLOSE_RECEIVER nacks whatever is not covered. A datagram
        can arrive, and the application read it, before the announcement of
        its number does (they travel apart): closing at once would nack a
        message the application holds, and a handle it carried would be
        lost for the peer. The announcement follows its datagrams shortly,
        so the close waits for it, at most the receipt deadline; whatever is
        still unannounced then is nacked as before.
        """
        if self.closing_deadline is None:
            if self._u_received.top <= self._u_total:
                return False
            self.closing_deadline = now + self._receipt_deadline()
        return self._u_received.top > self._u_total and now < self.closing_deadline

    def finish_close(self, now: float) -> None:
        """All done after FINISH_SENDER: ack everything, then CLOSE_RECEIVER."""
        self.flush(now, cover_to=self._u_total)
        self._close_frame()

    def close(self, now: float) -> tuple[list[int], list[int]]:
        """Close before the end (local close or CANCEL_SENDER).

        Messages the application did not dequeue are dropped. Those carrying
        attachments and not acked yet are left out of the final acks, so the
        CLOSE_RECEIVER nacks them and the sender sees their channels lost.
        Returns (attachments of dropped but already acked messages, attachments
        of dropped messages now nacked): the connection ends the former and
        silently destroys the latter.
        """
        acked_orphans: list[int] = []
        nacked_orphans: list[int] = []
        skip_r: set[int] = set()
        skip_u: set[int] = set()
        for _, key, children in self._undequeued:
            num = key >> 1
            if key & 1:
                pending = num >= self._u_cursor
                if pending:
                    skip_u.add(num)
            else:
                pending = num not in self._acked
                if pending:
                    skip_r.add(num)
            (nacked_orphans if pending else acked_orphans).extend(children)
        self._undequeued.clear()
        if skip_r:
            self._unacked = _without(self._unacked, skip_r)
        received = _without(self._u_received, skip_u) if skip_u else None
        self.flush(now, cover_to=self._u_total, received=received)
        self._close_frame()
        return acked_orphans, nacked_orphans


