"""One stream refused on the connector's wire: the ERROR's fixed form, read the same by both sides."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aqueduct.bridge.ingest.refusals import refusal_kind
from aqueduct.connector.connector_session import ConnectorSession
from aqueduct.connector.events import NotifyRefused, SessionEnded
from aqueduct.connector.frames import (
    PROTOCOL_VERSION,
    Error,
    FrameSplitter,
    Hello,
    Notify,
    Ok,
    encode,
)
from aqueduct.connector.stream_refusal import parse_stream_refusal, stream_refusal
from aqueduct.connector.worker_session import WorkerSession

RULE = "stream_not_allowed: stream 'billing-9' (id 9) is not in streams orders-* of acl:3"


@given(st.integers(0, 2**64 - 1), st.text(min_size=1))
def test_every_stream_and_rule_read_back_as_written(stream_id: int, rule: str) -> None:
    assert parse_stream_refusal(stream_refusal(stream_id, rule)) == (stream_id, rule)


def test_other_errors_are_not_a_stream_refusal() -> None:
    for reason in ("bad cookie", "stream 7 belongs to identity 'a', not 'b'", "message for unknown stream 3",
                   "stream 7 refused:", "stream x refused: why", "busy: retry within 5 s"):  # fmt: skip
        assert parse_stream_refusal(reason) is None


def test_the_worker_refuses_a_stream_with_the_form_and_the_connector_reads_which() -> None:
    worker = WorkerSession()
    worker.receive_data(encode(Hello(PROTOCOL_VERSION, b"", "p", "i")) + encode(Notify(9, "billing-9", 0)))
    worker.data_to_send()
    assert worker.refuse_stream(9, RULE) == [SessionEnded(f"stream 9 refused: {RULE}", "local")]
    (error,), _ = _frames(worker.data_to_send())
    assert error == Error(f"stream 9 refused: {RULE}")

    connector = ConnectorSession("p", "i")
    connector.start()
    connector.receive_data(encode(Ok(8, ())))
    connector.send(Notify(9, "billing-9", 0))
    assert connector.receive_data(encode(error)) == [NotifyRefused(9, RULE), SessionEnded(error.reason, "peer")]


def test_a_refusal_of_a_stream_the_session_never_notified_refuses_the_connector() -> None:
    """The connector never notifies a refused stream again: refusing one it did not notify is refusing it."""
    connector = ConnectorSession("p", "i")
    connector.start()
    connector.receive_data(encode(Ok(8, ())))
    connector.send(Notify(8, "orders-8", 0))
    reason = stream_refusal(9, RULE)
    assert connector.receive_data(encode(Error(reason))) == [SessionEnded(reason, "peer")]
    other = ConnectorSession("p", "i")
    other.start()
    assert other.receive_data(encode(Error("bad cookie"))) == [SessionEnded("bad cookie", "peer")]


def test_a_stream_refusal_is_counted_by_its_rule() -> None:
    assert refusal_kind(SessionEnded(stream_refusal(9, RULE), "local")) == "stream_not_allowed"
    owner = stream_refusal(7, "stream 7 belongs to identity 'billing', not 'x'")
    assert refusal_kind(SessionEnded(owner, "local")) == "stream_owner"
    assert refusal_kind(SessionEnded(owner, "peer")) == "connector_error"  # a connector's own ERROR


def _frames(data: bytes) -> tuple[list, Exception | None]:
    splitter = FrameSplitter()
    splitter.push(data)
    return splitter.drain()
