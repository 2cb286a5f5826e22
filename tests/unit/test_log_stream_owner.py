"""A stream belongs to the producer identity that first wrote it, across restarts (issue 38).

The subject is recorded in the stream's metadata; another subject is
refused even under the same connector name, anonymous sessions (the
shared cookie) are never checked, and a stream only they wrote is taken
by the first identity that writes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aqueduct.bridge.storage.log import DurableLog, LogError

CONNECTOR = "billing/p0"


def test_the_first_identity_owns_its_stream_and_another_is_refused_after_a_restart(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(7, "billing-1", CONNECTOR, owner="billing").result()
        log.open_stream(7, "billing-1", CONNECTOR, owner="billing").result()  # its own again: fine
        with pytest.raises(LogError, match=r"stream 7 belongs to identity 'billing', not 'fleet'"):
            log.open_stream(7, "billing-1", CONNECTOR, owner="fleet")
    with DurableLog(tmp_path / "log") as reopened:
        assert reopened.owner_of(7) == "billing"
        with pytest.raises(LogError, match=r"belongs to identity 'billing'"):
            reopened.open_stream(7, "billing-1", CONNECTOR, owner="fleet")
        reopened.open_stream(7, "billing-1", CONNECTOR).result()  # anonymous: the development cookie, unchecked
        assert reopened.owner_of(7) == "billing"  # and it does not erase the owner


def test_a_stream_only_anonymous_sessions_wrote_is_taken_by_the_first_identity(tmp_path: Path) -> None:
    with DurableLog(tmp_path / "log") as log:
        log.open_stream(3, "orders", CONNECTOR).result()
        assert log.owner_of(3) == ""
        log.open_stream(3, "orders", CONNECTOR, owner="orders").result()
        assert log.owner_of(3) == "orders"
    with DurableLog(tmp_path / "log") as reopened:
        assert reopened.owner_of(3) == "orders"
