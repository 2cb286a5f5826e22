"""Which sessions still get credits while the backlog is over ``max_lag``: the fair-share rule.

Closing the credit tap for every session once the backlog passes
``max_lag`` can deadlock a failover query. A batch planned with records
of a bridge that then died waits for their producer to resend them to
the bridge it moved to; if that bridge's backlog (its other producers'
records, which the stuck batch cannot commit) is past ``max_lag``, the
moved producer gets no credit, the batch never completes, nothing
commits and the backlog never falls. The backlog is made of the other
producers' records, not the moved one's, so the tap closes per session:

* **under the bound** (backlog at most ``max_lag``) every session gets
  its credits, as before;
* **a session with nothing of its own waiting** (every stream it writes
  committed up to its complete epochs on this bridge: the producer that
  just moved here) always gets its credits;
* **over the bound**, a session gets its credits while its own backlog is
  below its **fair share** of ``max_lag``: ``max_lag`` split evenly over
  the streams that have a backlog (its own streams counted whether or not
  they have one), times the number of its streams. The producers that
  filled the backlog are over their share and wait; a light one can send
  what a query waits for;
* **a ceiling**: at ``2 * max_lag`` only sessions with nothing of their
  own waiting get credits. Shares shrink as streams start lagging, so
  without it light sessions arriving one after another could each take
  a shrinking share without end.

So the backlog stays below ``2 * max_lag`` plus what sessions already
held credits for (each at most ``--credits``, or the shared budget
together) and the open epochs that close later, against ``max_lag`` plus
the same before. A single producer, or producers of equal pace per
stream, still stop at ``max_lag``: each is at its share. Per stream, not per session, so one cheap
count (:attr:`~aqueduct.bridge.ingest.backlog.Backlog.lagging`) serves
every session, and a producer writing ten streams weighs ten streams.

Pure arithmetic: :class:`~aqueduct.bridge.ingest.credits.Credits` asks it.
"""

from __future__ import annotations

from dataclasses import dataclass

CEILING_FACTOR = 2
"""The backlog at ``CEILING_FACTOR * max_lag`` stops every session that has records waiting."""


@dataclass(frozen=True)
class OwnBacklog:
    """One session's part of the backlog: records waiting, its streams, and how many of them wait."""

    records: int  # records of complete epochs of its streams not committed yet
    streams: int  # its streams on this bridge's log
    lagging: int  # of those, the ones with records waiting


def fair_share(max_lag: int, own: OwnBacklog, lagging_streams: int) -> int:
    """Records a session may have waiting while the backlog is over ``max_lag``.

    ``lagging_streams`` counts the bridge's streams with records waiting
    (the session's own among them); its streams with none count too, as
    the ones it is about to fill.
    """
    counted = max(1, lagging_streams + own.streams - own.lagging)
    return max(1, max_lag * own.streams // counted)


def may_grant(lag: int, max_lag: int, own: OwnBacklog, lagging_streams: int) -> bool:
    """May a session with ``own`` backlog get its credits now, the bridge's backlog being ``lag``?"""
    if lag <= max_lag or own.records == 0:
        return True
    if lag >= CEILING_FACTOR * max_lag:
        return False
    return own.records < fair_share(max_lag, own, lagging_streams)
