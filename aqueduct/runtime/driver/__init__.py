"""What drives the sans-IO core over one QUIC connection.

:class:`~.core_driver.Driver` feeds the core from the transport and the
timers, :class:`~.handle_link.HandleLink` carries the handles' calls to the
core and the core's events to the handles, a
:class:`~.coalesce.SendCoalescer` batches a burst of sends into one flush,
and :class:`~.framelog.FrameLog` writes the debug frame log. The driver
knows a QUIC stack only as :class:`~aqueduct.runtime.transport.QuicTransport`.
"""
