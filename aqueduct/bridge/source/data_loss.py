"""The source's data loss: records a query still needs that are gone, or whose stored bytes are corrupt.

Shared by the per-log reader (:mod:`.datasource`) and the failover reader
(:mod:`.failover`), so both raise the one error users catch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aqueduct.bridge.source.flight_client import RemoteCorruption
from aqueduct.bridge.storage.segment import BatchCorrupt

__all__ = ["AqueductDataLoss", "corruption_is_data_loss"]


class AqueductDataLoss(RuntimeError):
    """Records the query has not read yet were truncated from the log, or their stored bytes are corrupt."""


@contextmanager
def corruption_is_data_loss() -> Iterator[None]:
    """A stored batch failing its checksum, met by any read (records or an epoch question, here or on a bridge).

    The reads themselves already applied ``failOnDataLoss``
    (:func:`~aqueduct.bridge.storage.corruption.corrupt_handler`): what
    still raises is the query's data loss, reported the same on every path.
    """
    try:
        yield
    except (BatchCorrupt, RemoteCorruption) as found:
        raise AqueductDataLoss(f"aqueduct source: {found} (failOnDataLoss=false skips such batches)") from None
