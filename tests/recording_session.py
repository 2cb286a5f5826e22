"""A producer's real session that notes what its bridge told it, across all its connections.

``monkeypatch.setattr(client, "ConnectorSession", RecordingSession)`` makes
every ``Connector`` of the test use it (reset :attr:`RecordingSession.acks`,
:attr:`RecordingSession.endings` and :attr:`RecordingSession.accepted` with
``monkeypatch`` too): verdicts on the ACK points a producer was told (never
lower than before, in the end everything), on which connections got OK, and
on how its sessions ended (a RESTART, a refusal's exact reason).
"""

from __future__ import annotations

from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.events import Acked, ConnectorEvent, SessionAccepted, SessionEnded


class RecordingSession(ConnectorSession):
    """The producer's real session, noting every ACK (connection, stream, point) and how each session ended."""

    acks: list[tuple[int, int, int]] = []
    #: (connection, origin, reason) of every session that ended by a frame of the bridge (ERROR, RESTART)
    endings: list[tuple[int, str, str]] = []
    #: connections that got OK
    accepted: list[int] = []
    connections = 0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        RecordingSession.connections += 1
        self.connection = RecordingSession.connections

    def receive_data(self, data: bytes) -> list[ConnectorEvent]:
        events = super().receive_data(data)
        for event in events:
            if isinstance(event, Acked):
                self.acks.extend((self.connection, sid, point) for sid, point in event.refs)
            elif isinstance(event, SessionAccepted):
                self.accepted.append(self.connection)
            elif isinstance(event, SessionEnded):
                self.endings.append((self.connection, event.origin, event.reason))
        return events
