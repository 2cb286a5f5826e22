"""Seeded, sans-IO model of a lossy network link: what happens to each datagram.

The lossy proxy (:mod:`interop.proxy`) asks a :class:`Link` what to do with
every datagram it sees in one direction; the link answers with a
:class:`Decision` and never touches a socket or reads the clock (``now`` is
an argument). That split is what makes impairments reproducible and unit
testable: the same seed and the same arrival times give the same decisions,
so a failing interop run can be replayed and a test can count drops over
thousands of packets without sending any.

Impairments, applied in this order to datagram number ``index`` (0-based,
per direction):

1. *blackhole*: during a down period every datagram is dropped;
2. *drop by index*: listed indices are always dropped (scripted loss);
3. *random loss* with bursts: a two-state Gilbert-Elliott chain. In the good
   state a datagram is lost with ``drop_rate``; ``burst_rate`` is the chance
   per datagram to enter the bad state, where everything is lost, and the
   chain leaves it after ``burst_length`` datagrams on average;
4. *duplication*: a forwarded datagram is sent twice with ``duplicate_rate``;
5. *delay and jitter*: every copy waits ``delay`` plus a uniform
   ``[0, jitter)`` seconds;
6. *reordering*: with ``reorder_rate`` a datagram is held back and released
   right after ``reorder_gap`` later datagrams went through (or after
   ``reorder_max_hold`` seconds, so a held datagram never waits for traffic
   that does not come).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import StrEnum


class Action(StrEnum):
    """What the link does with a datagram."""

    FORWARD = "forward"
    DROP = "drop"
    HOLD = "hold"


class DropReason(StrEnum):
    """Why a datagram was dropped (logged, and counted by tests)."""

    BLACKHOLE = "blackhole"
    INDEX = "index"
    RANDOM = "random"
    BURST = "burst"


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Impairments of one direction. The default is a clean link."""

    drop_rate: float = 0.0
    burst_rate: float = 0.0
    burst_length: float = 1.0
    drop_indices: frozenset[int] = field(default_factory=frozenset)
    duplicate_rate: float = 0.0
    delay: float = 0.0
    jitter: float = 0.0
    reorder_rate: float = 0.0
    reorder_gap: int = 3
    reorder_max_hold: float = 0.05
    blackhole_up: float = 0.0
    blackhole_down: float = 0.0

    def __post_init__(self) -> None:
        for name in ("drop_rate", "burst_rate", "duplicate_rate", "reorder_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"LinkConfig.{name} must be within [0, 1], got {value}")
        for name in ("delay", "jitter", "reorder_max_hold", "blackhole_up", "blackhole_down"):
            if getattr(self, name) < 0:
                raise ValueError(f"LinkConfig.{name} must not be negative")
        if self.burst_length < 1.0:
            raise ValueError(f"LinkConfig.burst_length must be >= 1, got {self.burst_length}")
        if self.reorder_gap < 1:
            raise ValueError(f"LinkConfig.reorder_gap must be >= 1, got {self.reorder_gap}")
        if self.blackhole_down > 0 and self.blackhole_up <= 0:
            raise ValueError("LinkConfig.blackhole_up must be > 0 when blackhole_down is set")

    def in_blackhole(self, now: float) -> bool:
        """Whether ``now`` (seconds since the link started) falls in a down period.

        The cycle starts with an up period so that a handshake gets a chance
        before the first outage: up ``blackhole_up`` s, down ``blackhole_down`` s, repeat.
        """
        if self.blackhole_down <= 0:
            return False
        return now % (self.blackhole_up + self.blackhole_down) >= self.blackhole_up


@dataclass(frozen=True, slots=True)
class Decision:
    """The fate of datagram ``index`` and the held datagrams it releases.

    ``delays`` has one entry per copy to send (two when duplicated, none when
    dropped); a held datagram keeps its delays for when it is released.
    ``release`` lists indices of earlier held datagrams to send right after
    this one, oldest first.
    """

    index: int
    action: Action
    reason: DropReason | None = None
    delays: tuple[float, ...] = ()
    release: tuple[int, ...] = ()

    @property
    def duplicated(self) -> bool:
        return len(self.delays) > 1


@dataclass(slots=True)
class _Held:
    index: int
    since: float
    remaining: int


class Link:
    """One direction of the simulated network; deterministic for a given seed.

    Random draws happen in a fixed order for every datagram (whether or not
    they matter) so that enabling one impairment does not shift the random
    stream of another between runs with the same seed.
    """

    def __init__(self, config: LinkConfig, seed: int | str = 0) -> None:
        self.config = config
        self._rng = random.Random(f"aqueduct-interop:{seed}")
        self._next_index = 0
        self._bad_state = False
        self._held: list[_Held] = []

    @property
    def held(self) -> tuple[int, ...]:
        """Indices currently held back for reordering, oldest first."""
        return tuple(h.index for h in self._held)

    def submit(self, now: float) -> Decision:
        """Decide the fate of the next datagram, arriving at ``now`` seconds."""
        cfg = self.config
        index = self._next_index
        self._next_index += 1
        rng = self._rng
        u_loss, u_burst_enter, u_burst_exit, u_dup, u_reorder = (rng.random() for _ in range(5))
        jitters = (rng.random() * cfg.jitter, rng.random() * cfg.jitter)

        reason = self._drop_reason(index, now, u_loss, u_burst_enter, u_burst_exit)
        if reason is not None:
            return Decision(index, Action.DROP, reason, release=self._count_down(now))
        copies = 2 if u_dup < cfg.duplicate_rate else 1
        delays = tuple(cfg.delay + jitters[i] for i in range(copies))
        if u_reorder < cfg.reorder_rate:
            self._held.append(_Held(index, now, cfg.reorder_gap))
            return Decision(index, Action.HOLD, delays=delays)
        return Decision(index, Action.FORWARD, delays=delays, release=self._count_down(now))

    def expire(self, now: float) -> tuple[int, ...]:
        """Release held datagrams that waited ``reorder_max_hold`` seconds (call on a timer)."""
        limit = self.config.reorder_max_hold
        due = [h for h in self._held if now - h.since >= limit]
        self._held = [h for h in self._held if now - h.since < limit]
        return tuple(h.index for h in due)

    def next_expiry(self) -> float | None:
        """When :meth:`expire` next has something to release, or None."""
        if not self._held:
            return None
        return min(h.since for h in self._held) + self.config.reorder_max_hold

    def _drop_reason(
        self, index: int, now: float, u_loss: float, u_enter: float, u_exit: float
    ) -> DropReason | None:
        cfg = self.config
        # The burst chain advances on every datagram, so a blackhole or a
        # scripted drop does not freeze it.
        if self._bad_state:
            self._bad_state = u_exit >= 1.0 / cfg.burst_length
        else:
            self._bad_state = u_enter < cfg.burst_rate
        if cfg.in_blackhole(now):
            return DropReason.BLACKHOLE
        if index in cfg.drop_indices:
            return DropReason.INDEX
        if self._bad_state:
            return DropReason.BURST
        if u_loss < cfg.drop_rate:
            return DropReason.RANDOM
        return None

    def _count_down(self, now: float) -> tuple[int, ...]:
        """One more datagram went by: release the held ones whose gap is used up."""
        for h in self._held:
            h.remaining -= 1
        due = [h for h in self._held if h.remaining <= 0]
        self._held = [h for h in self._held if h.remaining > 0]
        return tuple(h.index for h in due)


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Both directions of the simulated network plus the seed."""

    client_to_server: LinkConfig = field(default_factory=LinkConfig)
    server_to_client: LinkConfig = field(default_factory=LinkConfig)
    seed: int = 0

    def links(self) -> tuple[Link, Link]:
        """Fresh (client->server, server->client) links, seeded independently per direction."""
        return (
            Link(self.client_to_server, f"{self.seed}:c2s"),
            Link(self.server_to_client, f"{self.seed}:s2c"),
        )

    def with_seed(self, seed: int) -> NetworkConfig:
        return replace(self, seed=seed)


def _symmetric(link: LinkConfig) -> NetworkConfig:
    return NetworkConfig(client_to_server=link, server_to_client=link)


SCENARIOS: dict[str, NetworkConfig] = {
    "clean": NetworkConfig(),
    # About 5 % overall: 3 % random loss plus bursts averaging 4 datagrams that
    # start on 0.5 % of datagrams (stationary bad-state share ~2 %).
    "loss": _symmetric(LinkConfig(drop_rate=0.03, burst_rate=0.005, burst_length=4.0)),
    "reorder": _symmetric(
        LinkConfig(reorder_rate=0.1, reorder_gap=3, delay=0.002, jitter=0.002)
    ),
    "duplicate": _symmetric(LinkConfig(duplicate_rate=0.1, delay=0.001, jitter=0.002)),
    # 1.2 s up, then 0.4 s of total silence, repeating: QUIC must recover by
    # retransmission after each outage.
    "blackhole": _symmetric(LinkConfig(blackhole_up=1.2, blackhole_down=0.4)),
}


def scenario(name: str, seed: int = 0) -> NetworkConfig:
    """The named scenario with ``seed``; a clear error names the known scenarios."""
    try:
        return SCENARIOS[name].with_seed(seed)
    except KeyError:
        known = ", ".join(SCENARIOS)
        raise ValueError(f"unknown scenario {name!r} (known: {known})") from None
