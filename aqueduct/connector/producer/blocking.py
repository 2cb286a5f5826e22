"""A blocking producer for code that is not asyncio: :class:`Producer`.

::

    def report(error, delivery):
        if error is not None:
            print(f"stream {delivery.stream_id} id {delivery.message_id} lost: {error}")

    with Producer("aqueduct://bridge:4433", program="orders", instance="p0",
                  cafile="ca.pem", on_delivery=report) as producer:
        producer.open_stream(1, "orders/0")
        for line in lines:
            producer.produce(1, line)
        left = producer.flush(30.0)          # 0: every record committed downstream

It is confluent-kafka's ``Producer`` shape over a :class:`~aqueduct.connector.producer.client.Connector`:
the connector runs on an event loop in a background thread of its own, and
every method hands its work to that loop and waits for the answer. So one
``Producer`` may be shared by any number of threads: their calls are
serialised on the loop, each stream's ids are given in the order the calls
arrive there. ``on_delivery`` runs on the background thread (keep it quick;
a call back into the producer from it would wait for itself and is refused).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from aqueduct.connector.producer.client import ORDERED, Connector, ConnectorStream, Mode

__all__ = ["Producer"]

T = TypeVar("T")


class Producer:
    """A thread-safe, blocking connector; ``url`` (one bridge or several) and keyword arguments are :class:`Connector`'s.

    Connecting happens in the constructor and raises what ``Connector.connect``
    raises (``ConnectorRefused``, ``TlsRefused``, ``ConnectionError`` after
    ``connect_timeout``); the background thread is stopped again then.
    """

    def __init__(self, url: str | Sequence[str], **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aqueduct-producer", daemon=True)
        self._thread.start()
        self._streams: dict[int, ConnectorStream] = {}
        self._closed = False

        async def connect() -> Connector:
            connector = Connector(url, **options)
            await connector.connect()
            return connector

        try:
            self.connector = self._call(connect())
        except BaseException:
            self._stop_thread()
            raise

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self, flush_timeout: float = 5.0) -> None:
        """Send what is queued (waiting at most ``flush_timeout``), disconnect, stop the thread.

        Records still unacked then get their delivery report with
        ``ConnectorClosed``. Closing twice is harmless.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.connector.close(flush_timeout))
        finally:
            self._stop_thread()

    def _stop_thread(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the producer's loop and wait for its result in this thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a Producer cannot be called from its own thread (e.g. from on_delivery)")
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("the Producer is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # ------------------------------------------------------------ sending

    def open_stream(self, stream_id: int, name: str, mode: Mode = ORDERED) -> int:
        """NOTIFY a stream (see ``Connector.stream``); return its ``resume_from`` point."""

        async def open_() -> int:
            stream = await self.connector.stream(stream_id, name, mode)
            self._streams[stream_id] = stream
            return stream.resume_from

        return self._call(open_())

    def _stream(self, stream_id: int) -> ConnectorStream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise KeyError(f"stream {stream_id} is not open: call open_stream({stream_id}, name) first")
        return stream

    def produce(self, stream_id: int, payload: bytes | None = b"", **send_options: Any) -> int | None:
        """Send one record on an open stream; return its id (None for EPHEMERAL).

        ``send_options`` are those of ``ConnectorStream.send`` (``key``,
        ``event_time``, ``message_id``, ``boundary``, ``eos`` ...). Blocks
        while the stream's unacked buffer is full or no credit is free, as
        ``send`` does; the record's delivery report comes later.
        """
        return self._call(self._stream(stream_id).send(payload, **send_options))

    def produce_many(
        self, stream_id: int, payloads: Sequence[bytes], event_times: Sequence[int | None] | None = None
    ) -> list[int] | None:
        """Send data records with the stream's next ids in one call (``ConnectorStream.send_many``)."""
        return self._call(self._stream(stream_id).send_many(payloads, event_times=event_times))

    def flush(self, timeout: float | None = None) -> int:
        """Wait up to ``timeout`` seconds for every record to be committed; return how many are not."""
        return self._call(self.connector.flush(timeout))

    @property
    def unacked(self) -> int:
        """Records sent that the worker has not committed yet (a snapshot)."""

        async def count() -> int:
            return self.connector.unacked

        return self._call(count())
